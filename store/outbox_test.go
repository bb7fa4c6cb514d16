package store_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
	"github.com/roomhub/messaging-api/subscriptions"
)

// outboxFixture publishes n events with one pending PULL send each (and,
// when sent is true, one more send already confirmed, which must not enter
// the outbox).
func outboxFixture(t *testing.T, ev *store.Events, n int, sent bool) []message.Send {
	t.Helper()
	return leasedFixture(t, ev, n, sent, outbox.Lease{})
}

// leasedFixture is outboxFixture with the outbox rows stored under lease (a
// publish handed off to its relay).
func leasedFixture(t *testing.T, ev *store.Events, n int, sent bool, lease outbox.Lease) []message.Send {
	t.Helper()
	room := uuid.Must(uuid.NewV7())
	now := time.Now().UTC().Truncate(time.Microsecond)
	var events []message.Event
	var sends []message.Send
	for range n {
		e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: room, RequestID: room, CorrelationID: "c",
			EventTypeID: room, EventType: "t", Version: 1, Payload: []byte(`1`), PublishedAt: now, Attributes: map[string]string{}}
		events = append(events, e)
		sends = append(sends, message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "c",
			SubscriptionID: room, SubscriptionType: "PULL", Destination: "d", Attempt: 1, CreatedAt: now, Status: message.StatusPending})
		if sent {
			sends = append(sends, message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "c",
				SubscriptionID: room, SubscriptionType: "PULL", Destination: "d", Attempt: 1, CreatedAt: now,
				Status: message.StatusSent, SentAt: now})
		}
	}
	if err := ev.Publish(context.Background(), events, sends, lease); err != nil {
		t.Fatal(err)
	}
	var pending []message.Send
	for _, s := range sends {
		if s.Status == message.StatusPending {
			pending = append(pending, s)
		}
	}
	return pending
}

