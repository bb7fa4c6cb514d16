package push_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/subscriptions"
)

// echoHook answers with every header it was sent, so that a credential the
// service failed to mask would show in what it records. A payload with
// "mode":"retry" fails (500) the first attempt of its event; "fail" fails
// every attempt (400, permanent); anything else (a test event) succeeds.
func echoHook(t *testing.T) *apptest.Hook {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	var h *apptest.Hook
	h = apptest.NewHook(t, func(n int, w http.ResponseWriter, r *http.Request) {
		var echo strings.Builder
		for name, vs := range r.Header {
			fmt.Fprintf(&echo, "%s: %s\n", name, strings.Join(vs, ", "))
		}
		var body struct{ Mode string }
		_ = json.Unmarshal(h.Requests()[n-1].Body, &body) // the hook has read r.Body
		mu.Lock()
		seen[r.Header.Get("Webhook-Id")]++
		tries := seen[r.Header.Get("Webhook-Id")]
		mu.Unlock()
		switch {
		case body.Mode == "fail":
			w.WriteHeader(http.StatusBadRequest)
		case body.Mode == "retry" && tries == 1:
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = w.Write([]byte(echo.String()))
	})
	return h
}

// TestPushAuthEndToEnd runs the whole service (on the real broker with
// PostgreSQL when BROKER_TEST_URL is set): each kind of credential reaches
// its endpoint on the first attempt, on the retry, on a dead letter's
// replay and with a test event, and no secret shows in any answer of the
// API (subscriptions, delivery log, timeline, dead letters, test results)
// or in the service's debug log, although the endpoints echo them.
func TestPushAuthEndToEnd(t *testing.T) {
	t.Parallel()
	apptest.Backends(t, func(t *testing.T, env map[string]string) {
		env["LOG_LEVEL"] = "debug"
		c, logs := apptest.StartServiceLogs(t, env)
		basic := base64.StdEncoding.EncodeToString([]byte("alice:pa55-w0rd-e2e"))
		creds := []struct {
			name, auth string
			want       map[string]string
		}{
			{"basic", `{"type":"basic","username":"alice","password":"pa55-w0rd-e2e"}`, map[string]string{"Authorization": "Basic " + basic}},
			{"bearer", `{"type":"bearer","token":"tok-e2e-bearer"}`, map[string]string{"Authorization": "Bearer tok-e2e-bearer"}},
			{"headers", `{"type":"headers","headers":{"X-Api-Key":"key-e2e-headers","Authorization":"ApiKey key-e2e-authz"}}`,
				map[string]string{"X-Api-Key": "key-e2e-headers", "Authorization": "ApiKey key-e2e-authz"}},
		}
		secrets := []string{"pa55-w0rd-e2e", basic, "tok-e2e-bearer", "key-e2e-headers", "key-e2e-authz"}
		var answers []string // every API answer, to search for secrets
		call := func(method, path, body string, want int, out any) {
			t.Helper()
			status, raw := c.Send(method, path, body)
			if status != want {
				t.Fatalf("%s %s: %d, want %d: %s", method, path, status, want, raw)
			}
			answers = append(answers, method+" "+path+": "+string(raw))
			if out != nil {
				if err := json.Unmarshal(raw, out); err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
			}
		}

		c.Call("POST", "/v1/rooms", `{"identifier":"auth","managerIdentifier":"m","deliveryDelay":100,"deliveryDelayMultiplier":1,"deliveryAttempts":3}`, http.StatusCreated)
		c.Call("POST", "/v1/rooms/auth/event-types", `{"identifier":"tick"}`, http.StatusCreated)
		c.Call("POST", "/v1/rooms/auth/event-types/tick/versions", `{"schema":true}`, http.StatusCreated)
		type target struct {
			hook *apptest.Hook
			sub  subscriptions.Response
			path string
			want map[string]string
		}
		targets := make([]target, len(creds))
		for i, cr := range creds {
			tg := target{hook: echoHook(t), want: cr.want}
			call("POST", "/v1/rooms/auth/subscriptions", `{"type":"PUSH","pushUrl":"`+tg.hook.URL()+`","eventTypes":[{"eventType":"tick"}],"pushAuth":`+cr.auth+`}`,
				http.StatusCreated, &tg.sub)
			if tg.sub.PushAuth == nil || string(tg.sub.PushAuth.Type) != cr.name || !tg.sub.PushAuth.Configured {
				t.Fatalf("%s: pushAuth %+v", cr.name, tg.sub.PushAuth)
			}
			tg.path = "/v1/rooms/auth/subscriptions/" + tg.sub.ID
			targets[i] = tg
		}
		carries := func(tg target, what string, reqs []apptest.PushRequest) {
			t.Helper()
			for _, r := range reqs {
				for name, v := range tg.want {
					if got := r.Header.Values(name); !slices.Equal(got, []string{v}) {
						t.Errorf("%s, %s (attempt %s): %s %q, want %q", tg.sub.PushAuth.Type, what, r.Header.Get("X-Attempt"), name, got, v)
					}
				}
			}
		}

		// The first attempt fails, the retry delivers: both carry the credential.
		retried := c.Publish("auth", `{"eventType":"tick","payload":{"mode":"retry"}}`)
		for _, tg := range targets {
			s := apptest.Sub{C: c, Room: "auth", ID: tg.sub.ID}
			ds := s.WaitStatuses(retried.EventID, 30*time.Second, "failed", "delivered")
			if !strings.Contains(ds[0].ResponseBody, "xxxxx") {
				t.Errorf("%s: the echo of attempt 1 shows no mask: %q", tg.sub.PushAuth.Type, ds[0].ResponseBody)
			}
			reqs := tg.hook.WithID(retried.EventID)
			if len(reqs) != 2 || reqs[0].Header.Get("X-Attempt") != "1" || reqs[1].Header.Get("X-Attempt") != "2" {
				t.Fatalf("%s: %d requests for the event", tg.sub.PushAuth.Type, len(reqs))
			}
			carries(tg, "first attempt and retry", reqs)
		}

		// A permanent failure: a dead letter, replayed as a new event.
		failed := c.Publish("auth", `{"eventType":"tick","payload":{"mode":"fail"}}`)
		for _, tg := range targets {
			s := apptest.Sub{C: c, Room: "auth", ID: tg.sub.ID}
			s.WaitStatuses(failed.EventID, 30*time.Second, "dead_lettered")
			dls := s.WaitDeadLetters(1, 30*time.Second)
			carries(tg, "dead-lettered attempt", tg.hook.WithID(failed.EventID))
			var replay delivery.ReplayResponse
			call("POST", tg.path+"/dead-letters:replay", `{"ids":["`+dls[0].ID+`"]}`, http.StatusAccepted, &replay)
			var reqs []apptest.PushRequest
			apitest.EventuallyWithin(t, 30*time.Second, "the replay at the hook", func() bool {
				reqs = tg.hook.WithID(replay.Replayed[0].EventID)
				return len(reqs) == 1
			})
			carries(tg, "replay", reqs)
			s.WaitStatuses(replay.Replayed[0].EventID, 30*time.Second, "dead_lettered")
		}

		// A test event, at once, authenticated like any push.
		for _, tg := range targets {
			var res subscriptions.TestResponse
			call("POST", tg.path+":test", "", http.StatusOK, &res)
			if res.Outcome != "delivered" || !strings.Contains(res.ResponseBody, "xxxxx") {
				t.Errorf("%s: test result %+v", tg.sub.PushAuth.Type, res)
			}
			carries(tg, "test event", tg.hook.WithID(res.EventID))
		}

		// Every answer that could show a credential, and the log.
		for _, tg := range targets {
			call("GET", tg.path, "", http.StatusOK, nil)
			call("GET", tg.path+"/deliveries?limit=500", "", http.StatusOK, nil)
			call("GET", tg.path+"/dead-letters", "", http.StatusOK, nil)
		}
		call("GET", "/v1/rooms/auth/subscriptions", "", http.StatusOK, nil)
		for _, ev := range []string{retried.EventID, failed.EventID} {
			call("GET", "/v1/rooms/auth/messages/"+ev, "", http.StatusOK, nil)
		}
		call("GET", "/v1/rooms/auth/messages?correlationId="+retried.CorrelationID, "", http.StatusOK, nil)
		for _, a := range answers {
			for _, s := range secrets {
				if strings.Contains(a, s) {
					t.Errorf("an answer shows %q: %s", s, a)
				}
			}
		}
		log := logs.String()
		if !strings.Contains(log, "push: delivered") {
			t.Errorf("the log is not at debug level:\n%s", log)
		}
		for _, s := range secrets {
			if strings.Contains(log, s) {
				t.Errorf("the service log shows %q", s)
			}
		}
	})
}
