package pull

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// The pull service's unit tests run on one harness: hand-written fakes of
// the store, the subscription directory and the relay, a fake clock, and the
// embedded broker. The HTTP API and the real stores are tested in
// cmd/messaging-api.

// directory holds one room and its subscriptions; it is both the
// Subscriptions and the Directory of the service.
type directory struct {
	mu   sync.Mutex
	room rooms.Room
	subs map[uuid.UUID]subscriptions.Subscription
	err  error // PushTarget fails with it
}

func (d *directory) Get(_ context.Context, roomRef, id string) (rooms.Room, subscriptions.Subscription, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sid, err := uuid.Parse(id)
	sub, ok := d.subs[sid]
	if err != nil || !ok || roomRef != d.room.Identifier {
		return rooms.Room{}, subscriptions.Subscription{}, fmt.Errorf("subscription %w", api.ErrNotFound)
	}
	return d.room, sub, nil
}

func (d *directory) PushTarget(_ context.Context, roomID, subscriptionID uuid.UUID) (rooms.Room, subscriptions.Subscription, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return rooms.Room{}, subscriptions.Subscription{}, d.err
	}
	sub, ok := d.subs[subscriptionID]
	if !ok || roomID != d.room.ID {
		return rooms.Room{}, subscriptions.Subscription{}, fmt.Errorf("subscription %w", api.ErrNotFound)
	}
	return d.room, sub, nil
}

// leaseStore keeps leases in memory with the selection rules of the real
// store: a settle by ack id takes live leases (deadline after now) of the
// subscription, the reaper those whose deadline passed.
type leaseStore struct {
	mu       sync.Mutex
	leases   map[uuid.UUID]Lease
	settled  []Settlement // applied, oldest first, with AddLeases' expired ones
	adds     int          // AddLeases calls
	failAdds map[int]bool // AddLeases calls (from 1) that fail
}

var _ Store = (*leaseStore)(nil)

func (s *leaseStore) AddLeases(_ context.Context, leases []Lease, expired []Settlement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adds++
	if s.failAdds[s.adds] {
		return errors.New("database down")
	}
	for _, l := range leases {
		s.leases[l.AckID] = l
	}
	s.settled = append(s.settled, expired...)
	return nil
}

func (s *leaseStore) SettleLeases(_ context.Context, sel Selector, decide func([]Lease) ([]Settlement, error)) ([]uuid.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var picked []Lease
	for _, l := range s.leases {
		switch {
		case sel.Expired && !l.Deadline.After(sel.Now):
			picked = append(picked, l)
		case !sel.Expired && l.SubscriptionID == sel.SubscriptionID && slices.Contains(sel.AckIDs, l.AckID) && l.Deadline.After(sel.Now):
			picked = append(picked, l)
		}
	}
	if len(picked) == 0 {
		return nil, nil
	}
	slices.SortFunc(picked, func(a, b Lease) int { return a.Deadline.Compare(b.Deadline) })
	if sel.Limit > 0 && len(picked) > sel.Limit {
		picked = picked[:sel.Limit]
	}
	out, err := decide(picked)
	if err != nil {
		return nil, err
	}
	var done []uuid.UUID
	for _, st := range out {
		delete(s.leases, st.AckID)
		s.settled = append(s.settled, st)
		done = append(done, st.AckID)
	}
	return done, nil
}

func (s *leaseStore) ExpiredSubscriptions(_ context.Context, now time.Time, limit int) (map[uuid.UUID]uuid.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[uuid.UUID]uuid.UUID{}
	for _, l := range s.leases {
		if !l.Deadline.After(now) && len(out) < limit {
			out[l.SubscriptionID] = l.RoomID
		}
	}
	return out, nil
}

func (s *leaseStore) ExtendLeases(_ context.Context, subscriptionID uuid.UUID, ackIDs []uuid.UUID, deadline, now time.Time) ([]uuid.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var live []uuid.UUID
	for _, id := range ackIDs {
		if l, ok := s.leases[id]; ok && l.SubscriptionID == subscriptionID && l.Deadline.After(now) {
			l.Deadline = deadline
			s.leases[id] = l
			live = append(live, id)
		}
	}
	return live, nil
}

// lease returns a copy of the lease ackID and whether it is stored.
func (s *leaseStore) lease(ackID uuid.UUID) (Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[ackID]
	return l, ok
}

// settlements returns the settlements applied so far.
func (s *leaseStore) settlements() []Settlement {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.settled)
}

// notifier counts Notify calls.
type notifier struct{ n atomic.Int64 }

func (n *notifier) Notify() { n.n.Add(1) }

// observer records outcomes as "outcome/attempt" and retry delays.
type observer struct {
	mu       sync.Mutex
	outcomes []string
	delays   []time.Duration
}

func (o *observer) Handled(typ, outcome string, attempt int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes = append(o.outcomes, fmt.Sprintf("%s %s/%d", typ, outcome, attempt))
}

func (o *observer) RetryScheduled(_ string, delay time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.delays = append(o.delays, delay)
}

