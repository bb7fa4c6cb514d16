package push

import (
	"context"
	"errors"
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

// flakyDB is a Directory and Log whose every call fails while down.
type flakyDB struct {
	sub   subscriptions.Subscription
	down  atomic.Bool
	pings atomic.Int32

	mu      sync.Mutex
	settled []delivery.Settlement
}

var errDown = errors.New("database unreachable")

func (f *flakyDB) PushTarget(context.Context, uuid.UUID, uuid.UUID) (rooms.Room, subscriptions.Subscription, error) {
	if f.down.Load() {
		return rooms.Room{}, subscriptions.Subscription{}, errDown
	}
	return rooms.Room{DeliveryAttempts: 3, DeliveryDelay: 10, DeliveryDelayMultiplier: 1}, f.sub, nil
}

func (f *flakyDB) Settle(_ context.Context, s delivery.Settlement) error {
	if f.down.Load() {
		return errDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, s)
	return nil
}

func (f *flakyDB) MarkSent(context.Context, []uuid.UUID, time.Time) error         { return nil }
func (f *flakyDB) Release(context.Context, []uuid.UUID) error                     { return nil }
func (*flakyDB) ReleaseParked(context.Context, uuid.UUID, time.Time) (int, error) { return 0, nil }

func (f *flakyDB) ping(context.Context) error {
	f.pings.Add(1)
	if f.down.Load() {
		return errDown
	}
	return nil
}

func (f *flakyDB) outcomes() []message.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []message.Status
	for _, s := range f.settled {
		out = append(out, s.Attempt.Status)
	}
	return out
}

// pauses records what the dispatcher reports.
type pauses struct {
	nopObserver
	mu     sync.Mutex
	events []bool
	final  map[string]int
}

func (p *pauses) Paused(b bool) { p.mu.Lock(); p.events = append(p.events, b); p.mu.Unlock() }
func (p *pauses) Handled(_, outcome string, _ int, _ time.Duration) {
	p.mu.Lock()
	p.final[outcome]++
	p.mu.Unlock()
}

func (p *pauses) snapshot() ([]bool, map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for k, v := range p.final {
		m[k] = v
	}
	return append([]bool(nil), p.events...), m
}

// TestDispatcherPausesWhileDatabaseDown: the database fails while a request
// is in flight. The request is not repeated: its outcome waits and is stored
// once the database is back; the message published meanwhile is not taken
// (no attempt, no outcome) until then; the observer sees pause and resume.
func TestDispatcherPausesWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	db := &flakyDB{}
	var requests, duringOutage atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) == 1 {
			db.down.Store(true) // the database goes away during the first request
		} else if db.down.Load() {
			duringOutage.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	db.sub = subscriptions.Subscription{ID: uuid.New(), Type: subscriptions.TypePush, PushURL: hook.URL, Status: subscriptions.StatusActive}

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := broker.NewEmbedded(logger)
	t.Cleanup(func() { _ = b.Close() })
	queue := broker.Destination{Address: "push", Queue: "push"}
	cfg := DefaultConfig(queue)
	cfg.Workers, cfg.ShutdownGrace = 4, time.Second
	obs := &pauses{final: map[string]int{}}
	d := New(cfg, Deps{Broker: b, Directory: db, Log: db, Client: NewHTTPClient(time.Second, loopbackAllowed()), Now: time.Now, Logger: logger,
		Observer: obs, Ping: db.ping, PingEvery: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	send := func() {
		t.Helper()
		ev := message.Event{ID: uuid.New(), RoomID: uuid.New(), EventType: "tick", Version: 1, Payload: []byte(`{}`), PublishedAt: time.Now()}
		s := message.Send{ID: uuid.New(), EventID: ev.ID, RoomID: ev.RoomID, CorrelationID: "c-" + ev.ID.String(),
			SubscriptionID: db.sub.ID, Destination: queue.FQQN(), Attempt: 1, CreatedAt: time.Now()}
		if err := b.Send(context.Background(), message.Encode(s, ev, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	send()
	apitest.EventuallyWithin(t, 5*time.Second, "pause", func() bool { ev, _ := obs.snapshot(); return len(ev) == 1 && ev[0] })
	send()
	// The outage lasts for five more of the watcher's pings, rounds of the
	// dispatcher rather than a span of the test's; the endpoint notes a
	// request that comes in it, however late, for the check below.
	from := db.pings.Load()
	apitest.Eventually(t, "five pings during the outage", func() bool { return db.pings.Load() >= from+5 })
	if got := db.outcomes(); len(got) != 0 {
		t.Errorf("outcomes stored while the database was down: %v", got)
	}
	if _, final := obs.snapshot(); len(final) != 0 {
		t.Errorf("outcomes observed while the database was down: %v", final)
	}

	db.down.Store(false)
	apitest.EventuallyWithin(t, 5*time.Second, "both delivered", func() bool { return len(db.outcomes()) == 2 })
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2: one per message", n)
	}
	if n := duringOutage.Load(); n != 0 {
		t.Errorf("%d requests during the outage, want only the one in flight when it began", n)
	}
	for i, s := range db.outcomes() {
		if s != message.StatusDelivered {
			t.Errorf("outcome %d: %s, want delivered", i, s)
		}
	}
	// The resume is reported as the dispatcher goes on, which may be after
	// the deliveries it lets through were stored.
	apitest.EventuallyWithin(t, 5*time.Second, "the resume reported", func() bool { ev, _ := obs.snapshot(); return len(ev) >= 2 })
	ev, final := obs.snapshot()
	if len(ev) != 2 || ev[1] {
		t.Errorf("pause events %v, want [true false]", ev)
	}
	if final[delivery.OutcomeDelivered] != 2 || len(final) != 1 {
		t.Errorf("observed %v, want 2 delivered", final)
	}
}
