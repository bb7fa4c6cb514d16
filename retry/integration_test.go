package retry_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/store/storetest"
)

// riSchedulerLate is how much later than its planned delay a scheduled
// retry may reach the receiver through ActiveMQ Classic. Its scheduler
// (AMQ_SCHEDULED_DELAY) releases due messages in rounds about 500 ms apart:
// measured on this machine (ActiveMQ Classic at 127.0.0.1:61623, 10 runs of
// TestRetryPolicyActiveMQ, 50 scheduled gaps of 1 to 3 s) a retry came 6 to
// 530 ms late, median 497 ms, never early. The gap also holds the failed
// response, the outcome's write to PostgreSQL and the resend; the bound
// leaves about 200 ms for a loaded machine.
const riSchedulerLate = 750 * time.Millisecond

// riImmediate bounds a retry without delay: it bypasses the scheduler (no
// AMQ_SCHEDULED_DELAY), so it is a database write and a broker round trip.
// Measured in the same runs: 5 to 15 ms; the bound stays well below the
// scheduler's rounds.
const riImmediate = 300 * time.Millisecond

// TestRetryPolicyActiveMQ: a PUSH delivery that keeps failing follows the
// room's four-phase retry policy end to end, through the dispatcher and
// ActiveMQ Classic's scheduler: as many requests as the policy's
// maxAttempts, spaced as its retry-schedule says (never earlier, at most
// riSchedulerLate later; the immediate retry within riImmediate), each
// attempt logged with its planned delay, and a dead letter for attempts
// exhausted at the end.
func TestRetryPolicyActiveMQ(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	h, _ := apptest.StatusHook(t, http.StatusServiceUnavailable) // retryable, no Retry-After
	c := apptest.StartService(t, map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	})
	// 7 attempts: 0, 1000, then 1000, 2000, 3000 (linear), then 3000 ms.
	sub := c.SetupPushRoom("retry", `"retryPolicy":`+rtPolicyBody, h.URL())

	var sched retry.ScheduleResponse
	c.CallJSON("GET", sub.Path()+"/retry-schedule", "", http.StatusOK, &sched)
	if sched.MaxAttempts != len(rtPolicySteps)+1 || len(sched.Attempts) != len(rtPolicySteps) {
		t.Fatalf("schedule: %+v", sched)
	}
	for i, st := range rtPolicySteps {
		if a := sched.Attempts[i]; a.Phase != st.Phase || a.Delay != st.Delay {
			t.Fatalf("schedule attempts[%d] = %+v, want %+v", i, a, st)
		}
	}

	eventID := c.Publish("retry", `{"eventType":"tick","payload":{"n":1}}`).EventID
	last := sched.Attempts[len(sched.Attempts)-1].SinceFirstAttempt
	h.WaitFor(sched.MaxAttempts, time.Duration(last)*time.Millisecond+time.Duration(sched.MaxAttempts)*riSchedulerLate+5*time.Second)

	// The last attempt's failure ends it: the log ends in the dead letter, and
	// a further attempt would have been logged before it was sent, so the
	// receiver has had every request it will get.
	statuses := make([]string, sched.MaxAttempts)
	for i := range statuses {
		statuses[i] = "failed"
	}
	statuses[len(statuses)-1] = "dead_lettered"
	log := sub.WaitStatuses(eventID, 5*time.Second, statuses...)
	hits := h.Requests()
	if len(hits) != sched.MaxAttempts {
		t.Fatalf("the receiver got %d requests, want maxAttempts %d", len(hits), sched.MaxAttempts)
	}
	dls := sub.DeadLetters()
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1: %+v", len(dls), dls)
	}
	if dl := dls[0]; dl.EventID != eventID || dl.Reason != "attempts_exhausted" || dl.Attempts != sched.MaxAttempts ||
		dl.LastStatusCode == nil || *dl.LastStatusCode != http.StatusServiceUnavailable {
		t.Errorf("dead letter %+v, want event %s, attempts_exhausted after %d attempts, last status 503", dl, eventID, sched.MaxAttempts)
	}

	for i, r := range hits {
		if id, attempt := r.Header.Get("Webhook-Id"), r.Header.Get("X-Attempt"); id != eventID || attempt != fmt.Sprint(i+1) {
			t.Errorf("request %d: event %s, X-Attempt %s; want %s, %d", i+1, id, attempt, eventID, i+1)
		}
	}
	var worst time.Duration
	for i, a := range sched.Attempts {
		planned := time.Duration(a.Delay) * time.Millisecond
		gap := hits[i+1].At.Sub(hits[i].At)
		late := gap - planned
		worst = max(worst, late)
		t.Logf("attempt %d (%s): planned %v after the failure, came %v later (%+v)",
			a.Attempt, a.Phase, planned, gap.Round(time.Millisecond), late.Round(time.Millisecond))
		switch {
		case a.Phase == "immediate" && gap > riImmediate:
			t.Errorf("attempt %d: the immediate retry took %v, want under %v", a.Attempt, gap, riImmediate)
		case late < -5*time.Millisecond:
			t.Errorf("attempt %d came %v early", a.Attempt, -late)
		case late > riSchedulerLate:
			t.Errorf("attempt %d came %v late, want at most %v", a.Attempt, late, riSchedulerLate)
		}
	}
	t.Logf("latest retry: %v after its planned delay", worst.Round(time.Millisecond))

	// The delivery log records the delay each attempt was scheduled with.
	for i, d := range log {
		var planned int64 // the first attempt is not delayed
		if i > 0 {
			planned = sched.Attempts[i-1].Delay
		}
		if d.EventID != eventID || d.Attempt != i+1 || d.ScheduledDelay != planned {
			t.Errorf("log row %d: %+v, want attempt %d scheduled after %d ms", i, d, i+1, planned)
		}
	}
}
