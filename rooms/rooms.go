// Package rooms owns rooms (a broker address each, with message expiration and
// delivery defaults), their event types and the numbered versions of each event
// type with its JSON Schema, and the HTTP handlers that manage them.
package rooms

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
)

// Sentinel errors; the store maps its own errors onto these.
var (
	ErrNotFound             = fmt.Errorf("room %w", api.ErrNotFound)
	ErrTerminated           = fmt.Errorf("the room is TERMINATED and accepts no events: %w", api.ErrInvalidState)
	ErrIdentifierTaken      = fmt.Errorf("a room with this identifier already exists: %w", api.ErrAlreadyExists)
	ErrHasSubscriptions     = fmt.Errorf("the room has subscriptions; delete them first, or use ?force=true to delete them with the room: %w", api.ErrInUse)
	ErrEventTypeNotFound    = fmt.Errorf("event type %w", api.ErrNotFound)
	ErrEventTypeExists      = fmt.Errorf("an event type with this identifier already exists in the room: %w", api.ErrAlreadyExists)
	ErrEventTypeInUse       = fmt.Errorf("the event type is used by a subscription; delete the subscription first: %w", api.ErrInUse)
	ErrVersionNotFound      = fmt.Errorf("event type version %w", api.ErrNotFound)
	ErrVersionExists        = fmt.Errorf("this version of the event type already exists: %w", api.ErrAlreadyExists)
	ErrVersionInUse         = fmt.Errorf("the version is used by a subscription; delete the subscription first: %w", api.ErrInUse)
	ErrEventTypeHasVersions = fmt.Errorf("the event type has versions in use by subscriptions: %w", api.ErrInUse)
)

// Status of a room. A terminated room accepts no new publishes.
type Status string

const (
	StatusActive     Status = "ACTIVE"
	StatusTerminated Status = "TERMINATED"
)

// Approval says whether a room's new subscriptions need its manager's
// approval before they receive anything.
type Approval string

const (
	// ApprovalAutomatic: every subscription starts as it is asked.
	ApprovalAutomatic Approval = "AUTOMATIC"
	// ApprovalManual: a subscription made by a key that does not manage the
	// room (a subscriber's) starts PENDING until the manager approves it.
	ApprovalManual Approval = "MANUAL"
)

// Room is a broker address with the defaults every message sent to it gets.
type Room struct {
	ID                uuid.UUID
	Identifier        string
	ManagerIdentifier string
	// MessageExpiration in ms after publishing; 0 means never.
	MessageExpiration int64
	// DeliveryDelay, DeliveryDelayMultiplier and DeliveryAttempts parameterise
	// the exponential backoff retry: after attempt k fails, attempt k+1 comes
	// DeliveryDelay × DeliveryDelayMultiplier^k ms later while k+1 ≤ DeliveryAttempts.
	DeliveryDelay           int64
	DeliveryDelayMultiplier float64
	DeliveryAttempts        int
	// MaxDeliveryDelay caps each retry delay (ms; 0: the default cap), and
	// DeliveryJitter spreads it by ±jitter (KIP-580).
	MaxDeliveryDelay int64
	DeliveryJitter   float64
	// RetryPolicy, when set, replaces the exponential backoff retry with the
	// four-phase policy.
	RetryPolicy *RetryPolicy
	// SubscriptionApproval says whether new subscriptions need the manager's
	// approval.
	SubscriptionApproval Approval
	// CircuitBreaker is the room's circuit breaker as given (nil: the
	// defaults); Breaker resolves it.
	CircuitBreaker *CircuitBreaker
	Status         Status
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Breaker is the circuit breaker the room's PUSH subscriptions have unless
// they override it.
func (r Room) Breaker() Breaker { return r.CircuitBreaker.Over(DefaultBreaker) }

// Address is the room's broker address.
func (r Room) Address() string { return Address(r.ID) }

// Address is the broker address of the room with this id.
func Address(id uuid.UUID) string { return "room-" + id.String() }

// EventType is a kind of event published to a room.
type EventType struct {
	ID          uuid.UUID
	RoomID      uuid.UUID
	Identifier  string
	Description string
	CreatedAt   time.Time
}

// Version is one numbered JSON Schema of an event type.
type Version struct {
	EventTypeID uuid.UUID
	Version     int
	Schema      json.RawMessage
	CreatedAt   time.Time
}

// Cleanup is told which PULL subscriptions went with a deleted room, so that
// their broker queues go too.
type Cleanup interface {
	RoomDeleted(ctx context.Context, roomID uuid.UUID, pullSubscriptions []uuid.UUID)
}

// ListQuery selects a page of rooms ordered by id (ids are time-ordered UUIDv7).
type ListQuery struct {
	Limit int
	After uuid.UUID
	// Restricted limits the list to the rooms of ManagerIdentifier (when
	// set) or else to IDs.
	Restricted        bool
	ManagerIdentifier string
	IDs               []uuid.UUID
}

// Store is what the service needs from persistence.
type Store interface {
	CreateRoom(ctx context.Context, r Room) error
	Room(ctx context.Context, id uuid.UUID) (Room, error)
	RoomByIdentifier(ctx context.Context, identifier string) (Room, error)
	Rooms(ctx context.Context, q ListQuery) ([]Room, error)
	UpdateRoom(ctx context.Context, r Room) error
	// DeleteRoom deletes the room, its event types and versions. With force it
	// first deletes its subscriptions and returns the ids of the PULL ones;
	// without, a room that has any gives ErrHasSubscriptions.
	DeleteRoom(ctx context.Context, id uuid.UUID, force bool) (pullSubscriptions []uuid.UUID, err error)

	CreateEventType(ctx context.Context, et EventType) error
	EventType(ctx context.Context, roomID uuid.UUID, identifier string) (EventType, error)
	EventTypes(ctx context.Context, roomID uuid.UUID, limit int, after string) ([]EventType, error)
	DeleteEventType(ctx context.Context, id uuid.UUID) error

	CreateVersion(ctx context.Context, v Version) error
	Version(ctx context.Context, eventTypeID uuid.UUID, version int) (Version, error)
	Versions(ctx context.Context, eventTypeID uuid.UUID) ([]Version, error)
	// ExistingVersions returns those of versions the event type has, in
	// ascending order, in one lookup.
	ExistingVersions(ctx context.Context, eventTypeID uuid.UUID, versions []int) ([]int, error)
	DeleteVersion(ctx context.Context, eventTypeID uuid.UUID, version int) error
}
