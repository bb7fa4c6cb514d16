package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// disconnectWait bounds a graceful DISCONNECT; go-stomp's own receipt timeout is
// set to twice as long so that ours always fires first (see conn.close).
const disconnectWait = 2 * time.Second

var errClosedLocally = errors.New("closed by this client")

// sendAfterDeath is how long a send waits for go-stomp's answer once the socket
// has died; go-stomp answers at once unless it is stuck for good.
const sendAfterDeath = 500 * time.Millisecond

// watchedConn is the socket under a go-stomp connection. go-stomp has no "done"
// signal: a read error, a write error, an ERROR frame and a missed heart-beat all
// end in a failed read or write or in a Close of this socket, so dead closes on
// the first of them and says why.
type watchedConn struct {
	net.Conn
	once  sync.Once
	dead  chan struct{}
	cause error // set before dead is closed
}

func newWatchedConn(c net.Conn) *watchedConn {
	return &watchedConn{Conn: c, dead: make(chan struct{})}
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if err != nil {
		w.fail(fmt.Errorf("read: %w", err))
	}
	return n, err
}

func (w *watchedConn) Write(p []byte) (int, error) {
	n, err := w.Conn.Write(p)
	if err != nil {
		w.fail(fmt.Errorf("write: %w", err))
	}
	return n, err
}

// Close is also what go-stomp calls after an ERROR frame or a heart-beat timeout.
func (w *watchedConn) Close() error {
	w.fail(errClosedLocally)
	return w.Conn.Close()
}

// kill closes the socket recording why; it wakes every go-stomp call waiting on it.
func (w *watchedConn) kill(cause error) {
	w.fail(cause)
	_ = w.Conn.Close()
}

func (w *watchedConn) fail(cause error) {
	w.once.Do(func() {
		w.cause = cause
		close(w.dead)
	})
}

func (w *watchedConn) isDead() bool {
	select {
	case <-w.dead:
		return true
	default:
		return false
	}
}

// deathCause is why the socket died; nil while it is alive.
func (w *watchedConn) deathCause() error {
	if !w.isDead() {
		return nil
	}
	return w.cause
}

// conn is one STOMP connection.
type conn struct {
	sc      *stomp.Conn
	sock    *watchedConn
	name    string
	host    string // host:port it is connected to
	started time.Time
	// refused is closed when the broker answers a SEND on this connection
	// with ERROR: a broker closes the connection after an ERROR frame (and
	// go-stomp does too), so its death is the refusal's, not an outage's.
	refused     chan struct{}
	refusedOnce sync.Once
	// gone is closed once the link has let go of this connection (it died,
	// or the broker is closing).
	gone chan struct{}
}

// refusalGrace is how long a dead connection's link waits to learn whether
// a refusal killed it: go-stomp may report the socket's end before the
// refused send returns.
const refusalGrace = 200 * time.Millisecond

// wasRefused reports whether a refusal ended c, waiting up to grace.
func (c *conn) wasRefused(grace time.Duration) bool {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.refused:
		return true
	case <-t.C:
		return false
	}
}

