package push

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/publish"
)

// sendRecorder is a Broker that keeps what the dispatcher sends.
type sendRecorder struct {
	mu   sync.Mutex
	msgs []broker.Message
}

func (b *sendRecorder) Send(_ context.Context, m broker.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.msgs = append(b.msgs, m)
	return nil
}

func (b *sendRecorder) Subscribe(context.Context, broker.Destination, broker.SubscribeOptions) (broker.Subscription, error) {
	return nil, errors.New("not used")
}

func (b *sendRecorder) sent() []broker.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]broker.Message(nil), b.msgs...)
}

// settleRecorder is a Log that keeps the settlements and the copies marked sent.
type settleRecorder struct {
	mu      sync.Mutex
	settled []Settlement
	marked  []uuid.UUID
}

func (l *settleRecorder) Settle(_ context.Context, s Settlement) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.settled = append(l.settled, s)
	return nil
}

func (l *settleRecorder) MarkSent(_ context.Context, ids []uuid.UUID, _ time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marked = append(l.marked, ids...)
	return nil
}

func (l *settleRecorder) Release(context.Context, []uuid.UUID) error { return nil }

func (l *settleRecorder) snapshot() ([]Settlement, []uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Settlement(nil), l.settled...), append([]uuid.UUID(nil), l.marked...)
}

// heldDelivery is a push message on its third attempt, already held twice.
func heldDelivery(queue broker.Destination, now time.Time) (*broker.Delivery, uuid.UUID) {
	sub := uuid.New()
	ev := publish.Event{ID: uuid.New(), RoomID: uuid.New(), EventType: "tick", Version: 1, Payload: []byte(`{}`), PublishedAt: now}
	s := publish.Send{ID: uuid.New(), EventID: ev.ID, RoomID: ev.RoomID, CorrelationID: "c", SubscriptionID: sub,
		Destination: queue.FQQN(), Attempt: 3, Held: 2, CreatedAt: now}
	return &broker.Delivery{Message: publish.Message(publish.Pending{Send: s, Event: ev}, now)}, sub
}

// TestSlowDeferralWaitsInTheOutbox: a slow subscription's deferred message
// is not sent again by the dispatcher: its copy is stored leased until the
// deferral ends (the delay doubled by each earlier deferral), for the outbox
// relay to send then, with the deferral counted and the same attempt. A
// PAUSED subscription's held message still goes to the broker's scheduler.
func TestSlowDeferralWaitsInTheOutbox(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC)
	queue := broker.Destination{Address: "push", Queue: "push"}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	newDispatcher := func() (*Dispatcher, *sendRecorder, *settleRecorder) {
		b, log := &sendRecorder{}, &settleRecorder{}
		return New(DefaultConfig(queue), b, nil, log, nil, func() time.Time { return now }, logger), b, log
	}

	t.Run("slow", func(t *testing.T) {
		p, b, log := newDispatcher()
		d, sub := heldDelivery(queue, now)
		p.deferSlow(context.Background(), &job{key: sub, d: d})
		eventually(t, 2*time.Second, "the deferral stored", func() bool { s, _ := log.snapshot(); return len(s) == 1 })
		settled, marked := log.snapshot()
		s := settled[0]
		delay := DefaultConfig(queue).DeferDelay << 2 // the third deferral
		if s.Resend == nil || s.Resend.Held != 3 || s.Resend.Attempt != 3 || s.Resend.ScheduledDelay != delay ||
			s.Owner != p.owner || !s.Until.Equal(now.Add(delay)) || s.Attempt.Status != StatusDeferred {
			t.Fatalf("stored %+v (resend %+v); want a copy held 3 times, attempt 3, leased to %s until %s",
				s, s.Resend, p.owner, now.Add(delay))
		}
		if msgs := b.sent(); len(msgs) != 0 || len(marked) != 0 {
			t.Errorf("the dispatcher sent %d messages and marked %v sent; the outbox relay sends a deferred copy", len(msgs), marked)
		}
	})

	t.Run("paused", func(t *testing.T) {
		p, b, log := newDispatcher()
		d, sub := heldDelivery(queue, now)
		dec := p.requeue(&job{key: sub, d: d}, 40*time.Second, "held", deferPaused)
		if err := p.settle(context.Background(), d, &dec); err != nil {
			t.Fatal(err)
		}
		settled, marked := log.snapshot()
		msgs := b.sent()
		if len(settled) != 1 || settled[0].Resend == nil || len(msgs) != 1 {
			t.Fatalf("%d settlements, %d sends; want one of each", len(settled), len(msgs))
		}
		s, m := settled[0], msgs[0]
		if s.Resend.Held != 3 || !s.Until.Equal(now.Add(time.Minute)) || m.Headers[publish.HeaderHeld] != strconv.Itoa(3) ||
			m.Delay != 40*time.Second || m.Attempt != 3 || len(marked) != 1 || marked[0] != s.Resend.ID {
			t.Errorf("held copy %+v leased until %s, sent with x-held %q, delay %s, attempt %d, marked %v",
				s.Resend, s.Until, m.Headers[publish.HeaderHeld], m.Delay, m.Attempt, marked)
		}
	})
}
