package push

import (
	"sync"
	"time"

	"github.com/google/uuid"
)

// scheduler hands jobs to workers so that no subscription has more than
// perSub jobs running or ready at once; the rest wait in its backlog. A
// backlog past maxBacklog is refused only while its subscription makes no
// progress (no job finished for slowAfter): a busy but healthy endpoint keeps
// its messages, a stuck one gives them back for deferral, so it cannot take
// the whole prefetch window from the others.
type scheduler struct {
	mu         sync.Mutex
	cond       *sync.Cond
	ready      []*job
	backlog    map[uuid.UUID][]*job
	active     map[uuid.UUID]int
	progress   map[uuid.UUID]time.Time // last finished job, or when it became active
	perSub     int
	maxBacklog int
	slowAfter  time.Duration
	now        func() time.Time
	closed     bool
}

func newScheduler(perSub, maxBacklog int, slowAfter time.Duration, now func() time.Time) *scheduler {
	s := &scheduler{
		backlog: map[uuid.UUID][]*job{}, active: map[uuid.UUID]int{}, progress: map[uuid.UUID]time.Time{},
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
		if s.active[j.key] == 0 {
			s.progress[j.key] = s.now()
		}
		s.active[j.key]++
		s.ready = append(s.ready, j)
		s.cond.Signal()
		return true
	}
	if len(s.backlog[j.key]) >= s.maxBacklog && s.now().Sub(s.progress[j.key]) >= s.slowAfter {
		return false
	}
	s.backlog[j.key] = append(s.backlog[j.key], j)
	return true
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
	return j
}

// done frees j's slot and promotes the next job of its subscription.
func (s *scheduler) done(j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress[j.key] = s.now()
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
		delete(s.progress, j.key)
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
