package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

var errAlreadyAcked = errors.New("broker: delivery already acknowledged")

// stompSub is a Subscription with a STOMP connection of its own. One goroutine
// (run) owns the connection: it dials, subscribes, moves MESSAGE frames from
// go-stomp's channel into an unbounded local queue at once (go-stomp stalls the
// connection, heart-beats included, while its channel is full) and feeds the
// caller's channel from that queue. The queue is bounded in practice by the
// prefetch window, because the broker sends no more unacknowledged messages.
type stompSub struct {
	b         *stompBroker
	dest      Destination
	stompDest string
	prefetch  int
	name      string

	out        chan *Delivery
	ctx        context.Context // cancelled by Close
	cancel     context.CancelFunc
	subscribed chan struct{} // closed after the first SUBSCRIBE
	done       chan struct{} // closed when run has returned

	mu  sync.Mutex
	cur *conn   // connection whose deliveries may be acked; nil between connections
	win *window // what cur delivered and was not acked; nil between connections
}

// window is what the broker has sent on one connection and not had acked:
// Artemis stops sending once the bytes reach the consumer window, ActiveMQ
// Classic once the count reaches the prefetch.
type window struct {
	count, bytes atomic.Int64
}

var _ Subscription = (*stompSub)(nil)

func newStompSub(b *stompBroker, dest Destination, prefetch int) *stompSub {
	ctx, cancel := context.WithCancel(b.ctx)
	return &stompSub{
		b:          b,
		dest:       dest,
		stompDest:  b.dialect.destination(dest),
		prefetch:   prefetch,
		name:       "consumer " + dest.FQQN(),
		out:        make(chan *Delivery),
		ctx:        ctx,
		cancel:     cancel,
		subscribed: make(chan struct{}),
		done:       make(chan struct{}),
	}
}

func (s *stompSub) C() <-chan *Delivery { return s.out }

// Close unsubscribes by disconnecting the subscription's connection; the broker
// redelivers what was not acked. It waits until the channel is closed.
func (s *stompSub) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *stompSub) setConn(c *conn, w *window) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur, s.win = c, w
}

// Full implements Subscription; the dialect knows how the broker counts.
func (s *stompSub) Full() bool {
	s.mu.Lock()
	w := s.win
	s.mu.Unlock()
	return w != nil && s.b.dialect.full(w, s.prefetch)
}

// frameSize is the size of m's MESSAGE frame as Artemis counts it against the
// consumer window (StompFrame.getEncodedSize): the command line, the headers
// escaped as on the wire (go-stomp hands them over unescaped), a blank line,
// the body, and the NUL and newline that end the frame.
func frameSize(m *stomp.Message) int64 {
	n := len(frame.MESSAGE) + 1 + 1 + len(m.Body) + 2
	for i := range m.Header.Len() {
		k, v := m.Header.GetAt(i)
		n += escapedLen(k) + 1 + escapedLen(v) + 1
	}
	return int64(n)
}

// escapedLen is the length of a STOMP 1.2 header key or value once escaped.
func escapedLen(s string) int {
	n := len(s)
	for i := range len(s) {
		switch s[i] {
		case '\\', '\n', '\r', ':':
			n++
		}
	}
	return n
}

func (s *stompSub) run() {
	defer close(s.done)
	defer close(s.out)
	defer s.b.forget(s)
	flaps, subscribedOnce, prevHost := 0, sync.OnceFunc(func() { close(s.subscribed) }), ""
	for {
		c := s.b.redial(s.ctx, s.name, flaps, prevHost)
		if c == nil {
			return
		}
		prevHost = c.host
		if !s.consume(c, subscribedOnce) {
			return
		}
		flaps = s.b.nextFlaps(c, flaps)
	}
}

