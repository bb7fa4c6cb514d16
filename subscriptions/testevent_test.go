package subscriptions_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/netguard"
	"github.com/roomhub/messaging-api/subscriptions"
)

// signedWith reports whether r carries a Standard Webhooks signature made
// with secret, computed from the spec: base64 HMAC-SHA256 keyed with the
// base64-decoded secret after "whsec_", over "id.timestamp.body".
func signedWith(t *testing.T, secret string, r apptest.PushRequest) bool {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(r.Header.Get("Webhook-Id") + "." + r.Header.Get("Webhook-Timestamp") + "."))
	mac.Write(r.Body)
	return strings.Contains(r.Header.Get("Webhook-Signature"), "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// createPush creates a PUSH subscription to url in room orders with the
// extra JSON members in fields, and returns its answer (with the secret).
func createPush(t *testing.T, a *apptest.API, url, fields string) subscriptions.Response {
	t.Helper()
	r := a.Do("POST", "/v1/rooms/orders/subscriptions",
		`{"type":"PUSH","pushUrl":"`+url+`","eventTypes":[{"eventType":"order.created"}]`+fields+`}`)
	apptest.Want(t, r, http.StatusCreated)
	return apptest.Decode[subscriptions.Response](t, r)
}

// TestTestEvent: POST …:test sends one signed, authenticated messaging.test
// event at once and answers what came back; nothing is recorded, and a
// second test of the subscription within the interval is a 429.
func TestTestEvent(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		roomID := a.Seed(t)
		hook := apptest.NewHook(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("ok, you sent " + r.Header.Get("Authorization")))
		})
		sub := createPush(t, a, hook.URL(), `,"pushAuth":{"type":"basic","username":"alice","password":"pa55-w0rd"},"status":"PAUSED"`)
		path := "/v1/rooms/orders/subscriptions/" + sub.ID

		before := time.Now().UTC().Truncate(time.Second)
		r := a.Do("POST", path+":test", nil)
		apptest.Want(t, r, http.StatusOK)
		res := apptest.Decode[subscriptions.TestResponse](t, r)
		if res.Outcome != "delivered" || res.StatusCode == nil || *res.StatusCode != 200 || res.Error != nil ||
			res.EventType != "messaging.test" || res.Latency < 0 || res.SentAt.Before(before) {
			t.Errorf("answer: %s", r.Body)
		}
		if res.ResponseBody != "ok, you sent Basic xxxxx" {
			t.Errorf("responseBody %q: want the credential masked", res.ResponseBody)
		}
		reqs := hook.Requests()
		if len(reqs) != 1 {
			t.Fatalf("the hook got %d requests, want 1", len(reqs))
		}
		got := reqs[0]
		for name, want := range map[string]string{
			"Webhook-Id": res.EventID, "X-Event-Id": res.EventID, "X-Event-Type": "messaging.test", "X-Event-Version": "1",
			"X-Attempt": "1", "X-Subscription-Id": sub.ID, "Content-Type": "application/json", "User-Agent": "messaging-api-push/1",
			"Authorization":     "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pa55-w0rd")),
			"Webhook-Timestamp": strconv.FormatInt(res.SentAt.Unix(), 10),
		} {
			if v := got.Header.Get(name); v != want {
				t.Errorf("%s: %q, want %q", name, v, want)
			}
		}
		if !signedWith(t, sub.SigningSecret, got) {
			t.Errorf("the test event is not signed with the subscription's secret: %v", got.Header)
		}
		if len(got.Header.Get("Traceparent")) != 55 {
			t.Errorf("traceparent %q", got.Header.Get("Traceparent"))
		}
		var body map[string]any
		if err := json.Unmarshal(got.Body, &body); err != nil || body["test"] != true || body["subscriptionId"] != sub.ID ||
			body["roomId"] != roomID || body["sentAt"] != res.SentAt.Format(time.RFC3339Nano) || len(body) != 4 {
			t.Errorf("body %s (%v)", got.Body, err)
		}

		// Within the interval: 429, and nothing sent.
		r = a.Do("POST", path+":test", nil)
		apptest.Want(t, r, http.StatusTooManyRequests)
		if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 5 {
			t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
		}
		if hook.Count() != 1 {
			t.Errorf("a refused test reached the hook")
		}

		// Not an attempt of anything: no delivery, dead letter or event.
		for _, p := range []string{path + "/deliveries", path + "/dead-letters"} {
			r = a.Do("GET", p, nil)
			apptest.Want(t, r, http.StatusOK)
			if n := len(apptest.Decode[api.List[delivery.DeliveryResponse]](t, r).Items); n != 0 {
				t.Errorf("%s lists %d items after a test", p, n)
			}
		}
		r = a.Do("GET", "/v1/rooms/orders/messages/"+res.EventID, nil)
		apptest.Want(t, r, http.StatusNotFound)
	})
}