// dial opens one STOMP connection to the live host: one round over the hosts,
// in the URL's order from the one last seen live, each bounded by
// connectTimeout. A broker that is not live refuses at once (an Artemis
// backup opens its acceptors only once it becomes live), so a round costs
// little unless a host does not answer at all. The error of a failed round
// names each host's failure.
func (b *stompBroker) dial(ctx context.Context, name string) (*conn, error) {
	hosts := b.cfg.hosts
	from := max(int(b.live.Load()), 0)
	var errs hostErrors
	for k := range hosts {
		i := (from + k) % len(hosts)
		c, err := b.dialHost(ctx, name, i)
		if err == nil {
			b.seenLive(i, name)
			return c, nil
		}
		if len(hosts) == 1 || ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errs
}

// seenLive records that a connection (named name) reached host i; the first
// to reach another host than the last one logs the failover.
func (b *stompBroker) seenLive(i int, name string) {
	prev := int(b.live.Swap(int32(i)))
	if prev < 0 || prev == i {
		return
	}
	to, from := b.cfg.hosts[i].addr, b.cfg.hosts[prev].addr
	b.log.Info("broker: connected to "+to+" (failover from "+from+")", "conn", name, "host", to, "previous_host", from)
}

// hostErrors is the failure of a round over several hosts, one error each.
type hostErrors []error

func (e hostErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return "broker: no host is live: " + strings.Join(parts, "; ")
}

func (e hostErrors) Unwrap() []error { return e }

// dialHost opens one STOMP connection to host i, bounded by connectTimeout and ctx.
func (b *stompBroker) dialHost(ctx context.Context, name string, i int) (*conn, error) {
	h := b.cfg.hosts[i]
	ctx, cancel := context.WithTimeout(ctx, b.cfg.connectTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return nil, fmt.Errorf("broker: dial %s: %w", h.addr, err)
	}
	if h.tls != nil {
		tc := tls.Client(nc, h.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("broker: TLS handshake with %s: %w", h.addr, err)
		}
		nc = tc
	}
	sock := newWatchedConn(&rawConnect{Conn: nc})
	// go-stomp only honours a deadline while waiting for CONNECTED; closing the
	// socket is how a cancelled ctx interrupts it.
	stop := context.AfterFunc(ctx, func() { sock.kill(context.Cause(ctx)) })
	sc, err := stomp.ConnectWithContext(ctx, sock, b.connectOptions(h.name)...)
	if !stop() {
		// ctx ended and closed the socket: whatever go-stomp saw of that
		// (a read on a closed connection) is its consequence.
		_ = sock.Close()
		return nil, fmt.Errorf("broker: connect to %s: %w", h.addr, context.Cause(ctx))
	}
	if err != nil {
		_ = sock.Close()
		return nil, fmt.Errorf("broker: connect to %s: %w", h.addr, err)
	}
	return &conn{sc: sc, sock: sock, name: name, host: h.addr, started: time.Now(), refused: make(chan struct{}), gone: make(chan struct{})}, nil
}

func (b *stompBroker) connectOptions(host string) []func(*stomp.Conn) error {
	hb := b.cfg.heartbeat
	opts := []func(*stomp.Conn) error{
		stomp.ConnOpt.Host(host),
		stomp.ConnOpt.AcceptVersion(stomp.V11, stomp.V12),
		// Heart-beats both ways at hb. go-stomp then writes every hb - hb/2 and gives
		// up after (hb + hb/2) × 2 = 3hb of silence: ActiveMQ Classic sends its first
		// heart-beat only after 2hb (measured on 5.17), Artemis every hb.
		stomp.ConnOpt.HeartBeat(hb, hb),
		// Receipts are awaited without go-stomp's timer: after its timeout go-stomp
		// leaves a channel behind that blocks its I/O loop when a late RECEIPT comes.
		// conn.send runs its own timer and closes the socket instead.
		stomp.ConnOpt.RcvReceiptTimeout(0),
		stomp.ConnOpt.DisconnectReceiptTimeout(2 * disconnectWait),
		stomp.ConnOpt.Logger(stompLogger{log: b.log}),
	}
	if hb > 0 {
		opts = append(opts,
			stomp.ConnOpt.HeartBeatError(hb/2),
			stomp.ConnOpt.HeartBeatGracePeriodMultiplier(2))
	}
	if b.cfg.login != "" || b.cfg.passcode != "" {
		opts = append(opts, stomp.ConnOpt.Login(b.cfg.login, b.cfg.passcode))
	}
	return opts
}

// isRefusal reports whether err is the broker answering a frame with ERROR (bad
// login, rejected SEND) rather than a network failure. go-stomp builds ERROR
// frames of its own for network failures; those carry nothing but a message
// header, while a broker's carry a body, a receipt-id or a content-type.
func isRefusal(err error) bool {
	var se stomp.Error
	if !errors.As(err, &se) || se.Frame == nil || se.Frame.Command != frame.ERROR {
		return false
	}
	return len(se.Frame.Body) > 0 || se.Frame.Header.Len() > 1
}

// refusalText is the message header and the body of the broker's ERROR
// frame in err (see isRefusal).
func refusalText(err error) string {
	var se stomp.Error
	if !errors.As(err, &se) || se.Frame == nil {
		return err.Error()
	}
	return se.Frame.Header.Get(frame.Message) + "\n" + string(se.Frame.Body)
}

// send writes one SEND frame and waits for the broker's receipt. When no receipt
// comes within timeout the socket is closed: the connection is unusable anyway
// and closing is the only way to unblock go-stomp.
func (c *conn) send(dest, contentType string, body []byte, timeout time.Duration, opts ...func(*frame.Frame) error) error {
	t := time.AfterFunc(timeout, func() {
		c.sock.kill(fmt.Errorf("no receipt within %s", timeout))
	})
	defer t.Stop()
	// go-stomp's Send may never return: a SEND queued just as its I/O loop ends
	// (the broker went away) is never answered, and Send holds the lock the
	// loop's final disconnect waits for (go-stomp issue #62; seen with kill -9
	// of the broker under load, cmd/faultsuite). So it runs aside, and the
	// socket's death ends the wait; what it leaves behind is stuck on a dead
	// connection.
	res := make(chan error, 1)
	go func() { res <- c.sc.Send(dest, contentType, body, opts...) }()
	var err error
	select {
	case err = <-res:
	case <-c.sock.dead:
		select {
		case err = <-res: // go-stomp's own answer, when it has one
		case <-time.After(sendAfterDeath):
			err = errors.New("connection lost before the receipt")
		}
	}
	if err == nil {
		return nil
	}
	refusal := isRefusal(err)
	cause := c.sock.deathCause()
	if refusal {
		c.refusedOnce.Do(func() { close(c.refused) })
	}
	// Whatever failed, the connection is done: go-stomp ends it after an
	// ERROR frame and after an error of its own, and a send written on it
	// before the socket closes would never be answered (and would leave a
	// go-stomp goroutine waiting for its receipt for good). End it now, so
	// that the next send waits for the link to redial (see link.await).
	c.sock.kill(errors.New("closed after a failed send"))
	if cause != nil && !errors.Is(cause, errClosedLocally) && !refusal {
		return fmt.Errorf("broker: send to %s on %s: %w (%w)", dest, c.name, err, cause)
	}
	return fmt.Errorf("broker: send to %s on %s: %w", dest, c.name, err)
}

// close disconnects gracefully: the RECEIPT of a DISCONNECT proves the broker has
// processed every frame written before it, ACKs included. After disconnectWait
// the socket is closed regardless, which also unblocks go-stomp's Disconnect.
func (c *conn) close() {
	if c.sock.isDead() {
		_ = c.sock.Close()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.sc.Disconnect()
	}()
	t := time.NewTimer(disconnectWait)
	select {
	case <-done:
	case <-t.C:
		c.sock.kill(fmt.Errorf("no DISCONNECT receipt within %s", disconnectWait))
		<-done // bounded by go-stomp's DisconnectReceiptTimeout
	}
	t.Stop()
	_ = c.sock.Close()
}

// closeDraining closes c while reading sub's channel: go-stomp's I/O loop blocks
// on a subscription nobody reads, and then DISCONNECT cannot complete.
func (c *conn) closeDraining(sub *stomp.Subscription) {
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range sub.C {
		}
	}()
	c.close()
	// sub.C closes once go-stomp's loop has seen the socket go; bound the wait in
	// case it does not, rather than hang Close.
	t := time.NewTimer(disconnectWait)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
	}
}

