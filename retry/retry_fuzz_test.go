package retry

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/rooms"
)

// FuzzFourPhase: Validate never panics, and a policy that validates gives a
// finite schedule of MaxAttempts−1 retries whose delays are non-negative,
// at most maximumDelay, never decreasing from one retry to the next, with
// jitter kept inside [lo, hi] and under the cap; the policy survives a JSON
// round trip.
func FuzzFourPhase(f *testing.F) {
	// set is a bitmask of the fields present, in the order of the arguments.
	f.Add(uint16(0), 0, 0, int64(0), 0, int64(0), 0, "", 0.0, 0.5)
	f.Add(uint16(0xff), 3, 3, int64(5000), 10, int64(30000), 3, "linear", 0.0, 0.5)
	f.Add(uint16(0xff), 0, 0, int64(1), 1000, int64(rooms.MaxPolicyDelay), 0, "geometric", 1.0, 1.0)
	f.Add(uint16(0xff), 0, 0, int64(0), 62, int64(rooms.MaxPolicyDelay), 0, "exponential", 0.0, 0.0)
	f.Add(uint16(0xff), 0, 0, int64(0), 40, int64(rooms.MaxPolicyDelay), 0, "exponential", 0.25, 0.75)
	f.Add(uint16(0xff), 0, 0, int64(7), 999, int64(rooms.MaxPolicyDelay), 0, "arithmetic", 0.3, 0.1)
	f.Add(uint16(0xff), 250, 250, int64(1), 250, int64(2), 249, "exponential", 0.5, 0.5)
	f.Add(uint16(0xff), -1, 1001, int64(-1), math.MaxInt, int64(math.MaxInt64), math.MinInt, "quadratic", math.NaN(), 2.0)
	f.Add(uint16(0x3f), 0, 0, int64(30001), 0, int64(0), 0, "", math.Inf(1), -1.0)
	f.Fuzz(func(t *testing.T, set uint16, noDelay, minRetries int, minDelay int64, backoffRetries int,
		maxDelay int64, maxRetries int, function string, jitter, u float64) {
		var p rooms.RetryPolicy
		if set&1 != 0 {
			p.RetriesWithNoDelay = &noDelay
		}
		if set&2 != 0 {
			p.MinimumDelayRetries = &minRetries
		}
		if set&4 != 0 {
			p.MinimumDelay = &minDelay
		}
		if set&8 != 0 {
			p.BackoffRetries = &backoffRetries
		}
		if set&16 != 0 {
			p.MaximumDelay = &maxDelay
		}
		if set&32 != 0 {
			p.MaximumDelayRetries = &maxRetries
		}
		if set&64 != 0 {
			p.RetryBackoffFunction = &function
		}
		if set&128 != 0 {
			p.Jitter = &jitter
		}
		var probs apiProblems
		p.Validate("retryPolicy", true, &probs.Problems)
		if probs.Len() > 0 {
			return
		}
		checkRoundTrip(t, p)
		r := p.Resolve()
		policy := FourPhase{r}
		if n := policy.MaxAttempts(); n < 1 || n > rooms.MaxTotalAttempts {
			t.Fatalf("MaxAttempts = %d for %+v", n, r)
		}
		hi := time.Duration(r.MaximumDelay) * time.Millisecond
		u = unit(u)
		var prev time.Duration
		for k := 1; k < policy.MaxAttempts(); k++ {
			step, ok := policy.Next(k)
			if !ok {
				t.Fatalf("Next(%d) = none, MaxAttempts %d", k, policy.MaxAttempts())
			}
			if step.Delay < 0 || step.Delay > hi {
				t.Fatalf("retry %d (%s): delay %v outside [0, %v] for %+v", k, step.Phase, step.Delay, hi, r)
			}
			if step.Delay < prev {
				t.Fatalf("retry %d (%s): delay %v below the previous %v for %+v", k, step.Phase, step.Delay, prev, r)
			}
			prev = step.Delay
			checkStep(t, step, u, hi)
		}
		if _, ok := policy.Next(policy.MaxAttempts()); ok {
			t.Fatalf("Next(MaxAttempts) gives a step")
		}
		checkSchedule(t, policy)
	})
}

