package push

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// memCircuits is the database's circuits, shared by the breakers of
// several "processes" in a test.
type memCircuits struct {
	mu sync.Mutex
	m  map[uuid.UUID]subscriptions.Circuit
}

func (s *memCircuits) Circuit(_ context.Context, id uuid.UUID) (subscriptions.Circuit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[id]
	if !ok {
		c.State = subscriptions.CircuitClosed
	}
	return c, nil
}

func (s *memCircuits) SwapCircuit(_ context.Context, id uuid.UUID, c subscriptions.Circuit) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[id].Version != c.Version-1 {
		return false, nil
	}
	s.m[id] = c
	return true, nil
}

// circuitEvents counts what the breakers report.
type circuitEvents struct {
	nopObserver
	mu                     sync.Mutex
	opened                 []string
	closed, probesOK, fail int
}

func (e *circuitEvents) CircuitOpened(reason string) {
	e.mu.Lock()
	e.opened = append(e.opened, reason)
	e.mu.Unlock()
}
func (e *circuitEvents) CircuitClosed() { e.mu.Lock(); e.closed++; e.mu.Unlock() }
func (e *circuitEvents) CircuitProbe(ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ok {
		e.probesOK++
	} else {
		e.fail++
	}
}

type breakerSetup struct {
	store *memCircuits
	clock *fakeClock
	obs   *circuitEvents
	id    uuid.UUID
	cfg   rooms.Breaker
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newBreakerSetup() breakerSetup {
	cfg := rooms.DefaultBreaker
	cfg.Cooldown, cfg.MaxCooldown = 1000, 3000
	return breakerSetup{
		store: &memCircuits{m: map[uuid.UUID]subscriptions.Circuit{}},
		clock: &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		obs:   &circuitEvents{}, id: uuid.New(), cfg: cfg,
	}
}

// process is one dispatcher process's breakers over the shared store.
func (s breakerSetup) process() *breakers {
	return newBreakers(s.store, 5*time.Second, s.clock.now, slog.New(slog.DiscardHandler), s.obs)
}

// read is the circuit as a dispatcher reads it with the subscription.
func (s breakerSetup) read(t *testing.T) subscriptions.Circuit {
	t.Helper()
	c, _ := s.store.Circuit(context.Background(), s.id)
	return c
}

const (
	minHold   = time.Second
	maxParked = 4 * time.Second
)

var (
	failed  = failure{failed: true, code: 503, err: "HTTP 503"}
	success = failure{code: 200}
)

// TestBreakerOpensOnFailureRate: the circuit opens once the window holds
// the minimum attempts and the failure rate is reached, not before; it
// ignores the outcomes of attempts still under way when it opened.
func TestBreakerOpensOnFailureRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		outcomes  func(i int) failure // outcome of attempt i (from 0)
		attempts  int
		opensAtOr int // the attempt (from 1) at which it opens; 0: never
	}{
		{"every one fails: opens at the minimum", func(int) failure { return failed }, 60, 20},
		{"one in ten succeeds: 90 %, opens at a failure", func(i int) failure {
			if i%10 == 9 {
				return success
			}
			return failed
		}, 60, 21},
		{"one in five succeeds: 80 %", func(i int) failure {
			if i%5 == 4 {
				return success
			}
			return failed
		}, 200, 0},
		{"a healthy streak first: the window forgets it", func(i int) failure {
			if i < 49 {
				return success
			}
			return failed
		}, 200, 49 + 45},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newBreakerSetup()
			bs := s.process()
			for i := range tc.attempts {
				b := bs.get(s.id, s.read(t))
				bs.record(ctx, s.id, b, s.cfg, tc.outcomes(i))
				open := !s.read(t).Closed()
				if want := tc.opensAtOr > 0 && i+1 >= tc.opensAtOr; open != want {
					t.Fatalf("after attempt %d: open %v, want %v", i+1, open, want)
				}
			}
			if tc.opensAtOr == 0 {
				return
			}
			c := s.read(t)
			if c.State != subscriptions.CircuitOpen || c.Cooldown != time.Second || !c.ProbeAt.Equal(s.clock.now().Add(time.Second)) ||
				c.LastError != "HTTP 503" || c.LastStatusCode != 503 || !c.OpenedAt.Equal(s.clock.now()) {
				t.Errorf("opened circuit: %+v", c)
			}
			if len(s.obs.opened) != 1 || s.obs.opened[0] != "failures" {
				t.Errorf("observed openings %v, want one for failures", s.obs.opened)
			}
		})
	}
}

// TestBreakerGoneOpensAtOnce: a 410 opens the circuit at its first answer.
func TestBreakerGoneOpensAtOnce(t *testing.T) {
	t.Parallel()
	s := newBreakerSetup()
	bs := s.process()
	bs.record(context.Background(), s.id, bs.get(s.id, s.read(t)), s.cfg, failure{failed: true, gone: true, code: 410, err: "HTTP 410"})
	if c := s.read(t); c.State != subscriptions.CircuitOpen || c.LastStatusCode != 410 {
		t.Fatalf("after a 410: %+v, want open", c)
	}
	if len(s.obs.opened) != 1 || s.obs.opened[0] != "gone" {
		t.Errorf("observed openings %v, want one for gone", s.obs.opened)
	}
}

