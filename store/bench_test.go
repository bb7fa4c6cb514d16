package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// BenchmarkPublishOne stores one event with one send, as a single publish
// does, on PostgreSQL. Its allocations per op are the steady figure to
// compare builds by (the time is mostly the database's round trip).
func BenchmarkPublishOne(b *testing.B) {
	ev := storetest.Open(b, store.Postgres).Events()
	room := uuid.Must(uuid.NewV7())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now().UTC()
		e := message.Event{ID: uuid.Must(uuid.NewV7()), RoomID: room, RequestID: room, CorrelationID: "c",
			EventTypeID: room, EventType: "t", Version: 1, Payload: []byte(`{"n":1}`), PublishedAt: now, Attributes: map[string]string{}}
		s := message.Send{ID: uuid.Must(uuid.NewV7()), EventID: e.ID, RoomID: room, CorrelationID: "c",
			SubscriptionID: room, SubscriptionType: "PUSH", Destination: "d", Attempt: 1, CreatedAt: now, Status: message.StatusPending}
		if err := ev.Publish(ctx, []message.Event{e}, []message.Send{s}, outbox.Lease{}); err != nil {
			b.Fatal(err)
		}
	}
}
