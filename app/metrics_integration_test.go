package app_test

import (
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestMetricsAcrossProcesses: an api and a dispatcher process (the real
// binary, ActiveMQ Classic, PostgreSQL) each serve /metrics; counters split
// between them add up when summed, and the database gauges agree.
func TestMetricsAcrossProcesses(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	bin := apptest.BuildService(t)
	env := map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           apptest.UniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	}
	hook := newScriptedHook(t)
	api := apptest.StartProcess(t, bin, "api", env)
	dispatcher := apptest.StartProcess(t, bin, "dispatcher", env)

	c := apptest.Client{T: t, Base: api.Base}
	c.SetupPushRoom("procs", `"deliveryDelay":50,"deliveryDelayMultiplier":1,"deliveryAttempts":2`, hook.URL())
	scripts := []string{"ok", "ok", "fail,ok", "refuse"}
	for _, s := range scripts {
		c.Publish("procs", `{"eventType":"tick","payload":{"script":"`+s+`"}}`)
	}
	var a, d []apptest.Sample
	apitest.EventuallyWithin(t, 20*time.Second, "every message settled", func() bool {
		a, d = apptest.Scrape(t, api.Base), apptest.Scrape(t, dispatcher.Base)
		final := apptest.Sum(d, "messaging_deliveries_total") - apptest.Sum(d, "messaging_deliveries_total", "outcome", "retried")
		return final == float64(len(scripts)) && apptest.Sum(a, "messaging_outbox_backlog") == 0
	})
	both := append(append([]apptest.Sample{}, a...), d...)
	checks := []struct {
		what      string
		got, want float64
	}{
		{"sends, on the api", apptest.Sum(a, "messaging_sends_total", "room", "procs"), 4},
		{"sends, on the dispatcher", apptest.Sum(d, "messaging_sends_total"), 0},
		{"deliveries, on the api", apptest.Sum(a, "messaging_deliveries_total"), 0},
		{"delivered", apptest.Sum(both, "messaging_deliveries_total", "outcome", "delivered"), 3},
		{"retried", apptest.Sum(both, "messaging_deliveries_total", "outcome", "retried"), 1},
		{"refused", apptest.Sum(both, "messaging_deliveries_total", "outcome", "refused"), 1},
		{"relayed by both relays (4 firsts; the retry went straight to the broker)", apptest.Sum(both, "messaging_outbox_relayed_total", "result", "sent"), 4},
		{"the dispatcher's broker", apptest.Sum(d, "messaging_broker_connected"), 1},
		{"the dispatcher's store stats", apptest.Sum(d, "messaging_store_stats_up"), 1},
		{"the dispatcher reports no leases", float64(len(filter(d, "messaging_pull_leases_outstanding"))), 0},
		{"the api reports leases", apptest.Sum(a, "messaging_pull_leases_outstanding"), 0},
		{"publish requests on the api", apptest.Sum(a, "messaging_http_request_duration_seconds_count", "route", "/v1/rooms/:roomId/messages", "status", "202"), 4},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: %v, want %v", ck.what, ck.got, ck.want)
		}
	}
	if t.Failed() {
		for _, s := range both {
			if s.Name == "messaging_deliveries_total" && s.Value > 0 {
				t.Log(s)
			}
		}
		for _, r := range hook.Requests() {
			t.Logf("hook: %s %s", r.Header.Get("Webhook-Id"), r.Body)
		}
	}
	if apptest.Sum(both, "messaging_sends_total") != apptest.Sum(both, "messaging_deliveries_total")-apptest.Sum(both, "messaging_deliveries_total", "outcome", "retried") {
		t.Error("sends summed over the processes differ from final outcomes summed over them")
	}
}

// filter returns the samples of name.
func filter(samples []apptest.Sample, name string) []apptest.Sample {
	var out []apptest.Sample
	for _, s := range samples {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
