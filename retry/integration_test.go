package retry_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

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

// riHit is one request the receiver got.
type riHit struct {
	At      time.Time
	Attempt string
	EventID string
}

// riReceiver answers every request 503 (retryable, no Retry-After) and
// records when each arrived.
type riReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []riHit
}

func newRIReceiver(t *testing.T) *riReceiver {
	t.Helper()
	rc := &riReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		rc.hits = append(rc.hits, riHit{At: time.Now(), Attempt: r.Header.Get("X-Attempt"), EventID: r.Header.Get("Webhook-Id")})
		rc.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *riReceiver) snapshot() []riHit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]riHit(nil), rc.hits...)
}

// riWait polls cond every 20 ms until it holds, failing after within.
func riWait(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// riDecode re-encodes a decoded JSON answer into out.
func riDecode(t *testing.T, in any, out any) {
	t.Helper()
	raw, _ := json.Marshal(in)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
}

// TestRetryPolicyActiveMQ: a PUSH delivery that keeps failing follows the
// room's four-phase retry policy end to end, through the dispatcher and
// ActiveMQ Classic's scheduler: as many requests as the policy's
// maxAttempts, spaced as its retry-schedule says (never earlier, at most
// riSchedulerLate later; the immediate retry within riImmediate), each
// attempt logged with its planned delay, and a dead letter for attempts
// exhausted at the end.
func TestRetryPolicyActiveMQ(t *testing.T) {
	brokerURL := realBroker(t)
	rc := newRIReceiver(t)
	base := startService(t, map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           fmt.Sprintf("push-retry-%d", time.Now().UnixNano()),
		"OUTBOX_POLL_INTERVAL": "100ms",
	})
	c := client{t: t, base: base}
	room := fmt.Sprintf("retry-%d", time.Now().UnixNano())
	// 7 attempts: 0, 1000, then 1000, 2000, 3000 (linear), then 3000 ms.
	c.call("POST", "/v1/rooms", `{"identifier":"`+room+`","managerIdentifier":"m","retryPolicy":`+rtPolicyBody+`}`, 201)
	c.call("POST", "/v1/rooms/"+room+"/event-types", `{"identifier":"tick"}`, 201)
	c.call("POST", "/v1/rooms/"+room+"/event-types/tick/versions", `{"schema":true}`, 201)
	sub := c.call("POST", "/v1/rooms/"+room+"/subscriptions", `{"type":"PUSH","pushUrl":"`+rc.srv.URL+`/hook","eventTypes":[{"eventType":"tick"}]}`, 201)
	subPath := "/v1/rooms/" + room + "/subscriptions/" + sub["id"].(string)

	var sched rtSchedule
	riDecode(t, c.call("GET", subPath+"/retry-schedule", "", 200), &sched)
	if sched.MaxAttempts != len(rtPolicySteps)+1 || len(sched.Attempts) != len(rtPolicySteps) {
		t.Fatalf("schedule: %+v", sched)
	}
	for i, st := range rtPolicySteps {
		if a := sched.Attempts[i]; a.Phase != st.Phase || a.Delay != st.Delay {
			t.Fatalf("schedule attempts[%d] = %+v, want %+v", i, a, st)
		}
	}

	ev := c.call("POST", "/v1/rooms/"+room+"/messages", `{"eventType":"tick","payload":{"n":1}}`, 202)
	eventID := ev["eventId"].(string)
	last := sched.Attempts[len(sched.Attempts)-1].SinceFirstAttempt
	riWait(t, time.Duration(last)*time.Millisecond+time.Duration(sched.MaxAttempts)*riSchedulerLate+5*time.Second,
		fmt.Sprintf("%d requests at the receiver", sched.MaxAttempts), func() bool { return len(rc.snapshot()) >= sched.MaxAttempts })

	// The last attempt's failure ends it: a dead letter, and no more requests.
	var dls struct {
		Items []struct {
			EventID        string `json:"eventId"`
			Attempts       int    `json:"attempts"`
			Reason         string `json:"reason"`
			LastStatusCode *int   `json:"lastStatusCode"`
		} `json:"items"`
	}
	riWait(t, 5*time.Second, "dead letter", func() bool {
		riDecode(t, c.call("GET", subPath+"/dead-letters", "", 200), &dls)
		return len(dls.Items) > 0
	})
	time.Sleep(300 * time.Millisecond) // a stray request would show by now
	hits := rc.snapshot()
	if len(hits) != sched.MaxAttempts {
		t.Fatalf("the receiver got %d requests, want maxAttempts %d", len(hits), sched.MaxAttempts)
	}
	if len(dls.Items) != 1 {
		t.Fatalf("%d dead letters, want 1: %+v", len(dls.Items), dls.Items)
	}
	if dl := dls.Items[0]; dl.EventID != eventID || dl.Reason != "attempts_exhausted" || dl.Attempts != sched.MaxAttempts ||
		dl.LastStatusCode == nil || *dl.LastStatusCode != http.StatusServiceUnavailable {
		t.Errorf("dead letter %+v, want event %s, attempts_exhausted after %d attempts, last status 503", dl, eventID, sched.MaxAttempts)
	}

	for i, h := range hits {
		if h.EventID != eventID || h.Attempt != fmt.Sprint(i+1) {
			t.Errorf("request %d: event %s, X-Attempt %s; want %s, %d", i+1, h.EventID, h.Attempt, eventID, i+1)
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
	var log struct {
		Items []struct {
			EventID        string `json:"eventId"`
			Attempt        int    `json:"attempt"`
			ScheduledDelay int64  `json:"scheduledDelay"`
		} `json:"items"`
	}
	riDecode(t, c.call("GET", subPath+"/deliveries?limit=100", "", 200), &log)
	sort.Slice(log.Items, func(i, j int) bool { return log.Items[i].Attempt < log.Items[j].Attempt })
	if len(log.Items) != sched.MaxAttempts {
		t.Fatalf("the delivery log has %d rows, want %d: %+v", len(log.Items), sched.MaxAttempts, log.Items)
	}
	for i, d := range log.Items {
		var planned int64 // the first attempt is not delayed
		if i > 0 {
			planned = sched.Attempts[i-1].Delay
		}
		if d.EventID != eventID || d.Attempt != i+1 || d.ScheduledDelay != planned {
			t.Errorf("log row %d: %+v, want attempt %d scheduled after %d ms", i, d, i+1, planned)
		}
	}
}
