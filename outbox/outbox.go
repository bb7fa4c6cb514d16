// Package outbox sends what the database owes the broker. Every copy of an
// event (a publish's first copies, and the retries the push dispatcher and
// pulls schedule) is stored as a pending row in the same transaction as
// what owes it; the Relay sends pending rows to the broker and marks each
// sent only after the broker's receipt. It guarantees:
//
//   - A copy whose row is committed reaches the broker at least once, through
//     broker outages and crashes: a crash between the send and the mark sends
//     it again, a duplicate, never a loss.
//   - Relays of several processes never send a row at the same time: a claim
//     leases rows to one relay, and a send that could outlive its lease is
//     not started.
//   - A copy the broker refuses (as opposed to one it cannot be reached for)
//     is tried again with a growing pause and ends as a dead letter (see
//     Refusal); it does not hold up the others or make the relay unhealthy.
//   - A slow subscription's parked copies wait in the outbox under a lease
//     until their deferral ends, or until Parking releases them early.
//   - The Purger deletes an event only past its expiry or the retention and
//     past the idempotency window, and never one that still owes a send.
//
// GroupCommit, which stores concurrent small writes in one transaction,
// serves the publishes and the push dispatcher's outcomes alike.
package outbox

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
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

// Store is the outbox as the relay sees it.
type Store interface {
	// ClaimPending leases up to limit pending sends to owner until the lease
	// ends, skipping rows another relay holds.
	ClaimPending(ctx context.Context, owner string, until time.Time, limit int) ([]Pending, error)
	// MarkSent records the broker's confirmation of these sends. at is when
	// they were sent: no later than any of them began (the broker may hand
	// a copy to its consumer before its receipt is recorded), so a copy's
	// sent time is never after its delivery; a copy created after at is
	// sent at its creation.
	MarkSent(ctx context.Context, ids []uuid.UUID, at time.Time) error
	// Release gives up the lease on sends that could not be sent.
	Release(ctx context.Context, ids []uuid.UUID) error
	// Refuse records copies the broker refused: each is leased until its
	// RetryAt, or given up with a dead letter (see Refusal).
	Refuse(ctx context.Context, refusals []Refusal) error
}

// Sender is what the relay needs of the broker.
type Sender interface {
	Send(ctx context.Context, msg broker.Message) error
}

// Observer is told what the relay did with outbox rows (metrics.Metrics is one).
type Observer interface {
	// Relayed counts n rows: result is sent, failed (no broker: released),
	// refused (to be tried again later) or given_up (see Refusal).
	Relayed(result string, n int)
}

type nopObserver struct{}

func (nopObserver) Relayed(string, int) {}
