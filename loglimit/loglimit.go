// Package loglimit caps how many log lines about one thing (a push
// subscription, a client) are written per interval, so that a flood of
// failures cannot flood the log; what it holds back is counted and reported
// once per interval as a summary.
package loglimit

import (
	"sync"
	"time"
)

// Summary reports lines held back about Key during the window that started
// at Since. Others is set for the lines of keys beyond the limiter's key
// bound, which share one window (Key is then the zero value).
type Summary[K comparable] struct {
	Key        K
	Others     bool
	Suppressed int
	Since      time.Time
}

// Limiter allows PerInterval lines per key in each fixed window of Interval
// that starts at a key's first line. It remembers at most MaxKeys keys.
type Limiter[K comparable] struct {
	perInterval int
	interval    time.Duration
	maxKeys     int
	report      func(Summary[K])

	mu sync.Mutex
	// Values rather than pointers: a known key costs no allocation per line.
	keys      map[K]window
	others    window
	lastSweep time.Time
}

type window struct {
	start      time.Time
	logged     int
	suppressed int
}

// New returns a Limiter that calls report (with the limiter's lock held, so
// it must not call back into it) for every window that ended with lines held
// back. perInterval below 1 is 1; maxKeys below 1 is 1.
func New[K comparable](perInterval int, interval time.Duration, maxKeys int, report func(Summary[K])) *Limiter[K] {
	return &Limiter[K]{
		perInterval: max(perInterval, 1), interval: interval, maxKeys: max(maxKeys, 1), report: report,
		keys: make(map[K]window),
	}
}

// Allow reports whether a line about key may be written at now; when not, the
// line is counted for the key's summary. A key's summary of the window that
// ended is reported before the first line of the next one is allowed.
func (l *Limiter[K]) Allow(key K, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.keys[key]
	if !ok && len(l.keys) >= l.maxKeys {
		// Sweeping a full map costs a pass over it: at most once per tenth
		// of an interval, so that many new keys do not each pay for one.
		if now.Sub(l.lastSweep) >= l.interval/10 {
			l.sweep(now)
		}
		if len(l.keys) >= l.maxKeys {
			var zero K
			return l.take(&l.others, zero, true, now)
		}
	}
	allowed := l.take(&w, key, false, now)
	l.keys[key] = w
	return allowed
}

func (l *Limiter[K]) take(w *window, key K, others bool, now time.Time) bool {
	if w.start.IsZero() || !now.Before(w.start.Add(l.interval)) {
		l.flush(w, key, others)
		*w = window{start: now}
	}
	if w.logged < l.perInterval {
		w.logged++
		return true
	}
	w.suppressed++
	return false
}

func (l *Limiter[K]) flush(w *window, key K, others bool) {
	if w.suppressed > 0 {
		l.report(Summary[K]{Key: key, Others: others, Suppressed: w.suppressed, Since: w.start})
		w.suppressed = 0
	}
}

// Sweep reports the summaries of the windows that ended by now and forgets
// their keys, so that memory follows the keys active in the last interval.
// Call it about once per interval.
func (l *Limiter[K]) Sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
}

// Flush reports every summary held back, ended or not (at shutdown).
func (l *Limiter[K]) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, w := range l.keys {
		l.flush(&w, k, false)
		delete(l.keys, k)
	}
	var zero K
	l.flush(&l.others, zero, true)
}

func (l *Limiter[K]) sweep(now time.Time) {
	l.lastSweep = now
	for k, w := range l.keys {
		if !now.Before(w.start.Add(l.interval)) {
			l.flush(&w, k, false)
			delete(l.keys, k)
		}
	}
	if !l.others.start.IsZero() && !now.Before(l.others.start.Add(l.interval)) {
		var zero K
		l.flush(&l.others, zero, true)
		l.others = window{}
	}
}

// Len is how many keys the limiter remembers.
func (l *Limiter[K]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
