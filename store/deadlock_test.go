package store_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestRecordingDoesNotDeadlock: the relay records a round of copies sent
// while dispatchers record the outcomes of the same copies (a consumer can be
// faster than the receipt), in any order. Every writer locks log rows in id
// order, so no transaction is ever aborted to break a deadlock (the retry
// that would hide one is off here). Before, PostgreSQL broke a deadlock
// after its 1 s deadlock_timeout several times a minute under load.
//
// Not parallel: it turns the conflict retry off for the package.
func TestRecordingDoesNotDeadlock(t *testing.T) {
	store.NoConflictRetries(t)
	ctx := context.Background()
	db := storetest.Open(t, store.Postgres)
	ev := db.Events()
	for round := range 15 {
		sends := outboxFixture(t, ev, 60, false)
		ids := make([]uuid.UUID, len(sends))
		for i, s := range sends {
			ids[i] = s.ID
		}
		now := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		// The relay's round, and three dispatchers' group commits over
		// overlapping parts of it in shuffled orders.
		wg.Go(func() { errs <- ev.MarkSent(ctx, ids, now) })
		for w := range 3 {
			part := slices.Clone(ids[w*15 : w*15+30])
			rand.Shuffle(len(part), func(i, j int) { part[i], part[j] = part[j], part[i] })
			wg.Go(func() {
				ss := make([]delivery.Settlement, len(part))
				for i, id := range part {
					ss[i] = delivery.Settlement{SendID: id, Attempt: delivery.Attempt{Status: message.StatusDelivered, StatusCode: 200, At: now}}
				}
				errs <- db.Push().SettleAll(ctx, ss)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
