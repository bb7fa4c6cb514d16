package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/console"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestConsoleSessions: a session is found by its hash, touched, deleted,
// and purged once it ran out, sat idle, or its key was revoked or expired.
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			cs := db.Console()
			now := time.Now().UTC().Truncate(time.Microsecond)
			key := func(name string, expires *time.Time) uuid.UUID {
				t.Helper()
				_, hash := auth.NewToken()
				k := auth.Key{ID: uuid.Must(uuid.NewV7()), Name: name, Role: api.RoleAdmin, Prefix: "mapi_x", Hash: hash,
					CreatedAt: now.Add(-time.Hour), ExpiresAt: expires}
				if err := db.Keys().CreateKey(ctx, k); err != nil {
					t.Fatal(err)
				}
				return k.ID
			}
			live, revoked := key("live", nil), key("revoked", nil)
			past := now.Add(-time.Second)
			expired := key("expired", &past)
			if err := db.Keys().RevokeKey(ctx, revoked, now); err != nil {
				t.Fatal(err)
			}
			sessions := map[string]console.Session{
				"fresh":       {KeyID: live, CreatedAt: now, SeenAt: now, ExpiresAt: now.Add(time.Hour)},
				"no key":      {CreatedAt: now, SeenAt: now, ExpiresAt: now.Add(time.Hour)},
				"idle":        {KeyID: live, CreatedAt: now.Add(-time.Hour), SeenAt: now.Add(-31 * time.Minute), ExpiresAt: now.Add(time.Hour)},
				"ran out":     {KeyID: live, CreatedAt: now.Add(-13 * time.Hour), SeenAt: now, ExpiresAt: now},
				"revoked key": {KeyID: revoked, CreatedAt: now, SeenAt: now, ExpiresAt: now.Add(time.Hour)},
				"expired key": {KeyID: expired, CreatedAt: now, SeenAt: now, ExpiresAt: now.Add(time.Hour)},
			}
			for name, s := range sessions {
				s.IDHash = "hash of " + name
				if err := cs.CreateSession(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			got, err := cs.Session(ctx, "hash of fresh")
			if err != nil || got.KeyID != live || !got.ExpiresAt.Equal(now.Add(time.Hour)) || !got.SeenAt.Equal(now) {
				t.Fatalf("Session = %+v, %v", got, err)
			}
			if got, err := cs.Session(ctx, "hash of no key"); err != nil || got.KeyID != uuid.Nil {
				t.Fatalf("a session without a key: %+v, %v", got, err)
			}
			later := now.Add(time.Minute)
			if err := cs.TouchSession(ctx, "hash of fresh", later); err != nil {
				t.Fatal(err)
			}
			if got, _ := cs.Session(ctx, "hash of fresh"); !got.SeenAt.Equal(later) {
				t.Errorf("touched: seen at %v, want %v", got.SeenAt, later)
			}

			n, err := cs.PurgeSessions(ctx, console.PurgeQuery{Now: now, IdleBefore: now.Add(-30 * time.Minute)})
			if err != nil || n != 4 {
				t.Fatalf("purged %d, %v; want 4 (idle, ran out, revoked key, expired key)", n, err)
			}
			for name := range sessions {
				_, err := cs.Session(ctx, "hash of "+name)
				kept := name == "fresh" || name == "no key"
				if kept && err != nil || !kept && !errors.Is(err, console.ErrSessionNotFound) {
					t.Errorf("%s after the purge: %v", name, err)
				}
			}
			if err := cs.DeleteSession(ctx, "hash of fresh"); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.Session(ctx, "hash of fresh"); !errors.Is(err, console.ErrSessionNotFound) {
				t.Errorf("deleted session: %v", err)
			}
		})
	}
}

// TestConsoleStats: the dashboard's queries count dead letters up to their
// bound and rank subscriptions by mean push latency among recent sends.
func TestConsoleStats(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			now := time.Now().UTC().Truncate(time.Microsecond)
			room := uuid.Must(uuid.NewV7())
			slow, fast := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
			var events []message.Event
			var sends []message.Send
			latency := map[uuid.UUID]time.Duration{}
			for i, sub := range []uuid.UUID{slow, slow, fast, fast, fast} {
				e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: room, RequestID: room, CorrelationID: "c",
					EventTypeID: room, EventType: "t", Version: 1, Payload: []byte(`1`), PublishedAt: now, Attributes: map[string]string{}}
				s := message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "c",
					SubscriptionID: sub, SubscriptionType: "PUSH", Destination: "d", Attempt: 1, CreatedAt: now,
					Status: message.StatusSent, SentAt: now}
				events, sends = append(events, e), append(sends, s)
				latency[s.ID] = time.Duration(10*(i+1)) * time.Millisecond
				if sub == slow {
					latency[s.ID] = time.Duration(1000*(i+1)) * time.Millisecond
				}
			}
			if err := db.Events().Publish(ctx, events, sends, outbox.Lease{}); err != nil {
				t.Fatal(err)
			}
			for _, s := range sends {
				if err := db.Push().Settle(ctx, delivery.Settlement{SendID: s.ID, Attempt: delivery.Attempt{
					Status: message.StatusDelivered, StatusCode: 200, Latency: latency[s.ID], At: now}}); err != nil {
					t.Fatal(err)
				}
			}
			top, err := db.Console().SlowestSubscriptions(ctx, console.SlowQuery{Since: now.Add(-time.Minute), Rows: 100, Top: 5})
			if err != nil {
				t.Fatal(err)
			}
			if len(top) != 2 || top[0].SubscriptionID != slow || top[0].Requests != 2 || top[0].Mean != 1500*time.Millisecond ||
				top[0].Max != 2000*time.Millisecond || top[1].SubscriptionID != fast || top[1].Mean != 40*time.Millisecond {
				t.Errorf("slowest = %+v", top)
			}
			if top, err := db.Console().SlowestSubscriptions(ctx, console.SlowQuery{Since: now.Add(time.Hour), Rows: 100, Top: 5}); err != nil || len(top) != 0 {
				t.Errorf("nothing since an hour from now: %+v, %v", top, err)
			}
			if top, err := db.Console().SlowestSubscriptions(ctx, console.SlowQuery{Since: now.Add(-time.Minute), Rows: 3, Top: 5}); err != nil || len(top) != 1 || top[0].SubscriptionID != fast {
				t.Errorf("the newest 3 sends are the fast subscription's: %+v, %v", top, err)
			}
			if n, err := db.Console().DeadLetterCount(ctx, 10); err != nil || n != 0 {
				t.Errorf("dead letters: %d, %v", n, err)
			}
		})
	}
}
