package push

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Pace is the shared pace of rate-limited subscriptions (the store is one):
// each has one sequence of request slots, interval apart, from which every
// dispatcher process reserves (GCRA: the sequence is the time of its next
// free slot, which never lags behind now, so no unused slot is saved up
// for a burst).
type Pace interface {
	// ReserveSlots reserves up to want consecutive slots of the
	// subscription from its first free one at or after now, of those that
	// begin before now+horizon. When none does, Slots.Retry is when the
	// caller may try again: the callers told to wait are spread interval
	// apart from the first free slot, in the order they asked.
	ReserveSlots(ctx context.Context, subscription uuid.UUID, interval time.Duration, now time.Time, horizon time.Duration, want int) (Slots, error)
}

// Slots are reserved request slots: N of them, interval apart, from First;
// or, when N is 0, when to try again (Retry).
type Slots struct {
	First time.Time
	N     int
	Retry time.Time
}

// Pacing constants.
//
//   - maxLate: a slot may be used up to this long after it began; later it
//     is given up and another taken. With slots exactly interval apart, the
//     requests that start in any second are then at most
//     rate × (1 s + maxLate) + 1, whichever process sends them.
//   - slotBatch: one reservation takes this much time's worth of slots (at
//     least one), so that a fast subscription costs a few round trips a
//     second, not one per request.
//   - maxHorizon, horizonSlots: slots are reserved at most this far ahead
//     (horizonSlots slots, up to maxHorizon): a message whose turn is further
//     off is deferred rather than kept in memory, so that a rate-limited
//     subscription holds at most horizonSlots messages of a process's
//     prefetch window while it waits.
const (
	maxLate      = 100 * time.Millisecond
	slotBatch    = 50 * time.Millisecond
	maxHorizon   = time.Second
	horizonSlots = 64
)

// slotInterval is the time between two requests at rate per second, in
// whole microseconds (what the database stores).
func slotInterval(rate float64) time.Duration {
	return max(time.Microsecond, time.Duration(float64(time.Second)/rate).Round(time.Microsecond))
}

func slotHorizon(interval time.Duration) time.Duration {
	return min(maxHorizon, horizonSlots*interval)
}

// pacer hands out this process's reserved slots of each rate-limited
// subscription, reserving more from the shared Pace when they run out.
type pacer struct {
	store Pace

	mu sync.Mutex
	m  map[uuid.UUID]*slotBank
}

// slotBank holds reserved slots: left of them, interval apart, from next.
type slotBank struct {
	mu       sync.Mutex
	interval time.Duration
	next     time.Time
	left     int
}

func newPacer(store Pace) *pacer { return &pacer{store: store, m: map[uuid.UUID]*slotBank{}} }

// take gives the caller a slot of the subscription at rate per second: the
// time its request may start (it may be past, by up to maxLate), or, when
// none is free within the horizon, the zero time and when to try again.
// Slots of this process that passed unused more than maxLate ago are given
// up. A reservation is made under the bank's lock: the subscription's other
// messages here wait for it rather than each asking.
func (p *pacer) take(ctx context.Context, id uuid.UUID, rate float64, now time.Time) (slot, retry time.Time, err error) {
	p.mu.Lock()
	b, ok := p.m[id]
	if !ok {
		if len(p.m) >= 100_000 {
			clear(p.m)
		}
		b = &slotBank{}
		p.m[id] = b
	}
	p.mu.Unlock()

	b.mu.Lock()
	defer b.mu.Unlock()
	interval := slotInterval(rate)
	if b.interval != interval {
		b.interval, b.left = interval, 0
	}
	if late := now.Sub(b.next) - maxLate; b.left > 0 && late > 0 {
		skip := int((late + interval - 1) / interval)
		b.next, b.left = b.next.Add(time.Duration(skip)*interval), max(0, b.left-skip)
	}
	if b.left == 0 {
		s, err := p.store.ReserveSlots(ctx, id, interval, now, slotHorizon(interval), max(1, int(slotBatch/interval)))
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		if s.N == 0 {
			return time.Time{}, s.Retry, nil
		}
		b.next, b.left = s.First, s.N
	}
	slot = b.next
	b.next, b.left = b.next.Add(interval), b.left-1
	return slot, time.Time{}, nil
}
