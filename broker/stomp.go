package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// stompBroker implements Broker over STOMP with go-stomp, for Artemis or
// ActiveMQ Classic (see the dialect type).
//
// Connections: go-stomp's Conn.Send holds the connection's lock until the
// RECEIPT arrives, so one connection carries one confirmed send at a time; a pool
// of cfg.senders connections lets concurrent Sends pipeline. Every Subscription
// has a connection of its own, so that a slow reader (go-stomp stalls the whole
// connection, heart-beats included, when sub.C is not read) only stalls itself.
// Every connection redials and, for subscriptions, resubscribes on its own.
type stompBroker struct {
	cfg    stompConfig
	log    *slog.Logger
	ctx    context.Context // cancelled by Close; parent of every background goroutine
	cancel context.CancelFunc

	senders []*link
	idle    chan *link // senders not carrying a send

	mu     sync.Mutex
	closed bool
	subs   map[*stompSub]struct{}
	wg     sync.WaitGroup // every goroutine started by the broker

	// ensureBeforeSend makes Send create each destination before its first
	// send (see ensureOnce): on Artemis from the start, until Prepare finds
	// that the broker creates queues on a SEND. ensured holds the
	// destinations created since (by FQQN).
	ensureBeforeSend atomic.Bool
	// replyQueueMade, when set (by tests), hears the name of every
	// management reply queue.
	replyQueueMade func(name string)
	ensuredMu      sync.Mutex
	ensured        map[string]struct{}
	ensuring       map[string]chan struct{} // creations under way, closed when done

	closeOnce sync.Once
}

var _ Broker = (*stompBroker)(nil)

func openStomp(ctx context.Context, cfg stompConfig, logger *slog.Logger) (*stompBroker, error) {
	logger = logger.With("broker", cfg.redacted, "dialect", string(cfg.dialect))
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b := &stompBroker{
		cfg:      cfg,
		log:      logger,
		ctx:      bctx,
		cancel:   cancel,
		idle:     make(chan *link, cfg.senders),
		subs:     make(map[*stompSub]struct{}),
		ensured:  make(map[string]struct{}),
		ensuring: make(map[string]chan struct{}),
	}
	b.ensureBeforeSend.Store(cfg.dialect == dialectArtemis)
	// One synchronous dial tells a wrong password or a non-STOMP port apart from a
	// broker that is merely down: the first fails Open, the second does not.
	first, err := b.dial(ctx, "sender-1")
	switch {
	case err == nil:
		logger.InfoContext(ctx, "broker: connected", "senders", cfg.senders, "server", first.sc.Server())
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
	if b.cfg.dialect == dialectActiveMQ && msg.Delay > 0 && !msg.Expires.IsZero() &&
		!msg.Expires.After(time.Now().Add(msg.Delay)) {
		// It would expire before it is due. A broker accepts and drops such a
		// message; Classic cannot be told (see sendHeaders), so it is not sent
		// and the caller hears why, to record it as expired.
		return ErrExpired
	}
	dest := b.cfg.destination(msg.Destination)
	opts := []func(*frame.Frame) error{stomp.SendOpt.Receipt, b.sendHeaders(msg)}
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			d := backoff(attempt-1, b.cfg.minReconnectDelay, b.cfg.maxReconnectDelay, rand.Float64())
			if !sleepCtx(ctx, d) {
				return sendError(dest, ctx.Err(), lastErr)
			}
		}
		if err := b.ensureOnce(ctx, msg.Destination); err != nil {
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
			return refusedByBroker(fmt.Errorf("broker: %s refused the message: %w", b.cfg.dialect, err), refusalText(err))
		}
		lastErr = err
		b.log.DebugContext(ctx, "broker: send failed, retrying", "destination", dest,
			"correlation_id", msg.CorrelationID, "attempt", attempt+1, "err", err)
	}
}

