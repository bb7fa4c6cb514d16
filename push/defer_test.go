package push

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/subscriptions"
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
	mu       sync.Mutex
	settled  []delivery.Settlement
	marked   []uuid.UUID
	released []uuid.UUID // subscriptions whose parked copies were released
}

func (l *settleRecorder) Settle(_ context.Context, s delivery.Settlement) error {
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

func (l *settleRecorder) ReleaseParked(_ context.Context, sub uuid.UUID, _ time.Time) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released = append(l.released, sub)
	return 1, nil
}

func (l *settleRecorder) releases() []uuid.UUID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uuid.UUID(nil), l.released...)
}

func (l *settleRecorder) snapshot() ([]delivery.Settlement, []uuid.UUID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]delivery.Settlement(nil), l.settled...), append([]uuid.UUID(nil), l.marked...)
}

// heldDelivery is a push message on its third attempt, already held held
// times.
func heldDelivery(queue broker.Destination, now time.Time, held int) (*broker.Delivery, uuid.UUID) {
	sub := uuid.New()
	ev := message.Event{ID: uuid.New(), RoomID: uuid.New(), EventType: "tick", Version: 1, Payload: []byte(`{}`), PublishedAt: now}
	s := message.Send{ID: uuid.New(), EventID: ev.ID, RoomID: ev.RoomID, CorrelationID: "c", SubscriptionID: sub,
		Destination: queue.FQQN(), Attempt: 3, Held: held, CreatedAt: now}
	return &broker.Delivery{Message: message.Encode(s, ev, now)}, sub
}

