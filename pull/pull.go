// Package pull serves PULL subscriptions over HTTP: a pull takes messages
// from the subscription's broker queue and leases them to the caller under an
// ack id; ack, nack and modify-ack-deadline act on leases.
//
// Semantics: a lease is stored in the database before the message is acked on
// the broker, so every API process sees it and a restart loses none. An
// acked lease is done. A nacked one is delivered again after the delay the
// subscription's retry policy gives for that attempt (backoff on negative
// acks, as Pulsar's redelivery backoff); one whose ack deadline passes is
// delivered again at once. Both count as attempts: past the policy's last
// attempt the message becomes a dead letter (the same API as push). Every
// redelivery is a fresh copy republished through the outbox with
// AMQ_SCHEDULED_DELAY, never a broker NACK (Artemis discards on NACK,
// ActiveMQ Classic dead-letters). Expired messages are never returned.
package pull

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
)

// Limits of a pull.
const (
	DefaultMaxMessages = 10
	MaxMessages        = 100
	MaxWait            = 30 * time.Second
	MaxAckIDs          = 1000
	// linger is how long a pull that has a message waits for the next one
	// before it answers: long enough to batch a burst, short enough to feel
	// immediate. Each message that comes starts it again, up to maxLinger
	// after the first: messages larger than the broker's consumer window
	// allows many of come one credit round trip apart.
	linger    = 20 * time.Millisecond
	maxLinger = 200 * time.Millisecond
	// handOver is how long a pull whose subscription is full waits for the
	// deliveries the subscription already holds: a hand-off between goroutines.
	handOver = 2 * time.Millisecond
)

// Errors.
var (
	ErrNotPull   = fmt.Errorf("only PULL subscriptions can be pulled from: %w", api.ErrInvalidState)
	ErrNotActive = fmt.Errorf("the subscription is not ACTIVE: %w", api.ErrInvalidState)
)

// Lease is a pulled message awaiting its ack.
type Lease struct {
	AckID          uuid.UUID
	SubscriptionID uuid.UUID
	RoomID         uuid.UUID
	SendID         uuid.UUID // the published_messages row of this copy; Nil if unknown
	Event          message.Event
	Attempt        int
	Deadline       time.Time
	LeasedAt       time.Time
}

// Settlement is what becomes of one lease: its log row's outcome, and a
// resend or a dead letter.
type Settlement struct {
	AckID      uuid.UUID
	SendID     uuid.UUID
	Attempt    delivery.Attempt
	Resend     *message.Send
	DeadLetter *delivery.DeadLetter
}

// Selector picks leases to settle.
type Selector struct {
	SubscriptionID uuid.UUID   // with AckIDs: these leases of this subscription, still live at Now
	AckIDs         []uuid.UUID //
	Expired        bool        // instead: any subscription's leases whose deadline passed by Now
	Now            time.Time
	Limit          int
}

// Store keeps leases.
type Store interface {
	// AddLeases stores leases, and settles (without a lease) the copies that
	// expired before they could be leased, in one transaction.
	AddLeases(ctx context.Context, leases []Lease, expired []Settlement) error
	// SettleLeases locks the leases sel picks (skipping ones another process
	// holds), applies decide's settlements and deletes those leases, in one
	// transaction, and returns the ack ids it settled. decide must not touch
	// the database: on SQLite the transaction holds the only connection.
	SettleLeases(ctx context.Context, sel Selector, decide func([]Lease) ([]Settlement, error)) ([]uuid.UUID, error)
	// ExpiredSubscriptions maps the subscriptions that have leases past their
	// deadline at now to their rooms.
	ExpiredSubscriptions(ctx context.Context, now time.Time, limit int) (map[uuid.UUID]uuid.UUID, error)
	// ExtendLeases sets the deadline of the live leases among ackIDs.
	ExtendLeases(ctx context.Context, subscriptionID uuid.UUID, ackIDs []uuid.UUID, deadline, now time.Time) ([]uuid.UUID, error)
}

// Message is what a pull returns for one lease.
type Message struct {
	AckID            string            `json:"ackId"`
	EventID          string            `json:"eventId"`
	CorrelationID    string            `json:"correlationId"`
	EventType        string            `json:"eventType"`
	EventTypeVersion int               `json:"eventTypeVersion"`
	Attempt          int               `json:"attempt"`
	PublishedAt      time.Time         `json:"publishedAt"`
	Attributes       map[string]string `json:"attributes"`
	Payload          json.RawMessage   `json:"payload"`
	AckDeadline      time.Time         `json:"ackDeadline"`
	// Traceparent and Tracestate are the publish's W3C trace context: a
	// consumer starts its span as a child of Traceparent.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

func toMessage(l Lease) Message {
	attrs := l.Event.Attributes
	if attrs == nil {
		attrs = map[string]string{}
	}
	return Message{
		AckID: l.AckID.String(), EventID: l.Event.ID.String(), CorrelationID: l.Event.CorrelationID,
		EventType: l.Event.EventType, EventTypeVersion: l.Event.Version, Attempt: l.Attempt,
		PublishedAt: l.Event.PublishedAt, Attributes: attrs, Payload: l.Event.Payload, AckDeadline: l.Deadline,
		Traceparent: l.Event.Trace.Parent, Tracestate: l.Event.Trace.State,
	}
}
