package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store/storetest"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestCircuitSwap: a circuit change is stored only over the version it was
// made from; the subscription reads it back; an update of the subscription
// leaves it alone, and a reset closes it with a new version.
func TestCircuitSwap(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			sub := subscriptionFixture(t, db)
			got, err := db.Push().Circuit(ctx, sub.ID)
			if err != nil || got.State != subscriptions.CircuitClosed || got.Version != 0 {
				t.Fatalf("a new subscription's circuit: %+v, %v; want closed, version 0", got, err)
			}

			at := time.Now().UTC().Truncate(time.Millisecond)
			open := subscriptions.Circuit{State: subscriptions.CircuitOpen, Version: 1, OpenedAt: at, Cooldown: 30 * time.Second,
				ProbeAt: at.Add(30 * time.Second), LastError: "HTTP 503", LastStatusCode: 503}
			if won, err := db.Push().SwapCircuit(ctx, sub.ID, open); err != nil || !won {
				t.Fatalf("open: %v, %v", won, err)
			}
			stale := open
			stale.State, stale.LastError = subscriptions.CircuitHalfOpen, "from version 0"
			if won, err := db.Push().SwapCircuit(ctx, sub.ID, stale); err != nil || won {
				t.Fatalf("a change from a stale version: %v, %v; want refused", won, err)
			}

			// An update of the subscription does not write its circuit.
			sub.DeliveryAttempts = new(int)
			if err := db.Subscriptions().UpdateSubscription(ctx, sub); err != nil {
				t.Fatal(err)
			}
			read, err := db.Subscriptions().Subscription(ctx, sub.RoomID, sub.ID)
			if err != nil {
				t.Fatal(err)
			}
			c := read.Circuit
			if c.State != open.State || c.Version != 1 || !c.OpenedAt.Equal(at) || c.Cooldown != open.Cooldown ||
				!c.ProbeAt.Equal(open.ProbeAt) || c.LastError != "HTTP 503" || c.LastStatusCode != 503 {
				t.Errorf("read back %+v, want %+v", c, open)
			}
			if n, err := db.Push().OpenCircuits(ctx); err != nil || n != 1 {
				t.Errorf("open circuits: %d, %v; want 1", n, err)
			}

			if err := db.Subscriptions().ResetCircuit(ctx, sub.RoomID, sub.ID); err != nil {
				t.Fatal(err)
			}
			c, err = db.Push().Circuit(ctx, sub.ID)
			if err != nil || c.State != subscriptions.CircuitClosed || c.Version != 2 || !c.OpenedAt.IsZero() || c.LastError != "" || c.LastStatusCode != 0 {
				t.Errorf("after a reset: %+v, %v; want closed, version 2, nothing else", c, err)
			}
			if n, err := db.Push().OpenCircuits(ctx); err != nil || n != 0 {
				t.Errorf("open circuits: %d, %v; want 0", n, err)
			}
		})
	}
}

// TestCircuitBreakerSettingsRoundTrip: a room's and a subscription's
// breaker settings and rate are stored as given.
func TestCircuitBreakerSettingsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			sub := subscriptionFixture(t, db)
			room, err := db.Rooms().Room(ctx, sub.RoomID)
			if err != nil {
				t.Fatal(err)
			}
			if room.CircuitBreaker != nil {
				t.Errorf("a room stored without a breaker reads %+v", room.CircuitBreaker)
			}
			rate, cool, off := 0.5, int64(5000), false
			room.CircuitBreaker = &rooms.CircuitBreaker{Enabled: &off}
			if err := db.Rooms().UpdateRoom(ctx, room); err != nil {
				t.Fatal(err)
			}
			sub.CircuitBreaker, sub.MaxDeliveryRate = &rooms.CircuitBreaker{Cooldown: &cool}, &rate
			if err := db.Subscriptions().UpdateSubscription(ctx, sub); err != nil {
				t.Fatal(err)
			}
			room, err = db.Rooms().Room(ctx, sub.RoomID)
			if err != nil {
				t.Fatal(err)
			}
			read, err := db.Subscriptions().Subscription(ctx, sub.RoomID, sub.ID)
			if err != nil {
				t.Fatal(err)
			}
			if b := read.Breaker(room); b.Enabled || b.Cooldown != cool || b.Window != rooms.DefaultBreaker.Window {
				t.Errorf("effective breaker %+v: want the room's off, the subscription's cool-down, the default window", b)
			}
			if read.MaxDeliveryRate == nil || *read.MaxDeliveryRate != rate {
				t.Errorf("maxDeliveryRate read back %v, want %v", read.MaxDeliveryRate, rate)
			}
		})
	}
}

// TestReserveSlots: slots come interval apart from now, only those that
// begin within the horizon; with none left, each caller is told to come
// back a slot later than the one before; an idle subscription saves no
// slots up; and concurrent reservations never share a slot.
func TestReserveSlots(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			sub := subscriptionFixture(t, db)
			pace := db.Push()
			iv, h := 100*time.Millisecond, 350*time.Millisecond
			t0 := time.UnixMicro(time.Now().UnixMicro()).UTC()

			s, err := pace.ReserveSlots(ctx, sub.ID, iv, t0, h, 3)
			if err != nil || s.N != 3 || !s.First.Equal(t0) {
				t.Fatalf("first reservation: %+v, %v; want 3 from %v", s, err, t0)
			}
			// Slots at +300 ms: the only one left that begins within 350 ms.
			s, err = pace.ReserveSlots(ctx, sub.ID, iv, t0, h, 3)
			if err != nil || s.N != 1 || !s.First.Equal(t0.Add(300*time.Millisecond)) {
				t.Fatalf("second: %+v, %v; want 1 at +300ms", s, err)
			}
			for i, want := range []time.Duration{500 * time.Millisecond, 600 * time.Millisecond} {
				s, err = pace.ReserveSlots(ctx, sub.ID, iv, t0, h, 1)
				if err != nil || s.N != 0 || !s.Retry.Equal(t0.Add(want)) {
					t.Fatalf("refusal %d: %+v, %v; want none, retry at +%v", i+1, s, err, want)
				}
			}
			// Much later: the first free slot is now, not one saved up.
			later := t0.Add(time.Hour)
			s, err = pace.ReserveSlots(ctx, sub.ID, iv, later, h, 2)
			if err != nil || s.N != 2 || !s.First.Equal(later) {
				t.Fatalf("after an idle hour: %+v, %v; want 2 from %v", s, err, later)
			}

			// Concurrent callers: every slot once, and together the slots
			// form one sequence interval apart.
			start := later.Add(time.Hour)
			var mu sync.Mutex
			seen := map[time.Time]bool{}
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 5 {
						s, err := pace.ReserveSlots(ctx, sub.ID, time.Millisecond, start, time.Second, 3)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						for i := range s.N {
							at := s.First.Add(time.Duration(i) * time.Millisecond)
							if seen[at] {
								t.Errorf("slot %v granted twice", at)
							}
							seen[at] = true
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(seen) != 8*5*3 {
				t.Errorf("%d slots granted, want %d", len(seen), 8*5*3)
			}
			for i := range len(seen) {
				if !seen[start.Add(time.Duration(i)*time.Millisecond)] {
					t.Errorf("slot %d (+%d ms) missing: the slots are not one sequence", i, i)
					break
				}
			}
		})
	}
}
