// Package retry computes when a failed delivery is tried again. A policy is
// data: it maps the number of the attempt that failed to the step before the
// next one (its phase, base delay, jitter and cap), or says there is none.
// The push dispatcher and pull nacks use it; the retry-schedule endpoints
// show it.
package retry

import (
	"math"
	"math/bits"
	"time"

	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// DefaultMaxDelay caps a computed delay when the policy sets no cap of its
// own, so that a multiplier over many attempts cannot schedule a retry years
// away. It is the longest cap a room may set.
const DefaultMaxDelay = rooms.MaxDeliveryDelay * time.Millisecond

// Phases of a step.
const (
	PhaseExponential = "exponential"  // the seed's exponential backoff retry
	PhaseImmediate   = "immediate"    // four-phase: no delay
	PhasePreBackoff  = "pre-backoff"  // four-phase: minimumDelay
	PhaseBackoff     = "backoff"      // four-phase: minimumDelay → maximumDelay
	PhasePostBackoff = "post-backoff" // four-phase: maximumDelay
)

// Step is what comes before one retry.
type Step struct {
	Phase string
	// Delay is the base delay, before jitter.
	Delay time.Duration
	// Jitter j spreads the delay over Delay × [1−j, 1+j] (Kafka KIP-580).
	Jitter float64
	// Max caps the delay after jitter; 0 means no cap beyond Delay's own.
	Max time.Duration
}

// Range is the lowest and highest delay Draw can give.
func (s Step) Range() (lo, hi time.Duration) {
	return s.Draw(0), s.Draw(1)
}

// Draw applies the jitter with u from [0, 1] (a uniform random number):
// Delay × (1 − j + 2j·u), capped at Max, in whole ms (floor).
func (s Step) Draw(u float64) time.Duration {
	ms := float64(s.Delay.Milliseconds())
	if s.Jitter > 0 {
		ms *= 1 - s.Jitter + 2*s.Jitter*u
	}
	// The epsilon keeps products that are whole in exact arithmetic (5000 ×
	// 1.3) from flooring one below through binary rounding.
	d := time.Duration(math.Floor(ms+1e-6)) * time.Millisecond
	if s.Max > 0 && d > s.Max {
		d = s.Max
	}
	return max(d, 0)
}

// Policy decides the step before each retry.
type Policy interface {
	// Next returns the step before attempt+1 after attempt (1 for the first
	// delivery) failed, or false when no attempt is left.
	Next(attempt int) (Step, bool)
	// MaxAttempts is the number of attempts, the first delivery included.
	MaxAttempts() int
}

// Exponential is the seed system's exponential backoff retry: after attempt k
// fails, attempt k+1 comes Delay × Multiplier^k later (whole ms, truncated),
// while k+1 ≤ Attempts. Attempts 0 or 1 means no redelivery.
type Exponential struct {
	Delay      time.Duration
	Multiplier float64
	Attempts   int
	// MaxDelay caps each delay, jitter included; 0 means DefaultMaxDelay.
	MaxDelay time.Duration
	Jitter   float64
}

// Next implements Policy.
func (e Exponential) Next(attempt int) (Step, bool) {
	if attempt < 1 || attempt+1 > e.Attempts {
		return Step{}, false
	}
	maxDelay := e.MaxDelay
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	step := Step{Phase: PhaseExponential, Jitter: e.Jitter, Max: maxDelay}
	ms := float64(e.Delay.Milliseconds()) * math.Pow(e.Multiplier, float64(attempt))
	if math.IsInf(ms, 0) || math.IsNaN(ms) || ms >= float64(maxDelay.Milliseconds()) {
		step.Delay = maxDelay
		return step, true
	}
	step.Delay = time.Duration(int64(ms)) * time.Millisecond
	return step, true
}

// MaxAttempts implements Policy.
func (e Exponential) MaxAttempts() int { return max(e.Attempts, 1) }

// FourPhase is the retry policy of OpenStack Zaqar and AWS SNS. After the
// first failed attempt, retries run through four phases in order:
// RetriesWithNoDelay immediate ones, MinimumDelayRetries after MinimumDelay,
// BackoffRetries from MinimumDelay to MaximumDelay by the backoff function,
// and MaximumDelayRetries after MaximumDelay. Total attempts = 1 + the sum.
type FourPhase struct {
	rooms.Resolved
}

// MaxAttempts implements Policy.
func (f FourPhase) MaxAttempts() int {
	return 1 + f.RetriesWithNoDelay + f.MinimumDelayRetries + f.BackoffRetries + f.MaximumDelayRetries
}

// Next implements Policy: retry i = attempt falls in the phase its number says.
func (f FourPhase) Next(attempt int) (Step, bool) {
	i := attempt
	if i < 1 || attempt+1 > f.MaxAttempts() {
		return Step{}, false
	}
	ms := time.Millisecond
	step := Step{Jitter: f.Jitter, Max: time.Duration(f.MaximumDelay) * ms}
	if f.Jitter == 0 {
		step.Max = 0
	}
	switch {
	case i <= f.RetriesWithNoDelay:
		step.Phase = PhaseImmediate
	case i <= f.RetriesWithNoDelay+f.MinimumDelayRetries:
		step.Phase, step.Delay = PhasePreBackoff, time.Duration(f.MinimumDelay)*ms
	case i <= f.RetriesWithNoDelay+f.MinimumDelayRetries+f.BackoffRetries:
		n := i - f.RetriesWithNoDelay - f.MinimumDelayRetries
		step.Phase = PhaseBackoff
		step.Delay = time.Duration(Backoff(f.RetryBackoffFunction, f.MinimumDelay, f.MaximumDelay, n, f.BackoffRetries)) * ms
	default:
		step.Phase, step.Delay = PhasePostBackoff, time.Duration(f.MaximumDelay)*ms
	}
	return step, true
}

// Backoff is the delay in ms of backoff retry n = 1..num from lo (MIN) to hi
// (MAX), floored to whole ms. Each function gives exactly lo at n = 1 and
// exactly hi at n = num (num = 1 gives lo):
//
//	linear:      MIN + (MAX − MIN)·(n − 1)/(NUM − 1)
//	arithmetic:  MIN + (MAX − MIN)·n(n − 1)/(NUM(NUM − 1))
//	geometric:   MIN·(MAX/MIN)^((n − 1)/(NUM − 1))
//	exponential: MIN + (MAX − MIN)·(2^(n − 1) − 1)/(2^(NUM − 1) − 1)
//
// The seed spec's linear formula stops one interval short of MAX, and its
// exponential one reduces to the geometric; these definitions fix both.
func Backoff(function string, lo, hi int64, n, num int) int64 {
	switch {
	case n <= 1 || num <= 1:
		return lo
	case n >= num:
		return hi
	}
	span := hi - lo
	N, k := int64(num), int64(n)
	switch function {
	case rooms.BackoffArithmetic:
		return lo + span*k*(k-1)/(N*(N-1))
	case rooms.BackoffGeometric:
		if lo <= 0 {
			return lo
		}
		return int64(math.Floor(float64(lo) * math.Pow(float64(hi)/float64(lo), float64(n-1)/float64(num-1))))
	case rooms.BackoffExponential:
		if num <= 62 && span >= 0 {
			// span·(2^(n−1) − 1) passes 2^63 from n ≈ 35 at a week's span:
			// multiply and divide in 128 bits.
			prodHi, prodLo := bits.Mul64(uint64(span), uint64(1)<<(n-1)-1)
			q, _ := bits.Div64(prodHi, prodLo, uint64(1)<<(num-1)-1)
			return lo + int64(q)
		}
		// 2^(n−1−(NUM−1)) keeps the ratio finite for large NUM.
		ratio := (math.Exp2(float64(n-num)) - math.Exp2(float64(1-num))) / (1 - math.Exp2(float64(1-num)))
		return lo + int64(math.Floor(float64(span)*ratio))
	default: // linear
		return lo + span*(k-1)/(N-1)
	}
}

// Source says whose settings an effective policy uses.
const (
	SourceRoom         = "room"
	SourceSubscription = "subscription"
	// SourceRoomWithOverrides: the exponential backoff retry with the
	// subscription's overrides of some of the room's fields.
	SourceRoomWithOverrides = "room with subscription overrides"
)

// Target is what decides a subscription's policy: its room's delivery
// settings and the subscription's own.
type Target struct {
	Room         rooms.Room
	Subscription SubscriptionSettings
}

// SubscriptionSettings are a subscription's delivery overrides (nil: the room's).
type SubscriptionSettings struct {
	DeliveryDelay           *int64
	DeliveryDelayMultiplier *float64
	DeliveryAttempts        *int
	MaxDeliveryDelay        *int64
	DeliveryJitter          *float64
	RetryPolicy             *rooms.RetryPolicy
}

// Effective is the policy for t, and whose settings it uses. Precedence: a
// room whose retryPolicy sets ignoreSubscriptionOverride uses its own policy
// for everything; else a subscription's retryPolicy replaces the room's as a
// whole; else the room's retryPolicy; else the exponential backoff retry,
// the subscription overriding the room field by field.
func Effective(t Target) (Policy, string) {
	room, sub := t.Room, t.Subscription
	if room.RetryPolicy != nil && room.RetryPolicy.Resolve().IgnoreSubscriptionOverride {
		return FourPhase{room.RetryPolicy.Resolve()}, SourceRoom
	}
	if sub.RetryPolicy != nil {
		return FourPhase{sub.RetryPolicy.Resolve()}, SourceSubscription
	}
	if room.RetryPolicy != nil {
		return FourPhase{room.RetryPolicy.Resolve()}, SourceRoom
	}
	ms := time.Millisecond
	p := Exponential{
		Delay:      time.Duration(room.DeliveryDelay) * ms,
		Multiplier: room.DeliveryDelayMultiplier,
		Attempts:   room.DeliveryAttempts,
		MaxDelay:   time.Duration(room.MaxDeliveryDelay) * ms,
		Jitter:     room.DeliveryJitter,
	}
	source := SourceRoom
	if sub.DeliveryDelay != nil {
		p.Delay, source = time.Duration(*sub.DeliveryDelay)*ms, SourceRoomWithOverrides
	}
	if sub.DeliveryDelayMultiplier != nil {
		p.Multiplier, source = *sub.DeliveryDelayMultiplier, SourceRoomWithOverrides
	}
	if sub.DeliveryAttempts != nil {
		p.Attempts, source = *sub.DeliveryAttempts, SourceRoomWithOverrides
	}
	if sub.MaxDeliveryDelay != nil {
		p.MaxDelay, source = time.Duration(*sub.MaxDeliveryDelay)*ms, SourceRoomWithOverrides
	}
	if sub.DeliveryJitter != nil {
		p.Jitter, source = *sub.DeliveryJitter, SourceRoomWithOverrides
	}
	return p, source
}

// Scheduled is one future attempt of a schedule.
type Scheduled struct {
	Attempt int
	Step    Step
	// Since is the time from the first attempt to this one when every
	// delay is its base (and its lowest and highest with jitter), delivery
	// time not counted.
	Since, SinceMin, SinceMax time.Duration
}

// Schedule lists every retry p allows, in order.
func Schedule(p Policy) []Scheduled {
	var out []Scheduled
	var since, lo, hi time.Duration
	for k := 1; ; k++ {
		step, ok := p.Next(k)
		if !ok {
			return out
		}
		dlo, dhi := step.Range()
		since += step.Draw(0.5)
		lo += dlo
		hi += dhi
		out = append(out, Scheduled{Attempt: k + 1, Step: step, Since: since, SinceMin: lo, SinceMax: hi})
	}
}

// TargetOf is the Target of a subscription of room.
func TargetOf(room rooms.Room, sub subscriptions.Subscription) Target {
	return Target{Room: room, Subscription: SubscriptionSettings{
		DeliveryDelay: sub.DeliveryDelay, DeliveryDelayMultiplier: sub.DeliveryDelayMultiplier,
		DeliveryAttempts: sub.DeliveryAttempts, MaxDeliveryDelay: sub.MaxDeliveryDelay,
		DeliveryJitter: sub.DeliveryJitter, RetryPolicy: sub.RetryPolicy,
	}}
}

// For is the policy a subscription's messages follow.
func For(room rooms.Room, sub subscriptions.Subscription) Policy {
	p, _ := Effective(TargetOf(room, sub))
	return p
}
