package push

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
)

// testClock is a clock a test moves by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestReleaseParkedGuards: a subscription's parked copies are released
// after a delivery under SlowAfter only while none of its other requests
// has run that long, at most once per DeferDelay, and only when copies were
// parked here since the last release or the quick delivery was itself held.
func TestReleaseParkedGuards(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Unix(1_000_000, 0)}
	log := &settleRecorder{}
	p := New(Config{SlowAfter: 250 * time.Millisecond, DeferDelay: time.Second}, nil, nil, log, nil, clock.now,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	sched := newScheduler(4, 8, 250*time.Millisecond, clock.now)
	sub := uuid.New()
	newJob := func(held string) *job {
		h := map[string]string{}
		if held != "" {
			h[message.HeaderHeld] = held
		}
		return &job{key: sub, d: &broker.Delivery{Message: broker.Message{Headers: h}}}
	}
	ctx := context.Background()
	try := func(j *job, latency time.Duration, want int, why string) {
		t.Helper()
		p.releaseParked(ctx, sched, j, latency)
		p.releasing.Wait()
		if got := len(log.releases()); got != want {
			t.Fatalf("%s: %d releases, want %d", why, got, want)
		}
	}

	hanging := newJob("")
	sched.add(hanging)
	if sched.take() != hanging {
		t.Fatal("the scheduler did not hand out the job")
	}
	p.parked.note(sub, clock.now())
	clock.advance(300 * time.Millisecond)
	quick := newJob("")
	try(quick, 10*time.Millisecond, 0, "a quick delivery while another request of the subscription runs past SlowAfter")
	sched.done(hanging)
	try(quick, 10*time.Millisecond, 1, "a quick delivery with none running long")

	p.parked.note(sub, clock.now())
	try(quick, 250*time.Millisecond, 1, "a delivery of SlowAfter")
	try(quick, 10*time.Millisecond, 1, "a second quick delivery within DeferDelay of the release")
	clock.advance(time.Second)
	try(quick, 10*time.Millisecond, 2, "a quick delivery DeferDelay after the release, copies parked since")
	clock.advance(2 * time.Second)
	try(quick, 10*time.Millisecond, 2, "a quick delivery with no copy parked here since the release")
	try(newJob("1"), 10*time.Millisecond, 3, "a quick delivery of a held copy (another dispatcher may have parked its siblings)")
	if r := log.releases(); r[0] != sub || r[1] != sub || r[2] != sub {
		t.Errorf("released %v, want the subscription's copies each time", r)
	}
}

// TestParkedSubsForget: past 1024 entries, entries idle for a minute are
// forgotten, and so are those with copies parked longer ago than
// parkedMemory (a deleted subscription's); recent ones are kept.
func TestParkedSubsForget(t *testing.T) {
	t.Parallel()
	var ps parkedSubs
	start := time.Unix(1_000_000, 0)
	recent := uuid.New()
	for range 600 {
		ps.note(uuid.New(), start) // parked, never released
	}
	for range 423 {
		ps.claim(uuid.New(), true, start, time.Second) // released, nothing parked since
	}
	ps.note(recent, start.Add(parkedMemory))
	now := start.Add(parkedMemory + time.Minute)
	if !ps.claim(uuid.New(), true, now, time.Second) {
		t.Fatal("claim of a new subscription refused")
	}
	ps.mu.Lock()
	if len(ps.m) != 2 {
		t.Errorf("%d entries left, want 2 (the recent one and the new one)", len(ps.m))
	}
	if st, ok := ps.m[recent]; !ok || !st.parked {
		t.Errorf("the recently parked subscription's entry: %+v, %v; want kept", st, ok)
	}
	ps.mu.Unlock()

	// A dispatcher that parks copies and never releases any forgets too.
	var parkOnly parkedSubs
	for range 1100 {
		parkOnly.note(uuid.New(), start)
	}
	parkOnly.note(uuid.New(), start.Add(parkedMemory+time.Second))
	if n := len(parkOnly.m); n != 1 {
		t.Errorf("%d entries after notes only, want 1 (the others parked more than parkedMemory ago)", n)
	}
}
