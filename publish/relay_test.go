package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
)

// outbox is an in-memory relay store: the outbox part of Store.
type outbox struct {
	Store  // the rest is never called
	mu     sync.Mutex
	rows   map[uuid.UUID]*outboxRow
	order  []uuid.UUID
	claims atomic.Int64
	// claimTimes is when each ClaimPending call came, oldest first.
	claimTimes []time.Time
	// failMarks is how many MarkSent calls fail (the database down).
	failMarks atomic.Int64
}

type outboxRow struct {
	p        Pending
	claimed  bool
	status   message.Status
	until    time.Time // a refused copy's retry time
	refusals []Refusal // as recorded, oldest first
}

func newOutbox() *outbox { return &outbox{rows: map[uuid.UUID]*outboxRow{}} }

func (o *outbox) add(expires time.Time) uuid.UUID {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := uuid.New()
	o.rows[id] = &outboxRow{p: Pending{Send: message.Send{ID: id, Destination: "q", CreatedAt: time.Now()}, Event: message.Event{ID: uuid.New(), ExpiresAt: expires}}, status: message.StatusPending}
	o.order = append(o.order, id)
	return id
}

func (o *outbox) ClaimPending(_ context.Context, _ string, _ time.Time, limit int) ([]Pending, error) {
	o.claims.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claimTimes = append(o.claimTimes, time.Now())
	var out []Pending
	for _, id := range o.order {
		r := o.rows[id]
		if len(out) < limit && r.status == message.StatusPending && !r.claimed && !time.Now().Before(r.until) {
			r.claimed = true
			out = append(out, r.p)
		}
	}
	return out, nil
}

func (o *outbox) set(ids []uuid.UUID, f func(*outboxRow)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		f(o.rows[id])
	}
}

func (o *outbox) MarkSent(_ context.Context, ids []uuid.UUID, _ time.Time) error {
	if len(ids) > 0 && o.failMarks.Add(-1) >= 0 {
		return errors.New("database down")
	}
	o.set(ids, func(r *outboxRow) { r.status, r.claimed = message.StatusSent, false })
	return nil
}

func (o *outbox) Release(_ context.Context, ids []uuid.UUID) error {
	o.set(ids, func(r *outboxRow) { r.claimed = false })
	return nil
}

func (o *outbox) Refuse(_ context.Context, fs []Refusal) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range fs {
		r := o.rows[f.ID]
		r.refusals = append(r.refusals, f)
		r.claimed = false
		if f.RetryAt.IsZero() {
			r.status = f.Status
			continue
		}
		r.p.Refusals++
		r.until = f.RetryAt
	}
	return nil
}

// row returns a copy of row id.
func (o *outbox) row(id uuid.UUID) outboxRow {
	o.mu.Lock()
	defer o.mu.Unlock()
	return *o.rows[id]
}

func (o *outbox) count(s message.Status) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, r := range o.rows {
		if r.status == s {
			n++
		}
	}
	return n
}

// sink is a broker that counts sends per send id, fails while down, and
// refuses messages to the address "refused" while refusing.
type sink struct {
	mu       sync.Mutex
	got      map[string]int
	exp      map[string]string // send id → its x-expires-at header
	down     atomic.Bool
	refusing atomic.Bool
	tries    atomic.Int64
}

// errNoQueue is a refusal as broker.Send returns it.
var errNoQueue = fmt.Errorf("broker: artemis refused the message: %w: AMQ229017: Queue refused does not exist", broker.ErrRefused)

// errAddressFull is a refusal because the address is full.
var errAddressFull = errors.Join(broker.ErrRefused, broker.ErrFull, errors.New(`broker: artemis refused the message: AMQ229102: Address "full" is full`))

func (s *sink) Send(_ context.Context, m broker.Message) error {
	s.tries.Add(1)
	if s.down.Load() {
		return broker.ErrClosed
	}
	if m.Destination.Address == "refused" && s.refusing.Load() {
		return errNoQueue
	}
	if m.Destination.Address == "full" && s.refusing.Load() {
		return errAddressFull
	}
	time.Sleep(time.Millisecond) // a receipt's round trip
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got[m.Headers[message.HeaderSendID]]++
	if v, ok := m.Headers[message.HeaderExpiresAt]; ok {
		if s.exp == nil {
			s.exp = map[string]string{}
		}
		s.exp[m.Headers[message.HeaderSendID]] = v
	}
	return nil
}

