package push

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/roomhub/messaging-api/delivery"
)

// batchLog records transactions; a settlement whose SendID is bad fails.
type batchLog struct {
	Log
	mu     sync.Mutex
	txs    []int // size of each transaction
	stored map[uuid.UUID]int
	bad    uuid.UUID
}

var errBad = errors.New("bad settlement")

func (l *batchLog) Settle(_ context.Context, s delivery.Settlement) error {
	return l.SettleAll(context.Background(), []delivery.Settlement{s})
}

func (l *batchLog) SettleAll(_ context.Context, ss []delivery.Settlement) error {
	time.Sleep(2 * time.Millisecond) // an fsync
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range ss {
		if s.SendID == l.bad {
			return errBad
		}
	}
	l.txs = append(l.txs, len(ss))
	for _, s := range ss {
		l.stored[s.SendID]++
	}
	return nil
}

func TestCommitterGroupsOutcomes(t *testing.T) {
	t.Parallel()
	log := &batchLog{stored: map[uuid.UUID]int{}, bad: uuid.New()}
	c := newCommitter(log)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { c.run(stop); close(done) }()

	const workers, each = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each+1)
	for range workers {
		wg.Go(func() {
			for range each {
				errs <- c.settle(context.Background(), delivery.Settlement{SendID: uuid.New()})
			}
		})
	}
	wg.Go(func() { errs <- c.settle(context.Background(), delivery.Settlement{SendID: log.bad}) })
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if !errors.Is(err, errBad) {
				t.Errorf("unexpected error %v", err)
			}
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d settlements failed, want only the bad one", failed)
	}
	log.mu.Lock()
	if len(log.stored) != workers*each {
		t.Errorf("%d outcomes stored, want %d", len(log.stored), workers*each)
	}
	for id, n := range log.stored {
		if n != 1 {
			t.Errorf("outcome %s stored %d times", id, n)
		}
	}
	if len(log.txs) > workers*each/4 {
		t.Errorf("%d transactions for %d outcomes from %d workers: not grouped", len(log.txs), workers*each, workers)
	}
	log.mu.Unlock()

	close(stop)
	<-done
	// After the committer stops, settle still stores (one by one).
	if err := c.settle(context.Background(), delivery.Settlement{SendID: uuid.New()}); err != nil {
		t.Errorf("settle after stop: %v", err)
	}
}