// TestSlowDeferralWaitsInTheOutbox: a slow subscription's deferred message
// is not sent again by the dispatcher: its copy is stored parked (leased to
// ParkedOwner of its subscription) until the deferral ends (the delay doubled
// by each earlier deferral), for the outbox relay to send then, with the
// deferral counted and the same attempt. From the fourth deferral in a row,
// for a deferral longer than 4 s (stretched by a long hang: slowDelay), and
// for a PAUSED subscription's held message, the copy goes to the broker's
// scheduler instead.
func TestSlowDeferralWaitsInTheOutbox(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 2, 0, 0, 0, time.UTC)
	queue := broker.Destination{Address: "push", Queue: "push"}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	defer1 := DefaultConfig(queue).DeferDelay
	// requeue decides, deferSlow's way, and settle stores and acks.
	settle := func(t *testing.T, held int, delay time.Duration, reason string) (delivery.Settlement, []uuid.UUID, []broker.Message, uuid.UUID) {
		t.Helper()
		b, log := &sendRecorder{}, &settleRecorder{}
		p := New(DefaultConfig(queue), Deps{Broker: b, Log: log, Now: func() time.Time { return now }, Logger: logger})
		d, sub := heldDelivery(queue, now, held)
		dec := p.requeue(&job{key: sub, d: d}, delay, "deferred", reason)
		if err := p.settle(context.Background(), d, &dec); err != nil {
			t.Fatal(err)
		}
		settled, marked := log.snapshot()
		if len(settled) != 1 || settled[0].Resend == nil {
			t.Fatalf("stored %+v; want one settlement with a copy", settled)
		}
		s := settled[0]
		if s.Resend.Held != held+1 || s.Resend.Attempt != 3 || s.Resend.ScheduledDelay != delay || s.Attempt.Status != delivery.StatusDeferred {
			t.Fatalf("stored %+v (copy %+v); want the deferral counted (%d), attempt 3, delay %s", s, s.Resend, held+1, delay)
		}
		return s, marked, b.sent(), sub
	}

	for held := range parkDeferrals {
		t.Run(fmt.Sprintf("slow, deferral %d", held+1), func(t *testing.T) {
			delay := defer1 << held
			s, marked, msgs, sub := settle(t, held, delay, deferSlow)
			if s.Owner != outbox.ParkedOwner(sub) || !s.Until.Equal(now.Add(delay)) {
				t.Errorf("copy leased to %q until %s; want parked (%q) until %s", s.Owner, s.Until, outbox.ParkedOwner(sub), now.Add(delay))
			}
			if len(msgs) != 0 || len(marked) != 0 {
				t.Errorf("the dispatcher sent %d messages and marked %v sent; the outbox relay sends a parked copy", len(msgs), marked)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		held   int
		delay  time.Duration
		reason string
	}{
		{fmt.Sprintf("slow, deferral %d", parkDeferrals+1), parkDeferrals, defer1 << parkDeferrals, deferSlow},
		{"slow, deferral 1 stretched by a long hang", 0, defer1<<(parkDeferrals-1) + time.Millisecond, deferSlow},
		{"paused", 2, 40 * time.Second, deferPaused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, marked, msgs, _ := settle(t, tc.held, tc.delay, tc.reason)
			if len(msgs) != 1 {
				t.Fatalf("%d sends; want the copy sent to the broker's scheduler", len(msgs))
			}
			m := msgs[0]
			if strings.HasPrefix(s.Owner, outbox.ParkedPrefix) || !s.Until.Equal(now.Add(time.Minute)) ||
				m.Headers[message.HeaderHeld] != strconv.Itoa(tc.held+1) || m.Delay != tc.delay || m.Attempt != 3 ||
				len(marked) != 1 || marked[0] != s.Resend.ID {
				t.Errorf("copy %+v leased to %q until %s, sent with x-held %q, delay %s, attempt %d, marked %v",
					s.Resend, s.Owner, s.Until, m.Headers[message.HeaderHeld], m.Delay, m.Attempt, marked)
			}
		})
	}
}

// TestParkedCopiesReleasedWhenQuickAgain: while a subscription's endpoint
// hangs, its deferred copies are parked and nothing releases them; once it
// answers quickly again (a delivery under SlowAfter with no request of it
// running that long), the dispatcher releases its parked copies, once.
func TestParkedCopiesReleasedWhenQuickAgain(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var opened atomic.Bool
	var answered atomic.Int32
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer answered.Add(1) // before the response goes out
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		if opened.CompareAndSwap(false, true) {
			close(release)
		}
		endpoint.Close()
	})
	sub := subscriptions.Subscription{ID: uuid.New(), Type: subscriptions.TypePush, PushURL: endpoint.URL, Status: subscriptions.StatusActive}
	log := &releaseWatch{settleRecorder: &settleRecorder{}, answered: &answered}
	dir := &twoSubs{subs: map[uuid.UUID]subscriptions.Subscription{sub.ID: sub}, out: map[message.Status]int{}}

	// A window of 12: 2 requests hang, 2 messages wait in the backlog, 8
	// are deferred.
	d, send := smallWindowDispatcher(t, dir, log)
	// A quick delivery must take less than this, on a loaded machine too.
	d.cfg.SlowAfter = 300 * time.Millisecond
	for range 12 {
		send(sub.ID)
	}
	stop := runDispatcher(t, d)

	parked := func() int {
		settled, _ := log.snapshot()
		n := 0
		for _, s := range settled {
			if s.Resend != nil && s.Owner == outbox.ParkedOwner(sub.ID) {
				n++
			}
		}
		return n
	}
	apitest.EventuallyWithin(t, 3*time.Second, "8 parked copies", func() bool { return parked() == 8 })
	opened.Store(true)
	close(release)
	delivered := func() int {
		settled, _ := log.snapshot()
		n := 0
		for _, s := range settled {
			if s.Attempt.Status == message.StatusDelivered {
				n++
			}
		}
		return n
	}
	// The 2 hanging requests end slow (no release); the 2 in the backlog
	// then go quickly, and so do 4 sent after them: the first quick one
	// releases the parked copies, the others do not (none parked since).
	apitest.EventuallyWithin(t, 3*time.Second, "4 deliveries", func() bool { return delivered() == 4 })
	for range 4 {
		send(sub.ID)
	}
	apitest.EventuallyWithin(t, 3*time.Second, "8 deliveries", func() bool { return delivered() == 8 })
	apitest.EventuallyWithin(t, 2*time.Second, "release of the parked copies", func() bool { return len(log.releases()) > 0 })
	// A stopped dispatcher has finished its releases: the count is final.
	stop()
	if r := log.releases(); len(r) != 1 || r[0] != sub.ID {
		t.Errorf("released %v; want the subscription's parked copies released once", r)
	}
	if n := log.answeredAt(); n[0] == 0 {
		t.Errorf("parked copies released while the endpoint hung, before it answered any request")
	}
}