func claimIDs(t *testing.T, ev *store.Events, owner string, lease time.Duration) []uuid.UUID {
	t.Helper()
	ps, err := ev.ClaimPending(context.Background(), owner, time.Now().Add(lease), 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

func backlog(t *testing.T, ev *store.Events) int {
	t.Helper()
	n, _, err := ev.OutboxBacklog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOutboxLeasedPublish: sends a publish stores leased (handed off to its
// relay in memory) are in the outbox but no claim takes them until the lease
// lapses, when any relay may (the process that held them may have died).
func TestOutboxLeasedPublish(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := storetest.Open(t, d)
			ev := db.Events()
			clock := apitest.NewClock(time.Now())
			db.SetClock(clock.Now)
			until := clock.Now().Add(time.Second)
			leased := leasedFixture(t, ev, 3, true, outbox.Lease{Owner: "relay-a", Until: until})
			free := outboxFixture(t, ev, 2, false)
			if n := backlog(t, ev); n != 5 {
				t.Fatalf("outbox holds %d rows, want 5 (3 leased, 2 free)", n)
			}
			got := claimIDs(t, ev, "relay-b", time.Minute)
			if want := []uuid.UUID{free[0].ID, free[1].ID}; !slices.Equal(got, want) {
				t.Fatalf("claimed %v, want only the unleased %v", got, want)
			}
			clock.Advance(time.Second + time.Millisecond)
			got = claimIDs(t, ev, "relay-b", time.Minute)
			if want := []uuid.UUID{leased[0].ID, leased[1].ID, leased[2].ID}; !slices.Equal(got, want) {
				t.Fatalf("after the lease lapsed claimed %v, want %v", got, want)
			}
		})
	}
}

// TestOutboxLifecycle: a pending send is in the outbox from the transaction
// that logs it until the broker's confirmation (or its expiry) is recorded;
// a lease hides it from other claims until released or lapsed; a send
// already settled or purged is dropped, never sent again.
func TestOutboxLifecycle(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			ev := db.Events()
			sends := outboxFixture(t, ev, 4, true)
			if n := backlog(t, ev); n != 4 {
				t.Fatalf("outbox holds %d rows, want the 4 pending sends (the sent ones stay out)", n)
			}

			// Claimed in creation order; a second claimer sees nothing.
			got := claimIDs(t, ev, "a", time.Minute)
			want := []uuid.UUID{sends[0].ID, sends[1].ID, sends[2].ID, sends[3].ID}
			if !slices.Equal(got, want) {
				t.Fatalf("claimed %v, want %v", got, want)
			}
			if ids := claimIDs(t, ev, "b", time.Minute); len(ids) != 0 {
				t.Fatalf("leased rows claimed again: %v", ids)
			}

			// Sent, expired, released, settled by its consumer.
			now := time.Now().UTC()
			if err := ev.MarkSent(ctx, []uuid.UUID{sends[0].ID}, now); err != nil {
				t.Fatal(err)
			}
			// Given up after a refusal; the fixture's subscription does not
			// exist, so it is dropped (see TestOutboxRefusals).
			if err := ev.Refuse(ctx, []outbox.Refusal{{Pending: outbox.Pending{Send: sends[1]}, Error: "refused",
				At: now, Status: message.StatusExpired, Reason: delivery.ReasonExpired}}); err != nil {
				t.Fatal(err)
			}
			// sends[3]'s lease ends too, as if its relay died after the
			// broker took the copy and before it recorded the receipt.
			if err := ev.Release(ctx, []uuid.UUID{sends[2].ID, sends[3].ID}); err != nil {
				t.Fatal(err)
			}
			if err := db.Push().Settle(ctx, delivery.Settlement{SendID: sends[3].ID,
				Attempt: delivery.Attempt{Status: message.StatusDelivered, StatusCode: 200, At: now}}); err != nil {
				t.Fatal(err)
			}
			if n := backlog(t, ev); n != 2 {
				t.Errorf("outbox holds %d rows after a send and a refusal given up, want 2", n)
			}
			// The settled send is dropped, not returned.
			if ids := claimIDs(t, ev, "b", -time.Second); !slices.Equal(ids, []uuid.UUID{sends[2].ID}) {
				t.Errorf("after release claimed %v, want only the released %v", ids, sends[2].ID)
			}
			// A lapsed lease: claimable again.
			if ids := claimIDs(t, ev, "c", time.Minute); !slices.Equal(ids, []uuid.UUID{sends[2].ID}) {
				t.Errorf("after the lease lapsed claimed %v, want %v", ids, sends[2].ID)
			}
			if n := backlog(t, ev); n != 1 {
				t.Errorf("outbox holds %d rows, want 1 (the settled send's row dropped)", n)
			}
			log, err := ev.Sends(ctx, []uuid.UUID{sends[0].EventID, sends[1].EventID, sends[3].EventID})
			if err != nil {
				t.Fatal(err)
			}
			status := map[uuid.UUID]message.Status{}
			for _, s := range log {
				status[s.ID] = s.Status
			}
			for id, w := range map[uuid.UUID]message.Status{sends[0].ID: message.StatusSent, sends[1].ID: message.StatusDropped, sends[3].ID: message.StatusDelivered} {
				if status[id] != w {
					t.Errorf("send %s logged %q, want %q", id, status[id], w)
				}
			}
		})
	}
}

// TestOutboxResendLease: a dispatcher's resend enters the outbox leased to
// the dispatcher, so the relay sends it only if the dispatcher does not.
func TestOutboxResendLease(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			ev := db.Events()
			sends := outboxFixture(t, ev, 1, false)
			if err := ev.MarkSent(ctx, []uuid.UUID{sends[0].ID}, time.Now()); err != nil {
				t.Fatal(err)
			}
			resend := sends[0]
			resend.ID, resend.Attempt, resend.ScheduledDelay = uuid.Must(uuid.NewV7()), 2, time.Second
			if err := db.Push().Settle(ctx, delivery.Settlement{SendID: sends[0].ID,
				Attempt: delivery.Attempt{Status: message.StatusFailed, StatusCode: 503, At: time.Now()},
				Resend:  &resend, Owner: "dispatcher", Until: time.Now().Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if n := backlog(t, ev); n != 1 {
				t.Fatalf("outbox holds %d rows, want the resend", n)
			}
			if ids := claimIDs(t, ev, "relay", time.Minute); len(ids) != 0 {
				t.Fatalf("the relay claimed the dispatcher's resend: %v", ids)
			}
			if err := db.Push().Release(ctx, []uuid.UUID{resend.ID}); err != nil {
				t.Fatal(err)
			}
			if ids := claimIDs(t, ev, "relay", time.Minute); !slices.Equal(ids, []uuid.UUID{resend.ID}) {
				t.Fatalf("after the dispatcher released it the relay claimed %v, want %v", ids, resend.ID)
			}
			if err := ev.MarkSent(ctx, []uuid.UUID{resend.ID}, time.Now()); err != nil {
				t.Fatal(err)
			}
			if n := backlog(t, ev); n != 0 {
				t.Errorf("outbox holds %d rows, want none", n)
			}
		})
	}
}