// TestBreakerProbes: an open circuit holds messages until its probe is due
// (the first held one comes back on time, the others after the probe);
// then one message, of one process only, is the probe; a failed probe
// reopens it with the cool-down doubled up to the cap; a successful one
// closes it, and each process starts counting afresh.
func TestBreakerProbes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newBreakerSetup()
	a, b := s.process(), s.process()
	for range 20 {
		a.record(ctx, s.id, a.get(s.id, s.read(t)), s.cfg, failed)
	}
	admit := func(p *breakers) verdict {
		t.Helper()
		return p.admit(ctx, s.id, p.get(s.id, s.read(t)), s.cfg, minHold, maxParked)
	}

	s.clock.add(200 * time.Millisecond)
	if v := admit(a); !v.hold || v.delay != 800*time.Millisecond {
		t.Errorf("first held message: %+v, want held until the probe, 800ms", v)
	}
	if v := admit(a); !v.hold || v.delay != 800*time.Millisecond+probeMargin {
		t.Errorf("second held message: %+v, want held until after the probe", v)
	}
	if v := admit(b); !v.hold || v.delay != 800*time.Millisecond {
		t.Errorf("the other process's first held message: %+v, want its own carrier", v)
	}

	for i, cooldown := range []time.Duration{2 * time.Second, 3 * time.Second, 3 * time.Second} {
		s.clock.add(s.read(t).ProbeAt.Sub(s.clock.now()))
		va, vb := admit(a), admit(b)
		if !va.probe || !vb.probe {
			t.Fatalf("probe %d due: %+v, %+v; want both offered as the probe", i+1, va, vb)
		}
		won, err := a.claimProbe(ctx, s.id, a.get(s.id, s.read(t)))
		if err != nil || !won {
			t.Fatalf("probe %d: claim %v, %v", i+1, won, err)
		}
		if won, err := b.claimProbe(ctx, s.id, b.get(s.id, subscriptions.Circuit{})); err != nil || won {
			t.Fatalf("probe %d: the other process claimed it too (%v, %v)", i+1, won, err)
		}
		if v := admit(b); !v.hold || v.delay != maxParked {
			t.Errorf("probe %d under way: the other process's message %+v, want held up to %v", i+1, v, maxParked)
		}
		if closed := a.probed(ctx, s.id, a.get(s.id, s.read(t)), s.cfg, failed); closed {
			t.Fatalf("a failed probe closed the circuit")
		}
		if c := s.read(t); c.State != subscriptions.CircuitOpen || c.Cooldown != cooldown {
			t.Errorf("after failed probe %d: %+v, want open with a cool-down of %v", i+1, c, cooldown)
		}
	}

	s.clock.add(s.read(t).ProbeAt.Sub(s.clock.now()))
	if won, _ := b.claimProbe(ctx, s.id, b.get(s.id, s.read(t))); !won {
		t.Fatal("the last probe was not claimed")
	}
	if closed := b.probed(ctx, s.id, b.get(s.id, s.read(t)), s.cfg, success); !closed {
		t.Fatal("a successful probe did not close the circuit")
	}
	if v := admit(a); v.hold || v.probe {
		t.Errorf("after the probe succeeded: %+v, want messages to go", v)
	}
	// A fresh count in every process: 19 failures do not open it again.
	for range 19 {
		a.record(ctx, s.id, a.get(s.id, s.read(t)), s.cfg, failed)
	}
	if c := s.read(t); !c.Closed() {
		t.Errorf("reopened by %d failures after closing: %+v", 19, c)
	}
	if s.obs.probesOK != 1 || s.obs.fail != 3 || s.obs.closed != 1 {
		t.Errorf("observed probes %d ok, %d failed, %d closings; want 1, 3, 1", s.obs.probesOK, s.obs.fail, s.obs.closed)
	}
}

// TestBreakerTurnedOff: a breaker turned off lets messages go and closes
// the circuit; it counts nothing.
func TestBreakerTurnedOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newBreakerSetup()
	bs := s.process()
	for range 20 {
		bs.record(ctx, s.id, bs.get(s.id, s.read(t)), s.cfg, failed)
	}
	off := s.cfg
	off.Enabled = false
	if v := bs.admit(ctx, s.id, bs.get(s.id, s.read(t)), off, minHold, maxParked); v.hold || v.probe {
		t.Errorf("turned off: %+v, want the message to go", v)
	}
	if c := s.read(t); !c.Closed() {
		t.Errorf("turned off: the circuit stays %s", c.State)
	}
	for range 50 {
		bs.record(ctx, s.id, bs.get(s.id, s.read(t)), off, failed)
	}
	if c := s.read(t); !c.Closed() {
		t.Errorf("turned off: failures opened it")
	}
}

// TestBreakerAdoptsNewerState: a process learns of another's change (or a
// reset) from the subscription it reads, and drops what it counted.
func TestBreakerAdoptsNewerState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newBreakerSetup()
	a, b := s.process(), s.process()
	for range 15 {
		b.record(ctx, s.id, b.get(s.id, s.read(t)), s.cfg, failed)
	}
	for range 20 {
		a.record(ctx, s.id, a.get(s.id, s.read(t)), s.cfg, failed)
	}
	if v := b.admit(ctx, s.id, b.get(s.id, s.read(t)), s.cfg, minHold, maxParked); !v.hold {
		t.Errorf("the other process's message: %+v, want held", v)
	}
	// A reset: closed, a new version.
	c := s.read(t)
	if won, _ := s.store.SwapCircuit(ctx, s.id, subscriptions.Circuit{State: subscriptions.CircuitClosed, Version: c.Version + 1}); !won {
		t.Fatal("reset refused")
	}
	for range 15 {
		b.record(ctx, s.id, b.get(s.id, s.read(t)), s.cfg, failed)
	}
	if c := s.read(t); !c.Closed() {
		t.Errorf("opened again by failures counted before the reset: %+v", c)
	}
}
