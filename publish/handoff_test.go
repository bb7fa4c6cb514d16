package publish_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/subscriptions"
)

// The outbox's relay is the hand-off a publish uses.
var _ publish.HandOff = (*outbox.Relay)(nil)

// handOffRelay is a relay that takes hand-offs while it has room.
type handOffRelay struct {
	free       int
	notified   int
	unreserved int
	handed     []outbox.Pending
	lease      outbox.Lease
}

func (h *handOffRelay) Notify() { h.notified++ }

func (h *handOffRelay) Reserve(n int) (outbox.Lease, bool) {
	if n > h.free {
		return outbox.Lease{}, false
	}
	h.free -= n
	return h.lease, true
}

func (h *handOffRelay) Unreserve(n int) { h.free += n; h.unreserved += n }

func (h *handOffRelay) HandOff(lease outbox.Lease, p []outbox.Pending) {
	if lease != h.lease {
		panic("handed off under another lease")
	}
	h.handed = append(h.handed, p...)
}

// leaseStore records the lease each publish was stored with, and fails when told.
type leaseStore struct {
	memEvents
	leases []outbox.Lease
	sends  []message.Send
	fail   error
}

func (s *leaseStore) Publish(ctx context.Context, events []message.Event, sends []message.Send, lease outbox.Lease) error {
	if s.fail != nil {
		return s.fail
	}
	s.leases = append(s.leases, lease)
	s.sends = append(s.sends, sends...)
	return s.memEvents.Publish(ctx, events, sends, lease)
}

// TestPublishHandsOff: a publish reserves a hand-off place per send, stores
// them leased to the relay and hands over each send with its event; when the
// relay has no room it stores them unleased and notifies; when the store
// fails it gives the places back.
func TestPublishHandsOff(t *testing.T) {
	ctx := context.Background()
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	relay := &handOffRelay{free: 3, lease: outbox.Lease{Owner: "relay-1", Until: now().Add(time.Minute)}}
	store := &leaseStore{}
	svc := publish.NewService(publish.Deps{Catalog: fixedCatalog{}, Subscribers: fixedSubscribers{}, Store: store, Relay: relay,
		PushQueue: broker.Destination{Address: "push", Queue: "dispatch"}, Now: now})
	v2 := 2
	in := publish.Input{EventType: "order.created", EventTypeVersion: &v2, Payload: json.RawMessage(`{"a": 1}`),
		Attributes: map[string]string{"k": "v"}}

	// Version 2 goes to both subscriptions: 2 sends, handed off.
	res, err := svc.Publish(ctx, "orders", []publish.Input{in}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(store.leases) != 1 || store.leases[0] != relay.lease {
		t.Fatalf("stored with leases %v, want the relay's", store.leases)
	}
	if len(relay.handed) != 2 || relay.notified != 0 || relay.free != 1 {
		t.Fatalf("handed %d, notified %d, %d places free; want 2, 0, 1", len(relay.handed), relay.notified, relay.free)
	}
	ev := res[0].Event
	for i, p := range relay.handed {
		if p.Send != store.sends[i] || p.Event.ID != ev.ID || string(p.Event.Payload) != `{"a":1}` || p.Event.Attributes["k"] != "v" ||
			p.Event.Destinations != 2 || !p.Event.ExpiresAt.Equal(now().Add(time.Minute)) {
			t.Errorf("hand-off %d: %+v; want send %+v with its event %+v", i, p, store.sends[i], ev)
		}
	}

	// No room for 2 more: stored unleased, the relay notified.
	if _, err := svc.Publish(ctx, "orders", []publish.Input{in}, "", false); err != nil {
		t.Fatal(err)
	}
	if store.leases[1] != (outbox.Lease{}) || len(relay.handed) != 2 || relay.notified != 1 {
		t.Errorf("full hand-off: lease %v, %d handed, notified %d; want no lease, 2, 1", store.leases[1], len(relay.handed), relay.notified)
	}

	// The store fails: the places come back.
	relay.free = 10
	store.fail = errors.New("database down")
	if _, err := svc.Publish(ctx, "orders", []publish.Input{in}, "", false); err == nil {
		t.Fatal("publish worked although the store failed")
	}
	if relay.free != 10 || relay.unreserved != 2 {
		t.Errorf("after a failed store: %d places free, %d given back; want 10, 2", relay.free, relay.unreserved)
	}
}

// noSubscribers: a room nobody subscribes to.
type noSubscribers struct{}

func (noSubscribers) Subscriptions(context.Context, subscriptions.Query) ([]subscriptions.Subscription, error) {
	return nil, nil
}

// TestPublishHandOffOff: with the relay's hand-off off (OUTBOX_HANDOFF=0) a
// publish notifies, and one that the store fails, with or without sends,
// just fails (it once gave back places it never took, and panicked).
func TestPublishHandOffOff(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	store := &leaseStore{fail: errors.New("database down")}
	relay := outbox.NewRelay(outbox.Config{Batch: 1, Concurrency: 1, Poll: time.Hour, Lease: time.Minute}, outbox.Deps{Now: now, Logger: slog.New(slog.DiscardHandler)})
	in := publish.Input{EventType: "order.created", Payload: json.RawMessage(`{"orderId": "1"}`)}
	for _, subs := range []publish.Subscribers{fixedSubscribers{}, noSubscribers{}} {
		svc := publish.NewService(publish.Deps{Catalog: fixedCatalog{}, Subscribers: subs, Store: store, Relay: relay,
			PushQueue: broker.Destination{Address: "push", Queue: "dispatch"}, Now: now})
		if _, err := svc.Publish(context.Background(), "orders", []publish.Input{in}, "", false); err == nil {
			t.Errorf("%T: publish worked although the store failed", subs)
		}
	}
	store.fail = nil
	svc := publish.NewService(publish.Deps{Catalog: fixedCatalog{}, Subscribers: fixedSubscribers{}, Store: store, Relay: relay,
		PushQueue: broker.Destination{Address: "push", Queue: "dispatch"}, Now: now})
	if _, err := svc.Publish(context.Background(), "orders", []publish.Input{in}, "", false); err != nil {
		t.Fatal(err)
	}
	if store.leases[0] != (outbox.Lease{}) {
		t.Errorf("stored with lease %+v although the hand-off is off", store.leases[0])
	}
}
