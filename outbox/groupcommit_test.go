package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/api/apitest"
)

// errTaken is a write's own failure, as a taken idempotency key is.
var errTaken = errors.New("taken")

// groupStore records how writes were grouped; a group's write can be held
// (gate) so that callers queue behind it, and fails when told to.
type groupStore struct {
	mu      sync.Mutex
	allErr  error         // all fails with it
	panics  bool          // all panics
	onWrite func()        // all calls it first
	groups  [][]uuid.UUID // all calls, in order
	singles []uuid.UUID
	gate    chan struct{} // nil: all and one never wait
	bad     uuid.UUID     // a write of this item fails, alone or in a group
}

func (s *groupStore) all(ctx context.Context, items []uuid.UUID) error {
	if s.onWrite != nil {
		s.onWrite()
	}
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups = append(s.groups, append([]uuid.UUID(nil), items...))
	if s.panics {
		panic("store exploded")
	}
	if s.allErr != nil {
		return s.allErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, it := range items {
		if it == s.bad {
			return errTaken
		}
	}
	return nil
}

func (s *groupStore) one(ctx context.Context, item uuid.UUID) error {
	if s.gate != nil {
		<-s.gate
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.singles = append(s.singles, item)
	if item == s.bad {
		return errTaken
	}
	return nil
}

func (s *groupStore) group(maxGroup int) *GroupCommit[uuid.UUID] {
	return NewGroupCommit(maxGroup, s.all, s.one)
}

func req(ctx context.Context, item uuid.UUID) *groupReq[uuid.UUID] {
	return &groupReq[uuid.UUID]{ctx: ctx, item: item, done: make(chan error, 1), lead: make(chan struct{}, 1)}
}

// TestGroupCommitGroups: a lone write is stored alone at once; writes that
// arrive while a transaction is written go into the next one, together;
// each is answered and stored exactly once.
func TestGroupCommitGroups(t *testing.T) {
	t.Parallel()
	st := &groupStore{gate: make(chan struct{})}
	g := st.group(64)
	ctx := context.Background()

	first := make(chan error, 1)
	go func() { first <- g.Commit(ctx, uuid.New()) }()
	// The first caller leads and is stuck in its write; queue 10 more.
	apitest.Eventually(t, "the first write", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.leading && len(g.queue) == 0 })
	const n = 10
	errs := make(chan error, n)
	for range n {
		go func() { errs <- g.Commit(ctx, uuid.New()) }()
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
	seen := map[uuid.UUID]bool{st.singles[0]: true}
	for _, id := range st.groups[0] {
		if seen[id] {
			t.Errorf("item %s stored twice", id)
		}
		seen[id] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leading || len(g.queue) != 0 {
		t.Errorf("after the last write: leading %v, %d queued; want the lead given up", g.leading, len(g.queue))
	}
}

// TestGroupCommitFallsBack: when a group's transaction fails, each item is
// stored alone, so only the bad one fails.
func TestGroupCommitFallsBack(t *testing.T) {
	t.Parallel()
	bad := uuid.New()
	st := &groupStore{bad: bad}
	g := st.group(64)
	r1, r2 := req(context.Background(), uuid.New()), req(context.Background(), bad)
	g.write([]*groupReq[uuid.UUID]{r1, r2})
	if err := <-r1.done; err != nil {
		t.Errorf("the good item: %v, want stored", err)
	}
	if err := <-r2.done; !errors.Is(err, errTaken) {
		t.Errorf("the bad item: %v, want its own error", err)
	}
	if len(st.groups) != 1 || len(st.singles) != 2 {
		t.Errorf("%d group writes and %d single writes, want 1 and 2", len(st.groups), len(st.singles))
	}
}

// TestGroupCommitMany: many concurrent writes all come back, each stored
// once, in groups of at most maxGroup, with no caller left waiting; a bad
// one among them fails alone (run with -race).
func TestGroupCommitMany(t *testing.T) {
	t.Parallel()
	st := &groupStore{bad: uuid.New()}
	const maxGroup = 16
	g := st.group(maxGroup)
	const n = 500
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := g.Commit(context.Background(), uuid.New()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Go(func() {
		if err := g.Commit(context.Background(), st.bad); !errors.Is(err, errTaken) {
			t.Errorf("the bad item: %v, want its own error", err)
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(apitest.EventuallyTimeout):
		t.Fatal("writes still waiting: a lead was lost")
	}
	// A group that held the bad item failed and its items were stored alone.
	stored := map[uuid.UUID]int{}
	for _, id := range st.singles {
		stored[id]++
	}
	for _, gr := range st.groups {
		if len(gr) > maxGroup {
			t.Errorf("a group of %d, more than maxGroup %d", len(gr), maxGroup)
		}
		if !slices.Contains(gr, st.bad) {
			for _, id := range gr {
				stored[id]++
			}
		}
	}
	delete(stored, st.bad)
	if len(stored) != n {
		t.Errorf("%d items stored, want %d", len(stored), n)
	}
	for id, k := range stored {
		if k != 1 {
			t.Errorf("item %s stored %d times", id, k)
		}
	}
}

func groupSizes(gs [][]uuid.UUID) []int {
	out := make([]int, len(gs))
	for i, g := range gs {
		out[i] = len(g)
	}
	return out
}

// TestGroupCommitCallerGone: a caller that went away (its context
// cancelled) does not abort the group it leads: every item in it is stored
// in the one transaction.
func TestGroupCommitCallerGone(t *testing.T) {
	t.Parallel()
	st := &groupStore{}
	g := st.group(64)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	r1, r2 := req(gone, uuid.New()), req(context.Background(), uuid.New())
	g.write([]*groupReq[uuid.UUID]{r1, r2})
	if err1, err2 := <-r1.done, <-r2.done; err1 != nil || err2 != nil {
		t.Errorf("errors %v, %v; want both stored", err1, err2)
	}
	if len(st.groups) != 1 || len(st.singles) != 0 {
		t.Errorf("%d group writes and %d single writes, want 1 and 0", len(st.groups), len(st.singles))
	}
}

// TestGroupCommitUnavailable: when the database is down every caller of the
// group gets that error at once; none is retried alone.
func TestGroupCommitUnavailable(t *testing.T) {
	t.Parallel()
	down := fmt.Errorf("database: connection refused: %w", api.ErrUnavailable)
	st := &groupStore{allErr: down}
	g := st.group(64)
	group := []*groupReq[uuid.UUID]{req(context.Background(), uuid.New()), req(context.Background(), uuid.New())}
	g.write(group)
	for i, r := range group {
		if err := <-r.done; !errors.Is(err, api.ErrUnavailable) {
			t.Errorf("caller %d: %v, want ErrUnavailable", i, err)
		}
	}
	if len(st.singles) != 0 {
		t.Errorf("%d single writes after an outage, want 0", len(st.singles))
	}
}

// TestGroupCommitPanic: a write that panics answers its group with an
// error, passes the lead on (the caller queued behind it is served) and the
// panic still reaches the caller.
func TestGroupCommitPanic(t *testing.T) {
	t.Parallel()
	st := &groupStore{panics: true}
	g := st.group(64)
	r1, r2, next := req(context.Background(), uuid.New()), req(context.Background(), uuid.New()), req(context.Background(), uuid.New())
	g.queue, g.leading = []*groupReq[uuid.UUID]{r1, r2}, true
	st.onWrite = func() { // a write arrives while the group is written
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
	for i, r := range []*groupReq[uuid.UUID]{r1, r2} {
		select {
		case err := <-r.done:
			if err == nil {
				t.Errorf("caller %d answered nil after a panic", i)
			}
		default:
			t.Errorf("caller %d never answered", i)
		}
	}
	select {
	case <-next.lead:
	default:
		t.Error("the lead was not passed to the caller queued behind")
	}
}

// TestGroupCommitWithoutGroups: without a group write every item is
// written alone, under its caller's context.
func TestGroupCommitWithoutGroups(t *testing.T) {
	t.Parallel()
	st := &groupStore{}
	g := NewGroupCommit(64, nil, st.one)
	if err := g.Commit(context.Background(), uuid.New()); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Commit(gone, uuid.New()); !errors.Is(err, context.Canceled) {
		t.Errorf("a write of a caller gone: %v, want its context's error", err)
	}
	if len(st.singles) != 1 || len(st.groups) != 0 {
		t.Errorf("%d single writes and %d groups, want 1 and 0", len(st.singles), len(st.groups))
	}
}
