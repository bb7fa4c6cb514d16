package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/message"
)

// groupStore records how publishes were grouped; PublishAll can be held
// (gate) so that requests queue behind it, and fails when told to.
type groupStore struct {
	mu      sync.Mutex
	allErr  error     // PublishAll fails with it
	panics  bool      // PublishAll panics
	onWrite func()    // PublishAll calls it first
	groups  [][]Batch // PublishAll calls, in order
	singles []Batch
	gate    chan struct{} // nil: PublishAll and single never wait
	failAll bool
	bad     uuid.UUID // single fails for the batch whose event has this id
}

func (s *groupStore) PublishAll(ctx context.Context, bs []Batch) error {
	if s.onWrite != nil {
		s.onWrite()
	}
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups = append(s.groups, append([]Batch(nil), bs...))
	if s.panics {
		panic("store exploded")
	}
	if s.allErr != nil {
		return s.allErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.failAll {
		return ErrDuplicateKey
	}
	return nil
}

func (s *groupStore) single(ctx context.Context, b Batch) error {
	if s.gate != nil {
		<-s.gate
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.singles = append(s.singles, b)
	if b.Events[0].ID == s.bad {
		return ErrDuplicateKey
	}
	return nil
}

func batchOf() Batch {
	id := uuid.New()
	return Batch{Events: []message.Event{{ID: id}}, Sends: []message.Send{{ID: uuid.New(), EventID: id}}}
}

// TestGroupCommitGroups: a lone publish is stored alone at once; publishes
// that arrive while a transaction is written go into the next one,
// together; each is answered and stored exactly once.
func TestGroupCommitGroups(t *testing.T) {
	t.Parallel()
	st := &groupStore{gate: make(chan struct{})}
	g := &groupCommit{store: st, single: st.single}
	ctx := context.Background()

	first := make(chan error, 1)
	go func() { first <- g.publish(ctx, batchOf()) }()
	// The first request leads and is stuck in its write; queue 10 more.
	apitest.Eventually(t, "the first write", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.leading && len(g.queue) == 0 })
	const n = 10
	errs := make(chan error, n)
	for range n {
		go func() { errs <- g.publish(ctx, batchOf()) }()
	}
	apitest.Eventually(t, "10 queued", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == n })
	close(st.gate) // let every write through
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.singles) != 1 || len(st.groups) != 1 || len(st.groups[0]) != n {
		t.Fatalf("stored %d alone and groups of %v; want the first alone, then one group of %d", len(st.singles), groupSizes(st.groups), n)
	}
	seen := map[uuid.UUID]bool{st.singles[0].Events[0].ID: true}
	for _, b := range st.groups[0] {
		if seen[b.Events[0].ID] {
			t.Errorf("event %s stored twice", b.Events[0].ID)
		}
		seen[b.Events[0].ID] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leading || len(g.queue) != 0 {
		t.Errorf("after the last write: leading %v, %d queued; want the lead given up", g.leading, len(g.queue))
	}
}

// TestGroupCommitFallsBack: when a group's transaction fails, each publish
// is stored alone, so only the bad one fails.
func TestGroupCommitFallsBack(t *testing.T) {
	t.Parallel()
	bad := batchOf()
	st := &groupStore{failAll: true, bad: bad.Events[0].ID}
	g := &groupCommit{store: st, single: st.single}
	good := batchOf()
	r1 := &groupReq{ctx: context.Background(), batch: good, done: make(chan error, 1)}
	r2 := &groupReq{ctx: context.Background(), batch: bad, done: make(chan error, 1)}
	g.write([]*groupReq{r1, r2})
	if err := <-r1.done; err != nil {
		t.Errorf("the good publish: %v, want stored", err)
	}
	if err := <-r2.done; !errors.Is(err, ErrDuplicateKey) {
		t.Errorf("the bad publish: %v, want its own ErrDuplicateKey", err)
	}
	if len(st.groups) != 1 || len(st.singles) != 2 {
		t.Errorf("%d group writes and %d single writes, want 1 and 2", len(st.groups), len(st.singles))
	}
}

