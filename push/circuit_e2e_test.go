package push_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/subscriptions"
)

// deadBound is how many requests a dead endpoint gets from one dispatcher
// process before its circuit opens: the breaker's minimumAttempts failures
// (20 by default), and the requests already under way when the last of
// them came back (at most PUSH_PER_SUBSCRIPTION − 1, 15 by default).
const deadBound = 20 + 16 - 1

// TestCircuitSavesRetryBudget: 1,000 events go to an endpoint that answers
// 503. The circuit opens after at most deadBound requests; after that the
// endpoint gets only the probes, one per cool-down (1 s, 2 s, 4 s), and no
// message is dead-lettered, though each allows 10 attempts 200 ms apart
// (exhausted within 2 s without the breaker). Once the endpoint answers 200
// the next probe closes the circuit and all 1,000 are delivered.
func TestCircuitSavesRetryBudget(t *testing.T) {
	t.Parallel()
	apptest.Backends(t, func(t *testing.T, env map[string]string) {
		var status atomic.Int32
		status.Store(http.StatusServiceUnavailable)
		var mu sync.Mutex
		delivered := map[string]bool{}
		hook := apptest.NewHook(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			code := int(status.Load())
			if code == http.StatusOK {
				mu.Lock()
				delivered[r.Header.Get("Webhook-Id")] = true
				mu.Unlock()
			}
			w.WriteHeader(code)
		})
		c := apptest.StartService(t, env)
		sub := c.SetupPushRoom("dead-endpoint", `"deliveryDelay":200,"deliveryDelayMultiplier":1,"deliveryAttempts":10,`+
			`"circuitBreaker":{"cooldown":1000,"maxCooldown":4000}`, hook.URL())

		start := time.Now()
		for batch := range 10 {
			var msgs []string
			for i := range 100 {
				msgs = append(msgs, fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d}}`, batch*100+i))
			}
			var out struct {
				Items []publish.PublishResponse `json:"items"`
			}
			c.CallJSON("POST", "/v1/rooms/dead-endpoint/messages:batch", `{"messages":[`+strings.Join(msgs, ",")+`]}`, http.StatusAccepted, &out)
		}

		// Three failed probes: 1 s, 2 s and 4 s after the circuit opened.
		// A scrape queries the database: a few a second, not one every 5 ms.
		var scraped time.Time
		apitest.EventuallyWithin(t, 60*time.Second, "3 failed probes", func() bool {
			if time.Since(scraped) < 200*time.Millisecond {
				return false
			}
			scraped = time.Now()
			return apptest.Sum(apptest.Scrape(t, c.Base), "messaging_push_circuit_probes_total", "result", "failed") >= 3
		})
		requests := hook.Count()
		var s subscriptions.Response
		c.CallJSON("GET", sub.Path(), "", http.StatusOK, &s)
		t.Logf("%s after publishing: %d requests to the dead endpoint; circuit %s since %v, cool-down %d ms",
			time.Since(start).Round(time.Millisecond), requests, s.Circuit.State, s.Circuit.OpenedAt, deref(s.Circuit.Cooldown))
		if requests > deadBound+3 {
			t.Errorf("the dead endpoint got %d requests; want at most %d before the circuit opened and 3 probes", requests, deadBound)
		}
		if s.Circuit.State == subscriptions.CircuitClosed || s.Circuit.LastStatusCode == nil || *s.Circuit.LastStatusCode != 503 {
			t.Errorf("circuit %+v, want open or half-open after a 503", *s.Circuit)
		}
		if dls := sub.DeadLetters(); len(dls) != 0 {
			t.Errorf("%d dead letters while the circuit held the messages", len(dls))
		}

		status.Store(http.StatusOK)
		recovered := time.Now()
		apitest.EventuallyWithin(t, 60*time.Second, "all 1000 delivered", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(delivered) == 1000
		})
		t.Logf("all 1000 delivered %s after the endpoint recovered; %d requests in all",
			time.Since(recovered).Round(time.Millisecond), hook.Count())
		c.CallJSON("GET", sub.Path(), "", http.StatusOK, &s)
		if s.Circuit.State != subscriptions.CircuitClosed {
			t.Errorf("circuit %s after the recovery, want closed", s.Circuit.State)
		}
		if dls := sub.DeadLetters(); len(dls) != 0 {
			t.Errorf("%d dead letters", len(dls))
		}
		m := apptest.Scrape(t, c.Base)
		if n := apptest.Sum(m, "messaging_push_circuit_opened_total"); n != 1 {
			t.Errorf("circuits opened: %v, want 1", n)
		}
		if n := apptest.Sum(m, "messaging_push_circuit_probes_total", "result", "succeeded"); n != 1 {
			t.Errorf("successful probes: %v, want 1", n)
		}
		if n := apptest.Sum(m, "messaging_push_circuits_open"); n != 0 {
			t.Errorf("open circuits: %v, want 0", n)
		}
	})
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// TestCircuitGone: an endpoint that answers 410 Gone opens the circuit at
// once; its message is retried when the endpoint is back (after the first
// probe), not dead-lettered as another 4xx would be.
func TestCircuitGone(t *testing.T) {
	t.Parallel()
	hook := apptest.SequenceHook(t, http.StatusGone, http.StatusOK)
	c := apptest.StartService(t, map[string]string{"OUTBOX_POLL_INTERVAL": "100ms"})
	sub := c.SetupPushRoom("gone", `"deliveryDelay":100,"deliveryAttempts":3,"circuitBreaker":{"cooldown":1000}`, hook.URL())
	ev := c.Publish("gone", `{"eventType":"tick","payload":{}}`)
	ds := sub.WaitStatuses(ev.EventID, 15*time.Second, "failed", "deferred", "delivered")
	if ds[0].StatusCode == nil || *ds[0].StatusCode != http.StatusGone {
		t.Errorf("first attempt: %+v, want the 410", ds[0])
	}
	if n := apptest.Sum(apptest.Scrape(t, c.Base), "messaging_push_circuit_opened_total", "reason", "gone"); n != 1 {
		t.Errorf("circuits opened for gone: %v, want 1", n)
	}
	if reqs := hook.Requests(); len(reqs) != 2 || reqs[1].Header.Get("X-Attempt") != "2" {
		t.Errorf("%d requests, want 2: the 410 and the probe, at attempt 2", len(reqs))
	}
}