// link is a supervised sender connection: it redials after every loss until ctx
// ends, and hands its current connection to senders.
type link struct {
	b    *stompBroker
	name string

	mu    sync.Mutex
	cur   *conn
	ready chan struct{} // closed while cur != nil
	// refusedAt is when a refusal last cost this link its connection: it
	// counts as connected while it redials (see connected), and immediate
	// redials are limited (refusalRedials in the second from redialsFrom).
	refusedAt      time.Time
	redialsFrom    time.Time
	refusalRedials int
}

// Limits on redials after refusals: each refusal costs a connection, and a
// backlog of refused copies must not turn into a storm of connects.
const (
	refusalRedialsPerSecond = 10
	// refusalConnectedGrace is how long a link redialing after a refusal
	// still counts as connected: the broker has just answered it.
	refusalConnectedGrace = time.Second
)

func newLink(b *stompBroker, name string) *link {
	return &link{b: b, name: name, ready: make(chan struct{})}
}

func (l *link) set(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case c != nil:
		l.cur = c
		close(l.ready)
	case l.cur != nil:
		l.cur = nil
		l.ready = make(chan struct{})
	}
}

// connected reports whether the link has a live connection, or one a
// refusal ended within the last refusalConnectedGrace (the broker has just
// answered it; the link redials at once).
func (l *link) connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil {
		select {
		case <-l.cur.refused:
			return true
		default:
		}
		if !l.cur.sock.isDead() {
			return true
		}
	}
	return !l.refusedAt.IsZero() && l.b.now().Sub(l.refusedAt) < refusalConnectedGrace
}

