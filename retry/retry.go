// Package retry computes when a failed delivery is tried again. A policy is
// data: it maps the number of the attempt that failed to the delay before the
// next one, or says there is none. The push dispatcher and pull nacks use it.
package retry

import (
	"math"
	"time"

	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// DefaultMaxDelay caps a computed delay when the policy sets no cap of its
// own, so that a multiplier over many attempts cannot schedule a retry years away.
const DefaultMaxDelay = 7 * 24 * time.Hour

// Policy decides the delay before the next attempt.
type Policy interface {
	// Next returns the delay before attempt+1 after attempt (1 for the first
	// delivery) failed, or false when no attempt is left.
	Next(attempt int) (time.Duration, bool)
}

// Exponential is the seed system's exponential backoff retry: after attempt k
// fails, attempt k+1 comes Delay × Multiplier^k later (whole ms, truncated),
// while k+1 ≤ Attempts. Attempts 0 or 1 means no redelivery.
type Exponential struct {
	Delay      time.Duration
	Multiplier float64
	Attempts   int
	// MaxDelay caps each delay; 0 means DefaultMaxDelay.
	MaxDelay time.Duration
}

// Next implements Policy.
func (e Exponential) Next(attempt int) (time.Duration, bool) {
	if attempt < 1 || attempt+1 > e.Attempts {
		return 0, false
	}
	maxDelay := e.MaxDelay
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	ms := float64(e.Delay.Milliseconds()) * math.Pow(e.Multiplier, float64(attempt))
	if math.IsInf(ms, 0) || math.IsNaN(ms) || ms >= float64(maxDelay.Milliseconds()) {
		return maxDelay, true
	}
	return time.Duration(int64(ms)) * time.Millisecond, true
}

// For is the policy a subscription's messages follow: its overrides of the
// room's delivery fields, field by field, else the room's.
func For(room rooms.Room, sub subscriptions.Subscription) Policy {
	p := Exponential{
		Delay:      time.Duration(room.DeliveryDelay) * time.Millisecond,
		Multiplier: room.DeliveryDelayMultiplier,
		Attempts:   room.DeliveryAttempts,
	}
	if sub.DeliveryDelay != nil {
		p.Delay = time.Duration(*sub.DeliveryDelay) * time.Millisecond
	}
	if sub.DeliveryDelayMultiplier != nil {
		p.Multiplier = *sub.DeliveryDelayMultiplier
	}
	if sub.DeliveryAttempts != nil {
		p.Attempts = *sub.DeliveryAttempts
	}
	return p
}
