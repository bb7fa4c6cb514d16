// Package subscriptions owns PUSH and PULL subscriptions of a room: which event
// types and versions each receives and its attribute filter, its delivery
// overrides, its status and its approval by the room's manager, the broker
// queue of a PULL subscription, and the HTTP handlers that manage them.
package subscriptions

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/rooms"
)

// Sentinel errors.
var (
	ErrNotFound   = fmt.Errorf("subscription %w", api.ErrNotFound)
	ErrTerminated = fmt.Errorf("the subscription is TERMINATED, which is final: %w", api.ErrInvalidState)
	ErrNotPush    = fmt.Errorf("only PUSH subscriptions have a signing secret: %w", api.ErrInvalidState)
	ErrNoCircuit  = fmt.Errorf("only PUSH subscriptions have a circuit breaker: %w", api.ErrInvalidState)
	ErrPending    = fmt.Errorf("the subscription is PENDING: it receives nothing until the room's manager approves it (POST …/subscriptions/{id}:approve): %w", api.ErrInvalidState)
	ErrRejected   = fmt.Errorf("the subscription was REJECTED by the room's manager, which is final: create another one: %w", api.ErrInvalidState)
	// ErrDecided: an approval or rejection of a subscription that another
	// one decided meanwhile.
	ErrDecided = fmt.Errorf("the subscription was approved or rejected meanwhile: %w", api.ErrInvalidState)
)

// Type says how messages reach the subscriber.
type Type string

const (
	TypePush Type = "PUSH" // the dispatcher POSTs each message to PushURL
	TypePull Type = "PULL" // the subscriber pulls from its own queue
)

// valid reports whether t is PUSH or PULL.
func (t Type) valid() bool { return t == TypePush || t == TypePull }

// Status of a subscription. Only an ACTIVE one receives new events. PAUSED
// holds the messages it already has; TERMINATED is final and drops them.
// PENDING (awaiting the room manager's approval) and REJECTED (final) never
// had any.
type Status string

const (
	StatusActive     Status = "ACTIVE"
	StatusPaused     Status = "PAUSED"
	StatusTerminated Status = "TERMINATED"
	StatusPending    Status = "PENDING"
	StatusRejected   Status = "REJECTED"
)

// valid reports whether s is one of the statuses.
func (s Status) valid() bool { return s.settable() || s == StatusPending || s == StatusRejected }

// settable reports whether a request may set s; PENDING and REJECTED come
// only from the approval.
func (s Status) settable() bool {
	return s == StatusActive || s == StatusPaused || s == StatusTerminated
}

// Filter selects one event type and, when Versions is not empty, only those
// versions of it.
type Filter struct {
	EventTypeID uuid.UUID
	EventType   string
	Versions    []int
}

// Matches reports whether an event of this type id and version passes the filter.
func (f Filter) Matches(eventTypeID uuid.UUID, version int) bool {
	return f.EventTypeID == eventTypeID && (len(f.Versions) == 0 || slices.Contains(f.Versions, version))
}

// Subscription receives the events of a room that its filters match.
type Subscription struct {
	ID      uuid.UUID
	RoomID  uuid.UUID
	Type    Type
	PushURL string
	// PushAuth authenticates the requests to PushURL at the endpoint (PUSH
	// only; nil for none).
	PushAuth   *PushAuth
	EventTypes []Filter
	// AttributeFilter selects among those events by their attributes; nil
	// selects them all.
	AttributeFilter *AttributeFilter
	// Overrides of the room's delivery defaults; nil uses the room's.
	DeliveryDelay           *int64
	DeliveryDelayMultiplier *float64
	DeliveryAttempts        *int
	MaxDeliveryDelay        *int64
	DeliveryJitter          *float64
	// RetryPolicy replaces the room's retry policy as a whole.
	RetryPolicy *rooms.RetryPolicy
	// CircuitBreaker overrides the room's circuit breaker field by field
	// (PUSH only; nil: the room's).
	CircuitBreaker *rooms.CircuitBreaker
	// MaxDeliveryRate bounds the requests to PushURL per second, over every
	// dispatcher process (nil: no bound).
	MaxDeliveryRate *float64
	// Circuit is where the circuit breaker stands (PUSH only).
	Circuit Circuit
	// AckDeadline is how long a pulled message waits for its ack before it is
	// delivered again (PULL only).
	AckDeadline time.Duration
	Status      Status
	// DecidedBy and DecidedAt say who approved or rejected a subscription
	// that was PENDING, and when ("" and zero: it never was);
	// RejectionReason says why it was rejected.
	DecidedBy       string
	DecidedAt       time.Time
	RejectionReason string
	// Owner is the subject of the subscriber key that owns the subscription
	// ("" for none): that key may use it, other subscriber keys never see it.
	Owner string
	// SigningSecret signs PUSH requests (Standard Webhooks, "whsec_..."). After
	// a rotation the previous one also signs until PreviousSecretExpiresAt.
	SigningSecret           string
	PreviousSecret          string
	PreviousSecretExpiresAt time.Time
	CreatedAt               time.Time
	UpdatedAt               time.Time
}