// consumer subscribes to the embedded broker with a prefetch window of at
// most window messages, as Artemis grants fewer than asked when the messages
// are large (it counts its window in bytes); err makes Subscribe fail.
type consumer struct {
	b      *broker.Embedded
	window int
	err    error
}

func (c *consumer) Subscribe(ctx context.Context, dest broker.Destination, opts broker.SubscribeOptions) (broker.Subscription, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.window > 0 {
		opts.Prefetch = min(opts.Prefetch, c.window)
	}
	return c.b.Subscribe(ctx, dest, opts)
}

// harness is a Service on fakes with one ACTIVE PULL subscription in a room
// whose policy retries after 400 ms, then 800 ms, and gives up after attempt 3.
type harness struct {
	svc      *Service
	store    *leaseStore
	dir      *directory
	relay    *notifier
	obs      *observer
	clock    *apitest.Clock
	broker   *broker.Embedded
	consumer *consumer
	room     rooms.Room
	sub      subscriptions.Subscription
}

func setup(t *testing.T) *harness {
	t.Helper()
	room := rooms.Room{ID: uuid.New(), Identifier: "room", ManagerIdentifier: "m", DeliveryDelay: 200, DeliveryDelayMultiplier: 2,
		DeliveryAttempts: 3, Status: rooms.StatusActive}
	sub := subscriptions.Subscription{ID: uuid.New(), RoomID: room.ID, Type: subscriptions.TypePull,
		AckDeadline: 10 * time.Second, Status: subscriptions.StatusActive}
	h := &harness{
		store:  &leaseStore{leases: map[uuid.UUID]Lease{}},
		dir:    &directory{room: room, subs: map[uuid.UUID]subscriptions.Subscription{sub.ID: sub}},
		relay:  &notifier{},
		obs:    &observer{},
		clock:  apitest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
		broker: broker.NewEmbedded(nil),
		room:   room,
		sub:    sub,
	}
	t.Cleanup(func() { _ = h.broker.Close() })
	h.consumer = &consumer{b: h.broker}
	h.svc = NewService(Deps{Subscriptions: h.dir, Directory: h.dir, Broker: h.consumer, Store: h.store, Relay: h.relay,
		Now: h.clock.Now, Rand: func() float64 { return 0.5 }, Logger: slog.New(slog.DiscardHandler), Observer: h.obs})
	return h
}

// addSub adds a subscription to the room, changed by mod.
func (h *harness) addSub(mod func(*subscriptions.Subscription)) subscriptions.Subscription {
	sub := h.sub
	sub.ID = uuid.New()
	mod(&sub)
	h.dir.mu.Lock()
	defer h.dir.mu.Unlock()
	h.dir.subs[sub.ID] = sub
	return sub
}

// publish queues one copy of a fresh event for sub, as the outbox relay
// sends it, with the event changed by mod (nil: none), and returns the event.
func (h *harness) publish(t *testing.T, sub subscriptions.Subscription, attempt int, mod func(*message.Event)) message.Event {
	t.Helper()
	ev := message.Event{ID: uuid.New(), RoomID: h.room.ID, CorrelationID: "corr-" + uuid.NewString()[:8], EventType: "tick", Version: 1,
		Payload: []byte(`{"n":1}`), Attributes: map[string]string{"region": "eu"}, PublishedAt: h.clock.Now().Add(-time.Second)}
	if mod != nil {
		mod(&ev)
	}
	send := message.Send{ID: uuid.New(), EventID: ev.ID, RoomID: h.room.ID, CorrelationID: ev.CorrelationID, SubscriptionID: sub.ID,
		SubscriptionType: string(subscriptions.TypePull), Destination: sub.Queue().FQQN(), Attempt: attempt, CreatedAt: h.clock.Now()}
	if err := h.broker.Send(t.Context(), message.Encode(send, ev, h.clock.Now())); err != nil {
		t.Fatal(err)
	}
	return ev
}

// lease stores a lease of a fresh event for sub with the given attempt and
// deadline, changed by mod (nil: none), and returns it.
func (h *harness) lease(sub subscriptions.Subscription, attempt int, deadline time.Time, mod func(*Lease)) Lease {
	l := Lease{AckID: uuid.Must(uuid.NewV7()), SubscriptionID: sub.ID, RoomID: sub.RoomID, SendID: uuid.New(),
		Event:   message.Event{ID: uuid.New(), RoomID: sub.RoomID, CorrelationID: "corr", EventType: "tick", Version: 1, PublishedAt: h.clock.Now().Add(-time.Minute)},
		Attempt: attempt, Deadline: deadline, LeasedAt: h.clock.Now()}
	if mod != nil {
		mod(&l)
	}
	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	h.store.leases[l.AckID] = l
	return l
}

// settlementOf returns the settlement applied to ackID.
func (h *harness) settlementOf(t *testing.T, ackID uuid.UUID) Settlement {
	t.Helper()
	for _, st := range h.store.settlements() {
		if st.AckID == ackID {
			return st
		}
	}
	t.Fatalf("lease %s was not settled", ackID)
	return Settlement{}
}

// statuses returns the statuses of results, in order.
func statuses(results []Result) []string {
	out := make([]string, len(results))
	for i, r := range results {
		out[i] = r.Status
	}
	return out
}
