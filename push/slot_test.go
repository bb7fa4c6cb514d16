package push

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/subscriptions"
)

// stalledLog is twoSubs whose first stored outcome waits until unstall is
// closed, like a group commit stuck on a slow database.
type stalledLog struct {
	*twoSubs
	calls   atomic.Int32
	stalled chan struct{} // closed when the first Settle starts waiting
	unstall chan struct{}
}

func (l *stalledLog) Settle(ctx context.Context, s delivery.Settlement) error {
	if l.calls.Add(1) == 1 {
		close(l.stalled)
		select {
		case <-l.unstall:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return l.twoSubs.Settle(ctx, s)
}

// TestDispatcherFreesTheSlotBeforeTheCommit: a subscription's bound on
// concurrent deliveries counts requests to its endpoint; the next request
// must not wait for the previous outcome to be stored. (Before, a worker
// kept the slot through the group commit, which capped one subscription at
// PerSubscription deliveries per commit latency.)
func TestDispatcherFreesTheSlotBeforeTheCommit(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	sub := subscriptions.Subscription{ID: uuid.New(), Type: subscriptions.TypePush, PushURL: srv.URL, Status: subscriptions.StatusActive}
	log := &stalledLog{
		twoSubs: &twoSubs{subs: map[uuid.UUID]subscriptions.Subscription{sub.ID: sub}, out: map[message.Status]int{}},
		stalled: make(chan struct{}), unstall: make(chan struct{}),
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := broker.NewEmbedded(logger)
	t.Cleanup(func() { _ = b.Close() })
	queue := broker.Destination{Address: "push", Queue: "push"}
	cfg := DefaultConfig(queue)
	cfg.Workers, cfg.PerSubscription, cfg.ShutdownGrace = 4, 1, 100*time.Millisecond
	d := New(cfg, Deps{Broker: b, Directory: log, Log: log, Client: NewHTTPClient(10*time.Second, loopbackAllowed()), Now: time.Now, Logger: logger})
	for range 2 {
		ev := message.Event{ID: uuid.New(), RoomID: uuid.New(), EventType: "tick", Version: 1, Payload: []byte(`{}`), PublishedAt: time.Now()}
		s := message.Send{ID: uuid.New(), EventID: ev.ID, RoomID: ev.RoomID, CorrelationID: "c", SubscriptionID: sub.ID,
			Destination: queue.FQQN(), Attempt: 1, CreatedAt: time.Now()}
		if err := b.Send(context.Background(), message.Encode(s, ev, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	select {
	case <-log.stalled:
	case <-time.After(3 * time.Second):
		t.Fatal("no outcome was stored")
	}
	apitest.EventuallyWithin(t, 2*time.Second, "the second request while the first outcome is being stored", func() bool { return got.Load() == 2 })
	close(log.unstall)
	apitest.EventuallyWithin(t, 2*time.Second, "both outcomes stored", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.out[message.StatusDelivered] == 2
	})
}
