package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// stompBroker implements Broker over STOMP with go-stomp. It holds what every
// STOMP broker shares (connections, redials, heart-beats, sends with receipts,
// subscriptions and their windows) and leaves the rest to its dialect.
//
// Connections: go-stomp's Conn.Send holds the connection's lock until the
// RECEIPT arrives, so one connection carries one confirmed send at a time; a pool
// of cfg.senders connections lets concurrent Sends pipeline. Every Subscription
// has a connection of its own, so that a slow reader (go-stomp stalls the whole
// connection, heart-beats included, when sub.C is not read) only stalls itself.
// Every connection redials and, for subscriptions, resubscribes on its own.
type stompBroker struct {
	cfg     stompConfig
	dialect dialect
	log     *slog.Logger
	ctx     context.Context // cancelled by Close; parent of every background goroutine
	cancel  context.CancelFunc
	// now is the clock of the limits on redials after refusals (see
	// link.afterRefusal): time.Now, or a test's. Timers are real.
	now func() time.Time

	// live is the index in cfg.hosts of the host a connection last reached
	// (-1 before any): every dial starts there (see dial).
	live atomic.Int32

	senders []*link
	idle    chan *link // senders not carrying a send

	mu     sync.Mutex
	closed bool
	subs   map[*stompSub]struct{}
	wg     sync.WaitGroup // every goroutine started by the broker

	closeOnce sync.Once
}

var _ Broker = (*stompBroker)(nil)

// dialect is what one kind of STOMP broker does its own way: how it names a
// destination, the headers of SEND and SUBSCRIBE, how a consumer's window
// fills, what its ERROR frame says when an address is full, queue management
// and the checks of Prepare. Implementations: artemis (artemis.go) and
// activeMQ (activemq.go); dialectNamed picks one from the URL.
type dialect interface {
	// destination is the STOMP destination of d.
	destination(d Destination) string
	// unsendable returns why msg must not be sent at now (ErrExpired), or nil.
	unsendable(msg Message, now time.Time) error
	// sendHeaders returns headers, the SEND headers of msg every broker
	// reads, with the dialect's own appended; a later one wins.
	sendHeaders(msg Message, headers [][2]string) [][2]string
	// subscribeOptions are the SUBSCRIBE headers besides destination, ack and
	// id. Never a receipt: go-stomp closes the subscription's channel on the
	// RECEIPT and panics on the next MESSAGE.
	subscribeOptions(prefetch int) []func(*frame.Frame) error
	// full reports whether the broker sends a consumer of this prefetch
	// nothing more while it holds w unacked.
	full(w *window, prefetch int) bool
	// addressFull reports whether refusal, the message header and body of an
	// ERROR frame answering a SEND, says the destination's address is full.
	addressFull(refusal string) bool
	// beforeSend runs before every attempt to send to dest; an error makes
	// Send wait and try again, as during an outage.
	beforeSend(ctx context.Context, dest Destination) error
	// ensureQueue, deleteQueue and prepare do the work of the Broker methods
	// of those names, for a valid destination on an open broker.
	ensureQueue(ctx context.Context, dest Destination) error
	deleteQueue(ctx context.Context, dest Destination) error
	prepare(ctx context.Context, addresses []string) (warnings []string, err error)
}

func openStomp(ctx context.Context, cfg stompConfig, logger *slog.Logger, now func() time.Time) (*stompBroker, error) {
	newDialect, ok := dialectNamed(cfg.dialect)
	if !ok {
		return nil, fmt.Errorf("broker: url %s: unknown dialect %q", cfg.redacted, cfg.dialect)
	}
	logger = logger.With("broker", cfg.redacted, "dialect", cfg.dialect)
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b := &stompBroker{
		cfg:    cfg,
		log:    logger,
		now:    now,
		ctx:    bctx,
		cancel: cancel,
		idle:   make(chan *link, cfg.senders),
		subs:   make(map[*stompSub]struct{}),
	}
	b.live.Store(-1)
	d, err := newDialect(b)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("broker: url %s: %w", cfg.redacted, err)
	}
	b.dialect = d
	// One synchronous dial tells a wrong password or a non-STOMP port apart from a
	// broker that is merely down: the first fails Open, the second does not.
	first, err := b.dial(ctx, "sender-1")
	switch {
	case err == nil:
		logger.InfoContext(ctx, "broker: connected", "host", first.host, "senders", cfg.senders, "server", first.sc.Server())
	case isRefusal(err) || ctx.Err() != nil:
		cancel()
		return nil, err
	default:
		logger.WarnContext(ctx, "broker: not reachable yet; connecting in the background", "err", err)
	}
	for i := range cfg.senders {
		l := newLink(b, "sender-"+strconv.Itoa(i+1))
		b.senders = append(b.senders, l)
		b.idle <- l
		var c *conn
		if i == 0 {
			c = first
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			l.run(c)
		}()
	}
	return b, nil
}

// start runs fn in a goroutine that Close waits for; false once closed.
func (b *stompBroker) start(fn func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
	}()
	return true
}

