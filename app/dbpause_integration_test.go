package app_test

import (
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestDispatcherPausesWhileDatabaseDown: with PostgreSQL unreachable (a
// TCP proxy cut), the dispatcher stops taking messages: retries that come
// due meanwhile are not attempted, counted or dead-lettered, /readyz
// answers 503 and /metrics says paused. Once the database answers again
// every message is delivered at its second attempt, as if nothing happened.
func TestDispatcherPausesWhileDatabaseDown(t *testing.T) {
	brokers := map[string]string{"embedded": "embedded"}
	if u := os.Getenv("BROKER_TEST_URL"); u != "" && !testing.Short() {
		brokers["activemq"] = u
	}
	for name, brokerURL := range brokers {
		t.Run(name, func(t *testing.T) {
			pgURL, err := url.Parse(storetest.PostgresSchemaURL(t))
			if err != nil {
				t.Fatal(err)
			}
			proxy := newTCPProxy(t, pgURL.Host)
			pgURL.Host = proxy.addr
			env := map[string]string{
				"DATABASE_URL": pgURL.String(), "BROKER_URL": brokerURL, "OUTBOX_POLL_INTERVAL": "100ms",
				"AUTH_DISABLED": "true", "LOG_LEVEL": "info",
			}
			if name != "embedded" {
				env["PUSH_QUEUE"] = apptest.UniquePushQueue(t)
			}
			hook := newScriptedHook(t)
			c := apptest.StartService(t, env)
			const n = 5
			// Each event fails once; its retry comes due 3 s later, during the outage.
			sub := c.SetupPushRoom("db-pause", `"deliveryDelay":3000,"deliveryDelayMultiplier":1,"deliveryAttempts":2`, hook.URL())
			var events []string
			for range n {
				events = append(events, c.Publish("db-pause", `{"eventType":"tick","payload":{"script":"fail,ok"}}`).EventID)
			}
			apitest.EventuallyWithin(t, 10*time.Second, "every first attempt settled", func() bool {
				return apptest.Sum(apptest.Scrape(t, c.Base), "messaging_deliveries_total", "type", "push", "outcome", "retried") == n
			})

			proxy.down()
			downAt := time.Now()
			apitest.EventuallyWithin(t, 5*time.Second, "the dispatcher paused", func() bool {
				return apptest.Sum(apptest.Scrape(t, c.Base), "messaging_dispatcher_paused") == 1
			})
			ready := c.Call("GET", "/readyz", "", 503)
			if ready["checks"].(map[string]any)["database"] != "unreachable" {
				t.Errorf("readyz: %v", ready)
			}
			// The retries come due about 3 s after the first attempts; hold
			// the database down well past that. They wait in the broker's
			// scheduler, on its clock, which no test can move.
			time.Sleep(time.Until(downAt.Add(6 * time.Second)))
			if got := hook.Count(); got != n {
				t.Errorf("the hook got %d requests while the database was down, want the %d first attempts only", got-n, n)
			}
			m := apptest.Scrape(t, c.Base)
			if paused := apptest.Sum(m, "messaging_dispatcher_paused"); paused != 1 {
				t.Errorf("dispatcher_paused %v during the outage", paused)
			}
			if final := apptest.Sum(m, "messaging_deliveries_total", "type", "push") - apptest.Sum(m, "messaging_deliveries_total", "type", "push", "outcome", "retried"); final != 0 {
				t.Errorf("%v messages reached a final outcome during the outage", final)
			}

			proxy.up()
			hook.WaitFor(2*n, 20*time.Second)
			for _, ev := range events {
				ds := sub.WaitStatuses(ev, 10*time.Second, "failed", "delivered")
				if ds[1].Attempt != 2 {
					t.Errorf("event %s delivered at attempt %d, want 2", ev, ds[1].Attempt)
				}
			}
			if dls := sub.DeadLetters(); len(dls) != 0 {
				t.Errorf("%d dead letters after a database outage, want none: %+v", len(dls), dls)
			}
			apitest.EventuallyWithin(t, 5*time.Second, "the dispatcher resumed", func() bool {
				m := apptest.Scrape(t, c.Base)
				return apptest.Sum(m, "messaging_dispatcher_paused") == 0 &&
					apptest.Sum(m, "messaging_deliveries_total", "type", "push", "outcome", "delivered") == n
			})
			if got := hook.Count(); got != 2*n {
				t.Errorf("the hook got %d requests, want %d (one retry each)", got, 2*n)
			}
		})
	}
}