// Secrets are the signing secrets valid at now, newest first.
func (s Subscription) Secrets(now time.Time) []string {
	out := []string{s.SigningSecret}
	if s.PreviousSecret != "" && now.Before(s.PreviousSecretExpiresAt) {
		out = append(out, s.PreviousSecret)
	}
	return out
}

// Breaker is the circuit breaker that applies to the subscription in room.
func (s Subscription) Breaker(room rooms.Room) rooms.Breaker {
	return s.CircuitBreaker.Over(room.Breaker())
}

// Queue is the broker queue of a PULL subscription on its room's address.
func (s Subscription) Queue() broker.Destination {
	return QueueOf(s.RoomID, s.ID)
}

// QueueOf is the broker queue of PULL subscription id in room roomID.
func QueueOf(roomID, id uuid.UUID) broker.Destination {
	return broker.Destination{Address: rooms.Address(roomID), Queue: "subscription-" + id.String()}
}

// Matches reports whether the subscription's event type filters take an
// event of this type and version.
func (s Subscription) Matches(eventTypeID uuid.UUID, version int) bool {
	for _, f := range s.EventTypes {
		if f.Matches(eventTypeID, version) {
			return true
		}
	}
	return false
}

// Receives reports whether an event of this type, version and attributes
// passes the subscription's filters (its status is the caller's to check:
// publishing routes to ACTIVE subscriptions only). A pointer receiver: it is
// called for every subscription of a room on every publish, and is too big
// to inline, so a value receiver would copy the whole subscription each time.
func (s *Subscription) Receives(eventTypeID uuid.UUID, version int, attrs map[string]string) bool {
	return s.Matches(eventTypeID, version) && s.AttributeFilter.Matches(attrs)
}

// Query selects subscriptions of a room, ordered by id.
type Query struct {
	RoomID uuid.UUID
	Type   Type   // "" for any
	Status Status // "" for any
	// Owner limits the list to one owner's subscriptions when OwnerSet.
	Owner    string
	OwnerSet bool
	Limit    int // 0 for all
	After    uuid.UUID
}

// Store is what the service needs from persistence.
type Store interface {
	CreateSubscription(ctx context.Context, s Subscription) error
	Subscription(ctx context.Context, roomID, id uuid.UUID) (Subscription, error)
	Subscriptions(ctx context.Context, q Query) ([]Subscription, error)
	// UpdateSubscription saves s, replacing its filters; it leaves the
	// signing secrets alone (see UpdateSecrets), so that a PATCH racing a
	// rotation cannot bring an old secret back.
	UpdateSubscription(ctx context.Context, s Subscription) error
	// UpdateSecrets saves s's signing secrets.
	UpdateSecrets(ctx context.Context, s Subscription) error
	// Decide saves s's status and decision (DecidedBy, DecidedAt,
	// RejectionReason) if the stored subscription is still PENDING, else
	// returns ErrDecided.
	Decide(ctx context.Context, s Subscription) error
	DeleteSubscription(ctx context.Context, roomID, id uuid.UUID) error
	// CountSubscriptions counts the room's subscriptions that are not
	// TERMINATED or REJECTED.
	CountSubscriptions(ctx context.Context, roomID uuid.UUID) (int, error)
	// ResetCircuit closes the subscription's circuit, whatever its state.
	ResetCircuit(ctx context.Context, roomID, id uuid.UUID) error
}

// Catalog finds rooms, event types and versions (rooms.Service is one).
type Catalog interface {
	Room(ctx context.Context, ref string) (rooms.Room, error)
	EventTypeOf(ctx context.Context, roomID uuid.UUID, identifier string) (rooms.EventType, error)
	// ExistingVersions returns those of versions the event type has, in one
	// lookup.
	ExistingVersions(ctx context.Context, eventTypeID uuid.UUID, versions []int) ([]int, error)
}

// Queues creates and removes the broker queues of PULL subscriptions.
type Queues interface {
	EnsureQueue(ctx context.Context, dest broker.Destination) error
	DeleteQueue(ctx context.Context, dest broker.Destination) error
}