func (b *stompBroker) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Send retries on lost connections until ctx ends: during an outage it waits for
// the broker to come back. A refusal by the broker (an ERROR frame answering the
// SEND) is returned at once. A retry after a lost receipt may store the message
// twice; at-least-once delivery allows that, losing it would not be.
func (b *stompBroker) Send(ctx context.Context, msg Message) error {
	if err := validateMessage(msg); err != nil {
		return refused(err)
	}
	if b.isClosed() {
		return ErrClosed
	}
	if err := b.dialect.unsendable(msg, time.Now()); err != nil {
		return err
	}
	dest := b.dialect.destination(msg.Destination)
	opts := []func(*frame.Frame) error{stomp.SendOpt.Receipt, b.sendHeaders(msg)}
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			d := backoff(attempt-1, b.cfg.minReconnectDelay, b.cfg.maxReconnectDelay, rand.Float64())
			if !sleepCtx(ctx, d) {
				return sendError(dest, ctx.Err(), lastErr)
			}
		}
		if err := b.dialect.beforeSend(ctx, msg.Destination); err != nil {
			// Not a verdict on the message (a management permission, a taken
			// queue name): it waits, as during an outage, and the log says why.
			if errors.Is(err, ErrClosed) || ctx.Err() != nil {
				return sendError(dest, err, lastErr)
			}
			lastErr = fmt.Errorf("create the queue before the first send: %w", err)
			b.log.WarnContext(ctx, "broker: queue not created before its first send; retrying", "destination", dest,
				"correlation_id", msg.CorrelationID, "attempt", attempt+1, "err", err)
			continue
		}
		err := b.sendOnce(ctx, dest, msg.Body, opts)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrClosed), ctx.Err() != nil:
			return sendError(dest, err, lastErr)
		case isRefusal(err):
			return refusedError{
				err:  fmt.Errorf("broker: %s refused the message: %w", b.cfg.dialect, err),
				full: b.dialect.addressFull(refusalText(err)),
			}
		}
		lastErr = err
		b.log.DebugContext(ctx, "broker: send failed, retrying", "destination", dest,
			"correlation_id", msg.CorrelationID, "attempt", attempt+1, "err", err)
	}
}

func sendError(dest string, err, last error) error {
	if last == nil {
		return fmt.Errorf("broker: send to %s: %w", dest, err)
	}
	return fmt.Errorf("broker: send to %s: %w (last failure: %w)", dest, err, last)
}

// sendOnce borrows an idle sender, waits for it to be connected and sends. The
// send itself runs in a goroutine so that ctx can end the wait; the goroutine
// returns the sender to the pool when the broker answers or the connection dies.
func (b *stompBroker) sendOnce(ctx context.Context, dest string, body []byte, opts []func(*frame.Frame) error) error {
	var l *link
	select {
	case l = <-b.idle:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.ctx.Done():
		return ErrClosed
	}
	c, err := l.await(ctx)
	if err != nil {
		b.idle <- l
		return err
	}
	res := make(chan error, 1)
	if !b.start(func() {
		defer func() { b.idle <- l }()
		res <- c.send(dest, "", body, b.cfg.receiptTimeout, opts...)
	}) {
		b.idle <- l
		return ErrClosed
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-b.ctx.Done():
		return ErrClosed
	}
}

// sendHeaders sets every header of a SEND frame but destination, receipt and
// content-length, which go-stomp owns.
func (b *stompBroker) sendHeaders(msg Message) func(*frame.Frame) error {
	headers := b.dialect.sendHeaders(msg, encodeHeaders(msg))
	return func(f *frame.Frame) error {
		for _, h := range headers {
			f.Header.Set(h[0], h[1])
		}
		return nil
	}
}

// Subscribe returns once the SUBSCRIBE frame is handed to a connection of its
// own, or fails when ctx ends first (for instance while the broker is down).
// Brokers do not confirm a SUBSCRIBE (a receipt would crash go-stomp): a refusal
// shows up as a lost connection, logged and redialed like any other.
func (b *stompBroker) Subscribe(ctx context.Context, dest Destination, opts SubscribeOptions) (Subscription, error) {
	if err := validateDestination(dest); err != nil {
		return nil, err
	}
	prefetch := opts.Prefetch
	if prefetch <= 0 {
		prefetch = b.cfg.prefetch
	}
	s := newStompSub(b, dest, prefetch)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	b.subs[s] = struct{}{}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		s.run()
	}()
	select {
	case <-s.subscribed:
		return s, nil
	case <-s.done:
		return nil, ErrClosed
	case <-ctx.Done():
		_ = s.Close()
		return nil, fmt.Errorf("broker: subscribe to %s: %w", s.stompDest, ctx.Err())
	}
}

func (b *stompBroker) forget(s *stompSub) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, s)
}

// EnsureQueue makes sure dest exists where the broker would delete or never
// create it (see the dialect's ensureQueue).
func (b *stompBroker) EnsureQueue(ctx context.Context, dest Destination) error {
	if err := validateDestination(dest); err != nil {
		return err
	}
	if b.isClosed() {
		return ErrClosed
	}
	return b.dialect.ensureQueue(ctx, dest)
}

// DeleteQueue removes dest where the broker lets a client do so (see the
// dialect's deleteQueue). Close the subscriptions on dest first, or they
// recreate it.
func (b *stompBroker) DeleteQueue(ctx context.Context, dest Destination) error {
	if err := validateDestination(dest); err != nil {
		return err
	}
	if b.isClosed() {
		return ErrClosed
	}
	return b.dialect.deleteQueue(ctx, dest)
}

// Prepare checks what the broker lets a client read of its settings (see the
// dialect's prepare).
func (b *stompBroker) Prepare(ctx context.Context, addresses []string) ([]string, error) {
	if b.isClosed() {
		return nil, ErrClosed
	}
	return b.dialect.prepare(ctx, addresses)
}

// Connected reports whether at least one sender connection is up.
func (b *stompBroker) Connected() bool {
	if b.isClosed() {
		return false
	}
	for _, l := range b.senders {
		if l.connected() {
			return true
		}
	}
	return false
}

// Close disconnects every connection gracefully (bounded) and waits for every
// goroutine of the broker, subscriptions included; their channels are closed.
func (b *stompBroker) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		b.cancel()
		b.wg.Wait()
		b.log.Info("broker: closed")
	})
	return nil
}
