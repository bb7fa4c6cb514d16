package push

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
)

// testJob makes a job of subscription sub whose message id names it.
func testJob(sub uuid.UUID, name string) *job {
	return &job{key: sub, d: &broker.Delivery{ID: name}}
}

// takeWithin returns the next job, failing the test if take blocks longer
// than within.
func takeWithin(t *testing.T, s *scheduler, within time.Duration) *job {
	t.Helper()
	got := make(chan *job, 1)
	go func() { got <- s.take() }()
	select {
	case j := <-got:
		return j
	case <-time.After(within):
		t.Fatalf("take blocked for %v", within)
		return nil
	}
}

// assertBlocks checks that take finds nothing ready: it waits for a job.
// The blocked take is released with a job of its own.
func assertBlocks(t *testing.T, s *scheduler) {
	t.Helper()
	got := make(chan *job, 1)
	go func() { got <- s.take() }()
	apitest.Eventually(t, "take to wait for a job", func() bool {
		select {
		case j := <-got:
			t.Fatalf("take returned %s; nothing should be ready", name(j))
		default:
		}
		return waitingInTake()
	})
	unblock := testJob(uuid.New(), "unblock")
	s.add(unblock)
	select {
	case j := <-got:
		if j != unblock {
			t.Fatalf("the blocked take returned %s, want unblock", name(j))
		}
		s.done(j)
	case <-time.After(5 * time.Second):
		t.Fatal("take still blocked after a job was added")
	}
}

// waitingInTake reports whether a goroutine that the calling goroutine
// started waits in scheduler.take for a job: the runtime's stacks show it
// once it does, where a pause could only show that take had not returned.
func waitingInTake() bool {
	self := make([]byte, 64)
	self = self[:runtime.Stack(self, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(self), "goroutine "), " ")
	all := make([]byte, 1<<20)
	all = all[:runtime.Stack(all, true)]
	for _, g := range strings.Split(string(all), "\n\n") {
		if strings.Contains(g, "sync.(*Cond).Wait") && strings.Contains(g, ".(*scheduler).take(") &&
			strings.Contains(g, " in goroutine "+id+"\n") {
			return true
		}
	}
	return false
}

func name(j *job) string {
	if j == nil {
		return "nil"
	}
	return j.d.ID
}

func TestSchedulerPerSubscriptionBound(t *testing.T) {
	t.Parallel()
	s := newScheduler(2, 10, 0, time.Now)
	a, b := uuid.New(), uuid.New()
	for i := range 4 {
		if !s.add(testJob(a, fmt.Sprintf("a%d", i))) {
			t.Fatalf("add a%d refused with room in the backlog", i)
		}
	}
	if got := s.pending(); got != 4 {
		t.Errorf("pending = %d, want 4", got)
	}
	for _, want := range []string{"a0", "a1"} {
		if j := takeWithin(t, s, time.Second); name(j) != want {
			t.Fatalf("took %s, want %s", name(j), want)
		}
	}
	// a has two running: a2 and a3 must wait, so another subscription's job
	// goes first, and then nothing is ready.
	s.add(testJob(b, "b0"))
	if j := takeWithin(t, s, time.Second); name(j) != "b0" {
		t.Fatalf("took %s, want b0 (a is at its bound)", name(j))
	}
	assertBlocks(t, s)
}

func TestSchedulerBacklogOverflow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		perSub, backlog int
	}{
		{1, 0},
		{1, 2},
		{3, 5},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("perSub=%d/backlog=%d", tt.perSub, tt.backlog), func(t *testing.T) {
			t.Parallel()
			s := newScheduler(tt.perSub, tt.backlog, 0, time.Now)
			a, b := uuid.New(), uuid.New()
			for i := range tt.perSub + tt.backlog {
				if !s.add(testJob(a, fmt.Sprintf("a%d", i))) {
					t.Fatalf("add #%d refused; %d running and %d waiting fit", i, tt.perSub, tt.backlog)
				}
			}
			if s.add(testJob(a, "overflow")) {
				t.Fatal("add accepted a job past the backlog")
			}
			if !s.add(testJob(b, "b0")) {
				t.Error("a full backlog of one subscription refused another's job")
			}
			if got, want := s.pending(), tt.perSub+tt.backlog+1; got != want {
				t.Errorf("pending = %d, want %d (the refused job is not counted)", got, want)
			}
			// Finishing one of a's jobs makes room for one more.
			j := takeWithin(t, s, time.Second)
			s.done(j)
			if !s.add(testJob(a, "after-done")) {
				t.Error("add refused after done freed a place")
			}
		})
	}
}

