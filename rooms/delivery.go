package rooms

import (
	"fmt"
	"math"

	"github.com/roomhub/messaging-api/api"
)

// DeliveryPatch is what a request sets of the delivery settings: a room's
// defaults, or a subscription's overrides of them. Both are validated here,
// so that a room and a subscription refuse the same values alike.
type DeliveryPatch struct {
	DeliveryDelay           api.Nullable[int64]
	DeliveryDelayMultiplier api.Nullable[float64]
	DeliveryAttempts        api.Nullable[int]
	MaxDeliveryDelay        api.Nullable[int64]
	DeliveryJitter          api.Nullable[float64]
	RetryPolicy             api.Nullable[RetryPolicy]
	CircuitBreaker          api.Nullable[CircuitBreaker]
}

// Holder is what carries delivery settings; a null means something else on each.
type Holder int

const (
	// OnRoom refuses null, but for maxDeliveryDelay (the default cap) and
	// retryPolicy (none).
	OnRoom Holder = iota
	// OnSubscription takes null for the room's setting.
	OnSubscription
)

const msPerDay = 24 * 3600 * 1000

// Validate reports every problem with the settings p sets, each under its
// field name. The ranges are the same on every holder; only what a null
// means differs, and the messages say it.
func (p DeliveryPatch) Validate(on Holder, probs *api.Problems) {
	nullMeans := func(onRoom string) string {
		if on == OnSubscription {
			return "the room's"
		}
		return onRoom
	}
	checkSetting(probs, "deliveryDelay", p.DeliveryDelay, nullMeans(""),
		fmt.Sprintf("from 1 to %d ms", MaxDeliveryDelay), func(v int64) bool { return v >= 1 && v <= MaxDeliveryDelay })
	checkSetting(probs, "deliveryDelayMultiplier", p.DeliveryDelayMultiplier, nullMeans(""),
		fmt.Sprintf("from 1.0 to %g", MaxDeliveryDelayMultiplier), func(v float64) bool { return v >= 1 && v <= MaxDeliveryDelayMultiplier })
	checkSetting(probs, "deliveryAttempts", p.DeliveryAttempts, nullMeans(""),
		fmt.Sprintf("from 0 to %d", MaxDeliveryAttempts), func(v int) bool { return v >= 0 && v <= MaxDeliveryAttempts })
	checkSetting(probs, "maxDeliveryDelay", p.MaxDeliveryDelay, nullMeans(fmt.Sprintf("the default cap, %d days", MaxDeliveryDelay/msPerDay)),
		fmt.Sprintf("from 1 to %d ms", MaxDeliveryDelay), func(v int64) bool { return v >= 1 && v <= MaxDeliveryDelay })
	checkSetting(probs, "deliveryJitter", p.DeliveryJitter, nullMeans(""),
		"from 0 to 1", ValidJitter)
	if v := p.RetryPolicy.Ptr(); v != nil {
		v.Validate("retryPolicy", on == OnRoom, probs)
	}
	if v := p.CircuitBreaker.Ptr(); v != nil {
		v.Validate("circuitBreaker", on, probs)
	}
}

// checkSetting refuses a null where nullMeans is empty, and a value that is
// not ok; the message says the range, and what null means where it may be
// null. NaN is never ok: every comparison with it is false.
func checkSetting[T any](probs *api.Problems, field string, v api.Nullable[T], nullMeans, valueRange string, ok func(T) bool) {
	switch {
	case !v.Set:
	case v.Null && nullMeans == "":
		probs.Add(field, "must not be null")
	case v.Null:
	case !ok(v.Value) && nullMeans == "":
		probs.Add(field, "must be "+valueRange)
	case !ok(v.Value):
		probs.Add(field, "must be null ("+nullMeans+") or "+valueRange)
	}
}

// ValidJitter reports whether j can spread a delay by ±j (KIP-580): from 0 to 1.
func ValidJitter(j float64) bool { return !math.IsNaN(j) && j >= 0 && j <= 1 }

// ApplyTo validates p as a room's settings and writes it onto r; the
// retry-schedule preview reads delivery settings this way.
func (p DeliveryPatch) ApplyTo(r *Room) error {
	var probs api.Problems
	p.applyTo(r, &probs)
	return probs.Err()
}

func (p DeliveryPatch) applyTo(r *Room, probs *api.Problems) {
	p.Validate(OnRoom, probs)
	if v := p.DeliveryDelay.Ptr(); v != nil {
		r.DeliveryDelay = *v
	}
	if v := p.DeliveryDelayMultiplier.Ptr(); v != nil {
		r.DeliveryDelayMultiplier = *v
	}
	if v := p.DeliveryAttempts.Ptr(); v != nil {
		r.DeliveryAttempts = *v
	}
	if p.MaxDeliveryDelay.Set {
		r.MaxDeliveryDelay = or(p.MaxDeliveryDelay.Ptr(), 0) // null: the default cap
	}
	if v := p.DeliveryJitter.Ptr(); v != nil {
		r.DeliveryJitter = *v
	}
	if p.RetryPolicy.Set {
		r.RetryPolicy = p.RetryPolicy.Ptr()
	}
	if p.CircuitBreaker.Set {
		r.CircuitBreaker = p.CircuitBreaker.Ptr() // null: the defaults
	}
}