// releaseWatch is a settleRecorder that notes, at each release of parked
// copies, how many requests the endpoint had answered by then.
type releaseWatch struct {
	*settleRecorder
	answered *atomic.Int32
	mu       sync.Mutex
	at       []int32
}

func (l *releaseWatch) ReleaseParked(ctx context.Context, sub uuid.UUID, at time.Time) (int, error) {
	l.mu.Lock()
	l.at = append(l.at, l.answered.Load())
	l.mu.Unlock()
	return l.settleRecorder.ReleaseParked(ctx, sub, at)
}

func (l *releaseWatch) answeredAt() []int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int32(nil), l.at...)
}

// TestSlowDelay: a slow subscription's deferral doubles with each one in a
// row (up to a minute), is stretched to how long its endpoint has been
// hanging (parked ones up to 4 s, the broker's up to maxSlowDelay), and not
// past halfway to the message's expiry.
func TestSlowDelay(t *testing.T) {
	t.Parallel()
	p := New(DefaultConfig(broker.Destination{Address: "push", Queue: "push"}), Deps{Now: time.Now, Logger: slog.New(slog.DiscardHandler)})
	s := time.Second
	for _, tc := range []struct {
		held             int
		stuck, expiresIn time.Duration
		want             time.Duration
	}{
		{0, 0, 0, s},
		{1, 0, 0, 2 * s},
		{2, 300 * time.Millisecond, 0, 4 * s},
		{0, 3 * s, 0, 3 * s},            // hanging for 3 s: parked 3 s, not 1
		{0, 10 * s, 0, 4 * s},           // parked: 4 s at most
		{2, 3 * s, 0, 4 * s},            // the doubling is longer
		{3, 10 * s, 0, 10 * s},          // the fourth: the broker's, as long as the hang
		{0, 90 * s, 0, 90 * s},          // a long hang: the broker's from the first, beyond the doubling's cap
		{0, time.Hour, 0, maxSlowDelay}, // capped
		{12, 0, 0, time.Minute},         // the doubling alone stops at a minute
		{12, 3 * time.Minute, 0, 3 * time.Minute},
		{0, 90 * s, 40 * s, 20 * s},           // not past the expiry: halfway to it
		{0, 90 * s, 120 * s, 60 * s},          // nor past halfway, lest it come back just as it expires
		{0, 90 * s, 10 * time.Minute, 90 * s}, // well before the expiry
		{0, 3 * s, 2 * s, s},                  // parked, not stretched past halfway
		{3, 90 * s, 10 * s, 8 * s},            // the doubling alone is not shortened (requeue dead-letters if it passes the expiry)
		{0, 30 * s, time.Second, s},           // about to expire: the plain deferral
	} {
		if got := p.slowDelay(tc.held, tc.stuck, tc.expiresIn); got != tc.want {
			t.Errorf("slowDelay(held %d, stuck %s, expires in %s) = %s, want %s", tc.held, tc.stuck, tc.expiresIn, got, tc.want)
		}
	}
}

// deferrals runs a small-window dispatcher (smallWindowDispatcher) for one
// subscription whose endpoint is handler, with requests timing out after
// timeout; first messages are sent, then, after pause, second more; it
// returns the settlements of the n deferrals that follow.
func deferrals(t *testing.T, handler http.HandlerFunc, timeout time.Duration, first int, pause time.Duration, second, n int) (*Dispatcher, uuid.UUID, []delivery.Settlement) {
	t.Helper()
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read to the end: only then does the server notice a client that
		// gives up, and cancel r's context.
		_, _ = io.Copy(io.Discard, r.Body)
		handler(w, r)
	}))
	t.Cleanup(endpoint.Close)
	sub := subscriptions.Subscription{ID: uuid.New(), Type: subscriptions.TypePush, PushURL: endpoint.URL, Status: subscriptions.StatusActive}
	log := &settleRecorder{}
	dir := &twoSubs{subs: map[uuid.UUID]subscriptions.Subscription{sub.ID: sub}, out: map[message.Status]int{}}
	d, send := smallWindowDispatcher(t, dir, log)
	d.client = NewHTTPClient(timeout, loopbackAllowed())
	runDispatcher(t, d)
	for range first {
		send(sub.ID)
	}
	// The endpoint's hang in real time, which the dispatcher measures with
	// the request latencies and client timeouts that no test clock moves.
	time.Sleep(pause)
	for range second {
		send(sub.ID)
	}
	var copies []delivery.Settlement
	apitest.EventuallyWithin(t, 3*time.Second, fmt.Sprintf("%d deferred copies", n), func() bool {
		settled, _ := log.snapshot()
		copies = copies[:0]
		for _, s := range settled {
			if s.Attempt.Status == delivery.StatusDeferred {
				copies = append(copies, s)
			}
		}
		return len(copies) == n
	})
	return d, sub.ID, copies
}