// consume subscribes on c and delivers until c dies (true) or Close (false).
func (s *stompSub) consume(c *conn, subscribed func()) (lost bool) {
	sub, err := c.sc.Subscribe(s.stompDest, stomp.AckClientIndividual, s.b.dialect.subscribeOptions(s.prefetch)...)
	if err != nil {
		c.sock.kill(fmt.Errorf("subscribe: %w", err))
		s.b.connectionLost(s.name, c, err)
		return s.ctx.Err() == nil
	}
	w := &window{}
	s.setConn(c, w)
	subscribed()

	var (
		queue []*Delivery
		cause error
	)
	for {
		var (
			out    chan<- *Delivery
			head   *Delivery
			expiry <-chan time.Time
		)
		if len(queue) > 0 {
			out, head = s.out, queue[0]
			if !head.Expires.IsZero() {
				expiry = time.After(time.Until(head.Expires))
			}
		}
		select {
		case m, ok := <-sub.C:
			if !ok {
				// Deliveries still queued belong to a dead connection; the broker
				// redelivers them.
				s.setConn(nil, nil)
				_ = c.sock.Close()
				s.b.connectionLost(s.name, c, cause)
				return true
			}
			if m.Err != nil {
				// go-stomp reports the ERROR frame or network failure, then closes sub.C.
				cause = m.Err
				continue
			}
			queue = append(queue, s.delivery(c, w, m))
		case out <- head:
			queue[0] = nil
			queue = queue[1:]
		case <-expiry:
			// Expired while waiting for the reader, or delivered by a broker whose
			// expiry check came too early (Classic, see activeMQ.sendHeaders): never
			// delivered, acked so that the broker forgets it. Not acked from this
			// goroutine: it must keep draining go-stomp meanwhile.
			expired := head
			s.b.start(func() {
				if err := expired.Ack(s.ctx); err != nil && !errors.Is(err, ErrStaleDelivery) && s.ctx.Err() == nil {
					s.b.log.Warn("broker: cannot ack an expired message", "destination", s.stompDest,
						"message_id", expired.ID, "correlation_id", expired.CorrelationID, "err", err)
				}
			})
			queue[0] = nil
			queue = queue[1:]
		case <-s.ctx.Done():
			s.setConn(nil, nil)
			c.closeDraining(sub)
			return false
		}
	}
}

func (s *stompSub) delivery(c *conn, w *window, m *stomp.Message) *Delivery {
	size := frameSize(m)
	w.count.Add(1)
	w.bytes.Add(size)
	id := m.Header.Get(frame.MessageId)
	msg, err := decodeMessage(s.dest, m.Header, m.Body)
	if err != nil {
		s.b.log.Warn("broker: delivery with malformed headers", "destination", s.stompDest,
			"message_id", id, "correlation_id", msg.CorrelationID, "err", err)
	}
	d := &Delivery{
		Message:     msg,
		ID:          id,
		Redelivered: m.Header.Get("redelivered") == "true",
	}
	var (
		mu    sync.Mutex
		acked bool
	)
	d.ack = func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if acked {
			return errAlreadyAcked
		}
		if err := s.ack(ctx, c, m); err != nil {
			return err
		}
		acked = true
		w.count.Add(-1)
		w.bytes.Add(-size)
		return nil
	}
	return d
}

// ack sends ACK on the connection m came from. The ACK carries no receipt
// (go-stomp strands the receipt channel of a frame that times out), so a
// connection lost right after Ack may still redeliver: a duplicate, never a loss.
func (s *stompSub) ack(ctx context.Context, c *conn, m *stomp.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur != c || c.sock.isDead() {
		if s.ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrClosed, ErrStaleDelivery)
		}
		return ErrStaleDelivery
	}
	if err := c.sc.Ack(m); err != nil {
		if c.sock.isDead() || errors.Is(err, stomp.ErrClosedUnexpectedly) {
			return ErrStaleDelivery
		}
		return fmt.Errorf("broker: ack on %s: %w", s.stompDest, err)
	}
	return nil
}
