package broker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// defaultPrefetch is the prefetch of a subscription that asks for 0: small, so
// that competing consumers share the work and a crash redelivers little.
const defaultPrefetch = 8

// Embedded is an in-process broker for `make run` and fast tests. It keeps
// everything in memory, so it is NOT durable: what it holds is lost when the
// process stops. Otherwise it behaves like the STOMP brokers: queues are created
// on demand, Delay schedules delivery, expired messages are dropped and never
// delivered, consumers of one queue compete, Prefetch bounds unacked messages per
// subscription and unacked messages are redelivered (Redelivered=true) when their
// subscription closes.
//
// Its own methods act as one client; Connect returns more clients, each of which
// can be closed like a dropped connection to a real broker.
type Embedded struct {
	log  *slog.Logger
	root *embeddedClient

	mu      sync.Mutex
	closed  bool
	seq     uint64
	queues  map[string]*equeue
	clients map[*embeddedClient]struct{}
}

var _ Broker = (*Embedded)(nil)

// NewEmbedded returns an empty in-process broker.
func NewEmbedded(logger *slog.Logger) *Embedded {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Embedded{
		log:     logger,
		queues:  make(map[string]*equeue),
		clients: make(map[*embeddedClient]struct{}),
	}
	e.root = e.newClient()
	return e
}

// Connect returns a new client of e. Closing it closes only its own
// subscriptions, whose unacked messages are then redelivered.
func (e *Embedded) Connect() Broker {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.newClient()
}

func (e *Embedded) newClient() *embeddedClient {
	c := &embeddedClient{e: e, subs: make(map[*esub]struct{}), closed: e.closed}
	if !e.closed {
		e.clients[c] = struct{}{}
	}
	return c
}

func (e *Embedded) Send(ctx context.Context, msg Message) error { return e.root.Send(ctx, msg) }
func (e *Embedded) Subscribe(ctx context.Context, dest Destination, opts SubscribeOptions) (Subscription, error) {
	return e.root.Subscribe(ctx, dest, opts)
}
func (e *Embedded) EnsureQueue(ctx context.Context, dest Destination) error {
	return e.root.EnsureQueue(ctx, dest)
}
func (e *Embedded) DeleteQueue(ctx context.Context, dest Destination) error {
	return e.root.DeleteQueue(ctx, dest)
}

// Connected is false once e is closed.
func (e *Embedded) Connected() bool { return e.root.Connected() }

// Prepare has nothing to check: the embedded broker keeps the contract by
// construction.
func (e *Embedded) Prepare(ctx context.Context, addresses []string) ([]string, error) {
	return e.root.Prepare(ctx, addresses)
}

// Close closes every client and drops every message.
func (e *Embedded) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	clients := make([]*embeddedClient, 0, len(e.clients))
	for c := range e.clients {
		clients = append(clients, c)
	}
	e.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for key, q := range e.queues {
		q.drop()
		delete(e.queues, key)
	}
	return nil
}

// equeue is one queue. Guarded by Embedded.mu.
type equeue struct {
	dest      Destination
	ready     []*emsg // deliverable now, oldest first
	scheduled map[*emsg]*time.Timer
	consumers []*esub
	next      int  // round-robin position in consumers
	deleted   bool // DeleteQueue ran; late timers and requeues are dropped
}

type emsg struct {
	seq        uint64
	msg        Message // private copy, Delay zeroed
	deliveries int     // times handed to a consumer
}

func (m *emsg) expired(now time.Time) bool {
	return !m.msg.Expires.IsZero() && !now.Before(m.msg.Expires)
}

// queue returns the queue for dest, creating it. Caller holds e.mu.
func (e *Embedded) queue(dest Destination) *equeue {
	key := dest.FQQN()
	q, ok := e.queues[key]
	if !ok {
		q = &equeue{dest: dest, scheduled: make(map[*emsg]*time.Timer)}
		e.queues[key] = q
	}
	return q
}

// drop forgets every message of q. Caller holds e.mu.
func (q *equeue) drop() {
	q.deleted = true
	for m, t := range q.scheduled {
		t.Stop()
		delete(q.scheduled, m)
	}
	q.ready = nil
}

