package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/message"
)

// Batch is one publish call's rows: its events, their sends, and the lease
// of the sends' outbox rows.
type Batch struct {
	Events []message.Event
	Sends  []message.Send
	Lease  Lease
}

// BatchStore is a Store that can store several publishes in one
// transaction: all of them or none.
type BatchStore interface {
	PublishAll(ctx context.Context, batches []Batch) error
}

// Group commit bounds: a publish with more events than groupMaxEvents or
// more sends than groupMaxSends is stored alone, in a transaction of its
// own; one transaction takes at most groupMaxCalls publishes. Grouping
// serialises the writes (one group at a time), which pays while rows are
// few: single events at fan-out 1 cost PostgreSQL 40–55 % less CPU and were
// accepted 13–19 % faster, but at fan-out 10 (11 rows each) the
// serialised groups accepted fewer events per second than 16 transactions
// in parallel (docs/benchmarks.md#what-limits-each-figure).
const (
	groupMaxEvents = 4
	groupMaxSends  = 4
	groupMaxCalls  = 64
)

// groupCommit stores concurrent small publishes in one transaction: one
// statement, one WAL flush and one round trip for all the requests that
// arrived while the previous transaction was being written. Nothing waits
// on a timer, so a lone request is stored at once; under load transactions
// grow by themselves. A request is answered only once its own rows are
// committed, as before. There is no goroutine to start or stop: the first
// waiting request leads, writes what is queued, and hands the lead to the
// next queued request.
type groupCommit struct {
	store BatchStore
	// single stores one publish (the fallback when a group fails).
	single func(ctx context.Context, b Batch) error

	mu      sync.Mutex
	leading bool
	queue   []*groupReq
}

type groupReq struct {
	ctx   context.Context
	batch Batch
	done  chan error    // the outcome
	lead  chan struct{} // this request writes the next group
}

// publish stores b, sharing a transaction with other requests' publishes.
func (g *groupCommit) publish(ctx context.Context, b Batch) error {
	r := &groupReq{ctx: ctx, batch: b, done: make(chan error, 1), lead: make(chan struct{}, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, r)
	if !g.leading {
		g.leading = true
		r.lead <- struct{}{}
	}
	g.mu.Unlock()
	for {
		select {
		case err := <-r.done:
			return err
		case <-r.lead:
			g.writeNext()
		}
	}
}

// writeNext writes up to groupMaxCalls queued publishes, then passes the
// lead to the first request still queued, or gives it up. A panic in the
// store answers the group's requests with an error and still passes the
// lead, so that the publishes queued behind it do not wait forever.
func (g *groupCommit) writeNext() {
	g.mu.Lock()
	n := min(len(g.queue), groupMaxCalls)
	group := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	defer g.passLead()
	defer func() {
		if v := recover(); v != nil {
			for _, r := range group {
				select {
				case r.done <- fmt.Errorf("publish: storing the events failed: %v", v):
				default: // already answered
				}
			}
			panic(v)
		}
	}()
	g.write(group)
}

func (g *groupCommit) passLead() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) > 0 {
		g.queue[0].lead <- struct{}{}
	} else {
		g.leading = false
	}
}

// groupTimeout bounds one write: every small publish waits behind it.
const groupTimeout = 30 * time.Second

// write stores a group and answers each of its requests. The transaction
// runs under a context of its own, so that one client going away does not
// abort the others' rows. If it fails for a reason that may be one
// publish's own (a taken idempotency key, a foreign key, a conflict), each
// publish is stored alone, so that only the bad one fails; if the database
// is unavailable or the write timed out, every request gets that error at
// once rather than one after another.
func (g *groupCommit) write(group []*groupReq) {
	if len(group) == 1 {
		r := group[0]
		r.done <- g.alone(r)
		return
	}
	batches := make([]Batch, len(group))
	for i, r := range group {
		batches[i] = r.batch
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), groupTimeout)
	err := g.store.PublishAll(ctx, batches)
	cancel()
	if err != nil && !errors.Is(err, api.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		for _, r := range group {
			r.done <- g.alone(r)
		}
		return
	}
	for _, r := range group {
		r.done <- err
	}
}

// alone stores one request's publish in a transaction of its own.
func (g *groupCommit) alone(r *groupReq) error {
	ctx, cancel := context.WithTimeout(r.ctx, groupTimeout)
	defer cancel()
	return g.single(ctx, r.batch)
}