// ensureOnce creates dest before this process first sends to it, unless
// Prepare found that Artemis creates missing queues on a SEND: where it does
// not, it answers the SEND with a RECEIPT and drops the message.
// Concurrent first sends to one destination share one creation.
func (b *stompBroker) ensureOnce(ctx context.Context, dest Destination) error {
	if !b.ensureBeforeSend.Load() {
		return nil
	}
	key := dest.FQQN()
	for {
		b.ensuredMu.Lock()
		if _, done := b.ensured[key]; done {
			b.ensuredMu.Unlock()
			return nil
		}
		if wait, busy := b.ensuring[key]; busy {
			b.ensuredMu.Unlock()
			select {
			case <-wait:
				continue // done, or failed: then this send tries itself
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		done := make(chan struct{})
		b.ensuring[key] = done
		b.ensuredMu.Unlock()
		err := b.artemisCreateQueue(ctx, dest)
		b.ensuredMu.Lock()
		delete(b.ensuring, key)
		if err == nil {
			b.ensured[key] = struct{}{}
		}
		b.ensuredMu.Unlock()
		close(done)
		return err
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
	headers := encodeHeaders(msg)
	if b.cfg.dialect == dialectActiveMQ && msg.Delay > 0 && !msg.Expires.IsZero() {
		// ActiveMQ Classic fires a scheduled message with a new timestamp and the
		// same time to live (expires - timestamp), which moves the expiry by the
		// delay (measured on 5.17). Sending it that much earlier lands it where
		// asked, late by the scheduler's lateness at most; deliveries past
		// Expires are dropped by the subscription.
		early := strconv.FormatInt(msg.Expires.UnixMilli()-delayMillis(msg.Delay), 10)
		headers = append(headers, [2]string{HeaderExpires, early})
	}
	if b.cfg.dialect == dialectArtemis {
		// Artemis auto-creates addresses with its default routing type (MULTICAST
		// unless configured otherwise); these queues are point-to-point.
		headers = append(headers, [2]string{"destination-type", "ANYCAST"})
	}
	return func(f *frame.Frame) error {
		for _, h := range headers {
			f.Header.Set(h[0], h[1])
		}
		return nil
	}
}

// destination is the STOMP destination of d. Classic 5.17 reads a name without
// prefix as a queue as well (checked), but older Classic versions refuse it, so
// the prefix is explicit.
func (cfg stompConfig) destination(d Destination) string {
	if cfg.dialect == dialectActiveMQ {
		return "/queue/" + d.FQQN()
	}
	return d.FQQN()
}

// consumerWindow is Artemis' consumer-window-size for a prefetch of n messages.
// Artemis counts the bytes of the MESSAGE frames it sends and sends while any
// are left, so n messages are budgeted windowPerMessage bytes each (see
// defaultWindowPerMessage) and the consumer holds about n messages of that
// size, one more at most. n = 1 maps to 0, which Artemis reads as "one
// unacknowledged message at a time". Artemis parses the header as an int32.
func (cfg stompConfig) consumerWindow(prefetch int) int {
	if prefetch <= 1 {
		return 0
	}
	return int(min(int64(prefetch)*int64(cfg.windowPerMessage), math.MaxInt32))
}

// subscribeOptions are the SUBSCRIBE headers besides destination, ack and id.
// Never a receipt: go-stomp closes the subscription's channel on the RECEIPT and
// panics on the next MESSAGE.
func (cfg stompConfig) subscribeOptions(prefetch int) []func(*frame.Frame) error {
	if cfg.dialect == dialectActiveMQ {
		return []func(*frame.Frame) error{
			stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(prefetch)),
		}
	}
	return []func(*frame.Frame) error{
		stomp.SubscribeOpt.Header("subscription-type", "ANYCAST"),
		stomp.SubscribeOpt.Header("consumer-window-size", strconv.Itoa(cfg.consumerWindow(prefetch))),
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

// EnsureQueue pre-creates dest on Artemis, whose auto-created queues are deleted
// once empty and unconsumed. ActiveMQ Classic creates a queue on its first SEND
// or SUBSCRIBE and never deletes it by itself, so there it only validates dest.
func (b *stompBroker) EnsureQueue(ctx context.Context, dest Destination) error {
	if err := validateDestination(dest); err != nil {
		return err
	}
	if b.isClosed() {
		return ErrClosed
	}
	if b.cfg.dialect == dialectActiveMQ {
		return nil
	}
	if err := b.artemisCreateQueue(ctx, dest); err != nil {
		return err
	}
	b.ensuredMu.Lock()
	b.ensured[dest.FQQN()] = struct{}{}
	b.ensuredMu.Unlock()
	return nil
}

// DeleteQueue destroys dest on Artemis (consumers are disconnected first). On
// ActiveMQ Classic it is a no-op: Classic offers no way to delete a destination
// over STOMP (only JMX, which is off); its messages stay until consumed or
// expired. Close the subscriptions on dest first either way, or they recreate it.
func (b *stompBroker) DeleteQueue(ctx context.Context, dest Destination) error {
	if err := validateDestination(dest); err != nil {
		return err
	}
	if b.isClosed() {
		return ErrClosed
	}
	if b.cfg.dialect == dialectActiveMQ {
		return nil
	}
	b.ensuredMu.Lock()
	delete(b.ensured, dest.FQQN())
	b.ensuredMu.Unlock()
	return b.artemisDestroyQueue(ctx, dest)
}

// Prepare checks Artemis's address settings and the broker.properties it
// read (see artemisPrepare). ActiveMQ Classic has nothing the service can
// read over STOMP; docs/operations.md lists what it needs.
func (b *stompBroker) Prepare(ctx context.Context, addresses []string) ([]string, error) {
	if b.isClosed() {
		return nil, ErrClosed
	}
	if b.cfg.dialect == dialectActiveMQ {
		return nil, nil
	}
	return b.artemisPrepare(ctx, addresses)
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