func TestRelaySendsOnNotifyAndBacksOff(t *testing.T) {
	t.Parallel()
	o, b := newOutbox(), &sink{got: map[string]int{}}
	cfg := RelayConfig{Batch: 50, Concurrency: 8, Poll: time.Hour, Lease: time.Minute, SendTimeout: time.Second}
	r := NewRelay(o, b, cfg, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()

	// Rows added while the relay runs are sent on Notify, without waiting
	// for the (hour-long) poll.
	for range 20 {
		for range 50 {
			o.add(time.Time{})
		}
		r.Notify()
		time.Sleep(2 * time.Millisecond)
	}
	// An expired event's copy is sent too, its expiry in a header, for the
	// consumer to dead-letter it.
	expiry := time.Now().Add(-time.Second)
	expired := o.add(expiry)
	r.Notify()
	apitest.Eventually(t, "1001 sends", func() bool { return o.count(message.StatusSent) == 1001 })
	b.mu.Lock()
	for id, n := range b.got {
		if n != 1 {
			t.Errorf("send %s went %d times", id, n)
		}
	}
	if len(b.got) != 1001 || b.got[expired.String()] != 1 || b.exp[expired.String()] != strconv.FormatInt(expiry.UnixMilli(), 10) {
		t.Errorf("%d distinct sends (want 1001), expired one sent %d times with %s %q (want once, %d)",
			len(b.got), b.got[expired.String()], message.HeaderExpiresAt, b.exp[expired.String()], expiry.UnixMilli())
	}
	b.mu.Unlock()
	if err := r.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}

	// A broker outage: rows are released, the relay is unhealthy and backs
	// off instead of spinning; all go once the broker is back.
	b.down.Store(true)
	for range 100 {
		o.add(time.Time{})
	}
	r.Notify()
	apitest.Eventually(t, "the relay to notice the outage", func() bool { return r.Healthy() != nil })
	// Every round from here on fails: the next two come after the backoff
	// (at least 100 ms, then 200 ms), however often publishes notify.
	o.mu.Lock()
	failedFrom := len(o.claimTimes)
	o.mu.Unlock()
	apitest.Eventually(t, "two more rounds during the outage", func() bool {
		r.Notify() // publishes keep coming
		o.mu.Lock()
		defer o.mu.Unlock()
		return len(o.claimTimes) >= failedFrom+2
	})
	o.mu.Lock()
	if gap := o.claimTimes[failedFrom+1].Sub(o.claimTimes[failedFrom]); gap < 200*time.Millisecond {
		t.Errorf("rounds %s apart during the outage, want the backoff (200 ms for the third failed round): the relay spins on Notify", gap)
	}
	o.mu.Unlock()
	b.down.Store(false)
	apitest.Eventually(t, "the backlog after the outage", func() bool { return o.count(message.StatusSent) == 1101 })
	apitest.Eventually(t, "Healthy", func() bool { return r.Healthy() == nil })

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if c := o.count(message.StatusPending); c != 0 {
		t.Errorf("%d rows left pending", c)
	}
}

// vacuumOutbox is an outbox that counts vacuums and may fail them.
type vacuumOutbox struct {
	*outbox
	calls atomic.Int64
	fail  bool
}

func (v *vacuumOutbox) VacuumOutbox(context.Context) error {
	v.calls.Add(1)
	if v.fail {
		return errors.New("must be owner of table published_messages")
	}
	return nil
}

// vacuumState is what maybeVacuum decided, under its lock: it records a
// vacuum it starts (vacLast, vacRunning) before it returns, so a test can
// show that a call started none by looking right after it.
func vacuumState(r *Relay) (last time.Time, running, off bool) {
	r.vacMu.Lock()
	defer r.vacMu.Unlock()
	return r.vacLast, r.vacRunning, r.vacOff
}

