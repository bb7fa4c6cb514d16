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

// TestOutboxBacklogAndTrace: the scrape-time outbox query counts the unsent
// sends and finds the oldest; the trace context round-trips with the event.
func TestOutboxBacklogAndTrace(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			ev := db.Events()
			if n, oldest, err := ev.OutboxBacklog(ctx); err != nil || n != 0 || !oldest.IsZero() {
				t.Fatalf("empty outbox: %d, %v, %v", n, oldest, err)
			}
			room := uuid.Must(uuid.NewV7())
			base := time.Now().UTC().Truncate(time.Microsecond)
			trace := message.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "a=1"}
			e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: room, RequestID: room, CorrelationID: "c",
				EventTypeID: room, EventType: "t", Version: 1, Payload: []byte(`1`), PublishedAt: base,
				Attributes: map[string]string{}, Trace: trace}
			var sends []message.Send
			for i := range 3 {
				sends = append(sends, message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "c",
					SubscriptionID: room, SubscriptionType: "PULL", Destination: "d", Attempt: 1,
					CreatedAt: base.Add(time.Duration(i-3) * time.Minute), Status: message.StatusPending})
			}
			if err := ev.Publish(ctx, []message.Event{e}, sends, outbox.Lease{}); err != nil {
				t.Fatal(err)
			}
			if err := ev.MarkSent(ctx, []uuid.UUID{sends[0].ID}, base); err != nil {
				t.Fatal(err)
			}
			n, oldest, err := ev.OutboxBacklog(ctx)
			if err != nil || n != 2 || !oldest.Equal(sends[1].CreatedAt) {
				t.Errorf("outbox: %d, oldest %v, %v; want 2, %v", n, oldest, err, sends[1].CreatedAt)
			}
			got, err := ev.Event(ctx, room, e.ID)
			if err != nil || got.Trace != trace {
				t.Errorf("trace read back %+v, %v; want %+v", got.Trace, err, trace)
			}
			if n, err := db.Leases().Outstanding(ctx); err != nil || n != 0 {
				t.Errorf("leases: %d, %v", n, err)
			}
		})
	}
}

// TestMarkSentTime: a send's sent time is the one MarkSent is given, or its
// creation when it was created later (the hand-off records a batch of sends
// with the time the first began).
func TestMarkSentTime(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ev := storetest.Open(t, d).Events()
			room := uuid.Must(uuid.NewV7())
			base := time.Now().UTC().Truncate(time.Microsecond)
			e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: room, RequestID: room, CorrelationID: "c",
				EventTypeID: room, EventType: "t", Version: 1, Payload: []byte(`1`), PublishedAt: base,
				Attributes: map[string]string{}}
			var sends []message.Send
			for i := range 3 {
				sends = append(sends, message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "c",
					SubscriptionID: room, SubscriptionType: "PULL", Destination: "d", Attempt: 1,
					CreatedAt: base.Add(time.Duration(i) * time.Second), Status: message.StatusPending})
			}
			if err := ev.Publish(ctx, []message.Event{e}, sends, outbox.Lease{}); err != nil {
				t.Fatal(err)
			}
			at := base.Add(1500 * time.Millisecond)
			if err := ev.MarkSent(ctx, []uuid.UUID{sends[0].ID, sends[1].ID, sends[2].ID}, at); err != nil {
				t.Fatal(err)
			}
			got, err := ev.Sends(ctx, []uuid.UUID{e.ID})
			if err != nil || len(got) != 3 {
				t.Fatalf("sends: %d, %v", len(got), err)
			}
			want := map[uuid.UUID]time.Time{sends[0].ID: at, sends[1].ID: at, sends[2].ID: sends[2].CreatedAt}
			for _, s := range got {
				if !s.SentAt.Equal(want[s.ID]) || s.Status != message.StatusSent {
					t.Errorf("send created %v: sent %v (%s), want %v (sent)", s.CreatedAt, s.SentAt, s.Status, want[s.ID])
				}
			}
		})
	}
}
