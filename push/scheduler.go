package push

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// scheduler hands jobs to workers so that no subscription has more than
// perSub jobs running or ready at once; the rest wait in its backlog. A
// backlog past maxBacklog is refused only while the subscription is slow (a
// request of it has been running for slowAfter or more): a busy but quick
// endpoint keeps its messages, a hanging one gives them back for deferral,
// so it cannot take the whole prefetch window from the others.
type scheduler struct {
	mu      sync.Mutex
	cond    *sync.Cond
	ready   []*job
	backlog map[uuid.UUID][]*job
	active  map[uuid.UUID]int
	running map[uuid.UUID]map[*job]time.Time // jobs taken by a worker, with when
	// hangs holds each hanging subscription's hang (see stuckFor).
	hangs      map[uuid.UUID]hang
	perSub     int
	maxBacklog int
	slowAfter  time.Duration
	now        func() time.Time
	closed     bool
	// sleeping counts jobs waiting for their turn under a delivery rate
	// limit (see sleep).
	sleeping int
}

func newScheduler(perSub, maxBacklog int, slowAfter time.Duration, now func() time.Time) *scheduler {
	s := &scheduler{
		backlog: map[uuid.UUID][]*job{}, active: map[uuid.UUID]int{}, running: map[uuid.UUID]map[*job]time.Time{},
		hangs:  map[uuid.UUID]hang{},
		perSub: max(1, perSub), maxBacklog: maxBacklog, slowAfter: slowAfter, now: now,
	}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// add queues j; false means its subscription is stuck with a full backlog
// and the caller must defer the message elsewhere.
func (s *scheduler) add(j *job) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[j.key] < s.perSub {
		s.active[j.key]++
		s.ready = append(s.ready, j)
		s.cond.Signal()
		return true
	}
	if len(s.backlog[j.key]) >= s.maxBacklog && s.slow(j.key) {
		return false
	}
	s.backlog[j.key] = append(s.backlog[j.key], j)
	return true
}

// shed takes the newest jobs beyond maxBacklog out of the backlog of every
// slow subscription, for the caller to defer. A backlog grows without bound
// while its subscription is merely busy; once a request of it hangs, the
// messages held for it would keep their prefetch slots for as long as it
// hangs, and the broker would have nothing left to send for the others (a
// hanging endpoint beside a fast one held 112 of 128 slots and cut the fast
// one to 67 deliveries/s).
func (s *scheduler) shed() []*job {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*job
	for key, q := range s.backlog {
		if len(q) <= s.maxBacklog || !s.slow(key) {
			continue
		}
		out = append(out, q[s.maxBacklog:]...)
		clear(q[s.maxBacklog:])
		if s.maxBacklog == 0 {
			delete(s.backlog, key)
		} else {
			s.backlog[key] = q[:s.maxBacklog]
		}
	}
	return out
}

// take blocks for the next ready job; nil when closed and drained.
func (s *scheduler) take() *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.ready) == 0 && (!s.closed || s.sleeping > 0) {
		s.cond.Wait()
	}
	if len(s.ready) == 0 {
		return nil
	}
	j := s.ready[0]
	s.ready[0] = nil
	s.ready = s.ready[1:]
	if s.running[j.key] == nil {
		s.running[j.key] = map[*job]time.Time{}
	}
	s.running[j.key][j] = s.now()
	return j
}

// quick reports whether no running job of key started slowAfter ago or
// more (always false with slowAfter 0).
func (s *scheduler) quick(key uuid.UUID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.slow(key)
}

// hang is what the scheduler knows of a subscription's endpoint hanging:
// since when (the start of the first request of it that took slowAfter or
// more) and until when it was seen going on (a request running that long,
// one ending after that long without an answer, or the end of a deferral
// handed out for it: see deferredUntil).
type hang struct{ since, seen time.Time }

// staleHang is how long a hang is remembered when nothing shows it going
// on: a subscription whose hanging request starts more than this after the
// hang was last seen is measured afresh.
const staleHang = 30 * time.Second

// slow reports whether a running job of key started slowAfter ago or more;
// with slowAfter 0 every subscription counts as slow (a full backlog alone
// defers). It records the hang (see stuckFor). Called with mu held.
func (s *scheduler) slow(key uuid.UUID) bool {
	if s.slowAfter <= 0 {
		return true
	}
	now := s.now()
	var oldest time.Time
	for _, started := range s.running[key] {
		if now.Sub(started) >= s.slowAfter && (oldest.IsZero() || started.Before(oldest)) {
			oldest = started
		}
	}
	if oldest.IsZero() {
		// Nothing hangs now; a hang not seen for staleHang is over.
		if h, ok := s.hangs[key]; ok && now.Sub(h.seen) > staleHang {
			delete(s.hangs, key)
		}
		return false
	}
	s.extend(key, oldest, now)
	return true
}

