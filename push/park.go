package push

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/roomhub/messaging-api/message"
)

// parkedSubs remembers the subscriptions this dispatcher parked copies of
// (see ParkedOwner) and when their parked copies were last released.
type parkedSubs struct {
	mu sync.Mutex
	m  map[uuid.UUID]parkedSub
}

type parkedSub struct {
	parked   bool      // copies parked since the last release
	noted    time.Time // the last copy parked
	released time.Time // the last release
}

// parkedMemory is how long an entry is kept without a release or a copy
// parked: far longer than any parked copy waits (parkDeferrals deferrals of
// at most a few seconds), so a forgotten entry has no copy left to release.
const parkedMemory = 10 * time.Minute

// note records that a copy of sub was parked at now.
func (ps *parkedSubs) note(sub uuid.UUID, now time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[uuid.UUID]parkedSub{}
	}
	st, ok := ps.m[sub]
	if !ok {
		ps.evict(now)
	}
	st.parked, st.noted = true, now
	ps.m[sub] = st
}

// evict forgets, once there are 1024 entries, those idle for a minute
// (released, nothing parked since) and those with copies parked more than
// parkedMemory ago (a deleted subscription's). Called with mu held.
func (ps *parkedSubs) evict(now time.Time) {
	if len(ps.m) < 1024 {
		return
	}
	for k, v := range ps.m {
		if (!v.parked && now.Sub(v.released) > time.Minute) || (v.parked && now.Sub(v.noted) > parkedMemory) {
			delete(ps.m, k)
		}
	}
}

// claim reports whether sub's parked copies should be released now: some
// were parked here since the last release, or heldCopy (the delivery that
// went quickly was itself deferred before, so another dispatcher may have
// parked its siblings); and the last release was at least every ago. It
// records the release (see evict for how entries are forgotten).
func (ps *parkedSubs) claim(sub uuid.UUID, heldCopy bool, now time.Time, every time.Duration) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st, ok := ps.m[sub]
	if (!st.parked && !heldCopy) || (ok && now.Sub(st.released) < every) {
		return false
	}
	if ps.m == nil {
		ps.m = map[uuid.UUID]parkedSub{}
	}
	if !ok {
		ps.evict(now)
	}
	ps.m[sub] = parkedSub{released: now}
	return true
}

// releaseParked ends the deferral of the subscription's parked copies early
// once it answers quickly again: a delivery that took less than SlowAfter
// while none of the subscription's requests has been running that long.
// Without it, a recovered endpoint's messages would wait out their
// deferrals (up to 4 s each, parkDeferrals of them in a row). At most once per
// DeferDelay per subscription and process: each release is one UPDATE of
// the outbox, and an endpoint quick for one request may hang on the next.
func (p *Dispatcher) releaseParked(ctx context.Context, sched *scheduler, j *job, latency time.Duration) {
	if p.cfg.SlowAfter <= 0 || latency >= p.cfg.SlowAfter || !sched.quick(j.key) {
		return
	}
	if !p.parked.claim(j.key, j.d.Headers[message.HeaderHeld] != "", p.now(), p.cfg.DeferDelay) {
		return
	}
	// Aside, so that the worker goes on; Run waits for it. Not cancelled by
	// a shutdown (it is one short UPDATE), but bounded.
	p.releasing.Go(func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		n, err := p.log.ReleaseParked(rctx, j.key, p.now())
		switch {
		case err != nil:
			// The copies wait out their deferrals instead.
			p.logger.WarnContext(ctx, "push: could not release a subscription's parked copies", slog.Any("error", err),
				slog.String("subscription_id", j.key.String()))
		case n > 0:
			p.logger.InfoContext(ctx, "push: the subscription answers quickly again; its parked copies are released",
				slog.String("subscription_id", j.key.String()), slog.Int("released", n))
			if p.onRelease != nil {
				p.onRelease()
			}
		}
	})
}

// releaseTimeout bounds one release of parked copies (and how much longer
// than its grace a dispatcher's shutdown may take for one).
const releaseTimeout = 5 * time.Second

// OnParkedReleased sets f to run after parked copies were released: the
// process's outbox relay's Notify, so that they go at once rather than at
// its next poll. Call before Run.
func (p *Dispatcher) OnParkedReleased(f func()) *Dispatcher {
	p.onRelease = f
	return p
}
