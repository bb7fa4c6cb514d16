package push

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Observer is told what becomes of each message (metrics.Metrics is one).
type Observer interface {
	// Handled counts one outcome (Outcome*) of one copy at attempt; age is
	// the time since publish.
	Handled(typ, outcome string, attempt int, age time.Duration)
	// RetryScheduled records the delay of a retry.
	RetryScheduled(typ string, delay time.Duration)
	// PushRequest records one HTTP request: result is a Result's String.
	PushRequest(result string, d time.Duration)
	// Deferred counts a message re-queued without an attempt: reason
	// paused, slow, circuit (held by an open circuit) or rate (waiting for
	// its turn under the subscription's delivery rate).
	Deferred(reason string)
	// Paused reports the dispatcher stopping (true) or resuming (false)
	// for a database outage.
	Paused(paused bool)
	// CircuitOpened counts a circuit this process opened: reason failures
	// (the breaker's threshold) or gone (410).
	CircuitOpened(reason string)
	// CircuitClosed counts a circuit this process closed.
	CircuitClosed()
	// CircuitProbe counts a probe this process made, by its outcome.
	CircuitProbe(succeeded bool)
}

type nopObserver struct{}

func (nopObserver) Handled(string, string, int, time.Duration) {}
func (nopObserver) RetryScheduled(string, time.Duration)       {}
func (nopObserver) PushRequest(string, time.Duration)          {}
func (nopObserver) Deferred(string)                            {}
func (nopObserver) Paused(bool)                                {}
func (nopObserver) CircuitOpened(string)                       {}
func (nopObserver) CircuitClosed()                             {}
func (nopObserver) CircuitProbe(bool)                          {}

// gate is open while the database answers. Closed, the dispatcher reads no
// message and starts no delivery; a delivery already made waits to store its
// outcome. Nothing is attempted, counted or dead-lettered meanwhile, and the
// broker keeps (or redelivers) the messages.
type gate struct {
	ping  func(context.Context) error
	every time.Duration
	check chan struct{} // asks watch to ping now

	mu     sync.Mutex
	down   bool
	up     chan struct{} // closed while up
	closed chan struct{} // closed while down
}

// newGate returns an open gate that ping (nil: none) keeps, every (a
// second if 0) and when a failure makes it suspect the database.
func newGate(ping func(context.Context) error, every time.Duration) *gate {
	up := make(chan struct{})
	close(up)
	if every <= 0 {
		every = time.Second
	}
	return &gate{ping: ping, every: every, up: up, closed: make(chan struct{}), check: make(chan struct{}, 1)}
}

// downCh is closed when the gate closes (at once if it is closed).
func (g *gate) downCh() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// state reports whether the gate is closed, and a channel closed when it opens.
func (g *gate) state() (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down, g.up
}

// wait blocks while the gate is closed; false when ctx ended first.
func (g *gate) wait(ctx context.Context) bool {
	_, up := g.state()
	select {
	case <-up:
		return true
	case <-ctx.Done():
		return false
	}
}

// suspect asks the watcher to ping now.
func (g *gate) suspect() {
	select {
	case g.check <- struct{}{}:
	default:
	}
}

func (g *gate) set(down bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down == down {
		return false
	}
	g.down = down
	if down {
		g.up = make(chan struct{})
		close(g.closed)
	} else {
		g.closed = make(chan struct{})
		close(g.up)
	}
	return true
}

// watch pings until ctx ends, closing the gate while pings fail.
func (g *gate) watch(ctx context.Context, logger *slog.Logger, obs Observer) {
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.set(false) // let workers drain
			return
		case <-t.C:
		case <-g.check:
		}
		pctx, cancel := context.WithTimeout(ctx, max(g.every, 2*time.Second))
		err := g.ping(pctx)
		cancel()
		if ctx.Err() != nil {
			continue
		}
		if !g.set(err != nil) {
			continue
		}
		obs.Paused(err != nil)
		if err != nil {
			logger.WarnContext(ctx, "push dispatcher paused: the database does not answer; messages stay with the broker", slog.Any("error", err))
		} else {
			logger.InfoContext(ctx, "push dispatcher resumed: the database answers again")
		}
	}
}
