package retry

import (
	"testing"
	"time"

	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

func TestExponential(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	cases := []struct {
		name    string
		p       Exponential
		attempt int
		want    time.Duration
		ok      bool
	}{
		// deliveryDelay × deliveryDelayMultiplier^k after attempt k failed.
		{"first retry", Exponential{Delay: 1000 * ms, Multiplier: 2, Attempts: 5}, 1, 2000 * ms, true},
		{"second retry", Exponential{Delay: 1000 * ms, Multiplier: 2, Attempts: 5}, 2, 4000 * ms, true},
		{"last allowed", Exponential{Delay: 1000 * ms, Multiplier: 2, Attempts: 5}, 4, 16000 * ms, true},
		{"exhausted", Exponential{Delay: 1000 * ms, Multiplier: 2, Attempts: 5}, 5, 0, false},
		{"multiplier 1", Exponential{Delay: 250 * ms, Multiplier: 1, Attempts: 3}, 2, 250 * ms, true},
		{"truncated to whole ms", Exponential{Delay: 1 * ms, Multiplier: 1.5, Attempts: 9}, 3, 3 * ms, true}, // 3.375
		{"fractional multiplier", Exponential{Delay: 100 * ms, Multiplier: 1.1, Attempts: 9}, 2, 121 * ms, true},
		{"attempts 0: none", Exponential{Delay: 1000 * ms, Multiplier: 2, Attempts: 0}, 1, 0, false},
		{"attempts 1: none", Exponential{Delay: 1000 * ms, Multiplier: 2, Attempts: 1}, 1, 0, false},
		{"attempts 2: one", Exponential{Delay: 1000 * ms, Multiplier: 2, Attempts: 2}, 1, 2000 * ms, true},
		{"capped", Exponential{Delay: 1000 * ms, Multiplier: 1000, Attempts: 1000}, 900, DefaultMaxDelay, true},
		{"own cap", Exponential{Delay: 1000 * ms, Multiplier: 10, Attempts: 10, MaxDelay: 5 * time.Second}, 3, 5 * time.Second, true},
		{"attempt 0 is no attempt", Exponential{Delay: 1000 * ms, Multiplier: 2, Attempts: 5}, 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tc.p.Next(tc.attempt)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Next(%d) = %v, %v; want %v, %v", tc.attempt, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestForOverridesFieldByField(t *testing.T) {
	t.Parallel()
	room := rooms.Room{DeliveryDelay: 1000, DeliveryDelayMultiplier: 2, DeliveryAttempts: 5}
	delay, attempts := int64(300), 2
	got := For(room, subscriptions.Subscription{DeliveryDelay: &delay, DeliveryAttempts: &attempts})
	want := Exponential{Delay: 300 * time.Millisecond, Multiplier: 2, Attempts: 2}
	if got != want {
		t.Errorf("For = %+v, want %+v", got, want)
	}
	if got := For(room, subscriptions.Subscription{}); got != (Exponential{Delay: time.Second, Multiplier: 2, Attempts: 5}) {
		t.Errorf("no overrides: %+v", got)
	}
}
