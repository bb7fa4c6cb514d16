package outbox

import (
	"context"
	"errors"
	"fmt"
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

// memOutbox is an in-memory Store; now is its clock (rows' creation, and
// which refused rows may be claimed again).
type memOutbox struct {
	now    func() time.Time
	mu     sync.Mutex
	rows   map[uuid.UUID]*outboxRow
	order  []uuid.UUID
	claims atomic.Int64
	// claimTimes is when each ClaimPending call came, oldest first (real
	// time: the relay's backoff runs on timers).
	claimTimes []time.Time
	// claimCount counts how often each row was claimed.
	claimCount map[uuid.UUID]int
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

func newOutbox() *memOutbox { return newOutboxAt(time.Now) }

func newOutboxAt(now func() time.Time) *memOutbox {
	return &memOutbox{now: now, rows: map[uuid.UUID]*outboxRow{}, claimCount: map[uuid.UUID]int{}}
}

func (o *memOutbox) add(expires time.Time) uuid.UUID {
	return o.insert(expires, false).ID
}

// insert adds a pending row, leased (as a publish that reserved hand-off
// places stores it: no claim takes it) or not.
func (o *memOutbox) insert(expires time.Time, leased bool) Pending {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := uuid.New()
	r := &outboxRow{p: Pending{Send: message.Send{ID: id, Destination: "q", CreatedAt: o.now()}, Event: message.Event{ID: uuid.New(), ExpiresAt: expires}},
		status: message.StatusPending, claimed: leased}
	o.rows[id] = r
	o.order = append(o.order, id)
	return r.p
}

func (o *memOutbox) ClaimPending(_ context.Context, _ string, _ time.Time, limit int) ([]Pending, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claims.Add(1)
	o.claimTimes = append(o.claimTimes, time.Now())
	var out []Pending
	for _, id := range o.order {
		r := o.rows[id]
		if len(out) < limit && r.status == message.StatusPending && !r.claimed && !o.now().Before(r.until) {
			r.claimed = true
			o.claimCount[id]++
			out = append(out, r.p)
		}
	}
	return out, nil
}

func (o *memOutbox) set(ids []uuid.UUID, f func(*outboxRow)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		f(o.rows[id])
	}
}

func (o *memOutbox) MarkSent(_ context.Context, ids []uuid.UUID, _ time.Time) error {
	if len(ids) > 0 && o.failMarks.Add(-1) >= 0 {
		return errors.New("database down")
	}
	o.set(ids, func(r *outboxRow) { r.status, r.claimed = message.StatusSent, false })
	return nil
}

func (o *memOutbox) Release(_ context.Context, ids []uuid.UUID) error {
	o.set(ids, func(r *outboxRow) { r.claimed = false })
	return nil
}

func (o *memOutbox) Refuse(_ context.Context, fs []Refusal) error {
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
func (o *memOutbox) row(id uuid.UUID) outboxRow {
	o.mu.Lock()
	defer o.mu.Unlock()
	return *o.rows[id]
}

func (o *memOutbox) count(s message.Status) int {
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

// newRelay returns a relay over o and b on the clock now.
func newRelay(o Store, b Sender, cfg Config, now func() time.Time) *Relay {
	return NewRelay(cfg, Deps{Store: o, Broker: b, Now: now, Logger: slog.New(slog.DiscardHandler)})
}

func TestRelaySendsOnNotifyAndBacksOff(t *testing.T) {
	t.Parallel()
	o, b := newOutbox(), &sink{got: map[string]int{}}
	cfg := Config{Batch: 50, Concurrency: 8, Poll: time.Hour, Lease: time.Minute, SendTimeout: time.Second}
	r := newRelay(o, b, cfg, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()

	// Rows added while the relay runs are sent on Notify, without waiting
	// for the (hour-long) poll.
	for i := range 20 {
		for range 50 {
			o.add(time.Time{})
		}
		r.Notify()
		apitest.Eventually(t, fmt.Sprintf("batch %d sent on Notify", i), func() bool { return o.count(message.StatusSent) == 50*(i+1) })
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
	case <-time.After(apitest.EventuallyTimeout):
		t.Fatal("Run did not return after its context ended")
	}
	if c := o.count(message.StatusPending); c != 0 {
		t.Errorf("%d rows left pending", c)
	}
}

// vacuumer counts vacuums and may fail them.
type vacuumer struct {
	calls atomic.Int64
	fail  bool
}

func (v *vacuumer) VacuumOutbox(context.Context) error {
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
// recorded, not again within VacuumInterval on its clock, again after it,
// and never again once the database refused a vacuum.
func TestRelayVacuumsTheOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := apitest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	relay := func(v Vacuumer) *Relay {
		return NewRelay(DefaultConfig, Deps{Store: newOutbox(), Broker: &sink{got: map[string]int{}}, Vacuum: v,
			Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	}
	v := &vacuumer{}
	r := relay(v)
	finished := func(calls int64) func() bool {
		return func() bool { _, running, _ := vacuumState(r); return !running && v.calls.Load() == calls }
	}

	r.maybeVacuum(ctx, VacuumEvery-1)
	if last, running, _ := vacuumState(r); !last.IsZero() || running {
		t.Fatalf("vacuum started after %d rows (VacuumEvery is %d)", VacuumEvery-1, VacuumEvery)
	}
	r.maybeVacuum(ctx, 1)
	first, _, _ := vacuumState(r)
	if !first.Equal(clock.Now()) {
		t.Fatalf("no vacuum started after VacuumEvery rows (last %v)", first)
	}
	apitest.Eventually(t, "the first vacuum", finished(1))

	clock.Advance(VacuumInterval - time.Millisecond)
	r.maybeVacuum(ctx, 10*VacuumEvery)
	if last, running, _ := vacuumState(r); !last.Equal(first) || running {
		t.Fatalf("vacuum started again within VacuumInterval (last %v, first %v)", last, first)
	}
	// Once VacuumInterval has passed, the rows counted meanwhile start one.
	clock.Advance(time.Millisecond)
	r.maybeVacuum(ctx, 1)
	if last, _, _ := vacuumState(r); !last.Equal(first.Add(VacuumInterval)) {
		t.Fatalf("no vacuum started VacuumInterval after the first (last %v)", last)
	}
	apitest.Eventually(t, "the vacuum after VacuumInterval", finished(2))

	// A vacuum the database refuses is not tried again.
	f := &vacuumer{fail: true}
	r = relay(f)
	r.maybeVacuum(ctx, VacuumEvery)
	apitest.Eventually(t, "the refused vacuum", func() bool { _, running, off := vacuumState(r); return off && !running })
	refused, _, _ := vacuumState(r)
	clock.Advance(VacuumInterval)
	r.maybeVacuum(ctx, VacuumEvery)
	if last, running, _ := vacuumState(r); !last.Equal(refused) || running {
		t.Errorf("a vacuum started again after the database refused one")
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("a refused vacuum was tried %d times, want 1", n)
	}

	// Without a Vacuumer nothing is vacuumed.
	r = relay(nil)
	r.maybeVacuum(ctx, 10*VacuumEvery)
	if last, running, _ := vacuumState(r); !last.IsZero() || running {
		t.Errorf("a relay without a Vacuumer started a vacuum")
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
			cfg := Config{Batch: 50, Concurrency: 1, Poll: time.Hour, Lease: 200 * time.Millisecond, SendTimeout: 50 * time.Millisecond}
			r := newRelay(o, b, cfg, c.Now)
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
func (o *memOutbox) addLeased(expires time.Time) Pending { return o.insert(expires, true) }

func (o *memOutbox) claimed(id uuid.UUID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rows[id].claimed
}

// handOffRelay is a relay with a hand-off of 100 over an in-memory outbox
// and broker.
func handOffRelay() (*memOutbox, *sink, *Relay) {
	o, b := newOutbox(), &sink{got: map[string]int{}}
	cfg := Config{Batch: 50, Concurrency: 8, Poll: time.Hour, Lease: time.Minute, SendTimeout: time.Second, HandOff: 100}
	return o, b, newRelay(o, b, cfg, time.Now)
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
	cancel, wait := startRelay(t, r)
	return func() { cancel(); wait() }
}

// startRelay runs r until cancel; wait fails the test if Run does not return.
func startRelay(t *testing.T, r *Relay) (cancel, wait func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	apitest.Eventually(t, "the hand-off to open", func() bool { return open(r) })
	return cancel, func() {
		select {
		case <-done:
		case <-time.After(apitest.EventuallyTimeout):
			t.Fatal("Run did not return after its context ended")
		}
	}
}

// TestRelayHandOff: sends handed over in memory go out once each without a
// claim; a full hand-off refuses the reservation (the publish then stores its
// sends unleased and notifies, and a claim takes them); an expired one is
// sent too, for its consumer to dead-letter.
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
	var handed, notified []uuid.UUID
	for i := range 40 {
		// Every fourth publish finds the hand-off full: another holds every
		// place. The three before it fit (75 of 100 places) however slowly
		// the relay drains.
		full := i%4 == 3
		if full {
			apitest.Eventually(t, "every place to come back", func() bool { _, ok := r.Reserve(100); return ok })
		}
		lease, ok := r.Reserve(25)
		if full {
			r.Unreserve(100)
		}
		if ok == full {
			t.Fatalf("publish %d: Reserve(25) = %v, want %v", i, ok, !full)
		}
		if !ok {
			for range 25 {
				notified = append(notified, o.add(time.Time{}))
			}
			r.Notify()
			continue
		}
		if lease.Owner != r.owner || time.Until(lease.Until) < 50*time.Second {
			t.Fatalf("lease %+v: want the relay's owner until about a minute from now", lease)
		}
		p := make([]Pending, 25)
		for i := range p {
			p[i] = o.addLeased(time.Time{})
			handed = append(handed, p[i].ID)
		}
		r.HandOff(lease, p)
	}
	lease, _ := r.Reserve(1)
	expiry := time.Now().Add(-time.Second)
	expired := o.addLeased(expiry)
	handed = append(handed, expired.ID)
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
	o.mu.Lock()
	for _, id := range handed {
		if n := o.claimCount[id]; n != 0 {
			t.Errorf("handed-off send %s claimed %d times, want sent without a claim", id, n)
		}
	}
	for _, id := range notified {
		if n := o.claimCount[id]; n != 1 {
			t.Errorf("send %s of a publish that found the hand-off full claimed %d times, want once", id, n)
		}
	}
	o.mu.Unlock()
	apitest.Eventually(t, "every place to come back", func() bool {
		if _, ok := r.Reserve(100); ok {
			r.Unreserve(100)
			return true
		}
		return false
	})
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
	cfg := Config{Batch: 50, Concurrency: 1, Poll: time.Hour, Lease: time.Minute, SendTimeout: 5 * time.Second, HandOff: 100}
	r := newRelay(o, b, cfg, time.Now)
	cancel, wait := startRelay(t, r)
	lease, _ := r.Reserve(11)
	rest := make([]Pending, 10)
	for i := range rest {
		rest[i] = o.addLeased(time.Time{})
	}
	r.HandOff(lease, append([]Pending{first}, rest...))
	apitest.Eventually(t, "the first send to start", func() bool { return b.tries.Load() == 0 && len(r.sem) == 1 })
	// Shut down while the first send is in flight: the hand-off closes
	// (and gives back what is queued); then the broker answers.
	cancel()
	apitest.Eventually(t, "the hand-off to close", func() bool { return !open(r) })
	close(b.release)
	wait()
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

// TestRelayHandOffLapsesLogOnce: a flood of handed-off sends whose leases are
// too short logs one line per interval and then their count, not a line each.
func TestRelayHandOffLapsesLogOnce(t *testing.T) {
	t.Parallel()
	o, b := newOutbox(), &sink{got: map[string]int{}}
	logs := &apitest.LogRecorder{}
	cfg := Config{Batch: 50, Concurrency: 8, Poll: time.Hour, Lease: time.Minute, SendTimeout: time.Second, HandOff: 100}
	r := NewRelay(cfg, Deps{Store: o, Broker: b, Now: time.Now, Logger: slog.New(logs)})
	stop := runRelay(t, r)
	lease, _ := r.Reserve(50)
	lease.Until = time.Now().Add(100 * time.Millisecond) // under the relay's 1 s SendTimeout
	var ps []Pending
	for range 50 {
		ps = append(ps, o.addLeased(time.Time{}))
	}
	r.HandOff(lease, ps)
	apitest.Eventually(t, "the sends, through claims", func() bool { return o.count(message.StatusSent) == 50 })
	stop() // the count of the lines held back is written at the latest when the relay stops
	text := logs.Text()
	if n := strings.Count(text, "a handed-off send waited too long"); n != 1 {
		t.Errorf("%d lines for one send each, want 1:\n%s", n, text)
	}
	if !strings.Contains(text, "more handed-off sends waited too long") || !strings.Contains(text, "sends=49") {
		t.Errorf("no count of the 49 others:\n%s", text)
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
func (o *memOutbox) addTo(dest string, expires time.Time, refusals int) uuid.UUID {
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
// MaxFullWait); once the broker takes it, it is sent. The pauses run on the
// relay's clock, which the test moves.
func TestRelayRefusals(t *testing.T) {
	t.Parallel()
	clock := apitest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	start := clock.Now()
	o, b := newOutboxAt(clock.Now), &sink{got: map[string]int{}}
	b.refusing.Store(true)
	cfg := Config{Batch: 50, Concurrency: 8, Poll: 20 * time.Millisecond, Lease: time.Minute, SendTimeout: time.Second, MaxRefusals: 3}
	r := newRelay(o, b, cfg, clock.Now)
	retried := o.addTo("refused::q", time.Time{}, 0)
	expired := o.addTo("refused::q", start.Add(-time.Second), 0)
	expiring := o.addTo("refused::q", start.Add(400*time.Millisecond), 0)
	last := o.addTo("refused::q", time.Time{}, 2)
	full := o.addTo("full::q", time.Time{}, 2)
	fullLong := o.addTo("full::q", time.Time{}, 2)
	o.mu.Lock()
	o.rows[fullLong].p.CreatedAt = start.Add(-MaxFullWait)
	o.mu.Unlock()
	fine := o.addTo("room::q", time.Time{}, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// The first round claims every row at once.
	apitest.Eventually(t, "the first round's outcomes", func() bool {
		return o.count(message.StatusSent) == 1 && len(o.row(retried).refusals) == 1 && len(o.row(expired).refusals) == 1 &&
			len(o.row(expiring).refusals) == 1 && len(o.row(last).refusals) == 1 && len(o.row(full).refusals) == 1 &&
			len(o.row(fullLong).refusals) == 1
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
	}{
		{"expired", expired, message.StatusExpired, delivery.ReasonExpired},
		{"refused MaxRefusals times", last, message.StatusDeadLettered, delivery.ReasonBrokerRefused},
		// A full address is back-pressure, until the copy has waited MaxFullWait.
		{"refused MaxRefusals times for a full address after MaxFullWait", fullLong, message.StatusDeadLettered, delivery.ReasonBrokerRefused},
	} {
		row := o.row(c.id)
		if len(row.refusals) != 1 || row.status != c.status || row.refusals[0].Reason != c.reason || !row.refusals[0].RetryAt.IsZero() {
			t.Errorf("%s copy: %q after %+v; want given up once as %q, reason %s", c.name, row.status, row.refusals, c.status, c.reason)
		}
	}
	if f := o.row(last).refusals[0]; !strings.Contains(f.Error, "3 times") || !strings.Contains(f.Error, "AMQ229017") {
		t.Errorf("given-up copy's error %q: want the count and the broker's answer", f.Error)
	}
	// A full address is back-pressure: never given up for the count.
	if f := o.row(full).refusals[0]; !f.RetryAt.Equal(start.Add(RefusalBackoff(2))) || o.row(full).status != message.StatusPending || !strings.Contains(f.Error, "AMQ229102") {
		t.Errorf("copy refused 3 times, the last for a full address: %+v, %q; want it tried again %s later", f, o.row(full).status, RefusalBackoff(2))
	}
	if f := o.row(retried).refusals[0]; f.Status != "" || !f.At.Equal(start) || !f.RetryAt.Equal(start.Add(time.Second)) || !strings.Contains(f.Error, "AMQ229017") {
		t.Errorf("first refusal %+v: want a retry a second later, with the broker's answer", f)
	}
	if f := o.row(expiring).refusals[0]; !f.RetryAt.Equal(start.Add(400 * time.Millisecond)) {
		t.Errorf("refusal of a copy expiring in 400 ms: retry at %v, want at its expiry", f.RetryAt)
	}

	// Until the clock moves, later rounds find nothing to try again.
	rounds := o.claims.Load()
	apitest.Eventually(t, "two more rounds", func() bool { return o.claims.Load() >= rounds+2 })
	if n, m := len(o.row(retried).refusals), len(o.row(expiring).refusals); n != 1 || m != 1 {
		t.Errorf("copies tried again before their pause ended: %d and %d refusals, want 1 each", n, m)
	}

	// At its expiry the expiring copy is tried again and given up; the other
	// is not tried again before its second is out.
	clock.Advance(400 * time.Millisecond)
	apitest.Eventually(t, "the expiring copy given up", func() bool { return o.row(expiring).status == message.StatusExpired })
	if n := len(o.row(expiring).refusals); n != 2 || o.row(expiring).refusals[1].Reason != delivery.ReasonExpired {
		t.Errorf("expiring copy: %+v, want a retry at its expiry and then an expired dead letter", o.row(expiring).refusals)
	}
	if n := len(o.row(retried).refusals); n != 1 {
		t.Errorf("copy tried again %d times within its first second", n-1)
	}
	clock.Advance(600 * time.Millisecond)
	apitest.Eventually(t, "the second refusal", func() bool { return len(o.row(retried).refusals) == 2 })
	if f := o.row(retried).refusals[1]; f.RetryAt.Sub(f.At) != 2*time.Second || o.row(retried).status != message.StatusPending {
		t.Errorf("second refusal %+v: want a retry 2 s later, still pending", f)
	}
	b.refusing.Store(false) // e.g. the queue is created
	clock.Advance(2 * time.Second)
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
	cfg := Config{Batch: 50, Concurrency: 8, Poll: time.Hour, Lease: time.Minute, SendTimeout: time.Second}
	r := newRelay(o, b, cfg, time.Now)
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
