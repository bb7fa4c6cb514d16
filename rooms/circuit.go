package rooms

import (
	"fmt"
	"math"
	"time"

	"github.com/roomhub/messaging-api/api"
)

// CircuitBreaker is the circuit breaker of PUSH subscriptions as a request
// gives it: a room's defaults, or a subscription's overrides of them field
// by field. Nil fields take the default (on a room) or the room's value (on
// a subscription).
type CircuitBreaker struct {
	Enabled         *bool    `json:"enabled,omitempty"`
	FailureRate     *float64 `json:"failureRate,omitempty"`
	Window          *int     `json:"window,omitempty"`
	MinimumAttempts *int     `json:"minimumAttempts,omitempty"`
	Cooldown        *int64   `json:"cooldown,omitempty"`
	MaxCooldown     *int64   `json:"maxCooldown,omitempty"`
}

// Breaker is a circuit breaker's effective settings: the circuit opens
// when at least MinimumAttempts of the last Window attempts were made and
// FailureRate of them failed; the first probe goes Cooldown (ms) later, each
// failed one doubles the wait up to MaxCooldown.
type Breaker struct {
	Enabled         bool    `json:"enabled"`
	FailureRate     float64 `json:"failureRate"`
	Window          int     `json:"window"`
	MinimumAttempts int     `json:"minimumAttempts"`
	Cooldown        int64   `json:"cooldown"`
	MaxCooldown     int64   `json:"maxCooldown"`
}

// DefaultBreaker is the circuit breaker of a room that sets none: 90 % of
// the last 50 attempts, at least 20 of them, a first probe after 30 s and a
// probe at least every 10 min.
var DefaultBreaker = Breaker{Enabled: true, FailureRate: 0.9, Window: 50, MinimumAttempts: 20, Cooldown: 30_000, MaxCooldown: 600_000}

// Limits of the circuit breaker's settings.
const (
	MinBreakerWindow   = 10
	MaxBreakerWindow   = 1000
	MinBreakerCooldown = 1000
	MaxBreakerCooldown = 24 * 3600 * 1000 // a day
	minFailureRate     = 0.01
)

// CooldownOf is a cool-down of ms milliseconds as a duration.
func CooldownOf(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// Over is b's settings over base: each field b sets replaces base's. A
// combination the fields make only together (a subscription's window below
// the room's minimum attempts, a cool-down above the room's cap) is
// clamped: the minimum attempts to the window, the cap up to the cool-down.
func (b *CircuitBreaker) Over(base Breaker) Breaker {
	out := base
	if b != nil {
		out.Enabled = or(b.Enabled, base.Enabled)
		out.FailureRate = or(b.FailureRate, base.FailureRate)
		out.Window = or(b.Window, base.Window)
		out.MinimumAttempts = or(b.MinimumAttempts, base.MinimumAttempts)
		out.Cooldown = or(b.Cooldown, base.Cooldown)
		out.MaxCooldown = or(b.MaxCooldown, base.MaxCooldown)
	}
	out.MinimumAttempts = min(out.MinimumAttempts, out.Window)
	out.MaxCooldown = max(out.MaxCooldown, out.Cooldown)
	return out
}

// UnmarshalJSON decodes strictly, naming an unknown field with its path.
func (b *CircuitBreaker) UnmarshalJSON(data []byte) error {
	type plain CircuitBreaker // without this method
	v, err := decodeStrict[plain](data, "circuitBreaker")
	if err != nil {
		return err
	}
	*b = CircuitBreaker(v)
	return nil
}

// Validate reports every problem with b under prefix ("circuitBreaker"). On
// a room the fields must agree with each other and the defaults; on a
// subscription only the pairs it sets both of are compared (Over clamps the
// rest).
func (b CircuitBreaker) Validate(prefix string, on Holder, probs *api.Problems) {
	okRate := b.FailureRate == nil || (!math.IsNaN(*b.FailureRate) && *b.FailureRate >= minFailureRate && *b.FailureRate <= 1)
	if !okRate {
		probs.Add(prefix+".failureRate", fmt.Sprintf("must be from %g to 1 (the share of the window's attempts that failed)", minFailureRate))
	}
	okWindow := b.Window == nil || (*b.Window >= MinBreakerWindow && *b.Window <= MaxBreakerWindow)
	if !okWindow {
		probs.Add(prefix+".window", fmt.Sprintf("must be from %d to %d attempts", MinBreakerWindow, MaxBreakerWindow))
	}
	okMin := b.MinimumAttempts == nil || (*b.MinimumAttempts >= 1 && *b.MinimumAttempts <= MaxBreakerWindow)
	if !okMin {
		probs.Add(prefix+".minimumAttempts", fmt.Sprintf("must be from 1 to %d attempts", MaxBreakerWindow))
	}
	cooldown := func(name string, v *int64) bool {
		if v != nil && (*v < MinBreakerCooldown || *v > MaxBreakerCooldown) {
			probs.Add(prefix+"."+name, fmt.Sprintf("must be from %d to %d ms", MinBreakerCooldown, MaxBreakerCooldown))
			return false
		}
		return true
	}
	okCool, okMax := cooldown("cooldown", b.Cooldown), cooldown("maxCooldown", b.MaxCooldown)

	// Pairs: on a room against the defaults, on a subscription only when it
	// sets both.
	window, minimum := b.Window, b.MinimumAttempts
	cool, maxCool := b.Cooldown, b.MaxCooldown
	if on == OnRoom {
		window, minimum = orDefault(window, DefaultBreaker.Window), orDefault(minimum, DefaultBreaker.MinimumAttempts)
		cool, maxCool = orDefault(cool, DefaultBreaker.Cooldown), orDefault(maxCool, DefaultBreaker.MaxCooldown)
	}
	if okWindow && okMin && window != nil && minimum != nil && *minimum > *window {
		if b.MinimumAttempts == nil { // name the field that was sent
			probs.Add(prefix+".window", fmt.Sprintf("must be at least minimumAttempts (%d by default)", *minimum))
		} else {
			probs.Add(prefix+".minimumAttempts", fmt.Sprintf("must be at most window (%d)", *window))
		}
	}
	if okCool && okMax && cool != nil && maxCool != nil && *cool > *maxCool {
		if b.MaxCooldown == nil {
			probs.Add(prefix+".cooldown", fmt.Sprintf("must be at most maxCooldown (%d ms by default)", *maxCool))
		} else {
			probs.Add(prefix+".maxCooldown", fmt.Sprintf("must be at least cooldown (%d ms)", *cool))
		}
	}
}

// orDefault is p, or a pointer to def when p is nil.
func orDefault[T any](p *T, def T) *T {
	if p == nil {
		return &def
	}
	return p
}
