// Package publish accepts events for a room, validates them against their
// event type version's JSON Schema, resolves the subscriptions they go to, and
// stores the event with one pending send per destination in one transaction
// (the transactional outbox). The outbox's Relay then sends every pending row
// to the broker and marks it sent once the broker has confirmed it, so a 202
// from the publish endpoint survives a broker outage or a crash right after
// answering.
package publish

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
)

// Sentinel errors.
var (
	ErrEventNotFound  = fmt.Errorf("event %w", api.ErrNotFound)
	ErrIdempotencyKey = fmt.Errorf("the Idempotency-Key was already used with a different request: %w", api.ErrIdempotencyKeyReused)
	ErrNoVersions     = fmt.Errorf("the event type has no versions yet: %w", api.ErrNotFound)
	// ErrDuplicateKey is the store's word that an idempotency key is taken.
	ErrDuplicateKey = fmt.Errorf("idempotency key taken: %w", api.ErrIdempotencyKeyReused)
)

// Store persists events and the log.
type Store interface {
	// Publish stores each event with its sends in one transaction, their
	// outbox rows leased as lease says (none when lease is zero). An event
	// whose idempotency key is taken fails the whole call with ErrDuplicateKey.
	Publish(ctx context.Context, events []message.Event, sends []message.Send, lease outbox.Lease) error
	EventByIdempotencyKey(ctx context.Context, roomID uuid.UUID, key string) (message.Event, error)
	EventsByRequest(ctx context.Context, roomID, requestID uuid.UUID) ([]message.Event, error)
	Event(ctx context.Context, roomID, id uuid.UUID) (message.Event, error)
	Events(ctx context.Context, q EventQuery) ([]message.Event, error)
	Sends(ctx context.Context, eventIDs []uuid.UUID) ([]message.Send, error)
}

// EventQuery selects events of a room, newest first.
type EventQuery struct {
	RoomID        uuid.UUID
	CorrelationID string
	Limit         int
	Before        uuid.UUID // uuid.Nil: from the newest
}