// TestOutboxPurge: an expired event whose copy the outbox still owes the
// broker is kept (the copy is still sent, for its consumer to dead-letter
// it); once the copy is settled, purging the event takes its outbox row with
// it (a row the relay had not yet recorded sent when the consumer settled it).
func TestOutboxPurge(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			ev := db.Events()
			now := time.Now().UTC()
			room := uuid.Must(uuid.NewV7())
			e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: room, RequestID: room, CorrelationID: "c",
				EventTypeID: room, EventType: "t", Version: 1, Payload: []byte(`1`), PublishedAt: now.Add(-48 * time.Hour),
				ExpiresAt: now.Add(-time.Hour), Attributes: map[string]string{}}
			s := message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "c",
				SubscriptionID: room, SubscriptionType: "PULL", Destination: "d", Attempt: 1, CreatedAt: e.PublishedAt, Status: message.StatusPending}
			if err := ev.Publish(ctx, []message.Event{e}, []message.Send{s}, outbox.Lease{}); err != nil {
				t.Fatal(err)
			}
			q := outbox.PurgeQuery{PublishedBefore: now.Add(-24 * time.Hour), RetainedBefore: now.Add(-7 * 24 * time.Hour), Now: now, Limit: 10}
			if n, err := ev.PurgeEvents(ctx, q); err != nil || n != 0 {
				t.Fatalf("purged %d, %v; want the expired event kept while its copy is owed", n, err)
			}
			if err := db.Push().Settle(ctx, delivery.Settlement{SendID: s.ID,
				Attempt: delivery.Attempt{Status: message.StatusExpired, Error: "expired before delivery", At: now}}); err != nil {
				t.Fatal(err)
			}
			if n := backlog(t, ev); n != 1 {
				t.Fatalf("outbox holds %d rows, want the settled copy's stale row", n)
			}
			if n, err := ev.PurgeEvents(ctx, q); err != nil || n != 1 {
				t.Fatalf("purged %d, %v; want 1", n, err)
			}
			if n := backlog(t, ev); n != 0 {
				t.Errorf("outbox holds %d rows of a purged event", n)
			}
		})
	}
}

// TestOutboxMigration: sends an older version left unsent move into the
// outbox with their leases on upgrade; nothing accepted is lost.
func TestOutboxMigration(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			url := "sqlite::memory:"
			if d == store.Postgres {
				url = storetest.PostgresSchemaURL(t)
			}
			db, err := store.Open(ctx, url, log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			if _, err := db.MigrateTo(ctx, log, 7); err != nil {
				t.Fatal(err)
			}
			ev := uuid.Must(uuid.NewV7())
			now := time.Now().UTC().Truncate(time.Second)
			if err := db.Exec(ctx, `INSERT INTO events (id, room_id, request_id, correlation_id, event_type_id, event_type,
				version, payload, destinations, published_at) VALUES (?, ?, ?, 'c', ?, 't', 1, '1', 3, ?)`, ev, ev, ev, ev, now); err != nil {
				t.Fatal(err)
			}
			ids := []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())}
			rows := []struct {
				sent    bool
				status  string
				claimed bool
			}{{false, "pending", false}, {false, "pending", true}, {true, "sent", false}}
			for i, r := range rows {
				var sentAt, until any
				if r.sent {
					sentAt = now
				}
				if r.claimed {
					until = now.Add(time.Hour)
				}
				if err := db.Exec(ctx, `INSERT INTO published_messages (id, event_id, room_id, correlation_id, subscription_id,
					subscription_type, destination, attempt, created_at, sent_at, claimed_by, claimed_until, status)
					VALUES (?, ?, ?, 'c', ?, 'PULL', 'd', 1, ?, ?, 'old', ?, ?)`, ids[i], ev, ev, ev, now, sentAt, until, r.status); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := db.Migrate(ctx, log); err != nil || n == 0 {
				t.Fatalf("migrate: %d, %v", n, err)
			}
			if n := backlog(t, db.Events()); n != 2 {
				t.Errorf("outbox holds %d rows after the upgrade, want the 2 unsent", n)
			}
			if got := claimIDs(t, db.Events(), "new", time.Minute); !slices.Equal(got, ids[:1]) {
				t.Errorf("claimed %v, want %v (the other keeps its lease)", got, ids[:1])
			}
		})
	}
}

