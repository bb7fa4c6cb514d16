package outbox

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
)

// ParkedPrefix begins the outbox lease holder of every parked copy.
const ParkedPrefix = "parked:"

// ParkedOwner is the outbox lease holder of a slow subscription's parked
// copies: deferred messages that wait in the outbox, not in the broker's
// scheduler, until their deferral ends (or the subscription answers quickly
// again). The lease's end, not its holder, makes a copy claimable; the holder
// names the subscription so that its copies can be released at once, and
// tells them apart from rows a relay is sending.
func ParkedOwner(subscription uuid.UUID) string { return ParkedPrefix + subscription.String() }

// ParkedStore ends parked copies' leases (the store is one).
type ParkedStore interface {
	// ReleaseParked ends the leases of the subscription's parked copies
	// (those leased to ParkedOwner(subscription)) at at, so that the relay
	// sends them at its next claim, with no delay left (a copy's scheduled
	// delay becomes what it waited), and returns how many it released.
	ReleaseParked(ctx context.Context, subscription uuid.UUID, at time.Time) (int, error)
}

// Parking remembers the subscriptions whose copies this process parked and
// when their parked copies were last released, and releases them early:
// without that, a recovered endpoint's messages would wait out their
// deferrals. At most once per every per subscription and process: each
// release is one UPDATE of the outbox, and an endpoint quick for one request
// may hang on the next.
type Parking struct {
	store     ParkedStore
	every     time.Duration
	onRelease func() // nil: nothing runs
	now       func() time.Time
	logger    *slog.Logger

	mu sync.Mutex
	m  map[uuid.UUID]parkedSub
	// releasing counts releases under way (Wait waits for them).
	releasing sync.WaitGroup
}

type parkedSub struct {
	parked   bool      // copies parked since the last release
	noted    time.Time // the last copy parked
	released time.Time // the last release
}

// NewParking returns a Parking that releases a subscription's parked copies
// at most once per every, and then runs onRelease (the process's relay's
// Notify, so that they go at once rather than at its next poll; nil: none).
func NewParking(store ParkedStore, every time.Duration, onRelease func(), now func() time.Time, logger *slog.Logger) *Parking {
	return &Parking{store: store, every: every, onRelease: onRelease, now: now, logger: logger}
}

// parkedMemory is how long an entry is kept without a release or a copy
// parked: far longer than any copy stays parked (a few seconds), so a
// forgotten entry has no copy left to release.
const parkedMemory = 10 * time.Minute

// Note records that a copy of sub was parked.
func (p *Parking) Note(sub uuid.UUID) { p.note(sub, p.now()) }

func (p *Parking) note(sub uuid.UUID, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[uuid.UUID]parkedSub{}
	}
	st, ok := p.m[sub]
	if !ok {
		p.evict(now)
	}
	st.parked, st.noted = true, now
	p.m[sub] = st
}

// evict forgets, once there are 1024 entries, those idle for a minute
// (released, nothing parked since) and those with copies parked more than
// parkedMemory ago (a deleted subscription's). Called with mu held.
func (p *Parking) evict(now time.Time) {
	if len(p.m) < 1024 {
		return
	}
	for k, v := range p.m {
		if (!v.parked && now.Sub(v.released) > time.Minute) || (v.parked && now.Sub(v.noted) > parkedMemory) {
			delete(p.m, k)
		}
	}
}

// claim reports whether sub's parked copies should be released now: some
// were parked here since the last release, or heldCopy (see Release); and
// the last release was at least every ago. It records the release (see
// evict for how entries are forgotten).
func (p *Parking) claim(sub uuid.UUID, heldCopy bool, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.m[sub]
	if (!st.parked && !heldCopy) || (ok && now.Sub(st.released) < p.every) {
		return false
	}
	if p.m == nil {
		p.m = map[uuid.UUID]parkedSub{}
	}
	if !ok {
		p.evict(now)
	}
	p.m[sub] = parkedSub{released: now}
	return true
}

// releaseTimeout bounds one release of parked copies (and how much longer
// than its grace a dispatcher's shutdown may take for one).
const releaseTimeout = 5 * time.Second

// Release ends sub's parked copies' deferral early, aside, so that the
// caller goes on (Wait waits for it): if copies were parked here since the
// last release, or heldCopy (the copy that went quickly was itself deferred
// before, so another process may have parked its siblings), and the last
// release was at least every ago. It is not cancelled with ctx (it is one
// short UPDATE), but bounded.
func (p *Parking) Release(ctx context.Context, sub uuid.UUID, heldCopy bool) {
	if !p.claim(sub, heldCopy, p.now()) {
		return
	}
	p.releasing.Go(func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		n, err := p.store.ReleaseParked(rctx, sub, p.now())
		switch {
		case err != nil:
			// The copies wait out their deferrals instead.
			p.logger.WarnContext(ctx, "push: could not release a subscription's parked copies", slog.Any("error", err),
				slog.String("subscription_id", sub.String()))
		case n > 0:
			p.logger.InfoContext(ctx, "push: the subscription answers quickly again; its parked copies are released",
				slog.String("subscription_id", sub.String()), slog.Int("released", n))
			if p.onRelease != nil {
				p.onRelease()
			}
		}
	})
}

// Wait waits for the releases under way.
func (p *Parking) Wait() { p.releasing.Wait() }
