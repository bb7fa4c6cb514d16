// Package publish accepts events for a room, validates them against their
// event type version's JSON Schema, resolves the subscriptions they go to, and
// stores the event with one pending send per destination in one transaction
// (the transactional outbox). The Relay then sends every pending row to the
// broker and marks it sent once the broker has confirmed it, so a 202 from the
// publish endpoint survives a broker outage or a crash right after answering.
package publish

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/message"
)

// Sentinel errors.
var (
	ErrEventNotFound  = fmt.Errorf("event %w", api.ErrNotFound)
	ErrIdempotencyKey = fmt.Errorf("the Idempotency-Key was already used with a different request: %w", api.ErrConflict)
	ErrNoVersions     = fmt.Errorf("the event type has no versions yet: %w", api.ErrNotFound)
	// ErrDuplicateKey is the store's word that an idempotency key is taken.
	ErrDuplicateKey = fmt.Errorf("idempotency key taken: %w", api.ErrConflict)
)

// Pending is a send the relay owes the broker, with what it needs to build the message.
type Pending struct {
	message.Send
	Event message.Event
	// Refusals counts how often the broker has refused this copy (see Refusal).
	Refusals int
}

// Refusal is what becomes of a copy the broker refused (broker.ErrRefused):
// the broker was reachable and said no (no such queue with auto-create off,
// not authorised, address full with the FAIL policy, ...). It is tried again
// later, with a growing pause, unless it is given up.
type Refusal struct {
	Pending
	Error string // the broker's answer
	At    time.Time
	// RetryAt, when not zero, is when the relay may try the copy again (its
	// refusal count grows by one); the copy stays owed and pending.
	RetryAt time.Time
	// Otherwise the copy is given up: it ends with Status (expired or
	// dead_lettered), leaves the outbox and becomes a dead letter of Reason
	// for its subscription, in one transaction.
	Status message.Status
	Reason string
}

// Lease holds outbox rows for one relay until a time: no other claim takes
// them meanwhile. A publish whose sends the relay takes in memory (see
// Relay.Reserve) stores them leased to it.
type Lease struct {
	Owner string
	Until time.Time
}

// Store persists events and the log.
type Store interface {
	// Publish stores each event with its sends in one transaction, their
	// outbox rows leased as lease says (none when lease is zero). An event
	// whose idempotency key is taken fails the whole call with ErrDuplicateKey.
	Publish(ctx context.Context, events []message.Event, sends []message.Send, lease Lease) error
	EventByIdempotencyKey(ctx context.Context, roomID uuid.UUID, key string) (message.Event, error)
	EventsByRequest(ctx context.Context, roomID, requestID uuid.UUID) ([]message.Event, error)
	Event(ctx context.Context, roomID, id uuid.UUID) (message.Event, error)
	Events(ctx context.Context, q EventQuery) ([]message.Event, error)
	Sends(ctx context.Context, eventIDs []uuid.UUID) ([]message.Send, error)

	// ClaimPending leases up to limit pending sends to owner until the lease
	// ends, skipping rows another relay holds.
	ClaimPending(ctx context.Context, owner string, until time.Time, limit int) ([]Pending, error)
	// MarkSent records the broker's confirmation of these sends.
	MarkSent(ctx context.Context, ids []uuid.UUID, at time.Time) error
	// Release gives up the lease on sends that could not be sent.
	Release(ctx context.Context, ids []uuid.UUID) error
	// Refuse records copies the broker refused: each is leased until its
	// RetryAt, or given up with a dead letter (see Refusal).
	Refuse(ctx context.Context, refusals []Refusal) error
	// PurgeEvents deletes events (with their log rows) that q selects and
	// returns how many went.
	PurgeEvents(ctx context.Context, q PurgeQuery) (int, error)
}

// EventQuery selects events of a room, newest first.
type EventQuery struct {
	RoomID        uuid.UUID
	CorrelationID string
	Limit         int
	Before        uuid.UUID // uuid.Nil: from the newest
}

// PurgeQuery selects events to delete: published before PublishedBefore (the
// idempotency window) and either published before RetainedBefore or expired
// by Now; never one that still owes the broker a send, even expired (the
// copy's consumer dead-letters it once the relay has sent it).
type PurgeQuery struct {
	PublishedBefore time.Time
	RetainedBefore  time.Time
	Now             time.Time
	Limit           int
}
