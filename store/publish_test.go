package store_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestPublishRoundTrip: every field of an event and its sends reads back as
// written, whichever way Publish writes them (one statement on PostgreSQL,
// a transaction for large batches and on SQLite); a taken idempotency key
// fails the whole call and writes nothing.
func TestPublishRoundTrip(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ev := storetest.Open(t, d).Events()
			now := time.Now().UTC().Truncate(time.Microsecond)
			room := uuid.Must(uuid.NewV7())
			mk := func(key string, expires time.Time) (message.Event, []message.Send) {
				e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: room, RequestID: uuid.Must(uuid.NewV7()),
					CorrelationID: "corr", EventTypeID: uuid.Must(uuid.NewV7()), EventType: "order.created", Version: 3,
					Payload: []byte(`{"a":[1,2]}`), Attributes: map[string]string{"k": "v"}, IdempotencyKey: key,
					RequestHash: "h", Destinations: 2, PublishedAt: now, ExpiresAt: expires,
					Trace: message.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "a=1"}}
				pending := message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "corr",
					SubscriptionID: uuid.Must(uuid.NewV7()), SubscriptionType: "PUSH", Destination: "q::push", Attempt: 1,
					ScheduledDelay: 1500 * time.Millisecond, CreatedAt: now, Status: message.StatusPending}
				done := message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "corr",
					SubscriptionID: uuid.Must(uuid.NewV7()), SubscriptionType: "PULL", Destination: "q::pull", Attempt: 2,
					CreatedAt: now, SentAt: now.Add(time.Millisecond), Status: message.StatusFailed, StatusCode: 503,
					Error: "boom", CompletedAt: now.Add(2 * time.Millisecond)}
				return e, []message.Send{pending, done}
			}
			e1, s1 := mk("key-1", now.Add(time.Hour))
			e2, s2 := mk("", time.Time{})
			if err := ev.Publish(ctx, []message.Event{e1, e2}, append(s1, s2...), outbox.Lease{}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []message.Event{e1, e2} {
				got, err := ev.Event(ctx, room, want.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("event read back\n got %+v\nwant %+v", got, want)
				}
			}
			got, err := ev.Sends(ctx, []uuid.UUID{e1.ID, e2.ID})
			if err != nil {
				t.Fatal(err)
			}
			if want := append(s1, s2...); !reflect.DeepEqual(got, want) {
				t.Errorf("sends read back\n got %+v\nwant %+v", got, want)
			}
			if n := backlog(t, ev); n != 2 {
				t.Errorf("outbox holds %d rows, want the 2 pending sends", n)
			}

			// The same key again, in a batch with a fresh event: nothing of it stays.
			e3, s3 := mk("key-1", time.Time{})
			e4, s4 := mk("key-4", time.Time{})
			err = ev.Publish(ctx, []message.Event{e4, e3}, append(s4, s3...), outbox.Lease{})
			if !errors.Is(err, publish.ErrDuplicateKey) {
				t.Fatalf("taken key: %v, want ErrDuplicateKey", err)
			}
			if _, err := ev.Event(ctx, room, e4.ID); err == nil {
				t.Error("the batch's other event was kept")
			}
			if n := backlog(t, ev); n != 2 {
				t.Errorf("outbox holds %d rows after the failed batch, want 2", n)
			}

			// A batch too large for one statement takes the transaction.
			var events []message.Event
			var sends []message.Send
			for range 1200 {
				e, ss := mk("", time.Time{})
				events, sends = append(events, e), append(sends, ss...)
			}
			if err := ev.Publish(ctx, events, sends, outbox.Lease{}); err != nil {
				t.Fatal(err)
			}
			if n := backlog(t, ev); n != 2+1200 {
				t.Errorf("outbox holds %d rows after the large batch, want %d", n, 2+1200)
			}
		})
	}
}

// TestPublishAll: several publishes stored together keep each its own
// outbox lease (a leased row is not claimable until its lease ends, an
// unleased one is), and a taken idempotency key in one of them stores
// nothing of any.
func TestPublishAll(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ev := storetest.Open(t, d).Events()
			now := time.Now().UTC().Truncate(time.Microsecond)
			room := uuid.Must(uuid.NewV7())
			mk := func(key string, lease outbox.Lease) publish.Batch {
				e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: room, RequestID: uuid.Must(uuid.NewV7()),
					CorrelationID: "corr", EventTypeID: uuid.Must(uuid.NewV7()), EventType: "order.created", Version: 1,
					Payload: []byte(`{}`), Attributes: map[string]string{}, IdempotencyKey: key, Destinations: 1, PublishedAt: now}
				s := message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "corr",
					SubscriptionID: uuid.Must(uuid.NewV7()), SubscriptionType: "PULL", Destination: "q::pull", Attempt: 1,
					CreatedAt: now, Status: message.StatusPending}
				return publish.Batch{Events: []message.Event{e}, Sends: []message.Send{s}, Lease: lease}
			}
			leased := mk("k1", outbox.Lease{Owner: "relay-a", Until: now.Add(time.Hour)})
			free := mk("", outbox.Lease{})
			if err := ev.PublishAll(ctx, []publish.Batch{leased, free}); err != nil {
				t.Fatal(err)
			}
			for _, b := range []publish.Batch{leased, free} {
				if _, err := ev.Event(ctx, room, b.Events[0].ID); err != nil {
					t.Errorf("event %s: %v", b.Events[0].ID, err)
				}
			}
			claimed, err := ev.ClaimPending(ctx, "relay-b", now.Add(time.Minute), 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(claimed) != 1 || claimed[0].ID != free.Sends[0].ID {
				t.Errorf("claimable: %+v, want only the unleased send %s", claimed, free.Sends[0].ID)
			}

			taken := mk("k1", outbox.Lease{})
			other := mk("k2", outbox.Lease{})
			if err := ev.PublishAll(ctx, []publish.Batch{other, taken}); !errors.Is(err, publish.ErrDuplicateKey) {
				t.Fatalf("a taken key among the batches: %v, want ErrDuplicateKey", err)
			}
			if _, err := ev.Event(ctx, room, other.Events[0].ID); err == nil {
				t.Error("the other batch's event was kept")
			}
		})
	}
}
