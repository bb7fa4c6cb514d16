package retry

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/rooms"
)

const ms = time.Millisecond

func TestExponential(t *testing.T) {
	t.Parallel()
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
		{"default cap", Exponential{Delay: 1000 * ms, Multiplier: 1000, Attempts: 1000}, 900, DefaultMaxDelay, true},
		{"maxDeliveryDelay caps", Exponential{Delay: 1000 * ms, Multiplier: 10, Attempts: 10, MaxDelay: 5 * time.Second}, 3, 5 * time.Second, true},
		{"below the cap", Exponential{Delay: 1000 * ms, Multiplier: 10, Attempts: 10, MaxDelay: 5 * time.Second}, 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			step, ok := tc.p.Next(tc.attempt)
			if step.Delay != tc.want || ok != tc.ok {
				t.Errorf("Next(%d) = %v, %v; want %v, %v", tc.attempt, step.Delay, ok, tc.want, tc.ok)
			}
			if ok && step.Phase != PhaseExponential {
				t.Errorf("phase %q", step.Phase)
			}
		})
	}
	if n := (Exponential{Attempts: 5}).MaxAttempts(); n != 5 {
		t.Errorf("MaxAttempts %d", n)
	}
}

// TestBackoffVectors: MIN 5000, MAX 260000, NUM 10, values worked out
// independently (exact rational arithmetic, floored).
func TestBackoffVectors(t *testing.T) {
	t.Parallel()
	want := map[string][]int64{
		rooms.BackoffLinear:      {5000, 33333, 61666, 90000, 118333, 146666, 175000, 203333, 231666, 260000},
		rooms.BackoffArithmetic:  {5000, 10666, 22000, 39000, 61666, 90000, 124000, 163666, 209000, 260000},
		rooms.BackoffGeometric:   {5000, 7755, 12031, 18662, 28949, 44906, 69658, 108053, 167612, 260000},
		rooms.BackoffExponential: {5000, 5499, 6497, 8493, 12485, 20469, 36438, 68375, 132250, 260000},
	}
	for fn, vec := range want {
		for n := 1; n <= 10; n++ {
			if got := Backoff(fn, 5000, 260000, n, 10); got != vec[n-1] {
				t.Errorf("%s n=%d: %d, want %d", fn, n, got, vec[n-1])
			}
		}
	}
}

func TestBackoffEdges(t *testing.T) {
	t.Parallel()
	for _, fn := range []string{rooms.BackoffLinear, rooms.BackoffArithmetic, rooms.BackoffGeometric, rooms.BackoffExponential} {
		if got := Backoff(fn, 5000, 9000, 1, 1); got != 5000 {
			t.Errorf("%s NUM=1: %d, want MIN", fn, got)
		}
		for n := 1; n <= 4; n++ {
			if got := Backoff(fn, 7000, 7000, n, 4); got != 7000 {
				t.Errorf("%s MIN=MAX n=%d: %d", fn, n, got)
			}
		}
		if got := Backoff(fn, 1, 600000000, 1000, 1000); got != 600000000 {
			t.Errorf("%s large NUM ends at MAX: %d", fn, got)
		}
		prev := int64(-1)
		for n := 1; n <= 200; n++ { // monotone, within [MIN, MAX], even for large NUM
			got := Backoff(fn, 10, 100000, n, 200)
			if got < prev || got < 10 || got > 100000 {
				t.Fatalf("%s n=%d: %d after %d", fn, n, got, prev)
			}
			prev = got
		}
	}
}

