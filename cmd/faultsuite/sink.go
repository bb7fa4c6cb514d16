package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// receipts counts what one subscription received, by publish sequence number
// (the suite's correlation id "fs-<run>-<seq>" carries it).
type receipts struct {
	mu     sync.Mutex
	count  map[int]int             // seq → messages received
	events map[int]map[string]bool // seq → distinct event ids received
	stray  int                     // messages with a correlation id of no publish of this run
	times  []time.Time             // when each message of this run arrived
	dups   []time.Time             // when each receipt of a publish already received arrived
}

func newReceipts() *receipts {
	return &receipts{count: map[int]int{}, events: map[int]map[string]bool{}}
}

func (r *receipts) add(prefix, correlationID, eventID string) {
	seq, ok := seqOf(prefix, correlationID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		r.stray++
		return
	}
	now := time.Now()
	if r.count[seq] > 0 {
		r.dups = append(r.dups, now)
	}
	r.count[seq]++
	r.times = append(r.times, now)
	if r.events[seq] == nil {
		r.events[seq] = map[string]bool{}
	}
	r.events[seq][eventID] = true
}

// longestGap is the longest time in [from, to) without an arrival, counted
// from from: how long deliveries stalled after a fault that started at from.
func (r *receipts) longestGap(from, to time.Time) time.Duration {
	r.mu.Lock()
	times := slices.Clone(r.times)
	r.mu.Unlock()
	return longestGap(times, from, to)
}

// duplicatesIn counts the receipts of a publish already received that
// arrived in [from, to).
func (r *receipts) duplicatesIn(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, t := range r.dups {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// longestGap is the longest time in [from, to) without one of times (in any
// order; sorted in place), counted from from and up to to.
func longestGap(times []time.Time, from, to time.Time) time.Duration {
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var longest time.Duration
	prev := from
	for _, t := range times {
		if t.Before(from) {
			continue
		}
		if !t.Before(to) {
			break
		}
		longest = max(longest, t.Sub(prev))
		prev = t
	}
	return max(longest, to.Sub(prev))
}

func (r *receipts) has(seq int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[seq] > 0
}

// tally is what a subscription received of the accepted publishes.
type tally struct {
	Delivered  int `json:"delivered"`  // accepted publishes received at least once
	Duplicated int `json:"duplicated"` // receipts beyond the first of a publish
	Lost       int `json:"lost"`       // accepted publishes never received
	// Unconfirmed counts publishes received whose answer the suite never got
	// (API killed mid-request) or that were refused: allowed either way.
	Unconfirmed   int            `json:"unconfirmedDelivered"`
	UnconfirmedBy map[string]int `json:"unconfirmedBy,omitempty"` // by the publish's outcome
	// DoublePublished counts publishes received under more than one event id:
	// an Idempotency-Key retry that published again.
	DoublePublished int   `json:"doublePublished"`
	Stray           int   `json:"stray"`
	LostSeqs        []int `json:"lostSeqs,omitempty"`
}

func (r *receipts) tally(outcomeOf func(seq int) outcome, published int) tally {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t tally
	t.Stray = r.stray
	for seq := range published {
		n := r.count[seq]
		accepted := outcomeOf(seq) == outAccepted
		if n > 1 {
			t.Duplicated += n - 1
		}
		if len(r.events[seq]) > 1 {
			t.DoublePublished++
		}
		switch {
		case accepted && n > 0:
			t.Delivered++
		case accepted:
			t.Lost++
			if len(t.LostSeqs) < 20 {
				t.LostSeqs = append(t.LostSeqs, seq)
			}
		case n > 0:
			t.Unconfirmed++
			if t.UnconfirmedBy == nil {
				t.UnconfirmedBy = map[string]int{}
			}
			t.UnconfirmedBy[outcomeOf(seq).String()]++
		}
	}
	return t
}

func seqOf(prefix, correlationID string) (int, bool) {
	rest, ok := strings.CutPrefix(correlationID, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// sink is the PUSH endpoint: an HTTP server on loopback that answers 200 to
// every POST and records it.
type sink struct {
	url    string
	srv    *http.Server
	prefix string
	got    *receipts
}

func startSink(ctx context.Context, prefix string) (*sink, error) {
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{url: "http://" + l.Addr().String() + "/push", prefix: prefix, got: newReceipts()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/push" {
		http.NotFound(w, r)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	s.got.add(s.prefix, r.Header.Get("X-Correlation-Id"), r.Header.Get("X-Event-Id"))
	w.WriteHeader(http.StatusOK)
}

func (s *sink) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}
