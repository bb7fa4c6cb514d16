package loglimit

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	var got []Summary[string]
	l := New(5, 10*time.Second, 100, func(s Summary[string]) { got = append(got, s) })

	allowed := 0
	for range 1000 {
		if l.Allow("a", t0) {
			allowed++
		}
	}
	if allowed != 5 || len(got) != 0 {
		t.Fatalf("a burst of 1000: %d allowed, %d summaries; want 5, none before the window ends", allowed, len(got))
	}
	if !l.Allow("b", t0) {
		t.Error("another key is held back by the first one's flood")
	}
	l.Sweep(t0.Add(9 * time.Second))
	if len(got) != 0 {
		t.Fatalf("summary before the window ended: %+v", got)
	}
	l.Sweep(t0.Add(10 * time.Second))
	if len(got) != 1 || got[0].Key != "a" || got[0].Suppressed != 995 || !got[0].Since.Equal(t0) {
		t.Fatalf("summaries %+v, want one for a with 995", got)
	}
	if l.Len() != 0 {
		t.Errorf("%d keys remembered after their windows ended", l.Len())
	}

	// Without a sweep, the next line after the window reports it first.
	got = nil
	for range 7 {
		l.Allow("c", t0)
	}
	if !l.Allow("c", t0.Add(11*time.Second)) || len(got) != 1 || got[0].Suppressed != 2 {
		t.Errorf("next window: summaries %+v, want 2 held back reported", got)
	}
}

func TestLimiterBoundsKeys(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	var got []Summary[int]
	l := New(1, time.Second, 3, func(s Summary[int]) { got = append(got, s) })
	allowed := 0
	for k := range 100 {
		if l.Allow(k, t0) {
			allowed++
		}
	}
	if l.Len() != 3 {
		t.Errorf("%d keys remembered, want the bound 3", l.Len())
	}
	if allowed != 4 {
		t.Errorf("%d lines allowed, want 3 keys' and 1 of the others'", allowed)
	}
	l.Flush()
	if len(got) != 1 || !got[0].Others || got[0].Suppressed != 96 {
		t.Errorf("summaries %+v, want the others' 96", got)
	}
	// Once windows end, new keys get their own again.
	if !l.Allow(1000, t0.Add(time.Second)) || l.Len() != 1 {
		t.Errorf("a new key after the windows ended: %d keys", l.Len())
	}
}

func BenchmarkAllow(b *testing.B) {
	l := New(5, 10*time.Second, 1000, func(Summary[int]) {})
	now := time.Unix(1_000_000, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.Allow(i%100, now)
	}
}
