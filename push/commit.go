package push

import (
	"context"
	"time"

	"github.com/roomhub/messaging-api/delivery"
)

// BatchLog is a Log that can store many outcomes in one transaction (one
// fsync instead of one per message).
type BatchLog interface {
	SettleAll(ctx context.Context, ss []delivery.Settlement) error
}

// maxCommitBatch bounds the outcomes one transaction stores.
const maxCommitBatch = 128

// committer group-commits outcomes: a worker hands its settlement over and
// waits; whatever arrived while the previous transaction was being written
// goes into the next one. Nothing waits on a timer, so a lone outcome is
// stored at once, and under load transactions grow by themselves.
type committer struct {
	log   Log
	batch BatchLog // nil: one Settle per outcome
	reqs  chan commitReq
	done  chan struct{}
}

type commitReq struct {
	s   delivery.Settlement
	err chan error
}

func newCommitter(log Log) *committer {
	c := &committer{log: log, reqs: make(chan commitReq), done: make(chan struct{})}
	c.batch, _ = log.(BatchLog)
	return c
}

// settle stores s, sharing a transaction with other workers' outcomes.
func (c *committer) settle(ctx context.Context, s delivery.Settlement) error {
	if c.batch == nil {
		return c.log.Settle(ctx, s)
	}
	r := commitReq{s: s, err: make(chan error, 1)}
	select {
	case c.reqs <- r:
	case <-c.done:
		return c.log.Settle(ctx, s)
	}
	return <-r.err
}

// run serves settle until stop; outcomes are written with a context of
// their own, so a shutdown does not abort a transaction workers wait on.
func (c *committer) run(stop <-chan struct{}) {
	defer close(c.done)
	for {
		var first commitReq
		select {
		case <-stop:
			return
		case first = <-c.reqs:
		}
		batch := []commitReq{first}
	more:
		for len(batch) < maxCommitBatch {
			select {
			case r := <-c.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c.write(ctx, batch)
		cancel()
	}
}

func (c *committer) write(ctx context.Context, batch []commitReq) {
	if len(batch) == 1 {
		batch[0].err <- c.log.Settle(ctx, batch[0].s)
		return
	}
	ss := make([]delivery.Settlement, len(batch))
	for i, r := range batch {
		ss[i] = r.s
	}
	err := c.batch.SettleAll(ctx, ss)
	if err == nil {
		for _, r := range batch {
			r.err <- nil
		}
		return
	}
	// One bad outcome must not fail the others: store them one by one.
	for _, r := range batch {
		r.err <- c.log.Settle(ctx, r.s)
	}
}
