package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/store/storetest"
)

// scriptedHook answers each event (by webhook-id) from the script its
// payload names: {"script":"fail,ok"} is a 500, then 200s.
type scriptedHook struct {
	*apptest.Hook
	mu    sync.Mutex
	tries map[string]int
}

func newScriptedHook(t *testing.T) *scriptedHook {
	h := &scriptedHook{tries: map[string]int{}}
	h.Hook = apptest.NewHook(t, func(n int, w http.ResponseWriter, r *http.Request) {
		var body struct {
			Script string `json:"script"`
		}
		_ = json.Unmarshal(h.Requests()[n-1].Body, &body) // the hook read r.Body
		h.mu.Lock()
		h.tries[r.Header.Get("Webhook-Id")]++
		try := h.tries[r.Header.Get("Webhook-Id")]
		h.mu.Unlock()
		steps := strings.Split(body.Script, ",")
		switch steps[min(try, len(steps))-1] {
		case "fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "refuse":
			w.WriteHeader(http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	return h
}

// backends runs f against the embedded broker with SQLite, and against
// ActiveMQ Classic with PostgreSQL when BROKER_TEST_URL is set.
func backends(t *testing.T, f func(t *testing.T, env map[string]string)) {
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		f(t, map[string]string{"OUTBOX_POLL_INTERVAL": "100ms", "AUTH_DISABLED": "true"})
	})
	if os.Getenv("BROKER_TEST_URL") == "" || testing.Short() {
		return
	}
	t.Run("activemq", func(t *testing.T) {
		t.Parallel()
		f(t, map[string]string{
			"OUTBOX_POLL_INTERVAL": "100ms", "AUTH_DISABLED": "true", "BROKER_URL": apptest.RealBroker(t),
			"DATABASE_URL": storetest.PostgresSchemaURL(t), "PUSH_QUEUE": apptest.UniquePushQueue(t),
		})
	})
}

// TestMetricsAddUp runs a scripted flow through the real service and checks
// that /metrics accounts for every copy: each first copy (sends_total)
// reaches exactly one final outcome, and each retry shows as retried, as a
// retry delay and as one more attempt in the attempt histogram.
func TestMetricsAddUp(t *testing.T) {
	t.Parallel()
	backends(t, testMetricsAddUp)
}

func testMetricsAddUp(t *testing.T, env map[string]string) {
	hook := newScriptedHook(t)
	c := apptest.StartService(t, env)
	const room = "metrics-flow"
	sub := c.SetupPushRoom(room, `"deliveryDelay":50,"deliveryDelayMultiplier":1,"deliveryAttempts":3`, hook.URL())
	c.Call("POST", "/v1/rooms/"+room+"/event-types", `{"identifier":"pulled"}`, 201)
	c.Call("POST", "/v1/rooms/"+room+"/event-types/pulled/versions", `{"schema":true}`, 201)
	var ps struct {
		ID string `json:"id"`
	}
	c.CallJSON("POST", "/v1/rooms/"+room+"/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"pulled"}]}`, 201, &ps)
	pullSub := apptest.PullSub{Sub: apptest.Sub{C: c, Room: room, ID: ps.ID}}

	scripts := []string{
		"fail",     // 3 attempts, then dead-lettered: 2 retries
		"fail,ok",  // 1 retry, delivered
		"fail,ok",  // 1 retry, delivered
		"refuse",   // a permanent failure: refused
		"ok", "ok", // delivered at once
	}
	for _, s := range scripts {
		c.Publish(room, `{"eventType":"tick","payload":{"script":"`+s+`"}}`)
	}
	c.Publish(room, `{"eventType":"pulled","payload":{}}`)

	msgs := pullSub.PullN(1, 10*time.Second)
	var leased float64
	apitest.EventuallyWithin(t, 5*time.Second, "one outstanding lease", func() bool {
		leased = apptest.Sum(apptest.Scrape(t, c.Base), "messaging_pull_leases_outstanding")
		return leased == 1
	})
	pullSub.Ack(msgs[0].AckID)

	// Quiet: every push copy reached a final outcome.
	var m []apptest.Sample
	apitest.EventuallyWithin(t, 15*time.Second, "every push message settled", func() bool {
		m = apptest.Scrape(t, c.Base)
		final := apptest.Sum(m, "messaging_deliveries_total", "type", "push") - apptest.Sum(m, "messaging_deliveries_total", "type", "push", "outcome", "retried")
		// A scrape is not atomic: the last outcome's counter and histogram
		// may fall on either side of it, so wait for both.
		return final == float64(len(scripts)) && apptest.Sum(m, "messaging_delivery_attempts_count", "type", "push") == final &&
			apptest.Sum(m, "messaging_outbox_backlog") == 0
	})

	checks := []struct {
		what string
		got  float64
		want float64
	}{
		{"published events in the room", apptest.Sum(m, "messaging_published_events_total", "room", room), 7},
		{"push sends", apptest.Sum(m, "messaging_sends_total", "room", room, "type", "push"), 6},
		{"pull sends", apptest.Sum(m, "messaging_sends_total", "room", room, "type", "pull"), 1},
		{"push delivered", apptest.Sum(m, "messaging_deliveries_total", "type", "push", "outcome", "delivered"), 4},
		{"push retried", apptest.Sum(m, "messaging_deliveries_total", "type", "push", "outcome", "retried"), 4},
		{"push dead-lettered", apptest.Sum(m, "messaging_deliveries_total", "type", "push", "outcome", "dead_lettered"), 1},
		{"push refused", apptest.Sum(m, "messaging_deliveries_total", "type", "push", "outcome", "refused"), 1},
		{"push expired", apptest.Sum(m, "messaging_deliveries_total", "type", "push", "outcome", "expired"), 0},
		{"pull delivered", apptest.Sum(m, "messaging_deliveries_total", "type", "pull", "outcome", "delivered"), 1},
		{"push retry delays", apptest.Sum(m, "messaging_retry_delay_seconds_count", "type", "push"), 4},
		{"push requests", apptest.Sum(m, "messaging_push_request_duration_seconds_count"), 10},
		{"push requests failing", apptest.Sum(m, "messaging_push_request_duration_seconds_count", "result", "retryable"), 5},
		{"push final attempts", apptest.Sum(m, "messaging_delivery_attempts_count", "type", "push"), 6},
		{"push attempts in all", apptest.Sum(m, "messaging_delivery_attempts_sum", "type", "push"), 10},
		{"push delivery latencies", apptest.Sum(m, "messaging_delivery_latency_seconds_count", "type", "push"), 4},
		{"pull delivery latencies", apptest.Sum(m, "messaging_delivery_latency_seconds_count", "type", "pull"), 1},
		{"leases after the ack", apptest.Sum(m, "messaging_pull_leases_outstanding"), 0},
		{"outbox age", apptest.Sum(m, "messaging_outbox_oldest_age_seconds"), 0},
		{"store stats", apptest.Sum(m, "messaging_store_stats_up"), 1},
		{"dispatcher paused", apptest.Sum(m, "messaging_dispatcher_paused"), 0},
		{"broker connected", apptest.Sum(m, "messaging_broker_connected"), 1},
		{"publish requests", apptest.Sum(m, "messaging_http_request_duration_seconds_count", "route", "/v1/rooms/:roomId/messages", "method", "POST", "status", "202"), 7},
		{"pull requests", apptest.Sum(m, "messaging_http_request_duration_seconds_count", "route", "/v1/rooms/:roomId/subscriptions/:subscriptionId/pull", "status", "200"), 1},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: %v, want %v", ck.what, ck.got, ck.want)
		}
	}
	// The identities docs/operations.md states.
	sends := apptest.Sum(m, "messaging_sends_total")
	final := apptest.Sum(m, "messaging_deliveries_total") - apptest.Sum(m, "messaging_deliveries_total", "outcome", "retried")
	if sends != final+apptest.Sum(m, "messaging_outbox_relayed_total", "result", "given_up") {
		t.Errorf("sends %v != final outcomes %v + copies the relay gave up", sends, final)
	}
	retried := apptest.Sum(m, "messaging_deliveries_total", "outcome", "retried")
	if extra := apptest.Sum(m, "messaging_delivery_attempts_sum") - apptest.Sum(m, "messaging_delivery_attempts_count"); extra != retried {
		t.Errorf("attempts beyond the first %v != retried %v", extra, retried)
	}

	// Replayed, the two dead letters fail the same way again (new event
	// ids: their scripts start over), and the sums still add up.
	c.Call("POST", sub.Path()+"/dead-letters:replay", "", 202)
	apitest.EventuallyWithin(t, 15*time.Second, "the replayed messages settled", func() bool {
		m = apptest.Scrape(t, c.Base)
		final := apptest.Sum(m, "messaging_deliveries_total", "type", "push") - apptest.Sum(m, "messaging_deliveries_total", "type", "push", "outcome", "retried")
		return final == float64(len(scripts)+2) && apptest.Sum(m, "messaging_delivery_attempts_count", "type", "push") == final &&
			apptest.Sum(m, "messaging_outbox_backlog") == 0
	})
	if got := apptest.Sum(m, "messaging_dead_letters_replayed_total", "type", "push"); got != 2 {
		t.Errorf("dead letters replayed (push): %v, want 2", got)
	}
	sends = apptest.Sum(m, "messaging_sends_total") + apptest.Sum(m, "messaging_dead_letters_replayed_total")
	final = apptest.Sum(m, "messaging_deliveries_total") - apptest.Sum(m, "messaging_deliveries_total", "outcome", "retried")
	if sends != final+apptest.Sum(m, "messaging_outbox_relayed_total", "result", "given_up") {
		t.Errorf("after the replay: sends and replays %v != final outcomes %v + copies the relay gave up", sends, final)
	}
	for _, s := range m {
		if r := s.Labels["route"]; strings.Contains(r, room) || strings.Contains(r, ps.ID) {
			t.Errorf("a route label holds a raw path: %v", s.Labels)
		}
	}
}

// TestMetricsRoomLabelOff: METRICS_ROOM_LABEL=false counts every room as one.
func TestMetricsRoomLabelOff(t *testing.T) {
	t.Parallel()
	hook := newScriptedHook(t)
	c := apptest.StartService(t, map[string]string{"METRICS_ROOM_LABEL": "false", "AUTH_DISABLED": "true"})
	c.SetupPushRoom("room-a", "", hook.URL())
	c.Publish("room-a", `{"eventType":"tick","payload":{}}`)
	m := apptest.Scrape(t, c.Base)
	if got := apptest.Sum(m, "messaging_published_events_total", "room", "_all"); got != 1 {
		t.Errorf("published under _all: %v, want 1", got)
	}
	if got := apptest.Sum(m, "messaging_published_events_total", "room", "room-a"); got != 0 {
		t.Errorf("published under room-a: %v, want 0", got)
	}
}

// TestTracePropagation: a publish's traceparent reaches each push attempt
// as a new span of the same trace (tracestate as sent) and comes back to
// pull consumers; a malformed one starts a new trace.
func TestTracePropagation(t *testing.T) {
	t.Parallel()
	backends(t, testTracePropagation)
}

func testTracePropagation(t *testing.T, env map[string]string) {
	hook := newScriptedHook(t)
	c := apptest.StartService(t, env)
	const room = "traced"
	c.SetupPushRoom(room, `"deliveryDelay":50,"deliveryDelayMultiplier":1,"deliveryAttempts":3`, hook.URL())
	var ps struct {
		ID string `json:"id"`
	}
	c.CallJSON("POST", "/v1/rooms/"+room+"/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"tick"}]}`, 201, &ps)
	pullSub := apptest.PullSub{Sub: apptest.Sub{C: c, Room: room, ID: ps.ID}}

	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00-" + traceID + "-00f067aa0ba902b7-01"
		state   = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
	)
	publishWith := func(headers map[string]string) (string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, c.Base+"/v1/rooms/"+room+"/messages",
			strings.NewReader(`{"eventType":"tick","payload":{"script":"fail,ok"}}`))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			EventID     string `json:"eventId"`
			Traceparent string `json:"traceparent"`
		}
		if resp.StatusCode != http.StatusAccepted {
			raw, _ := io.ReadAll(resp.Body)
			t.Fatalf("publish: %d %s", resp.StatusCode, raw)
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out.EventID, out.Traceparent
	}

	t.Run("valid", func(t *testing.T) {
		id, tp := publishWith(map[string]string{"traceparent": parent, "tracestate": state})
		if tp != parent {
			t.Errorf("publish answered traceparent %q, want %q", tp, parent)
		}
		apitest.EventuallyWithin(t, 10*time.Second, "two attempts", func() bool { return len(hook.WithID(id)) >= 2 })
		reqs := hook.WithID(id)
		spans := map[string]bool{}
		for i, r := range reqs {
			got, ok := message.ParseTraceparent(r.Header.Get("traceparent"))
			if !ok || got[3:35] != traceID || got[53:] != "01" {
				t.Errorf("attempt %d: traceparent %q, want trace %s sampled", i+1, r.Header.Get("traceparent"), traceID)
				continue
			}
			if got == parent {
				t.Errorf("attempt %d: traceparent is the publisher's, want a new span id", i+1)
			}
			spans[got[36:52]] = true
			if r.Header.Get("tracestate") != state {
				t.Errorf("attempt %d: tracestate %q, want %q", i+1, r.Header.Get("tracestate"), state)
			}
		}
		if len(spans) != len(reqs) {
			t.Errorf("%d attempts share span ids: %v", len(reqs), spans)
		}
		var out struct {
			Messages []struct {
				EventID     string `json:"eventId"`
				Traceparent string `json:"traceparent"`
				Tracestate  string `json:"tracestate"`
			} `json:"messages"`
		}
		c.CallJSON("POST", pullSub.Path()+"/pull", `{"maxMessages":1,"waitMs":5000}`, 200, &out)
		if len(out.Messages) != 1 || out.Messages[0].EventID != id || out.Messages[0].Traceparent != parent || out.Messages[0].Tracestate != state {
			t.Errorf("pulled %+v, want event %s with traceparent %s and tracestate %s", out.Messages, id, parent, state)
		}
		var logged struct {
			Traceparent string `json:"traceparent"`
			Tracestate  string `json:"tracestate"`
		}
		c.CallJSON("GET", "/v1/rooms/"+room+"/messages/"+id, "", 200, &logged)
		if logged.Traceparent != parent || logged.Tracestate != state {
			t.Errorf("message log: %+v, want the publish's trace context", logged)
		}
	})

	t.Run("malformed starts a new trace", func(t *testing.T) {
		id, tp := publishWith(map[string]string{"traceparent": "00-" + strings.ToUpper(traceID) + "-00f067aa0ba902b7-01", "tracestate": state})
		got, ok := message.ParseTraceparent(tp)
		if !ok || got[3:35] == traceID {
			t.Fatalf("publish answered traceparent %q, want a new valid trace", tp)
		}
		apitest.EventuallyWithin(t, 10*time.Second, "an attempt", func() bool { return len(hook.WithID(id)) >= 1 })
		r := hook.WithID(id)[0]
		if h := r.Header.Get("traceparent"); h[3:35] != tp[3:35] {
			t.Errorf("push traceparent %q, not in the new trace %q", h, tp)
		}
		if h := r.Header.Get("tracestate"); h != "" {
			t.Errorf("tracestate %q kept with a malformed traceparent", h)
		}
	})
}