func TestFourPhase(t *testing.T) {
	t.Parallel()
	p := FourPhase{rooms.RetryPolicy{
		RetriesWithNoDelay: ptr(2), MinimumDelayRetries: ptr(1), MinimumDelay: ptr(int64(5000)),
		BackoffRetries: ptr(3), MaximumDelay: ptr(int64(20000)), MaximumDelayRetries: ptr(2),
	}.Resolve()}
	if p.MaxAttempts() != 1+2+1+3+2 {
		t.Fatalf("MaxAttempts %d", p.MaxAttempts())
	}
	want := []struct {
		phase string
		delay int64
	}{
		{PhaseImmediate, 0}, {PhaseImmediate, 0}, // after attempts 1, 2
		{PhasePreBackoff, 5000},
		{PhaseBackoff, 5000}, {PhaseBackoff, 12500}, {PhaseBackoff, 20000}, // linear, NUM 3
		{PhasePostBackoff, 20000}, {PhasePostBackoff, 20000},
	}
	for i, w := range want {
		step, ok := p.Next(i + 1)
		if !ok || step.Phase != w.phase || step.Delay != time.Duration(w.delay)*ms {
			t.Errorf("after attempt %d: %+v %v, want %s %d ms", i+1, step, ok, w.phase, w.delay)
		}
	}
	if _, ok := p.Next(len(want) + 1); ok {
		t.Error("a retry past the last phase")
	}

	defaults := FourPhase{rooms.RetryPolicy{}.Resolve()}
	if defaults.MaxAttempts() != 1+3+3+10+3 {
		t.Errorf("defaults allow %d attempts", defaults.MaxAttempts())
	}
	zero := FourPhase{rooms.RetryPolicy{RetriesWithNoDelay: ptr(0), MinimumDelayRetries: ptr(0), BackoffRetries: ptr(0), MaximumDelayRetries: ptr(1)}.Resolve()}
	if s, ok := zero.Next(1); !ok || s.Phase != PhasePostBackoff || s.Delay != 30*time.Second {
		t.Errorf("only post-backoff: %+v %v", s, ok)
	}
	if _, ok := zero.Next(2); ok {
		t.Error("zero counts: a second retry")
	}
}

func TestJitterBounds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	step := Step{Delay: 10 * time.Second, Jitter: 0.2, Max: 11 * time.Second}
	lo, hi := step.Range()
	if lo != 8*time.Second || hi != 11*time.Second {
		t.Fatalf("range %v..%v, want 8s..11s (capped)", lo, hi)
	}
	var below, above int
	for range 10000 {
		d := step.Draw(r.Float64())
		if d < lo || d > hi {
			t.Fatalf("draw %v outside %v..%v", d, lo, hi)
		}
		if d < 9*time.Second {
			below++
		}
		if d == 11*time.Second {
			above++
		}
	}
	// Uniform on [8 s, 12 s]: a quarter below 9 s, a quarter capped at 11 s.
	for name, n := range map[string]int{"below 9s": below, "capped": above} {
		if n < 2200 || n > 2800 {
			t.Errorf("%s: %d of 10000, want about 2500", name, n)
		}
	}
	if d := (Step{Delay: 5 * time.Second}).Draw(0.9); d != 5*time.Second {
		t.Errorf("no jitter: %v", d)
	}
}