// TestTestEventOutcomes: what a real push would make of each answer, the
// response cut at 1 KiB, no redirect followed, no response at all, and a
// target the SSRF guard refuses.
func TestTestEventOutcomes(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, "sqlite")
	a.Seed(t)
	test := func(url, fields string) subscriptions.TestResponse {
		t.Helper()
		sub := createPush(t, a, url, fields)
		r := a.Do("POST", "/v1/rooms/orders/subscriptions/"+sub.ID+":test", nil)
		apptest.Want(t, r, http.StatusOK)
		return apptest.Decode[subscriptions.TestResponse](t, r)
	}
	code := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}

	echo := apptest.NewHook(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"seen":"` + r.Header.Get("X-Api-Key") + `","auth":"` + r.Header.Get("Authorization") + `"}` + strings.Repeat("z", 2000)))
	})
	res := test(echo.URL(), `,"pushAuth":{"type":"headers","headers":{"X-Api-Key":"key-value-1","Authorization":"Token tok/\"quoted\""}}`)
	if res.Outcome != "retryable" || code(res.StatusCode) != 503 || res.Error == nil || *res.Error != "HTTP 503" ||
		len(res.ResponseBody) != 1024 || strings.Contains(res.ResponseBody, "key-value") || strings.Contains(res.ResponseBody, "quoted") ||
		!strings.HasPrefix(res.ResponseBody, `{"seen":"xxxxx","auth":"xxxxx"}zz`) {
		t.Errorf("503 with an echo: %+v", res)
	}

	redirect := apptest.NewHook(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://example.com/", http.StatusFound)
	})
	if res := test(redirect.URL(), ""); res.Outcome != "permanent" || code(res.StatusCode) != 302 || res.Error == nil ||
		!strings.Contains(*res.Error, "redirects are not followed") || redirect.Count() != 1 {
		t.Errorf("redirect: %+v", res)
	}

	if res := test("http://127.0.0.1:1/hook", `,"pushAuth":{"type":"bearer","token":"tok-bearer-1"}`); res.Outcome != "retryable" ||
		res.StatusCode != nil || res.Error == nil || strings.Contains(*res.Error, "tok-bearer") {
		t.Errorf("no listener: %+v", res)
	}

	// A second API process on the same database without loopback allowed:
	// the guard refuses the target without a request.
	cfg := apptest.Config()
	cfg.PushTarget = netguard.Guard{}
	strict := apptest.Serve(t, a.DB, a.Queues, apptest.IdleRelay{}, cfg)
	refused := apptest.NewHook(t, func(int, http.ResponseWriter, *http.Request) {})
	sub := createPush(t, a, refused.URL(), "")
	r := strict.Do("POST", "/v1/rooms/orders/subscriptions/"+sub.ID+":test", nil)
	apptest.Want(t, r, http.StatusOK)
	if res := apptest.Decode[subscriptions.TestResponse](t, r); res.Outcome != "permanent" || res.StatusCode != nil ||
		res.Error == nil || !strings.Contains(*res.Error, "SSRF guard") || refused.Count() != 0 {
		t.Errorf("refused target: %+v, %d requests", res, refused.Count())
	}
}

// TestTestEventTimeout: a test waits PUSH_TIMEOUT at most.
func TestTestEventTimeout(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config()
	cfg.Push.Timeout = 200 * time.Millisecond
	a := apptest.NewConfig(t, "sqlite", cfg)
	a.Seed(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hang := apptest.NewHook(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	sub := createPush(t, a, hang.URL(), "")
	start := time.Now()
	r := a.Do("POST", "/v1/rooms/orders/subscriptions/"+sub.ID+":test", nil)
	apptest.Want(t, r, http.StatusOK)
	res := apptest.Decode[subscriptions.TestResponse](t, r)
	if took := time.Since(start); res.Outcome != "retryable" || res.Error == nil || !strings.Contains(*res.Error, "timeout") || took > 5*time.Second {
		t.Errorf("after %v: %+v", took, res)
	}
}

// TestTestEventRefusals: a PULL or TERMINATED subscription gets 409, an
// unknown one 404, another verb 404, and POST without a verb 405 as before.
func TestTestEventRefusals(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, "sqlite")
	a.Seed(t)
	r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"}]}`)
	apptest.Want(t, r, http.StatusCreated)
	pull := apptest.Decode[subscriptions.Response](t, r).ID
	r = a.Do("POST", "/v1/rooms/orders/subscriptions/"+pull+":test", nil)
	apptest.Want(t, r, http.StatusConflict)
	if !strings.Contains(string(r.Body), "only PUSH subscriptions") {
		t.Errorf("PULL: %s", r.Body)
	}

	push := createPush(t, a, "http://127.0.0.1:1/hook", "").ID
	apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+push, `{"status":"TERMINATED"}`), http.StatusOK)
	apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/"+push+":test", nil), http.StatusConflict)

	apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/0190b5a8-0000-7000-8000-000000000000:test", nil), http.StatusNotFound)
	apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/not-a-uuid:test", nil), http.StatusNotFound)
	apptest.Want(t, a.Do("POST", "/v1/rooms/nope/subscriptions/"+push+":test", nil), http.StatusNotFound)
	apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/"+push+":probe", nil), http.StatusNotFound)
	r = a.Do("POST", "/v1/rooms/orders/subscriptions/"+push, nil)
	apptest.Want(t, r, http.StatusMethodNotAllowed)
	if allow := r.Header.Get("Allow"); allow != "DELETE, GET, PATCH" {
		t.Errorf("Allow %q", allow)
	}
}