// TestDeferralsStretchWithTheHang: messages deferred while an endpoint has
// been hanging for a while wait about as long as it has hung (parked, up to
// parkedDelay), not DeferDelay.
func TestDeferralsStretchWithTheHang(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	// 2 requests hang, 2 messages wait in the backlog; 3 more are deferred.
	const hung = 2 * time.Second
	d, sub, copies := deferrals(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second): // should the test fail before it releases them
		}
	}, 10*time.Second, 4, hung, 3, 3)
	t.Cleanup(func() { close(release) }) // before the endpoint closes: it waits for its requests
	// The hang is timed from the first request's start, a little after the
	// first send.
	for _, st := range copies {
		if c := st.Resend; c.ScheduledDelay < hung-250*time.Millisecond || c.ScheduledDelay > d.parkedDelay() || st.Owner != outbox.ParkedOwner(sub) {
			t.Errorf("a message deferred after the endpoint hung %s waits %s leased to %q; want about %s, at most %s, parked", hung, c.ScheduledDelay, st.Owner, hung, d.parkedDelay())
		}
	}
}

// TestSlowAnswersDoNotStretchDeferrals: an endpoint that answers, however
// slowly, is not hanging: its messages' deferrals are not stretched by the
// time since its first slow request.
func TestSlowAnswersDoNotStretchDeferrals(t *testing.T) {
	t.Parallel()
	// 2 requests run (answered after 1.5 s), 2 wait; then those 2 run. 2.2 s
	// in, 2 more wait and 2 are deferred: the endpoint has been slow for
	// 2.2 s, but the requests running then started 0.7 s before, after the
	// first ones were answered.
	d, _, copies := deferrals(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-r.Context().Done():
		}
	}, 10*time.Second, 4, 2200*time.Millisecond, 4, 2)
	for _, st := range copies {
		if c := st.Resend; c.ScheduledDelay != d.cfg.DeferDelay {
			t.Errorf("deferred for %s; want %s: the endpoint answers (slowly), it does not hang", c.ScheduledDelay, d.cfg.DeferDelay)
		}
	}
}

// TestTimeoutsStretchDeferrals: requests that time out, or get a 5xx after
// as long (a proxy's own timeout), show the endpoint hanging: messages
// deferred later wait about as long as it has hung, measured from the first
// such request, although nothing looked at it while that one ran.
func TestTimeoutsStretchDeferrals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		answer  int // 0: hang until the request times out
	}{
		{"timeouts", 1500 * time.Millisecond, 0},
		{"slow 504s", 10 * time.Second, http.StatusGatewayTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// 2 requests end after 1.5 s, hanging, then the 2 in the backlog
			// run; 2.2 s in, 2 more wait and 2 are deferred: stretched to
			// 2.2 s, where the requests running then started 0.7 s before.
			d, _, copies := deferrals(t, func(w http.ResponseWriter, r *http.Request) {
				hold := 1500 * time.Millisecond
				if tc.answer == 0 {
					hold = 5 * time.Second // the client gives up after tc.timeout
				}
				select {
				case <-time.After(hold):
					if tc.answer != 0 {
						w.WriteHeader(tc.answer)
					}
				case <-r.Context().Done():
				}
			}, tc.timeout, 4, 2200*time.Millisecond, 4, 2)
			for _, st := range copies {
				if c := st.Resend; c.ScheduledDelay < 1900*time.Millisecond || c.ScheduledDelay > d.parkedDelay() {
					t.Errorf("deferred for %s; want about 2.2s: the endpoint has hung since its first request", c.ScheduledDelay)
				}
			}
		})
	}
}
