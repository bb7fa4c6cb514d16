package push_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/store/storetest"
)

// rateTolerance is the most requests that may start in any second at rate
// per second: rate × (1 s + the 100 ms a slot may be used late) + 1 (see
// push.maxLate).
func rateTolerance(rate float64) int { return int(math.Floor(rate*1.1)) + 1 }

// TestDeliveryRateTwoDispatchers: two dispatcher processes deliver 200
// events to a subscription with maxDeliveryRate 20: it takes about 10 s, the
// endpoint never sees more than rateTolerance(20) = 23 requests in any
// second, and every event arrives once, at attempt 1: the wait is not an
// attempt.
func TestDeliveryRateTwoDispatchers(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"BROKER_URL":           apptest.RealBroker(t),
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           apptest.UniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	}
	bin := apptest.BuildService(t)
	hook := apptest.NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	api := apptest.StartProcess(t, bin, "api", env)
	first := apptest.StartProcess(t, bin, "dispatcher", env)
	second := apptest.StartProcess(t, bin, "dispatcher", env)
	c := api.Client(t)
	sub := c.SetupPushRoom("paced", "", hook.URL())
	c.CallJSON("PATCH", sub.Path(), `{"maxDeliveryRate":20}`, http.StatusOK, nil)

	publishBatches(t, c, "paced", 2)
	reqs := hook.WaitFor(200, 60*time.Second)
	checkPaced(t, reqs, 20, 200)
	if byPID, err := requestsByProcess(reqs, first.Pid(), second.Pid()); err != nil {
		t.Logf("cannot tell the processes apart: %v", err)
	} else {
		t.Logf("requests by process: %d and %d, unknown %d", byPID[first.Pid()], byPID[second.Pid()], byPID[0])
		// ActiveMQ Classic counts its prefetch window in messages (256 per
		// consumer), so the first dispatcher to subscribe may take all 200:
		// the pace above still held, but sharing was not exercised. Artemis
		// counts its window in bytes and splits them.
		split := byPID[first.Pid()] > 0 && byPID[second.Pid()] > 0
		switch {
		case !split && byPID[0] == 0 && !strings.Contains(env["BROKER_URL"], "dialect=activemq"):
			t.Error("one of the two dispatchers delivered nothing: the limit was not shared")
		case !split:
			t.Log("one dispatcher took (or was seen to take) every message: the shared limit was not exercised")
		}
	}
}

// TestDeliveryRate: one process, on each backend: 60 events at 20 per
// second take about 3 s, within the tolerance in every second.
func TestDeliveryRate(t *testing.T) {
	t.Parallel()
	apptest.Backends(t, func(t *testing.T, env map[string]string) {
		hook := apptest.NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		c := apptest.StartService(t, env)
		sub := c.SetupPushRoom("paced-one", "", hook.URL())
		c.CallJSON("PATCH", sub.Path(), `{"maxDeliveryRate":20}`, http.StatusOK, nil)
		var msgs []string
		for i := range 60 {
			msgs = append(msgs, fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d}}`, i))
		}
		c.CallJSON("POST", "/v1/rooms/paced-one/messages:batch", `{"messages":[`+strings.Join(msgs, ",")+`]}`, http.StatusAccepted, nil)
		checkPaced(t, hook.WaitFor(60, 30*time.Second), 20, 60)
	})
}

// publishBatches publishes n batches of 100 events to room.
func publishBatches(t *testing.T, c apptest.Client, room string, n int) {
	t.Helper()
	for batch := range n {
		var msgs []string
		for i := range 100 {
			msgs = append(msgs, fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d}}`, batch*100+i))
		}
		c.CallJSON("POST", "/v1/rooms/"+room+"/messages:batch", `{"messages":[`+strings.Join(msgs, ",")+`]}`, http.StatusAccepted, nil)
	}
}

// checkPaced checks that the requests, n events each sent once at attempt
// 1, arrived at rate per second: spread over about (n−1)/rate seconds, and
// never more than rateTolerance(rate) of them in a second.
func checkPaced(t *testing.T, reqs []apptest.PushRequest, rate float64, n int) {
	t.Helper()
	ids := map[string]bool{}
	for i, r := range reqs {
		ids[r.Header.Get("Webhook-Id")] = true
		if a := r.Header.Get("X-Attempt"); a != "1" {
			t.Errorf("request %d at attempt %s: waiting for the rate counted as an attempt", i+1, a)
		}
	}
	if len(ids) != n || len(reqs) != n {
		t.Errorf("%d requests for %d distinct events, want %d of each", len(reqs), len(ids), n)
	}
	span := reqs[len(reqs)-1].At.Sub(reqs[0].At)
	busiest, at := 0, time.Duration(0)
	for i, r := range reqs {
		k := i
		for k < len(reqs) && reqs[k].At.Sub(r.At) < time.Second {
			k++
		}
		if k-i > busiest {
			busiest, at = k-i, r.At.Sub(reqs[0].At)
		}
	}
	ideal := time.Duration(float64(n-1) / rate * float64(time.Second))
	t.Logf("%d requests in %v (ideal %v); the busiest second (from +%v) held %d (tolerance %d)",
		len(reqs), span.Round(time.Millisecond), ideal, at.Round(time.Millisecond), busiest, rateTolerance(rate))
	if busiest > rateTolerance(rate) {
		t.Errorf("%d requests in one second at maxDeliveryRate %g: more than %d", busiest, rate, rateTolerance(rate))
	}
	// Faster than the rate is a broken limit; slower only a loaded machine
	// (the suite's packages run at once on two cores), so that bound is loose.
	if span < time.Duration(float64(ideal)/1.1) || span > 3*ideal+2*time.Second {
		t.Errorf("the requests took %v, want about %v", span.Round(time.Millisecond), ideal)
	}
}