// TestRelayVacuumsTheOutbox: the relay vacuums once VacuumEvery rows were
// recorded, not again within VacuumInterval, again after it, and never
// again once the database refused a vacuum.
func TestRelayVacuumsTheOutbox(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	v := &vacuumOutbox{outbox: newOutbox()}
	r := NewRelay(v, &sink{got: map[string]int{}}, DefaultRelayConfig, time.Now, logger)
	finished := func(calls int64) func() bool {
		return func() bool { _, running, _ := vacuumState(r); return !running && v.calls.Load() == calls }
	}

	r.maybeVacuum(ctx, VacuumEvery-1)
	if last, running, _ := vacuumState(r); !last.IsZero() || running {
		t.Fatalf("vacuum started after %d rows (VacuumEvery is %d)", VacuumEvery-1, VacuumEvery)
	}
	r.maybeVacuum(ctx, 1)
	first, _, _ := vacuumState(r)
	if first.IsZero() {
		t.Fatalf("no vacuum started after VacuumEvery rows")
	}
	apitest.Eventually(t, "the first vacuum", finished(1))

	r.maybeVacuum(ctx, 10*VacuumEvery) // within VacuumInterval of the first
	if last, running, _ := vacuumState(r); !last.Equal(first) || running {
		t.Fatalf("vacuum started again within VacuumInterval (last %v, first %v)", last, first)
	}
	// Once VacuumInterval has passed, the rows counted meanwhile start one.
	r.vacMu.Lock()
	r.vacLast = first.Add(-VacuumInterval)
	r.vacMu.Unlock()
	r.maybeVacuum(ctx, 1)
	apitest.Eventually(t, "the vacuum after VacuumInterval", finished(2))

	// A vacuum the database refuses is not tried again.
	f := &vacuumOutbox{outbox: newOutbox(), fail: true}
	r = NewRelay(f, &sink{got: map[string]int{}}, DefaultRelayConfig, time.Now, logger)
	r.maybeVacuum(ctx, VacuumEvery)
	apitest.Eventually(t, "the refused vacuum", func() bool { _, running, off := vacuumState(r); return off && !running })
	r.vacMu.Lock()
	r.vacLast = time.Time{}
	r.vacMu.Unlock()
	r.maybeVacuum(ctx, VacuumEvery)
	if last, running, _ := vacuumState(r); !last.IsZero() || running {
		t.Errorf("a vacuum started again after the database refused one")
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("a refused vacuum was tried %d times, want 1", n)
	}
}

// stallSink holds the send of one message until released; the rest go at once.
type stallSink struct {
	sink
	stall   uuid.UUID
	release chan struct{}
}

func (s *stallSink) Send(ctx context.Context, m broker.Message) error {
	if m.Headers[message.HeaderSendID] == s.stall.String() {
		<-s.release
	}
	return s.sink.Send(ctx, m)
}

// slowSink takes d of the clock's time to send one message; the rest go at once.
type slowSink struct {
	sink
	clock *apitest.Clock
	slow  uuid.UUID
	d     time.Duration
}

func (s *slowSink) Send(ctx context.Context, m broker.Message) error {
	if m.Headers[message.HeaderSendID] == s.slow.String() {
		s.clock.Advance(s.d)
	}
	return s.sink.Send(ctx, m)
}

// TestRelayLeavesRowsItCannotSendInTime: a round whose sends queue behind a
// slow broker for longer than the lease leaves the rest leased (another
// relay may claim them once it lapses) instead of sending them late, and
// reports the round failed.
func TestRelayLeavesRowsItCannotSendInTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		took      time.Duration // by the first send, which holds the only slot
		sent      int
		wantError bool
	}{
		{"the first send outlasts the lease", 300 * time.Millisecond, 1, true},
		{"the second send still fits the lease", 100 * time.Millisecond, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newOutbox()
			first := o.add(time.Time{})
			second := o.add(time.Time{})
			c := apitest.NewClock(time.Now())
			b := &slowSink{sink: sink{got: map[string]int{}}, clock: c, slow: first, d: tc.took}
			// One send at a time; the lease outlasts a send by 150 ms.
			cfg := RelayConfig{Batch: 50, Concurrency: 1, Poll: time.Hour, Lease: 200 * time.Millisecond, SendTimeout: 50 * time.Millisecond}
			r := NewRelay(o, b, cfg, c.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
			n, err := r.relayOnce(context.Background())
			if n != 2 || (err != nil) != tc.wantError {
				t.Errorf("round: %d claimed, error %v; want 2, error %v", n, err, tc.wantError)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.got[first.String()] != 1 || b.got[second.String()] != tc.sent-1 {
				t.Errorf("sent %v; want the first, and the second %d times", b.got, tc.sent-1)
			}
			if got := o.count(message.StatusSent); got != tc.sent {
				t.Errorf("%d marked sent, want %d", got, tc.sent)
			}
			if o.claimed(second) != (tc.sent == 1) {
				t.Errorf("second row claimed %v; want it left leased only when not sent", o.claimed(second))
			}
		})
	}
}