// FuzzExponential: room delivery settings that validate give retries whose
// delays are non-negative, capped (maxDeliveryDelay or DefaultMaxDelay),
// never decreasing, with jitter inside the step's range.
func FuzzExponential(f *testing.F) {
	f.Add(int64(1000), 2.0, 3, int64(0), 0.0, 0.5)
	f.Add(int64(1), 1.0, 1000, int64(1), 1.0, 1.0)
	f.Add(int64(rooms.MaxDeliveryDelay), rooms.MaxDeliveryDelayMultiplier, rooms.MaxDeliveryAttempts, int64(0), 0.5, 0.0)
	f.Add(int64(7), 1.0000001, 999, int64(rooms.MaxDeliveryDelay), 0.999, 0.123)
	f.Add(int64(0), math.NaN(), -1, int64(-1), math.Inf(-1), math.NaN())
	f.Fuzz(func(t *testing.T, delay int64, multiplier float64, attempts int, maxDelay int64, jitter, u float64) {
		room := rooms.NewRoomDefaults()
		patch := rooms.DeliveryPatch{}
		patch.DeliveryDelay.Set, patch.DeliveryDelay.Value = true, delay
		patch.DeliveryDelayMultiplier.Set, patch.DeliveryDelayMultiplier.Value = true, multiplier
		patch.DeliveryAttempts.Set, patch.DeliveryAttempts.Value = true, attempts
		patch.MaxDeliveryDelay.Set, patch.MaxDeliveryDelay.Value, patch.MaxDeliveryDelay.Null = true, maxDelay, maxDelay == 0
		patch.DeliveryJitter.Set, patch.DeliveryJitter.Value = true, jitter
		if err := patch.ApplyTo(&room); err != nil {
			return
		}
		policy, source := Effective(Target{Room: room})
		if source != SourceRoom {
			t.Fatalf("source = %q", source)
		}
		capDelay := DefaultMaxDelay
		if room.MaxDeliveryDelay > 0 {
			capDelay = time.Duration(room.MaxDeliveryDelay) * time.Millisecond
		}
		u = unit(u)
		var prev time.Duration
		for k := 1; k < policy.MaxAttempts(); k++ {
			step, ok := policy.Next(k)
			if !ok {
				t.Fatalf("Next(%d) = none, MaxAttempts %d", k, policy.MaxAttempts())
			}
			if step.Delay < 0 || step.Delay > capDelay {
				t.Fatalf("retry %d: delay %v outside [0, %v] for %+v", k, step.Delay, capDelay, policy)
			}
			if step.Delay < prev {
				t.Fatalf("retry %d: delay %v below the previous %v for %+v", k, step.Delay, prev, policy)
			}
			prev = step.Delay
			checkStep(t, step, u, capDelay)
		}
		checkSchedule(t, policy)
	})
}

