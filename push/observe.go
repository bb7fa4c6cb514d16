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
	// Deferred counts a message re-queued without an attempt: reason paused or slow.
	Deferred(reason string)
	// Paused reports the dispatcher stopping (true) or resuming (false)
	// for a database outage.
	Paused(paused bool)
}

type nopObserver struct{}

func (nopObserver) Handled(string, string, int, time.Duration) {}
func (nopObserver) RetryScheduled(string, time.Duration)       {}
func (nopObserver) PushRequest(string, time.Duration)          {}
func (nopObserver) Deferred(string)                            {}
func (nopObserver) Paused(bool)                                {}

// Observe makes o see every outcome; call it before Run.
func (p *Dispatcher) Observe(o Observer) *Dispatcher {
	p.obs = o
	return p
}

// WatchDatabase makes Run ping the database every interval (and at once
// after any failure to store an outcome) and stop taking messages while it
// does not answer; call it before Run.
func (p *Dispatcher) WatchDatabase(ping func(context.Context) error, every time.Duration) *Dispatcher {
	p.gate.ping, p.gate.every = ping, every
	return p
}

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

func newGate() *gate {
	up := make(chan struct{})
	close(up)
	return &gate{up: up, closed: make(chan struct{}), check: make(chan struct{}, 1), every: time.Second}
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