// addLeased adds a pending row as a publish that reserved a hand-off place
// stores it: leased, so no claim takes it.
func (o *outbox) addLeased(expires time.Time) Pending {
	id := o.add(expires)
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.rows[id]
	r.claimed = true
	return r.p
}

func (o *outbox) claimed(id uuid.UUID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rows[id].claimed
}

// handOffRelay is a relay with a hand-off of 100 over an in-memory outbox
// and broker.
func handOffRelay() (*outbox, *sink, *Relay) {
	o, b := newOutbox(), &sink{got: map[string]int{}}
	cfg := RelayConfig{Batch: 50, Concurrency: 8, Poll: time.Hour, Lease: time.Minute, SendTimeout: time.Second, HandOff: 100}
	return o, b, NewRelay(o, b, cfg, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// open reports whether r's hand-off takes a reservation now.
func open(r *Relay) bool {
	if _, ok := r.Reserve(1); ok {
		r.Unreserve(1)
		return true
	}
	return false
}

// runRelay runs r until stop, which fails the test if Run does not return.
func runRelay(t *testing.T, r *Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	apitest.Eventually(t, "the hand-off to open", func() bool { return open(r) })
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
}

// TestRelayHandOff: sends handed over in memory go out once each without a
// claim; a full hand-off refuses the reservation (the publish then stores its
// sends unleased and notifies); expired ones are recorded, not sent.
func TestRelayHandOff(t *testing.T) {
	t.Parallel()
	o, b, r := handOffRelay()
	if _, ok := r.Reserve(1); ok {
		t.Fatal("Reserve worked before Run")
	}
	stop := runRelay(t, r)
	if _, ok := r.Reserve(101); ok {
		t.Error("Reserve(101) worked on a hand-off of 100")
	}
	handed, notified := 0, 0
	for range 40 {
		lease, ok := r.Reserve(25)
		if !ok {
			for range 25 {
				o.add(time.Time{})
			}
			r.Notify()
			notified++
			continue
		}
		if lease.Owner != r.owner || time.Until(lease.Until) < 50*time.Second {
			t.Fatalf("lease %+v: want the relay's owner until about a minute from now", lease)
		}
		p := make([]Pending, 25)
		for i := range p {
			p[i] = o.addLeased(time.Time{})
		}
		r.HandOff(lease, p)
		handed++
		time.Sleep(10 * time.Millisecond)
	}
	lease, _ := r.Reserve(1)
	expiry := time.Now().Add(-time.Second)
	expired := o.addLeased(expiry)
	r.HandOff(lease, []Pending{expired})
	apitest.Eventually(t, "1001 sends", func() bool { return o.count(message.StatusSent) == 1001 })
	b.mu.Lock()
	for id, n := range b.got {
		if n != 1 {
			t.Errorf("send %s went %d times", id, n)
		}
	}
	if len(b.got) != 1001 || b.got[expired.ID.String()] != 1 || b.exp[expired.ID.String()] != strconv.FormatInt(expiry.UnixMilli(), 10) {
		t.Errorf("%d distinct sends (want 1001), expired one sent %d times with %s %q (want once, %d)",
			len(b.got), b.got[expired.ID.String()], message.HeaderExpiresAt, b.exp[expired.ID.String()], expiry.UnixMilli())
	}
	b.mu.Unlock()
	if handed < 20 {
		t.Errorf("%d of 40 publishes handed off; want most (the hand-off holds 4 at once and drains in ~4 ms, 10 ms apart)", handed)
	}
	apitest.Eventually(t, "every place to come back", func() bool {
		if _, ok := r.Reserve(100); ok {
			r.Unreserve(100)
			return true
		}
		return false
	})
	if claims := o.claims.Load(); notified == 0 && claims > 1 {
		t.Errorf("%d claims although every publish was handed off", claims)
	}
	t.Logf("%d publishes handed off, %d notified, %d claims", handed, notified, o.claims.Load())
	stop()
	if _, ok := r.Reserve(1); ok {
		t.Error("Reserve worked after Run returned")
	}
}

// TestRelayHandOffBrokerDown: a handed-off send the broker refuses is
// released for a claim, further publishes go through claims (which back off)
// until a send works again, and nothing is lost.
func TestRelayHandOffBrokerDown(t *testing.T) {
	t.Parallel()
	o, b, r := handOffRelay()
	stop := runRelay(t, r)
	defer stop()
	b.down.Store(true)
	lease, _ := r.Reserve(1)
	p := o.addLeased(time.Time{})
	r.HandOff(lease, []Pending{p})
	apitest.Eventually(t, "the refused send to be released", func() bool { return !o.claimed(p.ID) || o.count(message.StatusSent) == 1 })
	if _, ok := r.Reserve(1); ok {
		t.Error("Reserve worked while the broker refuses sends")
	}
	b.down.Store(false)
	r.Notify()
	apitest.Eventually(t, "the released send to go out", func() bool { return o.count(message.StatusSent) == 1 })
	apitest.Eventually(t, "the hand-off to reopen", func() bool { return open(r) })
}

// TestRelayHandOffShutdown: on shutdown the send in flight finishes and is
// recorded, and sends still queued are released, so that the next process
// claims them at once instead of after their lease.
func TestRelayHandOffShutdown(t *testing.T) {
	t.Parallel()
	o := newOutbox()
	first := o.addLeased(time.Time{})
	b := &stallSink{sink: sink{got: map[string]int{}}, stall: first.ID, release: make(chan struct{})}
	cfg := RelayConfig{Batch: 50, Concurrency: 1, Poll: time.Hour, Lease: time.Minute, SendTimeout: 5 * time.Second, HandOff: 100}
	r := NewRelay(o, b, cfg, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	stop := runRelay(t, r)
	lease, _ := r.Reserve(11)
	rest := make([]Pending, 10)
	for i := range rest {
		rest[i] = o.addLeased(time.Time{})
	}
	r.HandOff(lease, append([]Pending{first}, rest...))
	apitest.Eventually(t, "the first send to start", func() bool { return b.tries.Load() == 0 && len(r.sem) == 1 })
	go func() {
		time.Sleep(100 * time.Millisecond)
		close(b.release)
	}()
	stop()
	if o.count(message.StatusSent) != 1 || o.claimed(first.ID) {
		t.Errorf("%d sent, first claimed %v: want the send in flight recorded", o.count(message.StatusSent), o.claimed(first.ID))
	}
	released := 0
	for _, p := range rest {
		if !o.claimed(p.ID) {
			released++
		}
	}
	if released != 10 || o.count(message.StatusPending) != 10 {
		t.Errorf("%d of the 10 queued sends released, %d pending; want all 10 released, unsent", released, o.count(message.StatusPending))
	}
}

// TestRelayHandOffLeaseTooShort: a handed-off send that could not be sent
// within its lease is released for a claim (which leases it afresh), not
// left leased until the lease lapses.
func TestRelayHandOffLeaseTooShort(t *testing.T) {
	t.Parallel()
	o, b, r := handOffRelay()
	stop := runRelay(t, r)
	defer stop()
	lease, _ := r.Reserve(1)
	lease.Until = time.Now().Add(100 * time.Millisecond) // under the relay's 1 s SendTimeout
	p := o.addLeased(time.Time{})
	r.HandOff(lease, []Pending{p})
	apitest.Eventually(t, "the send", func() bool { return o.count(message.StatusSent) == 1 })
	if o.claims.Load() == 0 {
		t.Error("sent without a claim although its lease was too short")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.got[p.ID.String()] != 1 {
		t.Errorf("sent %d times, want 1", b.got[p.ID.String()])
	}
}

// TestRelayHandOffAfterStop: a publish that reserved before the relay
// stopped and hands off after it (a shutdown past its grace) has its sends
// released at once.
func TestRelayHandOffAfterStop(t *testing.T) {
	t.Parallel()
	o, b, r := handOffRelay()
	stop := runRelay(t, r)
	lease, _ := r.Reserve(2)
	stop()
	p := []Pending{o.addLeased(time.Time{}), o.addLeased(time.Time{})}
	r.HandOff(lease, p)
	for _, x := range p {
		if o.claimed(x.ID) {
			t.Errorf("send %s still leased after a hand-off to a stopped relay", x.ID)
		}
	}
	if b.tries.Load() != 0 {
		t.Errorf("%d sends tried by a stopped relay", b.tries.Load())
	}
	if r.hand.free != 100 {
		t.Errorf("%d places free after the release, want all 100", r.hand.free)
	}
}

// addTo adds a pending row for destination with refusals already counted.
func (o *outbox) addTo(dest string, expires time.Time, refusals int) uuid.UUID {
	id := o.add(expires)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rows[id].p.Destination = dest
	o.rows[id].p.Refusals = refusals
	return id
}

// TestRelayRefusals: a copy the broker refuses is not an outage (the relay
// stays healthy and sends the rest); it is tried again after a growing pause
// (cut short by its expiry), given up as an expired dead letter once its
// event has expired, and as a broker_refused one after MaxRefusals refusals
// (unless the address is full: back-pressure, until it has waited
// MaxFullWait); once the broker takes it, it is sent.
func TestRelayRefusals(t *testing.T) {
	t.Parallel()
	o, b := newOutbox(), &sink{got: map[string]int{}}
	b.refusing.Store(true)
	cfg := RelayConfig{Batch: 50, Concurrency: 8, Poll: 20 * time.Millisecond, Lease: time.Minute, SendTimeout: time.Second, MaxRefusals: 3}
	r := NewRelay(o, b, cfg, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	retried := o.addTo("refused::q", time.Time{}, 0)
	expired := o.addTo("refused::q", time.Now().Add(-time.Second), 0)
	expiring := o.addTo("refused::q", time.Now().Add(400*time.Millisecond), 0)
	last := o.addTo("refused::q", time.Time{}, 2)
	full := o.addTo("full::q", time.Time{}, 2)
	fullLong := o.addTo("full::q", time.Time{}, 2)
	o.mu.Lock()
	o.rows[fullLong].p.CreatedAt = time.Now().Add(-MaxFullWait)
	o.mu.Unlock()
	fine := o.addTo("room::q", time.Time{}, 0)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	apitest.Eventually(t, "the first round's outcomes", func() bool {
		return o.count(message.StatusSent) == 1 && len(o.row(retried).refusals) == 1 && len(o.row(last).refusals) == 1
	})
	if err := r.Healthy(); err != nil {
		t.Errorf("Healthy() = %v after refusals: the broker was reachable", err)
	}
	if o.row(fine).status != message.StatusSent {
		t.Errorf("the copy the broker takes: %q, want sent", o.row(fine).status)
	}
	for _, c := range []struct {
		name   string
		id     uuid.UUID
		status message.Status
		reason string
	}{{"expired", expired, message.StatusExpired, delivery.ReasonExpired}, {"refused MaxRefusals times", last, message.StatusDeadLettered, delivery.ReasonBrokerRefused}} {
		row := o.row(c.id)
		if len(row.refusals) != 1 || row.status != c.status || row.refusals[0].Reason != c.reason || !row.refusals[0].RetryAt.IsZero() {
			t.Errorf("%s copy: %q after %+v; want given up once as %q, reason %s", c.name, row.status, row.refusals, c.status, c.reason)
		}
	}
	if f := o.row(last).refusals[0]; !strings.Contains(f.Error, "3 times") || !strings.Contains(f.Error, "AMQ229017") {
		t.Errorf("given-up copy's error %q: want the count and the broker's answer", f.Error)
	}
	// A full address is back-pressure: never given up for the count.
	apitest.Eventually(t, "the full address's refusal", func() bool { return len(o.row(full).refusals) == 1 })
	if f := o.row(full).refusals[0]; f.RetryAt.IsZero() || o.row(full).status != message.StatusPending || !strings.Contains(f.Error, "AMQ229102") {
		t.Errorf("copy refused %d times, the last for a full address: %+v, %q; want it tried again", 3, f, o.row(full).status)
	}
	// ... until it has waited MaxFullWait.
	apitest.Eventually(t, "the long-waiting full copy's refusal", func() bool { return len(o.row(fullLong).refusals) == 1 })
	if f := o.row(fullLong).refusals[0]; o.row(fullLong).status != message.StatusDeadLettered || f.Reason != delivery.ReasonBrokerRefused {
		t.Errorf("copy refused 3 times for a full address after waiting %s: %q %+v; want a broker_refused dead letter", MaxFullWait, o.row(fullLong).status, f)
	}
	f := o.row(retried).refusals[0]
	if f.Status != "" || f.RetryAt.Before(start.Add(time.Second)) || f.RetryAt.After(time.Now().Add(time.Second)) || !strings.Contains(f.Error, "AMQ229017") {
		t.Errorf("first refusal %+v: want a retry a second later, with the broker's answer", f)
	}
	if f := o.row(expiring).refusals[0]; f.RetryAt.IsZero() || f.RetryAt.After(start.Add(400*time.Millisecond)) {
		t.Errorf("refusal of a copy expiring in 400 ms: retry at %v, want by its expiry", f.RetryAt)
	}

	// At its expiry the expiring copy is tried again and given up; the other
	// is not tried again before its second is out.
	apitest.Eventually(t, "the expiring copy given up", func() bool { return o.row(expiring).status == message.StatusExpired })
	if n := len(o.row(expiring).refusals); n != 2 || o.row(expiring).refusals[1].Reason != delivery.ReasonExpired {
		t.Errorf("expiring copy: %+v, want a retry at its expiry and then an expired dead letter", o.row(expiring).refusals)
	}
	if n := len(o.row(retried).refusals); n != 1 && time.Since(start) < time.Second {
		t.Errorf("copy tried again %d times within its first second", n-1)
	}
	apitest.Eventually(t, "the second refusal", func() bool { return len(o.row(retried).refusals) == 2 })
	if f := o.row(retried).refusals[1]; f.RetryAt.Sub(f.At) != 2*time.Second || o.row(retried).status != message.StatusPending {
		t.Errorf("second refusal %+v: want a retry 2 s later, still pending", f)
	}
	b.refusing.Store(false) // e.g. the queue is created
	apitest.Eventually(t, "the refused copy sent once the broker takes it", func() bool { return o.row(retried).status == message.StatusSent })
	if err := r.Healthy(); err != nil {
		t.Errorf("Healthy() = %v", err)
	}
}

// TestRelayHandOffRefusal: a handed-off copy the broker refuses is recorded
// as a refusal; the hand-off stays open (the broker is not down).
func TestRelayHandOffRefusal(t *testing.T) {
	t.Parallel()
	o, b, r := handOffRelay()
	b.refusing.Store(true)
	stop := runRelay(t, r)
	defer stop()
	lease, _ := r.Reserve(2)
	p := o.addLeased(time.Time{})
	o.mu.Lock()
	o.rows[p.ID].p.Destination = "refused::q"
	p = o.rows[p.ID].p
	o.mu.Unlock()
	r.HandOff(lease, []Pending{p, o.addLeased(time.Time{})})
	apitest.Eventually(t, "the refusal recorded", func() bool { return len(o.row(p.ID).refusals) == 1 })
	if f := o.row(p.ID).refusals[0]; f.RetryAt.IsZero() || o.row(p.ID).status != message.StatusPending {
		t.Errorf("refusal %+v: want a retry later", f)
	}
	apitest.Eventually(t, "the other copy sent", func() bool { return o.count(message.StatusSent) == 1 })
	if !open(r) {
		t.Error("the hand-off closed after a refusal")
	}
}

// TestRelayRetriesRecordingSends: a round whose MarkSent fails (a database
// blip) records its sends once the database answers, without waiting out
// their lease or sending them again.
func TestRelayRetriesRecordingSends(t *testing.T) {
	t.Parallel()
	o, b := newOutbox(), &sink{got: map[string]int{}}
	o.failMarks.Store(3)
	cfg := RelayConfig{Batch: 50, Concurrency: 8, Poll: time.Hour, Lease: time.Minute, SendTimeout: time.Second}
	r := NewRelay(o, b, cfg, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for range 5 {
		o.add(time.Time{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	start := time.Now()
	apitest.Eventually(t, "5 sends recorded", func() bool { return o.count(message.StatusSent) == 5 })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("recorded after %s", d)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, n := range b.got {
		if n != 1 {
			t.Errorf("send %s went %d times", id, n)
		}
	}
	if err := r.Healthy(); err != nil {
		t.Errorf("Healthy() = %v once the database answers", err)
	}
}