// extend records that a request of key that started at started was seen
// hanging at now: it goes on with key's hang unless it started more than
// staleHang after that was last seen. Called with mu held.
func (s *scheduler) extend(key uuid.UUID, started, now time.Time) {
	h, ok := s.hangs[key]
	if !ok || started.Sub(h.seen) > staleHang {
		if !ok {
			s.forgetHangs(now)
		}
		h = hang{since: started}
	}
	h.since = minTime(h.since, started)
	if now.After(h.seen) {
		h.seen = now
	}
	s.hangs[key] = h
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// stuckFor is how long key's endpoint has been hanging: since the start of
// the first request of it that took slowAfter or more, as long as no
// request of it has ended quickly or been answered since (requestEnded)
// and each hanging request started within staleHang of the hang last being
// seen (0 if none is known). Requests that time out one after another keep
// it growing.
func (s *scheduler) stuckFor(key uuid.UUID) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slow(key)
	h, ok := s.hangs[key]
	if !ok {
		return 0
	}
	return max(0, s.now().Sub(h.since))
}

// requestEnded records how a request of key that took latency ended:
// hanging (it took slowAfter or more and got no answer, or a 5xx that a
// proxy may have sent after its own timeout) starts or extends the hang;
// any other end (a quick one, a quick failure too, or a slow answer: the
// endpoint is slow then, not hanging) ends it.
func (s *scheduler) requestEnded(key uuid.UUID, latency time.Duration, hanging bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !hanging {
		delete(s.hangs, key)
		return
	}
	now := s.now()
	s.extend(key, now.Add(-latency), now)
}

// deferredFor records that a message of key was deferred, for its hang,
// for delay: the hang counts as going on until the copy comes back, so that
// it finds the hang still measured, however quiet the subscription is
// meanwhile.
func (s *scheduler) deferredFor(key uuid.UUID, delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.hangs[key]; ok {
		if until := s.now().Add(delay); until.After(h.seen) {
			h.seen = until
			s.hangs[key] = h
		}
	}
}

// forgetHangs drops, once 1024 subscriptions are remembered as hanging,
// those not seen hanging within staleHang. Called with mu held, when a
// hang is added.
func (s *scheduler) forgetHangs(now time.Time) {
	if len(s.hangs) < 1024 {
		return
	}
	for key, h := range s.hangs {
		if now.Sub(h.seen) > staleHang {
			delete(s.hangs, key)
		}
	}
}

// done frees j's slot and promotes the next job of its subscription. The
// dispatcher calls it once j's request is over and again when j is settled;
// the second call does nothing.
func (s *scheduler) done(j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.finished {
		return
	}
	j.finished = true
	s.free(j)
}

// sleep takes j, whose request has not started, off its worker until its
// turn under its subscription's delivery rate, d from now: meanwhile it
// neither takes a worker nor counts as running (it does not make its
// subscription look slow), and its slot goes to the subscription's next
// job. Then it comes back ahead of the subscription's backlog. The workers
// wait for sleeping jobs before they stop.
func (s *scheduler) sleep(j *job, d time.Duration) {
	s.mu.Lock()
	s.sleeping++
	s.free(j)
	s.mu.Unlock()
	time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.sleeping--
		if s.active[j.key] < s.perSub {
			s.active[j.key]++
			s.ready = append(s.ready, j)
		} else {
			s.backlog[j.key] = append([]*job{j}, s.backlog[j.key]...)
		}
		s.cond.Broadcast() // a worker may be waiting to stop
	})
}

// free gives up j's slot: the next job of its backlog takes it. Called with
// mu held.
func (s *scheduler) free(j *job) {
	if delete(s.running[j.key], j); len(s.running[j.key]) == 0 {
		delete(s.running, j.key)
	}
	if q := s.backlog[j.key]; len(q) > 0 {
		s.ready = append(s.ready, q[0])
		q[0] = nil
		if len(q) == 1 {
			delete(s.backlog, j.key)
		} else {
			s.backlog[j.key] = q[1:]
		}
		s.cond.Signal()
		return
	}
	if s.active[j.key]--; s.active[j.key] <= 0 {
		delete(s.active, j.key)
	}
}

// close wakes every worker; take returns nil once ready is empty. done keeps
// promoting backlog jobs, so workers finish them too within the shutdown
// grace; whatever is cut off then is never acked and the broker redelivers it.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cond.Broadcast()
}

// pending counts jobs not yet finished.
func (s *scheduler) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.sleeping
	for _, a := range s.active {
		n += a
	}
	for _, q := range s.backlog {
		n += len(q)
	}
	return n
}