// TestGroupCommitMany: many concurrent publishes all come back, each stored
// once, with no request left waiting (run with -race).
func TestGroupCommitMany(t *testing.T) {
	t.Parallel()
	st := &groupStore{}
	g := &groupCommit{store: st, single: func(ctx context.Context, b Batch) error {
		time.Sleep(50 * time.Microsecond)
		return st.single(ctx, b)
	}}
	const n = 500
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := g.publish(context.Background(), batchOf()); err != nil {
				t.Error(err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("publishes still waiting: a lead was lost")
	}
	total := len(st.singles)
	for _, gr := range st.groups {
		total += len(gr)
		if len(gr) > groupMaxCalls {
			t.Errorf("a group of %d, more than groupMaxCalls %d", len(gr), groupMaxCalls)
		}
	}
	if total != n {
		t.Errorf("%d publishes stored, want %d", total, n)
	}
}

func groupSizes(gs [][]Batch) []int {
	out := make([]int, len(gs))
	for i, g := range gs {
		out[i] = len(g)
	}
	return out
}

// TestGroupCommitClientGone: a client that went away (its request's context
// cancelled) does not abort the group it leads: every publish in it is
// stored in the one transaction.
func TestGroupCommitClientGone(t *testing.T) {
	t.Parallel()
	st := &groupStore{}
	g := &groupCommit{store: st, single: st.single}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	r1 := &groupReq{ctx: gone, batch: batchOf(), done: make(chan error, 1)}
	r2 := &groupReq{ctx: context.Background(), batch: batchOf(), done: make(chan error, 1)}
	g.write([]*groupReq{r1, r2})
	if err1, err2 := <-r1.done, <-r2.done; err1 != nil || err2 != nil {
		t.Errorf("errors %v, %v; want both stored", err1, err2)
	}
	if len(st.groups) != 1 || len(st.singles) != 0 {
		t.Errorf("%d group writes and %d single writes, want 1 and 0", len(st.groups), len(st.singles))
	}
}

// TestGroupCommitUnavailable: when the database is down every request of
// the group gets that error at once; none is retried alone.
func TestGroupCommitUnavailable(t *testing.T) {
	t.Parallel()
	down := fmt.Errorf("database: connection refused: %w", api.ErrUnavailable)
	st := &groupStore{allErr: down}
	g := &groupCommit{store: st, single: st.single}
	group := []*groupReq{
		{ctx: context.Background(), batch: batchOf(), done: make(chan error, 1)},
		{ctx: context.Background(), batch: batchOf(), done: make(chan error, 1)},
	}
	g.write(group)
	for i, r := range group {
		if err := <-r.done; !errors.Is(err, api.ErrUnavailable) {
			t.Errorf("request %d: %v, want ErrUnavailable", i, err)
		}
	}
	if len(st.singles) != 0 {
		t.Errorf("%d single writes after an outage, want 0", len(st.singles))
	}
}

// TestGroupCommitPanic: a store that panics answers its group with an
// error, passes the lead on (the publish queued behind it is stored) and
// the panic still reaches the caller.
func TestGroupCommitPanic(t *testing.T) {
	t.Parallel()
	st := &groupStore{panics: true}
	g := &groupCommit{store: st, single: st.single}
	mk := func() *groupReq {
		return &groupReq{ctx: context.Background(), batch: batchOf(), done: make(chan error, 1), lead: make(chan struct{}, 1)}
	}
	r1, r2, next := mk(), mk(), mk()
	g.queue, g.leading = []*groupReq{r1, r2}, true
	st.onWrite = func() { // a publish arrives while the group is written
		g.mu.Lock()
		g.queue = append(g.queue, next)
		g.mu.Unlock()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the store's panic was swallowed")
			}
		}()
		g.writeNext()
	}()
	for i, r := range []*groupReq{r1, r2} {
		select {
		case err := <-r.done:
			if err == nil {
				t.Errorf("request %d answered nil after a panic", i)
			}
		default:
			t.Errorf("request %d never answered", i)
		}
	}
	select {
	case <-next.lead:
	default:
		t.Error("the lead was not passed to the request queued behind")
	}
}
