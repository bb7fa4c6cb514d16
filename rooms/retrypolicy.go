package rooms

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/roomhub/messaging-api/api"
)

// Backoff functions of the four-phase retry policy's backoff phase.
const (
	BackoffLinear      = "linear"
	BackoffArithmetic  = "arithmetic"
	BackoffGeometric   = "geometric"
	BackoffExponential = "exponential"
)

// Defaults of the four-phase policy (OpenStack Zaqar / AWS SNS).
const (
	DefaultRetriesWithNoDelay  = 3
	DefaultMinimumDelayRetries = 3
	DefaultMinimumDelay        = 5000
	DefaultBackoffRetries      = 10
	DefaultMaximumDelay        = 30000
	DefaultMaximumDelayRetries = 3
)

// Limits that keep a policy's schedule finite and its numbers sane; a
// policy's delays and attempts have the bounds of the room's own settings.
const (
	MaxPhaseRetries  = 1000
	MaxPolicyDelay   = MaxDeliveryDelay
	MaxTotalAttempts = MaxDeliveryAttempts
)

// RetryPolicy is the four-phase retry policy a room or subscription may
// carry: after the first failed attempt, retriesWithNoDelay immediate retries,
// minimumDelayRetries after minimumDelay, backoffRetries whose delays go from
// minimumDelay to maximumDelay by retryBackoffFunction, then
// maximumDelayRetries after maximumDelay. Nil fields take the defaults.
type RetryPolicy struct {
	RetriesWithNoDelay   *int     `json:"retriesWithNoDelay,omitempty"`
	MinimumDelayRetries  *int     `json:"minimumDelayRetries,omitempty"`
	MinimumDelay         *int64   `json:"minimumDelay,omitempty"`
	BackoffRetries       *int     `json:"backoffRetries,omitempty"`
	MaximumDelay         *int64   `json:"maximumDelay,omitempty"`
	MaximumDelayRetries  *int     `json:"maximumDelayRetries,omitempty"`
	RetryBackoffFunction *string  `json:"retryBackoffFunction,omitempty"`
	Jitter               *float64 `json:"jitter,omitempty"`
	// IgnoreSubscriptionOverride, on a room only, makes the room's delivery
	// settings apply to every subscription, whatever they say.
	IgnoreSubscriptionOverride *bool `json:"ignoreSubscriptionOverride,omitempty"`
}

// UnmarshalJSON decodes strictly, naming an unknown field with its path.
func (p *RetryPolicy) UnmarshalJSON(b []byte) error {
	type plain RetryPolicy // without this method
	v, err := decodeStrict[plain](b, "retryPolicy")
	if err != nil {
		return err
	}
	*p = RetryPolicy(v)
	return nil
}

// decodeStrict decodes data into a T, refusing an unknown field with a
// FieldError that names it under field.
func decodeStrict[T any](data []byte, field string) (T, error) {
	var v T
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return v, &api.FieldError{Field: field + "." + strings.Trim(name, `"`), Message: "unknown field"}
		}
		return v, err
	}
	return v, nil
}

// Resolved is a RetryPolicy with its defaults filled in.
type Resolved struct {
	RetriesWithNoDelay         int     `json:"retriesWithNoDelay"`
	MinimumDelayRetries        int     `json:"minimumDelayRetries"`
	MinimumDelay               int64   `json:"minimumDelay"`
	BackoffRetries             int     `json:"backoffRetries"`
	MaximumDelay               int64   `json:"maximumDelay"`
	MaximumDelayRetries        int     `json:"maximumDelayRetries"`
	RetryBackoffFunction       string  `json:"retryBackoffFunction"`
	Jitter                     float64 `json:"jitter"`
	IgnoreSubscriptionOverride bool    `json:"ignoreSubscriptionOverride"`
}

func or[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// Resolve fills in the defaults.
func (p RetryPolicy) Resolve() Resolved {
	return Resolved{
		RetriesWithNoDelay:         or(p.RetriesWithNoDelay, DefaultRetriesWithNoDelay),
		MinimumDelayRetries:        or(p.MinimumDelayRetries, DefaultMinimumDelayRetries),
		MinimumDelay:               or(p.MinimumDelay, int64(DefaultMinimumDelay)),
		BackoffRetries:             or(p.BackoffRetries, DefaultBackoffRetries),
		MaximumDelay:               or(p.MaximumDelay, int64(DefaultMaximumDelay)),
		MaximumDelayRetries:        or(p.MaximumDelayRetries, DefaultMaximumDelayRetries),
		RetryBackoffFunction:       or(p.RetryBackoffFunction, BackoffLinear),
		Jitter:                     or(p.Jitter, 0),
		IgnoreSubscriptionOverride: or(p.IgnoreSubscriptionOverride, false),
	}
}

// Validate reports every problem with p under prefix ("retryPolicy").
// onRoom allows ignoreSubscriptionOverride.
func (p RetryPolicy) Validate(prefix string, onRoom bool, probs *api.Problems) {
	countsOK := true
	count := func(name string, v *int) {
		if v != nil && (*v < 0 || *v > MaxPhaseRetries) {
			probs.Add(prefix+"."+name, fmt.Sprintf("must be from 0 to %d", MaxPhaseRetries))
			countsOK = false
		}
	}
	count("retriesWithNoDelay", p.RetriesWithNoDelay)
	count("minimumDelayRetries", p.MinimumDelayRetries)
	count("backoffRetries", p.BackoffRetries)
	count("maximumDelayRetries", p.MaximumDelayRetries)
	delay := func(name string, v *int64) bool {
		if v != nil && (*v < 0 || *v > MaxPolicyDelay) {
			probs.Add(prefix+"."+name, fmt.Sprintf("must be from 0 to %d ms", int64(MaxPolicyDelay)))
			return false
		}
		return true
	}
	okMin, okMax := delay("minimumDelay", p.MinimumDelay), delay("maximumDelay", p.MaximumDelay)
	r := p.Resolve()
	if okMin && okMax && r.MinimumDelay > r.MaximumDelay {
		if p.MaximumDelay == nil { // name the field that was sent
			probs.Add(prefix+".minimumDelay", fmt.Sprintf("must be at most maximumDelay (%d ms by default)", r.MaximumDelay))
		} else {
			probs.Add(prefix+".maximumDelay", fmt.Sprintf("must be at least minimumDelay (%d ms)", r.MinimumDelay))
		}
	}
	switch r.RetryBackoffFunction {
	case BackoffLinear, BackoffArithmetic, BackoffExponential:
	case BackoffGeometric:
		if okMin && r.MinimumDelay < 1 && r.BackoffRetries > 1 {
			probs.Add(prefix+".minimumDelay", "must be at least 1 ms with the geometric function (it multiplies from it)")
		}
	default:
		probs.Add(prefix+".retryBackoffFunction", "must be linear, arithmetic, geometric or exponential")
	}
	if p.Jitter != nil && !ValidJitter(*p.Jitter) {
		probs.Add(prefix+".jitter", "must be from 0 to 1")
	}
	if p.IgnoreSubscriptionOverride != nil && !onRoom {
		probs.Add(prefix+".ignoreSubscriptionOverride", "is a room setting; a subscription cannot carry it")
	}
	if total := r.RetriesWithNoDelay + r.MinimumDelayRetries + r.BackoffRetries + r.MaximumDelayRetries; countsOK && total+1 > MaxTotalAttempts {
		probs.Add(prefix, fmt.Sprintf("allows %d attempts; at most %d", total+1, MaxTotalAttempts))
	}
}
