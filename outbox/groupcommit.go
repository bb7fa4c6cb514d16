package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/roomhub/messaging-api/api"
)

// GroupCommit stores concurrent writes in one transaction: one statement,
// one WAL flush and one round trip for all the writes that arrived while the
// previous transaction was being written. Nothing waits on a timer, so a
// lone write is stored at once; under load transactions grow by themselves.
// A caller is answered only once its own write is committed. There is no
// goroutine to start or stop: the first waiting caller leads, writes what is
// queued, and hands the lead to the next queued caller.
//
// It serves the publishes (small ones; see publish.Service) and the push
// dispatcher's outcomes.
type GroupCommit[T any] struct {
	all      func(ctx context.Context, items []T) error
	one      func(ctx context.Context, item T) error
	maxGroup int

	mu      sync.Mutex
	leading bool
	queue   []*groupReq[T]
}

type groupReq[T any] struct {
	ctx  context.Context
	item T
	done chan error    // the outcome
	lead chan struct{} // this caller writes the next group
}

// NewGroupCommit returns a GroupCommit that writes up to maxGroup items
// with one call of all, and a lone item, or each item of a group that may
// have failed for one item's sake, with one. With all nil every item is
// written alone, by one, under its caller's context.
func NewGroupCommit[T any](maxGroup int, all func(context.Context, []T) error, one func(context.Context, T) error) *GroupCommit[T] {
	return &GroupCommit[T]{all: all, one: one, maxGroup: max(1, maxGroup)}
}

// groupTimeout bounds one write: every caller queued behind it waits.
const groupTimeout = 30 * time.Second

// Commit stores item, sharing a transaction with other callers' items.
func (g *GroupCommit[T]) Commit(ctx context.Context, item T) error {
	if g.all == nil {
		return g.one(ctx, item)
	}
	r := &groupReq[T]{ctx: ctx, item: item, done: make(chan error, 1), lead: make(chan struct{}, 1)}
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

// writeNext writes up to maxGroup queued items, then passes the lead to the
// first caller still queued, or gives it up. A panic in the write answers
// the group's callers with an error and still passes the lead, so that the
// callers queued behind it do not wait forever.
func (g *GroupCommit[T]) writeNext() {
	g.mu.Lock()
	n := min(len(g.queue), g.maxGroup)
	group := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	defer g.passLead()
	defer func() {
		if v := recover(); v != nil {
			for _, r := range group {
				select {
				case r.done <- fmt.Errorf("group commit: the write failed: %v", v):
				default: // already answered
				}
			}
			panic(v)
		}
	}()
	g.write(group)
}

func (g *GroupCommit[T]) passLead() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) > 0 {
		g.queue[0].lead <- struct{}{}
	} else {
		g.leading = false
	}
}

// write stores a group and answers each of its callers. The transaction
// runs under a context of its own, so that one caller going away does not
// abort the others' writes. If it fails for a reason that may be one item's
// own (a taken idempotency key, a foreign key, a conflict), each item is
// stored alone, so that only the bad one fails; if the database is
// unavailable or the write timed out, every caller gets that error at once
// rather than one after another.
func (g *GroupCommit[T]) write(group []*groupReq[T]) {
	if len(group) == 1 {
		r := group[0]
		r.done <- g.alone(r)
		return
	}
	items := make([]T, len(group))
	for i, r := range group {
		items[i] = r.item
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), groupTimeout)
	err := g.all(ctx, items)
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

// alone stores one caller's item in a transaction of its own.
func (g *GroupCommit[T]) alone(r *groupReq[T]) error {
	ctx, cancel := context.WithTimeout(r.ctx, groupTimeout)
	defer cancel()
	return g.one(ctx, r.item)
}