func TestEffectivePrecedence(t *testing.T) {
	t.Parallel()
	room := rooms.Room{DeliveryDelay: 1000, DeliveryDelayMultiplier: 2, DeliveryAttempts: 5, MaxDeliveryDelay: 60000}
	roomPolicy := &rooms.RetryPolicy{RetriesWithNoDelay: ptr(1)}
	roomIgnoring := &rooms.RetryPolicy{RetriesWithNoDelay: ptr(4), IgnoreSubscriptionOverride: ptr(true)}
	subPolicy := &rooms.RetryPolicy{RetriesWithNoDelay: ptr(7)}
	cases := []struct {
		name       string
		roomPolicy *rooms.RetryPolicy
		sub        SubscriptionSettings
		want       Policy
		source     string
	}{
		{"room's exponential", nil, SubscriptionSettings{},
			Exponential{Delay: time.Second, Multiplier: 2, Attempts: 5, MaxDelay: time.Minute}, SourceRoom},
		{"field-by-field overrides", nil, SubscriptionSettings{DeliveryDelay: ptr(int64(300)), DeliveryAttempts: ptr(2), MaxDeliveryDelay: ptr(int64(900)), DeliveryJitter: ptr(0.1)},
			Exponential{Delay: 300 * ms, Multiplier: 2, Attempts: 2, MaxDelay: 900 * ms, Jitter: 0.1}, SourceRoomWithOverrides},
		{"room's four-phase", roomPolicy, SubscriptionSettings{DeliveryDelay: ptr(int64(300))},
			FourPhase{roomPolicy.Resolve()}, SourceRoom},
		{"subscription's policy replaces the room's", roomPolicy, SubscriptionSettings{RetryPolicy: subPolicy},
			FourPhase{subPolicy.Resolve()}, SourceSubscription},
		{"subscription's policy over the room's exponential", nil, SubscriptionSettings{RetryPolicy: subPolicy},
			FourPhase{subPolicy.Resolve()}, SourceSubscription},
		{"room ignores subscription overrides", roomIgnoring, SubscriptionSettings{RetryPolicy: subPolicy, DeliveryAttempts: ptr(9)},
			FourPhase{roomIgnoring.Resolve()}, SourceRoom},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := room
			r.RetryPolicy = tc.roomPolicy
			got, source := Effective(Target{Room: r, Subscription: tc.sub})
			if got != tc.want || source != tc.source {
				t.Errorf("got %+v from %s, want %+v from %s", got, source, tc.want, tc.source)
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	s := Schedule(Exponential{Delay: 100 * ms, Multiplier: 2, Attempts: 4, Jitter: 0.5})
	if len(s) != 3 {
		t.Fatalf("%d retries, want 3", len(s))
	}
	// Base delays 200, 400, 800 ms; with jitter 0.5 each spans [d/2, 3d/2].
	wantSince := []time.Duration{200 * ms, 600 * ms, 1400 * ms}
	for i, sc := range s {
		if sc.Attempt != i+2 || sc.Since != wantSince[i] || sc.SinceMin != wantSince[i]/2 || sc.SinceMax != wantSince[i]*3/2 {
			t.Errorf("retry %d: %+v", i, sc)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	fn := func(s string) *string { return &s }
	cases := []struct {
		name  string
		p     rooms.RetryPolicy
		room  bool
		field string
	}{
		{"negative count", rooms.RetryPolicy{BackoffRetries: ptr(-1)}, true, "retryPolicy.backoffRetries"},
		{"negative delay", rooms.RetryPolicy{MinimumDelay: ptr(int64(-5))}, true, "retryPolicy.minimumDelay"},
		{"MIN > MAX", rooms.RetryPolicy{MinimumDelay: ptr(int64(9000)), MaximumDelay: ptr(int64(8000))}, true, "retryPolicy.maximumDelay"},
		{"MIN > default MAX", rooms.RetryPolicy{MinimumDelay: ptr(int64(40000))}, true, "retryPolicy.minimumDelay"}, // the field sent,
		{"geometric from 0", rooms.RetryPolicy{MinimumDelay: ptr(int64(0)), RetryBackoffFunction: fn("geometric")}, true, "retryPolicy.minimumDelay"},
		{"unknown function", rooms.RetryPolicy{RetryBackoffFunction: fn("fibonacci")}, true, "retryPolicy.retryBackoffFunction"},
		{"jitter above 1", rooms.RetryPolicy{Jitter: ptr(1.5)}, true, "retryPolicy.jitter"},
		{"ignore override on a subscription", rooms.RetryPolicy{IgnoreSubscriptionOverride: ptr(true)}, false, "retryPolicy.ignoreSubscriptionOverride"},
		{"too many attempts", rooms.RetryPolicy{BackoffRetries: ptr(1000)}, true, "retryPolicy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var probs apiProblems
			tc.p.Validate("retryPolicy", tc.room, &probs.Problems)
			if !probs.has(tc.field) {
				t.Errorf("no problem with %s: %v", tc.field, probs.Err())
			}
		})
	}
	var ok apiProblems
	rooms.RetryPolicy{MinimumDelay: ptr(int64(0)), RetryBackoffFunction: fn("linear")}.Validate("retryPolicy", true, &ok.Problems)
	if ok.Err() != nil {
		t.Errorf("a valid policy: %v", ok.Err())
	}
}
