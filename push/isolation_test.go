package push

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// twoSubs is a Directory and Log with a hanging and a fast subscription.
type twoSubs struct {
	subs map[uuid.UUID]subscriptions.Subscription
	mu   sync.Mutex
	out  map[message.Status]int
}

func (d *twoSubs) PushTarget(_ context.Context, _, id uuid.UUID) (rooms.Room, subscriptions.Subscription, error) {
	return rooms.Room{DeliveryAttempts: 1}, d.subs[id], nil
}

func (d *twoSubs) Settle(_ context.Context, s delivery.Settlement) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.out[s.Attempt.Status]++
	return nil
}

func (d *twoSubs) MarkSent(context.Context, []uuid.UUID, time.Time) error         { return nil }
func (d *twoSubs) Release(context.Context, []uuid.UUID) error                     { return nil }
func (*twoSubs) ReleaseParked(context.Context, uuid.UUID, time.Time) (int, error) { return 0, nil }

// TestDispatcherIsolatesAHangingEndpoint: messages of an endpoint that
// hangs fill the prefetch window while it merely looks busy; once its
// requests count as slow, its backlog beyond the limit is deferred, so the
// window opens again for a fast endpoint queued behind them. (Before, the
// held messages kept their slots until the hanging requests timed out.)
func TestDispatcherIsolatesAHangingEndpoint(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	var fastGot atomic.Int32
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fastGot.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	var opened sync.Once
	open := func() { opened.Do(func() { close(release) }) }
	t.Cleanup(func() { open(); hang.Close(); fast.Close() })
	slowSub := subscriptions.Subscription{ID: uuid.New(), Type: subscriptions.TypePush, PushURL: hang.URL, Status: subscriptions.StatusActive}
	fastSub := subscriptions.Subscription{ID: uuid.New(), Type: subscriptions.TypePush, PushURL: fast.URL, Status: subscriptions.StatusActive}
	db := &twoSubs{subs: map[uuid.UUID]subscriptions.Subscription{slowSub.ID: slowSub, fastSub.ID: fastSub}, out: map[message.Status]int{}}

	d, send := smallWindowDispatcher(t, db, db)
	for range 12 {
		send(slowSub.ID)
	}
	for range 20 {
		send(fastSub.ID)
	}
	runDispatcher(t, d)

	// The hanging requests last 10 s; the fast endpoint must not wait for them.
	apitest.EventuallyWithin(t, 3*time.Second, "the fast endpoint's 20 deliveries", func() bool { return fastGot.Load() == 20 })
	// Each deferral's ack frees a slot for the fast endpoint, so its 20 can
	// all pass through the first 7 while the 8th is still being stored.
	outcomes := func() (deferred, all int) {
		db.mu.Lock()
		defer db.mu.Unlock()
		for _, n := range db.out {
			all += n
		}
		return db.out[delivery.StatusDeferred], all
	}
	apitest.EventuallyWithin(t, 2*time.Second, "8 deferrals", func() bool { d, _ := outcomes(); return d >= 8 })
	// Once the endpoint answers, the hanging requests and the backlog behind
	// them are delivered: with all 32 messages settled, the number deferred
	// is final.
	open()
	apitest.EventuallyWithin(t, 3*time.Second, "all 32 messages settled", func() bool { _, all := outcomes(); return all == 32 })
	if n, _ := outcomes(); n != 8 {
		t.Errorf("%d deferrals, want the 8 held messages beyond the backlog of 2", n)
	}
}

// smallWindowDispatcher is a Dispatcher on an embedded broker with a
// prefetch window of 12 (2 requests per subscription, a backlog of 2, slow
// after 100 ms), and a function that queues a first copy for a subscription.
func smallWindowDispatcher(t *testing.T, dir Directory, log Log) (*Dispatcher, func(sub uuid.UUID)) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := broker.NewEmbedded(logger)
	t.Cleanup(func() { _ = b.Close() })
	queue := broker.Destination{Address: "push", Queue: "push"}
	cfg := DefaultConfig(queue)
	cfg.Workers, cfg.PerSubscription, cfg.Backlog, cfg.Prefetch = 8, 2, 2, 12
	cfg.SlowAfter, cfg.ShutdownGrace = 100*time.Millisecond, 100*time.Millisecond
	d := New(cfg, Deps{Broker: b, Directory: dir, Log: log, Client: NewHTTPClient(10*time.Second, loopbackAllowed()), Now: time.Now, Logger: logger})
	return d, func(sub uuid.UUID) {
		ev := message.Event{ID: uuid.New(), RoomID: uuid.New(), EventType: "tick", Version: 1, Payload: []byte(`{}`), PublishedAt: time.Now()}
		s := message.Send{ID: uuid.New(), EventID: ev.ID, RoomID: ev.RoomID, CorrelationID: "c", SubscriptionID: sub,
			Destination: queue.FQQN(), Attempt: 1, CreatedAt: time.Now()}
		if err := b.Send(context.Background(), message.Encode(s, ev, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
}

// runDispatcher runs d until the test ends or stop, which returns once Run
// has.
func runDispatcher(t *testing.T, d *Dispatcher) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}
