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
	mu         sync.Mutex
	cond       *sync.Cond
	ready      []*job
	backlog    map[uuid.UUID][]*job
	active     map[uuid.UUID]int
	running    map[uuid.UUID]map[*job]time.Time // jobs taken by a worker, with when
	perSub     int
	maxBacklog int
	slowAfter  time.Duration
	now        func() time.Time
	closed     bool
}

func newScheduler(perSub, maxBacklog int, slowAfter time.Duration, now func() time.Time) *scheduler {
	s := &scheduler{
		backlog: map[uuid.UUID][]*job{}, active: map[uuid.UUID]int{}, running: map[uuid.UUID]map[*job]time.Time{},
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
	for len(s.ready) == 0 && !s.closed {
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

// slow reports whether a running job of key started slowAfter ago or more;
// with slowAfter 0 every subscription counts as slow (a full backlog alone
// defers).
func (s *scheduler) slow(key uuid.UUID) bool {
	if s.slowAfter <= 0 {
		return true
	}
	now := s.now()
	for _, started := range s.running[key] {
		if now.Sub(started) >= s.slowAfter {
			return true
		}
	}
	return false
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
	n := 0
	for _, a := range s.active {
		n += a
	}
	for _, q := range s.backlog {
		n += len(q)
	}
	return n
}