// FuzzBackoff: for lo ≤ hi within the policy limits and 1 ≤ n ≤ num, each
// function starts at lo, ends at hi, stays inside [lo, hi] and never
// decreases in n. Backoff never panics on any input.
func FuzzBackoff(f *testing.F) {
	for _, fn := range []string{rooms.BackoffLinear, rooms.BackoffArithmetic, rooms.BackoffGeometric, rooms.BackoffExponential} {
		f.Add(fn, int64(5000), int64(30000), 10)
		f.Add(fn, int64(0), int64(rooms.MaxPolicyDelay), 62)
		f.Add(fn, int64(1), int64(rooms.MaxPolicyDelay), rooms.MaxPhaseRetries)
	}
	f.Add("exponential", int64(0), int64(rooms.MaxPolicyDelay), 40)
	f.Add("geometric", int64(3), int64(4), 999)
	f.Add("", int64(math.MinInt64), int64(math.MaxInt64), math.MaxInt)
	f.Fuzz(func(t *testing.T, function string, lo, hi int64, num int) {
		_ = Backoff(function, lo, hi, num/2, num) // any input: no panic
		_ = Backoff(function, hi, lo, 2, num)
		if lo < 0 || hi < lo || hi > rooms.MaxPolicyDelay || num < 1 || num > rooms.MaxPhaseRetries {
			return
		}
		if function == rooms.BackoffGeometric && lo < 1 && num > 1 {
			return // Validate refuses it
		}
		prev := lo
		for n := 1; n <= num; n++ {
			got := Backoff(function, lo, hi, n, num)
			switch {
			case got < lo || got > hi:
				t.Fatalf("Backoff(%q, %d, %d, %d, %d) = %d, outside [lo, hi]", function, lo, hi, n, num, got)
			case got < prev:
				t.Fatalf("Backoff(%q, %d, %d, %d, %d) = %d, below n−1's %d", function, lo, hi, n, num, got, prev)
			case n == 1 && got != lo:
				t.Fatalf("Backoff(%q, %d, %d, 1, %d) = %d, want lo", function, lo, hi, num, got)
			case n == num && num > 1 && got != hi:
				t.Fatalf("Backoff(%q, %d, %d, %d, %d) = %d, want hi", function, lo, hi, n, num, got)
			}
			prev = got
		}
	})
}

// FuzzRetryPolicyJSON: the strict decoder never panics; what it accepts
// encodes and decodes to itself, and an unknown field is named under
// retryPolicy.
func FuzzRetryPolicyJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`,
		`{"retriesWithNoDelay":3,"minimumDelayRetries":3,"minimumDelay":5000,"backoffRetries":10,"maximumDelay":30000,"maximumDelayRetries":3,"retryBackoffFunction":"linear","jitter":0.2,"ignoreSubscriptionOverride":true}`,
		`{"retriesWithNoDelay":null}`, `{"maximumDelay":1e400}`, `{"jitter":"NaN"}`, `{"backoffRetries":1.5}`,
		`{"retryBackofFunction":"linear"}`, `{"minimumDelay":1,"minimumDelay":2}`, `{"":0}`, `[]`, `"linear"`,
		`{"retryBackoffFunction":"\u0000"}`, `{"maximumDelay":9223372036854775808}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p rooms.RetryPolicy
		if err := json.Unmarshal(b, &p); err != nil {
			return
		}
		var probs apiProblems
		p.Validate("retryPolicy", false, &probs.Problems) // must not panic
		checkRoundTrip(t, p)
	})
}

func checkRoundTrip(t *testing.T, p rooms.RetryPolicy) {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("policy %+v does not encode: %v", p, err)
	}
	var back rooms.RetryPolicy
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("encoded policy %s does not decode: %v", b, err)
	}
	if !reflect.DeepEqual(p, back) {
		t.Fatalf("round trip through %s changed the policy", b)
	}
}

// checkStep: a drawn delay lies in the step's range, which is non-negative
// and under both the step's cap and the policy's.
func checkStep(t *testing.T, s Step, u float64, capDelay time.Duration) {
	t.Helper()
	lo, hi := s.Range()
	d := s.Draw(u)
	if lo < 0 || lo > hi || d < lo || d > hi {
		t.Fatalf("step %+v: Draw(%v) = %v outside [%v, %v]", s, u, d, lo, hi)
	}
	if hi > capDelay || (s.Max > 0 && hi > s.Max) {
		t.Fatalf("step %+v: highest delay %v over the cap %v", s, hi, capDelay)
	}
	want := s.Delay
	if s.Max > 0 && want > s.Max {
		want = s.Max
	}
	if s.Jitter == 0 && (lo != hi || d != want) {
		t.Fatalf("step %+v without jitter: range [%v, %v], Draw %v", s, lo, hi, d)
	}
}

