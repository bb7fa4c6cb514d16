package push

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// memPace is the shared pace as the store keeps it (store.Push.ReserveSlots
// computes the same in SQL), counting the reservations made.
type memPace struct {
	mu       sync.Mutex
	next     map[uuid.UUID]time.Time
	deferred map[uuid.UUID]time.Time
	calls    int
}

func newMemPace() *memPace {
	return &memPace{next: map[uuid.UUID]time.Time{}, deferred: map[uuid.UUID]time.Time{}}
}

func (p *memPace) ReserveSlots(_ context.Context, id uuid.UUID, iv time.Duration, now time.Time, horizon time.Duration, want int) (Slots, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	start := p.next[id]
	if start.Before(now) {
		start = now
	}
	n := 0
	if room := now.Add(horizon).Sub(start); room > 0 {
		n = min(want, int((room+iv-1)/iv))
	}
	if n == 0 {
		d := p.deferred[id]
		if d.Before(start) {
			d = start
		}
		p.deferred[id] = d.Add(iv)
		return Slots{Retry: d.Add(iv)}, nil
	}
	p.next[id] = start.Add(time.Duration(n) * iv)
	return Slots{First: start, N: n}, nil
}

// TestPacerTakesSlots: slots come interval apart; a fast subscription
// reserves slotBatch's worth at a time; a slot unused for more than maxLate
// is given up; with none free within the horizon the caller is told when to
// come back, each one slot after the one before.
func TestPacerTakesSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	t.Run("20 per second", func(t *testing.T) {
		t.Parallel()
		store, id := newMemPace(), uuid.New()
		p := newPacer(store)
		for i := range 20 { // the horizon: a second's worth
			slot, _, err := p.take(ctx, id, 20, t0)
			if err != nil || !slot.Equal(t0.Add(time.Duration(i)*50*time.Millisecond)) {
				t.Fatalf("slot %d: %v, %v; want +%dms", i, slot, err, 50*i)
			}
		}
		for i, want := range []time.Duration{1050 * time.Millisecond, 1100 * time.Millisecond} {
			slot, retry, err := p.take(ctx, id, 20, t0)
			if err != nil || !slot.IsZero() || !retry.Equal(t0.Add(want)) {
				t.Errorf("beyond the horizon %d: slot %v, retry %v, %v; want none, retry at +%v", i, slot, retry, err, want)
			}
		}
		if store.calls != 22 {
			t.Errorf("%d reservations, want one per slot at 20/s (22)", store.calls)
		}
	})

	t.Run("1000 per second", func(t *testing.T) {
		t.Parallel()
		store, id := newMemPace(), uuid.New()
		p := newPacer(store)
		for i := range 60 {
			slot, _, err := p.take(ctx, id, 1000, t0)
			if err != nil || !slot.Equal(t0.Add(time.Duration(i)*time.Millisecond)) {
				t.Fatalf("slot %d: %v, %v", i, slot, err)
			}
		}
		if store.calls != 2 {
			t.Errorf("%d reservations for 60 slots, want 2 (50 at a time)", store.calls)
		}
		// 200 ms later the 40 slots left are stale: a new batch from now.
		later := t0.Add(200 * time.Millisecond)
		slot, _, err := p.take(ctx, id, 1000, later)
		if err != nil || !slot.Equal(later) {
			t.Errorf("after 200 ms: %v, %v; want a fresh slot at %v", slot, err, later)
		}
	})

	t.Run("a slot late by less than maxLate is used", func(t *testing.T) {
		t.Parallel()
		store, id := newMemPace(), uuid.New()
		p := newPacer(store)
		for range 2 {
			if _, _, err := p.take(ctx, id, 1000, t0); err != nil {
				t.Fatal(err)
			}
		}
		slot, _, err := p.take(ctx, id, 1000, t0.Add(maxLate))
		if err != nil || !slot.Equal(t0.Add(2*time.Millisecond)) {
			t.Errorf("%v, %v; want the reserved slot at +2ms", slot, err)
		}
	})
}

// TestSchedulerSleep: a job asleep for its turn frees its subscription's
// slot, does not count as running (the subscription is not slow), counts
// as pending, and comes back ahead of the backlog; closing waits for it.
func TestSchedulerSleep(t *testing.T) {
	t.Parallel()
	sub := uuid.New()
	s := newScheduler(1, 10, 10*time.Millisecond, time.Now)
	first, second := testJob(sub, "first"), testJob(sub, "second")
	s.add(first)
	s.add(second) // waits behind first
	if j := takeWithin(t, s, time.Second); j != first {
		t.Fatalf("took %s, want first", name(j))
	}
	s.sleep(first, 200*time.Millisecond)
	if j := takeWithin(t, s, time.Second); j != second {
		t.Fatalf("took %s while first sleeps, want second", name(j))
	}
	time.Sleep(50 * time.Millisecond) // past slowAfter: second runs, first sleeps
	if n := s.pending(); n != 2 {
		t.Errorf("pending %d, want 2 (one running, one asleep)", n)
	}
	s.done(second)
	if !s.quick(sub) {
		t.Error("a sleeping job made its subscription slow")
	}
	s.close()
	if j := takeWithin(t, s, 2*time.Second); j != first {
		t.Fatalf("after close, took %s, want first back from its sleep", name(j))
	}
	s.done(first)
	if j := takeWithin(t, s, time.Second); j != nil {
		t.Fatalf("took %s, want nil: closed and drained", name(j))
	}
}