func TestSchedulerDonePromotesInOrder(t *testing.T) {
	t.Parallel()
	s := newScheduler(1, 10, 0, time.Now)
	a := uuid.New()
	for i := range 5 {
		s.add(testJob(a, fmt.Sprintf("a%d", i)))
	}
	for i := range 5 {
		j := takeWithin(t, s, time.Second)
		if want := fmt.Sprintf("a%d", i); name(j) != want {
			t.Fatalf("took %s, want %s", name(j), want)
		}
		if i < 4 {
			assertBlocks(t, s) // a0..a3 running: the next waits for done
		}
		s.done(j)
	}
	if got := s.pending(); got != 0 {
		t.Errorf("pending = %d after every job is done, want 0", got)
	}
	// The subscription's slot is free again: its next job is ready at once.
	s.add(testJob(a, "a5"))
	if j := takeWithin(t, s, time.Second); name(j) != "a5" {
		t.Fatalf("took %s, want a5", name(j))
	}
}

func TestSchedulerCloseDrains(t *testing.T) {
	t.Parallel()
	s := newScheduler(2, 10, 0, time.Now)
	a, b := uuid.New(), uuid.New()

	// A worker blocked in take is woken by close.
	woken := make(chan *job, 1)
	go func() { woken <- s.take() }()
	apitest.Eventually(t, "take to wait for a job", waitingInTake)
	s.close()
	select {
	case j := <-woken:
		if j != nil {
			t.Fatalf("blocked take returned %s after close, want nil", name(j))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("close did not wake a blocked take")
	}

	s2 := newScheduler(1, 10, 0, time.Now)
	s2.add(testJob(a, "a0"))
	s2.add(testJob(a, "a1")) // backlog
	s2.add(testJob(b, "b0"))
	s2.close()
	var got []string
	for j := s2.take(); j != nil; j = s2.take() {
		got = append(got, name(j))
		s2.done(j) // promotes a1 even after close
	}
	if want := "[a0 b0 a1]"; fmt.Sprint(got) != want {
		t.Errorf("after close took %v, want %s", got, want)
	}
	if j := takeWithin(t, s2, time.Second); j != nil {
		t.Errorf("take on a closed, drained scheduler returned %s", name(j))
	}
	if s2.pending() != 0 {
		t.Errorf("pending = %d, want 0", s2.pending())
	}
}

// TestSchedulerConcurrent: under concurrent add, take and done, every job
// accepted is taken exactly once and no subscription ever has more than its
// bound running. Run with -race.
func TestSchedulerConcurrent(t *testing.T) {
	t.Parallel()
	const (
		perSub    = 3
		backlog   = 8
		subs      = 7
		producers = 8
		perProd   = 500
		workers   = 16
	)
	s := newScheduler(perSub, backlog, 0, time.Now)
	keys := make([]uuid.UUID, subs)
	running := make(map[uuid.UUID]*atomic.Int32, subs)
	for i := range keys {
		keys[i] = uuid.New()
		running[keys[i]] = &atomic.Int32{}
	}

	var (
		mu       sync.Mutex
		accepted = map[*job]bool{}
		taken    = map[*job]int{}
		over     atomic.Int32
	)
	var workersWG sync.WaitGroup
	for range workers {
		workersWG.Go(func() {
			for j := s.take(); j != nil; j = s.take() {
				if n := running[j.key].Add(1); n > perSub {
					over.Add(1)
				}
				mu.Lock()
				taken[j]++
				n := len(taken)
				mu.Unlock()
				if n%7 == 0 {
					time.Sleep(50 * time.Microsecond) // a job that takes a little work, to vary the interleaving
				}
				running[j.key].Add(-1)
				s.done(j)
			}
		})
	}
	var producersWG sync.WaitGroup
	for p := range producers {
		producersWG.Go(func() {
			for i := range perProd {
				j := testJob(keys[(p+i)%subs], fmt.Sprintf("p%d-%d", p, i))
				for !s.add(j) {
					// Backlog full: the dispatcher would defer the message;
					// here the producer offers it again a little later.
					time.Sleep(20 * time.Microsecond)
				}
				mu.Lock()
				accepted[j] = true
				mu.Unlock()
			}
		})
	}
	producersWG.Wait()

	apitest.EventuallyWithin(t, 20*time.Second, "every job accepted to be finished", func() bool { return s.pending() == 0 })
	s.close()
	stopped := make(chan struct{})
	go func() { workersWG.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("workers did not return after close")
	}

	if n := over.Load(); n > 0 {
		t.Errorf("a subscription had more than %d jobs running %d times", perSub, n)
	}
	if len(accepted) != producers*perProd {
		t.Fatalf("accepted %d jobs, want %d", len(accepted), producers*perProd)
	}
	for j := range accepted {
		if taken[j] != 1 {
			t.Errorf("job %s taken %d times, want once", name(j), taken[j])
		}
	}
	if len(taken) != len(accepted) {
		t.Errorf("took %d distinct jobs, accepted %d", len(taken), len(accepted))
	}
}

// TestSchedulerDefersOnlySlowSubscriptions: a full backlog is refused only
// while a request of its subscription has been running for slowAfter.
func TestSchedulerDefersOnlySlowSubscriptions(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	s := newScheduler(1, 1, time.Second, clock)
	key := uuid.New()
	running := &job{key: key}
	if !s.add(running) || !s.add(&job{key: key}) {
		t.Fatal("first job and first backlog slot refused")
	}
	if got := s.take(); got != running {
		t.Fatalf("took %v", got)
	}
	// Backlog full, but its request started just now: busy, not slow.
	if !s.add(&job{key: key}) {
		t.Fatal("a busy subscription's message was refused")
	}
	now = now.Add(2 * time.Second) // the request hangs
	if s.add(&job{key: key}) {
		t.Fatal("a hanging subscription's full backlog took another message")
	}
	if other := (&job{key: uuid.New()}); !s.add(other) {
		t.Fatal("another subscription was refused")
	}
	s.done(running) // the next backlog job becomes ready; nothing runs for key
	if !s.add(&job{key: key}) {
		t.Fatal("refused once no request of the subscription was hanging")
	}
}

// TestSchedulerShedsSlowBacklogs: a backlog that grew past its limit while
// its subscription was busy is cut back to the limit (newest out) once a
// request of it hangs; a busy subscription's and other backlogs are kept.
func TestSchedulerShedsSlowBacklogs(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	s := newScheduler(1, 2, time.Second, clock)
	slowKey, busyKey := uuid.New(), uuid.New()
	var slowJobs []*job
	for range 6 {
		j := &job{key: slowKey}
		slowJobs = append(slowJobs, j)
		if !s.add(j) {
			t.Fatal("a busy subscription's message was refused")
		}
	}
	if got := s.take(); got != slowJobs[0] {
		t.Fatalf("took %v", got)
	}
	if shed := s.shed(); len(shed) != 0 {
		t.Fatalf("shed %d jobs of a subscription that is busy, not slow", len(shed))
	}
	now = now.Add(2 * time.Second) // slowKey's request hangs
	for range 4 {
		if !s.add(&job{key: busyKey}) {
			t.Fatal("a busy subscription's message was refused")
		}
	}
	busy := s.take() // started now: busy, not slow
	if busy.key != busyKey {
		t.Fatalf("took %v", busy)
	}
	shed := s.shed()
	if len(shed) != 3 || shed[0] != slowJobs[3] || shed[1] != slowJobs[4] || shed[2] != slowJobs[5] {
		t.Fatalf("shed %d jobs; want the 3 newest of the slow subscription's backlog of 5", len(shed))
	}
	if n := s.pending(); n != 1+2+4 {
		t.Errorf("%d jobs pending after shedding, want 7 (1 running + 2 kept, busy's 4)", n)
	}
	if again := s.shed(); len(again) != 0 {
		t.Errorf("shed %d more from a backlog at its limit", len(again))
	}
	// The kept ones run in order once the hanging request ends.
	s.done(slowJobs[0])
	if got := s.take(); got != slowJobs[1] {
		t.Errorf("after the hang took %v, want the oldest kept job", got)
	}
}

// TestSchedulerDoneTwice: done is called once the request is over and again
// by the worker; the second call must not free another slot.
func TestSchedulerDoneTwice(t *testing.T) {
	s := newScheduler(1, 10, 0, time.Now)
	key := uuid.New()
	a, b, c := &job{key: key}, &job{key: key}, &job{key: key}
	for _, j := range []*job{a, b, c} {
		if !s.add(j) {
			t.Fatal("add refused")
		}
	}
	if s.take() != a {
		t.Fatal("first take is not a")
	}
	s.done(a) // promotes b
	s.done(a) // must not promote c as well
	if got := s.take(); got != b {
		t.Fatal("second take is not b")
	}
	s.mu.Lock()
	ready := len(s.ready)
	s.mu.Unlock()
	if ready != 0 {
		t.Fatalf("%d jobs ready with 1 slot and b running, want 0", ready)
	}
}

// TestSchedulerStuckFor: a subscription's hang is measured from the start of
// its first request that took slowAfter or more, keeps growing while its
// requests time out one after another (however long each takes), and ends
// with a request that ends otherwise, or once a hanging request starts more
// than staleHang after the hang was last seen going on (a deferral handed
// out for it counts until the copy comes back).
func TestSchedulerStuckFor(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	s := newScheduler(1, 10, time.Second, clock)
	key, other := uuid.New(), uuid.New()
	jobs := func(n int) []*job {
		out := make([]*job, n)
		for i := range out {
			out[i] = &job{key: key}
			s.add(out[i])
		}
		return out
	}
	take := func(want *job) {
		t.Helper()
		if got := s.take(); got != want {
			t.Fatalf("took %v, want %v", got, want)
		}
	}
	stuck := func(key uuid.UUID, want time.Duration, why string) {
		t.Helper()
		if d := s.stuckFor(key); d != want {
			t.Fatalf("stuck for %s, want %s: %s", d, want, why)
		}
	}
	js := jobs(3)
	a, b, c := js[0], js[1], js[2]
	take(a)
	now = now.Add(500 * time.Millisecond)
	stuck(key, 0, "its request has run 500 ms of the 1 s that make it slow")
	now = now.Add(time.Second)
	stuck(key, 1500*time.Millisecond, "since a started")
	stuck(other, 0, "another subscription")
	now = now.Add(3 * time.Second) // a times out after 4.5 s; b starts
	s.done(a)
	s.requestEnded(key, 4500*time.Millisecond, true)
	take(b)
	stuck(key, 4500*time.Millisecond, "a timed out and b started: the hang goes on")
	now = now.Add(5 * time.Second) // b hangs too
	stuck(key, 9500*time.Millisecond, "b hangs")
	s.done(b)
	take(c)
	now = now.Add(100 * time.Millisecond) // c is answered, or fails, quickly
	s.done(c)
	stuck(key, 9600*time.Millisecond, "done alone (no request may have been made) ends nothing")
	s.requestEnded(key, 100*time.Millisecond, false)
	stuck(key, 0, "a request ended without hanging")

	// A slow answer ends a hang too: the endpoint is slow, not hanging.
	js = jobs(2)
	take(js[0])
	now = now.Add(2 * time.Second)
	stuck(key, 2*time.Second, "since the request started")
	s.done(js[0])
	s.requestEnded(key, 2*time.Second, false)
	take(js[1])
	stuck(key, 0, "the last request was answered (slowly)")

	// A hang not seen going on for staleHang is over: the traffic stopped.
	now = now.Add(2 * time.Second) // js[1] hangs
	stuck(key, 2*time.Second, "js[1] hangs")
	s.done(js[1])
	s.requestEnded(key, 2*time.Second, true)
	now = now.Add(staleHang + time.Second)
	stuck(key, 0, "nothing seen hanging for more than staleHang")
	e := jobs(1)[0]
	take(e)
	now = now.Add(time.Second)
	stuck(key, time.Second, "the earlier hang is over; e has hung 1 s")

	// Requests that each hang longer than staleHang, one after another,
	// make one hang.
	s.done(e)
	s.requestEnded(key, time.Second, true)
	for range 3 {
		j := jobs(1)[0]
		take(j)
		now = now.Add(time.Minute)
		s.done(j)
		s.requestEnded(key, time.Minute, true)
	}
	stuck(key, 3*time.Minute+time.Second, "three requests timed out after a minute each, after e")

	// A deferral for the hang keeps it going on until the copy comes back,
	// with nothing else seen meanwhile.
	s.deferredFor(key, 2*time.Minute)
	now = now.Add(90 * time.Second)
	f := jobs(1)[0]
	take(f)
	now = now.Add(time.Second)
	stuck(key, 3*time.Minute+time.Second+91*time.Second, "a copy deferred for 2 min came back 90 s later and hangs")

	// A hang noticed only when its request ends (nothing asked while it
	// ran) counts from that request's start.
	s.requestEnded(other, 3*time.Second, true)
	stuck(other, 3*time.Second, "its first request timed out after 3 s")
}
