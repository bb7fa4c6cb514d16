package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestPurge: events go once past the idempotency window and either expired or
// past retention; an event that still owes the broker a send stays, expired
// or not.
func TestPurge(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ev := storetest.Open(t, d).Events()
			now := time.Now().UTC().Truncate(time.Microsecond)
			room := uuid.Must(uuid.NewV7())
			mk := func(age, expiresIn time.Duration, pending bool) uuid.UUID {
				e := message.Event{
					ID: uuid.Must(uuid.NewV7()), RoomID: room, RequestID: uuid.Must(uuid.NewV7()), CorrelationID: "c",
					EventTypeID: uuid.Must(uuid.NewV7()), EventType: "t", Version: 1, Payload: []byte(`{}`),
					PublishedAt: now.Add(-age), Attributes: map[string]string{},
				}
				if expiresIn != 0 {
					e.ExpiresAt = now.Add(expiresIn)
				}
				s := message.Send{
					ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "c",
					SubscriptionID: uuid.Must(uuid.NewV7()), SubscriptionType: "PULL", Destination: "d", Attempt: 1,
					CreatedAt: e.PublishedAt, Status: message.StatusPending,
				}
				if !pending {
					s.Status, s.SentAt = message.StatusSent, e.PublishedAt
				}
				if err := ev.Publish(ctx, []message.Event{e}, []message.Send{s}, outbox.Lease{}); err != nil {
					t.Fatal(err)
				}
				return e.ID
			}
			day := 24 * time.Hour
			keep := map[string]uuid.UUID{
				"young, expired (idempotency window)": mk(time.Hour, -time.Minute, false),
				"old, unexpired, within retention":    mk(2*day, time.Hour, false),
				"past retention but a send pending":   mk(9*day, 0, true),
				// Its copy is still sent, for its consumer to dead-letter it.
				"expired with a send still owed": mk(2*day, -time.Minute, true),
			}
			gone := map[string]uuid.UUID{
				"old and expired": mk(2*day, -time.Hour, false),
				"past retention":  mk(8*day, 0, false),
			}
			n, err := ev.PurgeEvents(ctx, outbox.PurgeQuery{
				PublishedBefore: now.Add(-day), RetainedBefore: now.Add(-7 * day), Now: now, Limit: 100,
			})
			if err != nil {
				t.Fatal(err)
			}
			if n != len(gone) {
				t.Errorf("purged %d events, want %d", n, len(gone))
			}
			for name, id := range keep {
				if _, err := ev.Event(ctx, room, id); err != nil {
					t.Errorf("%s: purged (%v)", name, err)
				}
			}
			for name, id := range gone {
				if _, err := ev.Event(ctx, room, id); err == nil {
					t.Errorf("%s: kept", name)
				}
				if sends, _ := ev.Sends(ctx, []uuid.UUID{id}); len(sends) != 0 {
					t.Errorf("%s: its log rows were kept", name)
				}
			}
		})
	}
}

// TestClaimPendingIsExclusive: two relays claiming at once never get the same row.
func TestClaimPendingIsExclusive(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ev := storetest.Open(t, d).Events()
			sends := outboxFixture(t, ev, 300, false)
			seen := make(chan uuid.UUID, 1000)
			errs := make(chan error, 4)
			for w := range 4 {
				go func() {
					for {
						ps, err := ev.ClaimPending(ctx, "relay-"+string(rune('a'+w)), time.Now().Add(time.Minute), 25)
						if err != nil || len(ps) == 0 {
							errs <- err
							return
						}
						for _, p := range ps {
							seen <- p.ID
						}
					}
				}()
			}
			for range 4 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			close(seen)
			count := map[uuid.UUID]int{}
			for id := range seen {
				count[id]++
			}
			if len(count) != len(sends) {
				t.Errorf("claimed %d distinct rows of %d", len(count), len(sends))
			}
			for id, c := range count {
				if c > 1 {
					t.Errorf("row %s claimed %d times", id, c)
				}
			}
		})
	}
}

// TestVacuumOutbox: the relay's vacuum runs on PostgreSQL (outside any
// transaction block) and is a no-op on SQLite.
func TestVacuumOutbox(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := storetest.Open(t, d)
			if err := db.Events().VacuumOutbox(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
