package outbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
)

// parkedStore records the releases of parked copies; each releases n copies,
// or fails with err.
type parkedStore struct {
	mu       sync.Mutex
	released []uuid.UUID
	at       []time.Time
	n        int
	err      error
}

func (s *parkedStore) ReleaseParked(_ context.Context, sub uuid.UUID, at time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = append(s.released, sub)
	s.at = append(s.at, at)
	return s.n, s.err
}

func (s *parkedStore) releases() []uuid.UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uuid.UUID(nil), s.released...)
}

// TestParkingRelease: a subscription's parked copies are released at most
// once per every, and only when copies were parked here since the last
// release or the quick copy was itself held; the relay is woken after a
// release that freed copies, not after one that freed none or failed.
func TestParkingRelease(t *testing.T) {
	t.Parallel()
	clock := apitest.NewClock(time.Unix(1_000_000, 0))
	st := &parkedStore{n: 2}
	var woken int
	p := NewParking(st, time.Second, func() { woken++ }, clock.Now, slog.New(slog.DiscardHandler))
	sub := uuid.New()
	ctx := context.Background()
	try := func(held bool, want int, why string) {
		t.Helper()
		p.Release(ctx, sub, held)
		p.Wait()
		if got := len(st.releases()); got != want {
			t.Fatalf("%s: %d releases, want %d", why, got, want)
		}
	}

	try(false, 0, "nothing parked here")
	p.Note(sub)
	clock.Advance(300 * time.Millisecond)
	try(false, 1, "copies parked here")
	if st.at[0] != clock.Now() || woken != 1 {
		t.Errorf("released at %v, relay woken %d times; want now, once", st.at[0], woken)
	}
	p.Note(sub)
	try(false, 1, "within every of the last release")
	clock.Advance(time.Second)
	try(false, 2, "every after the release, copies parked since")
	clock.Advance(2 * time.Second)
	try(false, 2, "no copy parked here since the release")
	try(true, 3, "a held copy (another process may have parked its siblings)")
	if r := st.releases(); r[0] != sub || r[1] != sub || r[2] != sub {
		t.Errorf("released %v, want the subscription's copies each time", r)
	}
	if woken != 3 {
		t.Errorf("relay woken %d times, want once per release", woken)
	}

	// A release that frees nothing, or fails, wakes no relay.
	st.n = 0
	clock.Advance(time.Second)
	try(true, 4, "a held copy, nothing left to release")
	st.err = errors.New("database down")
	clock.Advance(time.Second)
	try(true, 5, "a held copy, the release fails")
	if woken != 3 {
		t.Errorf("relay woken %d times after releases that freed nothing; want still 3", woken)
	}
}

// TestParkingForgets: past 1024 entries, entries idle for a minute are
// forgotten, and so are those with copies parked longer ago than
// parkedMemory (a deleted subscription's); recent ones are kept.
func TestParkingForgets(t *testing.T) {
	t.Parallel()
	newParking := func() *Parking {
		return NewParking(&parkedStore{}, time.Second, nil, time.Now, slog.New(slog.DiscardHandler))
	}
	p := newParking()
	start := time.Unix(1_000_000, 0)
	recent := uuid.New()
	for range 600 {
		p.note(uuid.New(), start) // parked, never released
	}
	for range 423 {
		p.claim(uuid.New(), true, start) // released, nothing parked since
	}
	p.note(recent, start.Add(parkedMemory))
	now := start.Add(parkedMemory + time.Minute)
	if !p.claim(uuid.New(), true, now) {
		t.Fatal("claim of a new subscription refused")
	}
	p.mu.Lock()
	if len(p.m) != 2 {
		t.Errorf("%d entries left, want 2 (the recent one and the new one)", len(p.m))
	}
	if st, ok := p.m[recent]; !ok || !st.parked {
		t.Errorf("the recently parked subscription's entry: %+v, %v; want kept", st, ok)
	}
	p.mu.Unlock()

	// A process that parks copies and never releases any forgets too.
	parkOnly := newParking()
	for range 1100 {
		parkOnly.note(uuid.New(), start)
	}
	parkOnly.note(uuid.New(), start.Add(parkedMemory+time.Second))
	if n := len(parkOnly.m); n != 1 {
		t.Errorf("%d entries after notes only, want 1 (the others parked more than parkedMemory ago)", n)
	}
}
