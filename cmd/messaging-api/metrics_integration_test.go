package main

import (
	"testing"
	"time"

	"github.com/roomhub/messaging-api/store/storetest"
)

// TestMetricsAcrossProcesses: an api and a dispatcher process (the real
// binary, ActiveMQ Classic, PostgreSQL) each serve /metrics; counters split
// between them add up when summed, and the database gauges agree.
func TestMetricsAcrossProcesses(t *testing.T) {
	brokerURL := realBroker(t)
	bin := buildService(t)
	env := map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           uniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	}
	hook := newScriptedHook(t)
	api := startProcess(t, bin, "api", env)
	dispatcher := startProcess(t, bin, "dispatcher", env)

	c := client{t: t, base: api.base}
	setupPushRoom(c, "procs", `"deliveryDelay":50,"deliveryDelayMultiplier":1,"deliveryAttempts":2`, hook.URL())
	scripts := []string{"ok", "ok", "fail,ok", "refuse"}
	for _, s := range scripts {
		pushPublish(c, "procs", `{"eventType":"tick","payload":{"script":"`+s+`"}}`)
	}
	var a, d []sample
	pushEventually(t, 20*time.Second, "every message settled", func() bool {
		a, d = scrape(t, api.base), scrape(t, dispatcher.base)
		final := sum(d, "messaging_deliveries_total") - sum(d, "messaging_deliveries_total", "outcome", "retried")
		return final == float64(len(scripts)) && sum(a, "messaging_outbox_backlog") == 0
	})
	both := append(append([]sample{}, a...), d...)
	checks := []struct {
		what      string
		got, want float64
	}{
		{"sends, on the api", sum(a, "messaging_sends_total", "room", "procs"), 4},
		{"sends, on the dispatcher", sum(d, "messaging_sends_total"), 0},
		{"deliveries, on the api", sum(a, "messaging_deliveries_total"), 0},
		{"delivered", sum(both, "messaging_deliveries_total", "outcome", "delivered"), 3},
		{"retried", sum(both, "messaging_deliveries_total", "outcome", "retried"), 1},
		{"refused", sum(both, "messaging_deliveries_total", "outcome", "refused"), 1},
		{"relayed by both relays (4 firsts; the retry went straight to the broker)", sum(both, "messaging_outbox_relayed_total", "result", "sent"), 4},
		{"the dispatcher's broker", sum(d, "messaging_broker_connected"), 1},
		{"the dispatcher's store stats", sum(d, "messaging_store_stats_up"), 1},
		{"the dispatcher reports no leases", float64(len(filter(d, "messaging_pull_leases_outstanding"))), 0},
		{"the api reports leases", sum(a, "messaging_pull_leases_outstanding"), 0},
		{"publish requests on the api", sum(a, "messaging_http_request_duration_seconds_count", "route", "/v1/rooms/:roomId/messages", "status", "202"), 4},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: %v, want %v", ck.what, ck.got, ck.want)
		}
	}
	if t.Failed() {
		for _, s := range both {
			if s.name == "messaging_deliveries_total" && s.value > 0 {
				t.Log(s)
			}
		}
		for _, r := range hook.requests() {
			t.Logf("hook: %s %s", r.Header.Get("Webhook-Id"), r.Body)
		}
	}
	if sum(both, "messaging_sends_total") != sum(both, "messaging_deliveries_total")-sum(both, "messaging_deliveries_total", "outcome", "retried") {
		t.Error("sends summed over the processes differ from final outcomes summed over them")
	}
}

// filter returns the samples of name.
func filter(samples []sample, name string) []sample {
	var out []sample
	for _, s := range samples {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}