// dispatch assigns ready messages to consumers with room in their prefetch
// window, round-robin, dropping expired ones. Caller holds e.mu.
func (q *equeue) dispatch(now time.Time) {
	for len(q.ready) > 0 {
		s := q.pick()
		if s == nil {
			return
		}
		m := q.ready[0]
		q.ready[0] = nil
		q.ready = q.ready[1:]
		if m.expired(now) {
			continue
		}
		s.unacked[m] = struct{}{}
		s.assigned = append(s.assigned, m)
		s.wakeUp()
	}
}

func (q *equeue) pick() *esub {
	for i := range q.consumers {
		idx := (q.next + i) % len(q.consumers)
		if s := q.consumers[idx]; !s.closed && len(s.unacked) < s.prefetch {
			q.next = idx + 1
			return s
		}
	}
	return nil
}

// embeddedClient is one client of an Embedded broker.
type embeddedClient struct {
	e      *Embedded
	subs   map[*esub]struct{} // guarded by e.mu
	closed bool               // guarded by e.mu
}

var _ Broker = (*embeddedClient)(nil)

// Send enqueues msg and returns at once; a message already expired is accepted
// and dropped, as a broker would.
func (c *embeddedClient) Send(ctx context.Context, msg Message) error {
	if err := validateMessage(msg); err != nil {
		return refused(err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	q := e.queue(msg.Destination)
	e.seq++
	m := &emsg{seq: e.seq, msg: cloneMessage(msg)}
	m.msg.Delay = 0
	now := time.Now()
	if m.expired(now) {
		return nil
	}
	if msg.Delay <= 0 {
		q.ready = append(q.ready, m)
		q.dispatch(now)
		return nil
	}
	q.scheduled[m] = time.AfterFunc(msg.Delay, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if _, ok := q.scheduled[m]; !ok {
			return // queue deleted or broker closed meanwhile
		}
		delete(q.scheduled, m)
		q.ready = append(q.ready, m)
		q.dispatch(time.Now())
	})
	return nil
}

func (c *embeddedClient) Subscribe(ctx context.Context, dest Destination, opts SubscribeOptions) (Subscription, error) {
	if err := validateDestination(dest); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	prefetch := opts.Prefetch
	if prefetch <= 0 {
		prefetch = defaultPrefetch
	}
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	q := e.queue(dest)
	s := &esub{
		e:        e,
		q:        q,
		client:   c,
		prefetch: prefetch,
		unacked:  make(map[*emsg]struct{}),
		out:      make(chan *Delivery),
		wake:     make(chan struct{}, 1),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	q.consumers = append(q.consumers, s)
	c.subs[s] = struct{}{}
	go s.pump()
	q.dispatch(time.Now())
	return s, nil
}

func (c *embeddedClient) EnsureQueue(ctx context.Context, dest Destination) error {
	if err := validateDestination(dest); err != nil {
		return err
	}
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.e.queue(dest)
	return nil
}

// DeleteQueue drops dest with its messages and closes the subscriptions on it,
// like Artemis' destroyQueue with removeConsumers.
func (c *embeddedClient) DeleteQueue(ctx context.Context, dest Destination) error {
	if err := validateDestination(dest); err != nil {
		return err
	}
	e := c.e
	e.mu.Lock()
	if c.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	q, ok := e.queues[dest.FQQN()]
	if !ok {
		e.mu.Unlock()
		return nil
	}
	delete(e.queues, dest.FQQN())
	q.drop()
	consumers := slices.Clone(q.consumers)
	e.mu.Unlock()
	for _, s := range consumers {
		_ = s.Close()
	}
	return nil
}

func (c *embeddedClient) Prepare(context.Context, []string) ([]string, error) { return nil, nil }

func (c *embeddedClient) Connected() bool {
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	return !c.closed
}

// Close closes the client's subscriptions; their unacked messages are redelivered.
func (c *embeddedClient) Close() error {
	e := c.e
	e.mu.Lock()
	if c.closed {
		e.mu.Unlock()
		return nil
	}
	c.closed = true
	delete(e.clients, c)
	subs := make([]*esub, 0, len(c.subs))
	for s := range c.subs {
		subs = append(subs, s)
	}
	e.mu.Unlock()
	for _, s := range subs {
		_ = s.Close()
	}
	return nil
}

// esub is a subscription of the embedded broker. Messages are assigned to it
// under the broker's lock (dispatch) and handed to the caller by its pump
// goroutine, which drops a message that expires while waiting for the reader.
type esub struct {
	e        *Embedded
	q        *equeue
	client   *embeddedClient
	prefetch int

	// Guarded by e.mu.
	closed   bool
	unacked  map[*emsg]struct{} // assigned or delivered, not yet acked
	assigned []*emsg            // assigned, not yet handed to the caller

	out     chan *Delivery
	wake    chan struct{} // capacity 1: "assigned may be non-empty"
	closing chan struct{}
	done    chan struct{} // closed when pump has returned
}

var _ Subscription = (*esub)(nil)

func (s *esub) C() <-chan *Delivery { return s.out }

// Full implements Subscription: the messages assigned to s and not yet
// handed over come without another dispatch.
func (s *esub) Full() bool {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return !s.closed && len(s.unacked) >= s.prefetch
}

func (s *esub) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *esub) pump() {
	defer close(s.done)
	for {
		s.e.mu.Lock()
		if s.closed {
			s.e.mu.Unlock()
			return
		}
		if len(s.assigned) == 0 {
			s.e.mu.Unlock()
			select {
			case <-s.wake:
				continue
			case <-s.closing:
				return
			}
		}
		m := s.assigned[0]
		s.assigned[0] = nil
		s.assigned = s.assigned[1:]
		if m.expired(time.Now()) {
			s.forget(m)
			s.e.mu.Unlock()
			continue
		}
		d := s.delivery(m)
		s.e.mu.Unlock()

		if !s.handOff(m, d) {
			return
		}
	}
}

// handOff waits for the reader to take d, unless m expires first (then it is
// dropped) or the subscription closes (then it stays unacked for Close to
// requeue, and handOff returns false).
func (s *esub) handOff(m *emsg, d *Delivery) bool {
	var expiry <-chan time.Time
	if !m.msg.Expires.IsZero() {
		t := time.NewTimer(time.Until(m.msg.Expires))
		defer t.Stop()
		expiry = t.C
	}
	select {
	case s.out <- d:
		s.e.mu.Lock()
		m.deliveries++
		s.e.mu.Unlock()
	case <-expiry:
		s.e.mu.Lock()
		s.forget(m)
		s.e.mu.Unlock()
	case <-s.closing:
		return false
	}
	return true
}

// forget removes m from the window and lets the queue fill it. Caller holds e.mu.
func (s *esub) forget(m *emsg) {
	delete(s.unacked, m)
	s.q.dispatch(time.Now())
}

func (s *esub) delivery(m *emsg) *Delivery {
	d := &Delivery{
		Message:     cloneMessage(m.msg),
		ID:          fmt.Sprintf("embedded-%d", m.seq),
		Redelivered: m.deliveries > 0,
	}
	d.ack = func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.e.mu.Lock()
		defer s.e.mu.Unlock()
		if s.closed {
			return fmt.Errorf("%w: %w", ErrClosed, ErrStaleDelivery)
		}
		if _, ok := s.unacked[m]; !ok {
			return errAlreadyAcked
		}
		s.forget(m)
		return nil
	}
	return d
}

// Close requeues the unacked messages at the head of the queue, oldest first,
// and closes the channel.
func (s *esub) Close() error {
	e := s.e
	e.mu.Lock()
	if s.closed {
		e.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	s.q.consumers = slices.DeleteFunc(s.q.consumers, func(o *esub) bool { return o == s })
	delete(s.client.subs, s)
	close(s.closing)
	e.mu.Unlock()

	<-s.done // pump is gone: the unacked set is final

	e.mu.Lock()
	if !s.q.deleted {
		requeue := make([]*emsg, 0, len(s.unacked))
		for m := range s.unacked {
			requeue = append(requeue, m)
		}
		slices.SortFunc(requeue, func(a, b *emsg) int { return cmp.Compare(a.seq, b.seq) })
		s.q.ready = append(requeue, s.q.ready...)
		s.q.dispatch(time.Now())
	}
	s.unacked, s.assigned = nil, nil
	e.mu.Unlock()
	close(s.out)
	return nil
}