// checkSchedule: one entry per retry, attempts numbered from 2, and the
// times since the first attempt ordered and never decreasing.
func checkSchedule(t *testing.T, p Policy) {
	t.Helper()
	sched := Schedule(p)
	if len(sched) != p.MaxAttempts()-1 {
		t.Fatalf("schedule has %d retries, MaxAttempts %d", len(sched), p.MaxAttempts())
	}
	var prev Scheduled
	for i, s := range sched {
		if s.Attempt != i+2 {
			t.Fatalf("entry %d is attempt %d", i, s.Attempt)
		}
		if s.SinceMin < 0 || s.SinceMin > s.Since || s.Since > s.SinceMax {
			t.Fatalf("attempt %d: since %v not in [%v, %v]", s.Attempt, s.Since, s.SinceMin, s.SinceMax)
		}
		if s.Since < prev.Since || s.SinceMin < prev.SinceMin || s.SinceMax < prev.SinceMax {
			t.Fatalf("attempt %d comes before attempt %d: %+v then %+v", s.Attempt, prev.Attempt, prev, s)
		}
		prev = s
	}
}

// unit maps any float onto [0, 1], as a uniform random number would be.
func unit(u float64) float64 {
	if math.IsNaN(u) || math.IsInf(u, 0) {
		return 0.5
	}
	return math.Abs(u - math.Trunc(u))
}

// FuzzPreview drives POST /v1/retry-schedule:preview, decoding and
// validation included, with any body: never a 500 or a panic; a schedule it
// answers has one entry per retry, delays from 0 to a week with
// delayMin ≤ delay ≤ delayMax, and times since the first attempt that never
// decrease.
func FuzzPreview(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `null`, `{"deliveryDelay":1000,"deliveryDelayMultiplier":2,"deliveryAttempts":5,"deliveryJitter":0.2}`,
		`{"deliveryDelay":604800000,"deliveryDelayMultiplier":1000,"deliveryAttempts":1000,"maxDeliveryDelay":null}`,
		`{"retryPolicy":{"minimumDelay":0,"backoffRetries":40,"maximumDelay":604800000,"retryBackoffFunction":"exponential"}}`,
		`{"retryPolicy":{"retriesWithNoDelay":250,"minimumDelayRetries":250,"backoffRetries":250,"maximumDelayRetries":249,"jitter":1}}`,
		`{"retryPolicy":{"retryBackoffFunction":"geometric","minimumDelay":0}}`, `{"retryPolicy":{"x":1}}`,
		`{"deliveryDelay":null}`, `{"deliveryJitter":"NaN"}`, `{"deliveryDelay":1e400}`, `{"deliveryAttempts":1,"deliveryAttempts":null}`,
	} {
		f.Add([]byte(s))
	}
	e := echo.New()
	e.HTTPErrorHandler = api.ErrorHandler(slog.New(slog.DiscardHandler))
	Routes(e.Group("/v1"), nil) // the preview needs no subscription
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/retry-schedule:preview", bytes.NewReader(body))
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			var p api.Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != rec.Code || len(p.Errors) == 0 {
				t.Fatalf("%d without a problem naming fields: %s", rec.Code, rec.Body)
			}
			return
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var out ScheduleResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("schedule %s: %v", rec.Body, err)
		}
		if len(out.Attempts) != out.MaxAttempts-1 || out.MaxAttempts > rooms.MaxTotalAttempts {
			t.Fatalf("%d attempts listed, maxAttempts %d", len(out.Attempts), out.MaxAttempts)
		}
		var prev AttemptResponse
		for _, a := range out.Attempts {
			if a.DelayMin < 0 || a.DelayMin > a.Delay || a.Delay > a.DelayMax || a.DelayMax > rooms.MaxDeliveryDelay ||
				a.SinceFirstAttempt < prev.SinceFirstAttempt || a.SinceFirstAttemptMin < prev.SinceFirstAttemptMin ||
				a.SinceFirstAttemptMax < prev.SinceFirstAttemptMax {
				t.Fatalf("attempt %+v after %+v", a, prev)
			}
			prev = a
		}
	})
}