// TestOutboxConcurrentClaimsRespectTheLimit: relays of several processes
// claim at once while others release rows; no claim takes more than its
// limit nor a row another claim holds. (With the candidates picked in an
// IN (… LIMIT … FOR UPDATE SKIP LOCKED) subquery, PostgreSQL re-ran the
// subquery when the UPDATE met a row changed meanwhile: claims of 484 rows
// with a limit of 200, one taking 7.5 s.)
func TestOutboxConcurrentClaimsRespectTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ev := storetest.Open(t, store.Postgres).Events()
	outboxFixture(t, ev, 3000, false)
	const limit = 50
	var mu sync.Mutex
	held := map[uuid.UUID]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 8 {
		owner := fmt.Sprintf("relay-%d", w)
		wg.Go(func() {
			for range 40 {
				ps, err := ev.ClaimPending(ctx, owner, time.Now().Add(time.Minute), limit)
				if err != nil {
					errs <- err
					return
				}
				if len(ps) > limit {
					errs <- fmt.Errorf("%s claimed %d rows with a limit of %d", owner, len(ps), limit)
				}
				ids := make([]uuid.UUID, len(ps))
				mu.Lock()
				for i, p := range ps {
					if other, ok := held[p.ID]; ok {
						errs <- fmt.Errorf("%s claimed %s, which %s holds", owner, p.ID, other)
					}
					held[p.ID] = owner
					ids[i] = p.ID
				}
				mu.Unlock()
				if w%4 != 3 { // most relays give their rows back at once
					mu.Lock()
					for _, id := range ids {
						delete(held, id)
					}
					mu.Unlock()
					if err := ev.Release(ctx, ids); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// subscriptionFixture stores a room with an event type and a PULL
// subscription to it, and returns the subscription.
func subscriptionFixture(t *testing.T, db *store.DB) subscriptions.Subscription {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	room := rooms.Room{ID: uuid.Must(uuid.NewV7()), Identifier: "room-" + uuid.NewString(), DeliveryDelayMultiplier: 1,
		DeliveryAttempts: 1, Status: rooms.StatusActive, CreatedAt: now, UpdatedAt: now}
	if err := db.Rooms().CreateRoom(ctx, room); err != nil {
		t.Fatal(err)
	}
	et := rooms.EventType{ID: uuid.Must(uuid.NewV7()), RoomID: room.ID, Identifier: "t", CreatedAt: now}
	if err := db.Rooms().CreateEventType(ctx, et); err != nil {
		t.Fatal(err)
	}
	sub := subscriptions.Subscription{ID: uuid.Must(uuid.NewV7()), RoomID: room.ID, Type: subscriptions.TypePull,
		EventTypes: []subscriptions.Filter{{EventTypeID: et.ID, EventType: "t"}}, AckDeadline: time.Minute,
		Status: subscriptions.StatusActive, CreatedAt: now, UpdatedAt: now}
	if err := db.Subscriptions().CreateSubscription(ctx, sub); err != nil {
		t.Fatal(err)
	}
	return sub
}

// TestOutboxRefusals: a copy the broker refused and that may be tried again
// stays owed, out of every claim until its retry time, with its refusal
// counted and the broker's answer logged (cleared once it is sent); a copy
// given up leaves the outbox with its final status and becomes a dead letter
// of its subscription, or is dropped when its subscription is gone.
func TestOutboxRefusals(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			ev := db.Events()
			sub := subscriptionFixture(t, db)
			now := time.Now().UTC().Truncate(time.Microsecond)
			var events []message.Event
			var sends []message.Send
			for i := range 4 {
				e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: sub.RoomID, RequestID: sub.RoomID, CorrelationID: fmt.Sprint("c", i),
					EventTypeID: sub.EventTypes[0].EventTypeID, EventType: "t", Version: 1, Payload: []byte(`{"n":1}`),
					PublishedAt: now, Attributes: map[string]string{"k": "v"}}
				subID := sub.ID
				if i == 3 {
					subID = uuid.Must(uuid.NewV7()) // deleted
				}
				events = append(events, e)
				sends = append(sends, message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: e.RoomID, CorrelationID: e.CorrelationID,
					SubscriptionID: subID, SubscriptionType: "PULL", Destination: "d", Attempt: 1, CreatedAt: now, Status: message.StatusPending})
			}
			if err := ev.Publish(ctx, events, sends, outbox.Lease{}); err != nil {
				t.Fatal(err)
			}
			ps, err := ev.ClaimPending(ctx, "relay-a", time.Now().Add(time.Minute), 10)
			if err != nil || len(ps) != 4 {
				t.Fatalf("claimed %d, %v; want 4", len(ps), err)
			}
			for _, p := range ps {
				if p.Refusals != 0 {
					t.Fatalf("fresh copy %s has %d refusals", p.ID, p.Refusals)
				}
			}
			retryAt := time.Now().Add(300 * time.Millisecond)
			refusals := []outbox.Refusal{
				{Pending: ps[0], Error: "no such queue", At: now, RetryAt: retryAt},
				{Pending: ps[1], Error: "no such queue", At: now, Status: message.StatusExpired, Reason: delivery.ReasonExpired},
				{Pending: ps[2], Error: "refused 10 times", At: now, Status: message.StatusDeadLettered, Reason: delivery.ReasonBrokerRefused},
				{Pending: ps[3], Error: "refused 10 times", At: now, Status: message.StatusDeadLettered, Reason: delivery.ReasonBrokerRefused},
			}
			// In any order: the store locks in id order.
			if err := ev.Refuse(ctx, []outbox.Refusal{refusals[3], refusals[1], refusals[0], refusals[2]}); err != nil {
				t.Fatal(err)
			}
			if n := backlog(t, ev); n != 1 {
				t.Errorf("outbox holds %d rows, want only the copy to try again", n)
			}
			if ids := claimIDs(t, ev, "relay-b", time.Minute); len(ids) != 0 {
				t.Errorf("claimed %v before the retry time", ids)
			}
			log := func() map[uuid.UUID]message.Send {
				t.Helper()
				got, err := ev.Sends(ctx, []uuid.UUID{events[0].ID, events[1].ID, events[2].ID, events[3].ID})
				if err != nil {
					t.Fatal(err)
				}
				m := map[uuid.UUID]message.Send{}
				for _, s := range got {
					m[s.ID] = s
				}
				return m
			}
			l := log()
			for i, w := range []struct {
				status message.Status
				err    string
			}{{message.StatusPending, "no such queue"}, {message.StatusExpired, "no such queue"},
				{message.StatusDeadLettered, "refused 10 times"}, {message.StatusDropped, "subscription deleted; refused 10 times"}} {
				s := l[sends[i].ID]
				if s.Status != w.status || s.Error != w.err {
					t.Errorf("copy %d logged %q %q, want %q %q", i, s.Status, s.Error, w.status, w.err)
				}
				if given := i > 0; given == s.CompletedAt.IsZero() {
					t.Errorf("copy %d completed at %v", i, s.CompletedAt)
				}
			}
			dls, err := db.Push().DeadLetters(ctx, sub.ID, delivery.Filter{}, 10, uuid.Nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(dls) != 2 {
				t.Fatalf("%d dead letters, want 2 (the dropped copy's subscription is gone): %+v", len(dls), dls)
			}
			reasons := map[uuid.UUID]string{}
			for _, dl := range dls {
				reasons[dl.Event.ID] = dl.Reason
				if dl.Attempts != 1 || dl.LastError == "" || string(dl.Event.Payload) != `{"n":1}` || dl.Event.Attributes["k"] != "v" {
					t.Errorf("dead letter %+v: want attempts 1, the error, the payload and attributes", dl)
				}
			}
			if reasons[events[1].ID] != delivery.ReasonExpired || reasons[events[2].ID] != delivery.ReasonBrokerRefused {
				t.Errorf("dead-letter reasons %v, want expired for event 1 and broker_refused for event 2", reasons)
			}

			// Once its retry time passes, any relay claims the copy, with its
			// refusal counted; sent, its refusal is no longer its error.
			db.SetClock(apitest.NewClock(retryAt.Add(time.Millisecond)).Now)
			ps, err = ev.ClaimPending(ctx, "relay-b", time.Now().Add(time.Minute), 10)
			if err != nil || len(ps) != 1 || ps[0].ID != sends[0].ID || ps[0].Refusals != 1 {
				t.Fatalf("claimed %+v, %v; want copy 0 with 1 refusal", ps, err)
			}
			if err := ev.Refuse(ctx, []outbox.Refusal{{Pending: ps[0], Error: "still no queue", At: now, RetryAt: time.Now()}}); err != nil {
				t.Fatal(err)
			}
			ps, err = ev.ClaimPending(ctx, "relay-b", time.Now().Add(time.Minute), 10)
			if err != nil || len(ps) != 1 || ps[0].Refusals != 2 || ps[0].Error != "still no queue" {
				t.Fatalf("claimed %+v, %v; want copy 0 with 2 refusals", ps, err)
			}
			if err := ev.MarkSent(ctx, []uuid.UUID{ps[0].ID}, time.Now()); err != nil {
				t.Fatal(err)
			}
			if s := log()[sends[0].ID]; s.Status != message.StatusSent || s.Error != "" {
				t.Errorf("sent copy logged %q %q, want sent with no error", s.Status, s.Error)
			}
		})
	}
}

// TestDeleteSubscriptionDropsOwedCopies: deleting a subscription ends the
// copies still owed to the broker for it as dropped (sent, a PULL copy would
// recreate its queue); other subscriptions' copies and copies already sent
// keep their place and status. Deleting the room drops all of its copies.
func TestDeleteSubscriptionDropsOwedCopies(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			ev := db.Events()
			sub := subscriptionFixture(t, db)
			now := time.Now().UTC().Truncate(time.Microsecond)
			e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: sub.RoomID, RequestID: sub.RoomID, CorrelationID: "c",
				EventTypeID: sub.EventTypes[0].EventTypeID, EventType: "t", Version: 1, Payload: []byte(`1`), PublishedAt: now, Attributes: map[string]string{}}
			send := func(subID uuid.UUID, status message.Status) message.Send {
				s := message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: e.RoomID, CorrelationID: "c", SubscriptionID: subID,
					SubscriptionType: "PULL", Destination: "d", Attempt: 1, CreatedAt: now, Status: status}
				if status == message.StatusSent {
					s.SentAt = now
				}
				return s
			}
			other := uuid.Must(uuid.NewV7())
			sends := []message.Send{send(sub.ID, message.StatusPending), send(sub.ID, message.StatusPending), send(sub.ID, message.StatusSent), send(other, message.StatusPending)}
			if err := ev.Publish(ctx, []message.Event{e}, sends, outbox.Lease{}); err != nil {
				t.Fatal(err)
			}
			if n := backlog(t, ev); n != 3 {
				t.Fatalf("outbox holds %d rows, want 3", n)
			}
			if err := db.Subscriptions().DeleteSubscription(ctx, sub.RoomID, sub.ID); err != nil {
				t.Fatal(err)
			}
			if ids := claimIDs(t, ev, "relay", time.Minute); !slices.Equal(ids, []uuid.UUID{sends[3].ID}) {
				t.Errorf("claimed %v after the delete, want only the other subscription's copy %s", ids, sends[3].ID)
			}
			log, err := ev.Sends(ctx, []uuid.UUID{e.ID})
			if err != nil {
				t.Fatal(err)
			}
			want := map[uuid.UUID]message.Status{sends[0].ID: message.StatusDropped, sends[1].ID: message.StatusDropped,
				sends[2].ID: message.StatusSent, sends[3].ID: message.StatusPending}
			for _, s := range log {
				if s.Status != want[s.ID] {
					t.Errorf("copy %s logged %q, want %q", s.ID, s.Status, want[s.ID])
				}
			}
			// Deleting the room drops every copy of it still owed.
			if _, err := db.Rooms().DeleteRoom(ctx, sub.RoomID, true); err != nil {
				t.Fatal(err)
			}
			if n := backlog(t, ev); n != 0 {
				t.Errorf("outbox holds %d rows after the room's delete, want 0", n)
			}
			log, err = ev.Sends(ctx, []uuid.UUID{e.ID})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range log {
				if s.ID == sends[3].ID && (s.Status != message.StatusDropped || s.Error != "room deleted before the broker took the copy") {
					t.Errorf("the room's last owed copy logged %q %q, want dropped", s.Status, s.Error)
				}
			}
		})
	}
}
