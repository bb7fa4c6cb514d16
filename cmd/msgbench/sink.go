package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// targetMode is how a sink target answers.
type targetMode int

const (
	answerOK        targetMode = iota // 200 at once
	answerFailFirst                   // 500 to attempt 1, 200 to later attempts
	answerHang                        // holds the request until the client gives up
)

// sink is the push endpoint: an HTTP server on loopback whose paths are
// targets, each counting what it receives. Times are taken on arrival, before
// the body is read.
type sink struct {
	t0   time.Time // payload "t" fields are offsets from t0 (monotonic)
	base string
	srv  *http.Server
	// hangCap bounds a hanging request in case the client never gives up.
	hangCap time.Duration

	mu      sync.Mutex
	targets map[string]*target
}

func startSink(ctx context.Context, pushTimeout time.Duration) (*sink, error) {
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{t0: time.Now(), base: "http://" + l.Addr().String(), hangCap: 3*pushTimeout + 5*time.Second, targets: map[string]*target{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func (s *sink) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close() // hanging requests
	}
}

// since is the payload timestamp of now.
func (s *sink) since() int64 { return int64(time.Since(s.t0)) }

// target is one push URL of the sink.
type target struct {
	name string
	mode targetMode
	// want is how many distinct events complete the target; reached closes then.
	want    int
	reached chan struct{}
	// first closes on the first delivery, so that a process's CPU can be read then.
	first chan struct{}
	// retryDelay is the delay the service should wait after a failed attempt 1.
	retryDelay time.Duration
	latency    bool // record publish → arrival latency from the payload's "t"

	mu        sync.Mutex
	seen      map[string]struct{}
	dups      int
	firstAt   time.Time
	lastAt    time.Time
	latencies []time.Duration
	failedAt  map[string]time.Time
	retryErrs []time.Duration
	hung      int
}

// add registers a target at /name.
func (s *sink) add(name string, mode targetMode, want int) *target {
	t := &target{
		name: name, mode: mode, want: want, reached: make(chan struct{}), first: make(chan struct{}),
		seen: map[string]struct{}{}, failedAt: map[string]time.Time{},
	}
	s.mu.Lock()
	s.targets[name] = t
	s.mu.Unlock()
	return t
}

func (s *sink) url(t *target) string { return s.base + "/" + t.name }

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	t := s.targets[strings.TrimPrefix(r.URL.Path, "/")]
	s.mu.Unlock()
	if t == nil || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	id := r.Header.Get("X-Event-Id")
	switch t.mode {
	case answerHang:
		t.mu.Lock()
		t.hung++
		t.mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-time.After(s.hangCap):
		}
		return
	case answerFailFirst:
		if r.Header.Get("X-Attempt") == "1" {
			_, _ = io.Copy(io.Discard, r.Body)
			t.mu.Lock()
			t.failedAt[id] = time.Now()
			t.mu.Unlock()
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
	}
	var lat time.Duration
	if t.latency {
		var p struct {
			T int64 `json:"t"`
		}
		if err := json.NewDecoder(r.Body).Decode(&p); err == nil && p.T > 0 {
			lat = now.Sub(s.t0) - time.Duration(p.T)
		}
	}
	_, _ = io.Copy(io.Discard, r.Body)
	t.delivered(id, now, lat)
	w.WriteHeader(http.StatusOK)
}

func (t *target) delivered(id string, at time.Time, lat time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.seen[id]; dup {
		t.dups++
		return
	}
	t.seen[id] = struct{}{}
	if len(t.seen) == 1 {
		t.firstAt = at
		close(t.first)
	}
	t.lastAt = at
	if t.latency {
		t.latencies = append(t.latencies, lat)
	}
	if failed, ok := t.failedAt[id]; ok && t.mode == answerFailFirst {
		t.retryErrs = append(t.retryErrs, at.Sub(failed.Add(t.retryDelay)))
	}
	if t.want > 0 && len(t.seen) == t.want {
		close(t.reached)
	}
}

// wait blocks until want distinct events arrived, or fails after within.
func (t *target) wait(ctx context.Context, within time.Duration) error {
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-t.reached:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("target %s: %d of %d delivered: %w", t.name, t.count(), t.want, ctx.Err())
	case <-timer.C:
		return fmt.Errorf("target %s: %d of %d delivered within %s", t.name, t.count(), t.want, within)
	}
}

func (t *target) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.seen)
}

// snapshot returns the arrival window, duplicates, latencies and retry errors.
func (t *target) snapshot() (first, last time.Time, dups int, lat, retryErrs []time.Duration, hung int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.firstAt, t.lastAt, t.dups, append([]time.Duration(nil), t.latencies...),
		append([]time.Duration(nil), t.retryErrs...), t.hung
}