// afterRefusal records that a refusal ended the link's connection and
// reports whether it may redial at once (at most refusalRedialsPerSecond
// times a second; past that it backs off as after a failure).
func (l *link) afterRefusal(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refusedAt = now
	if now.Sub(l.redialsFrom) >= time.Second {
		l.redialsFrom, l.refusalRedials = now, 0
	}
	l.refusalRedials++
	return l.refusalRedials <= refusalRedialsPerSecond
}

// await returns the current connection, waiting for one while the link redials.
func (l *link) await(ctx context.Context) (*conn, error) {
	for {
		l.mu.Lock()
		c, ready := l.cur, l.ready
		l.mu.Unlock()
		if c != nil && !c.sock.isDead() {
			return c, nil
		}
		if c != nil {
			// Dead (conn.send kills the socket after any failure, before
			// the link goes back to the pool) but not yet replaced: a send
			// written now would never be answered (and would leave go-stomp
			// waiting for its receipt for good).
			select {
			case <-c.gone:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-l.b.ctx.Done():
				return nil, ErrClosed
			}
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.b.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// run supervises the link until the broker closes; first may be nil.
func (l *link) run(first *conn) {
	ctx := l.b.ctx
	c, flaps, prevHost := first, 0, ""
	for {
		if c == nil {
			if c = l.b.redial(ctx, l.name, flaps, prevHost); c == nil {
				return
			}
		}
		prevHost = c.host
		l.set(c)
		select {
		case <-c.sock.dead:
			// Whether a refusal ended it is settled before the link lets go
			// of it, so that connected() has no gap (see there).
			refused := c.wasRefused(refusalGrace)
			immediate := refused && l.afterRefusal(l.b.now())
			l.set(nil)
			close(c.gone)
			_ = c.sock.Close()
			if refused {
				// The broker refused one message and closed the connection
				// after its ERROR frame: it is up, so redial at once, or every
				// refusal would leave this sender down for a growing backoff
				// (and all of them down: the service not ready). A storm of
				// refusals backs off all the same.
				l.b.log.Info("broker: connection closed after the broker refused a message; redialing", "conn", l.name)
				if immediate {
					flaps = 0
				} else {
					flaps = l.b.nextFlaps(c, flaps)
				}
			} else {
				l.b.connectionLost(l.name, c, nil)
				flaps = l.b.nextFlaps(c, flaps)
			}
			c = nil
		case <-ctx.Done():
			l.set(nil)
			close(c.gone)
			c.close()
			return
		}
	}
}

// nextFlaps counts connections that died young, so a broker that accepts and
// then drops connections at once is redialed with growing delays.
func (b *stompBroker) nextFlaps(c *conn, flaps int) int {
	if time.Since(c.started) < b.cfg.maxReconnectDelay {
		return flaps + 1
	}
	return 0
}

// redial connects, retrying with backoff until ctx ends (then it returns nil).
// flaps > 0 delays the first attempt as if that many attempts had failed.
// prevHost is the host of the connection lost ("" for none): a connection
// that comes back on another host says so, however soon it came back.
func (b *stompBroker) redial(ctx context.Context, name string, flaps int, prevHost string) *conn {
	for attempt := flaps; ; attempt++ {
		if attempt > 0 {
			if !sleepCtx(ctx, backoff(attempt-1, b.cfg.minReconnectDelay, b.cfg.maxReconnectDelay, rand.Float64())) {
				return nil
			}
		}
		c, err := b.dial(ctx, name)
		if err == nil {
			switch {
			case prevHost != "" && c.host != prevHost:
				b.log.Info("broker: reconnected", "conn", name, "host", c.host, "previous_host", prevHost, "attempts", attempt-flaps+1)
			case attempt > flaps:
				b.log.Info("broker: reconnected", "conn", name, "host", c.host, "attempts", attempt-flaps+1)
			}
			return c
		}
		if ctx.Err() != nil {
			return nil
		}
		// One warning per outage and connection; the retries are debug noise.
		level := slog.LevelDebug
		if attempt == flaps {
			level = slog.LevelWarn
		}
		b.log.Log(ctx, level, "broker: cannot connect, retrying with backoff", "conn", name, "attempt", attempt-flaps+1, "err", err)
	}
}

func (b *stompBroker) connectionLost(name string, c *conn, cause error) {
	if cause == nil {
		cause = c.sock.deathCause()
	}
	b.log.Warn("broker: connection lost, redialing", "conn", name, "host", c.host, "err", cause)
}

// backoff is the delay before retry attempt+1: exponential from lo, capped at hi,
// with jitter r ∈ [0,1) spreading it over [d/2, d) so that many connections lost
// together do not redial in lockstep.
//
//	d = min(hi, lo·2^attempt);  delay = d/2 + r·d/2
func backoff(attempt int, lo, hi time.Duration, r float64) time.Duration {
	d := hi
	if attempt < 32 {
		if e := lo << attempt; e > 0 && e < hi {
			d = e
		}
	}
	return d/2 + time.Duration(r*float64(d/2))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// stompLogger routes go-stomp's log lines to slog. Its Info lines describe events
// this package reports itself (subscription errors, lost connections), so they
// go to Debug.
type stompLogger struct{ log *slog.Logger }

func (l stompLogger) Debugf(format string, v ...any) {
	l.log.Debug("go-stomp: " + fmt.Sprintf(format, v...))
}
func (l stompLogger) Infof(format string, v ...any) {
	l.log.Debug("go-stomp: " + fmt.Sprintf(format, v...))
}
func (l stompLogger) Warningf(format string, v ...any) {
	l.log.Warn("go-stomp: " + fmt.Sprintf(format, v...))
}
func (l stompLogger) Errorf(format string, v ...any) {
	l.log.Warn("go-stomp: " + fmt.Sprintf(format, v...))
}
func (l stompLogger) Debug(msg string)   { l.log.Debug("go-stomp: " + msg) }
func (l stompLogger) Info(msg string)    { l.log.Debug("go-stomp: " + msg) }
func (l stompLogger) Warning(msg string) { l.log.Warn("go-stomp: " + msg) }
func (l stompLogger) Error(msg string)   { l.log.Warn("go-stomp: " + msg) }
