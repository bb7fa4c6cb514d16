package app_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
)

// TestProtocolAnswers: 415 for a body that is not JSON, 405 with Allow for
// a known path with another method, 404 naming the message of a batch whose
// event type does not exist, no-store on answers with a secret.
func TestProtocolAnswers(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, "sqlite")
	a.Seed(t)

	send := func(method, path, contentType, body string) apptest.Response {
		t.Helper()
		h := map[string]string{}
		if contentType != "-" {
			h["Content-Type"] = contentType
		}
		return raw(a, method, path, body, h)
	}
	for _, tc := range []struct {
		name, method, path, contentType, body string
		status                                int
	}{
		{"text", "POST", "/v1/rooms", "text/plain", `{"identifier":"r1","managerIdentifier":"m"}`, 415},
		{"form", "POST", "/v1/rooms", "application/x-www-form-urlencoded", `{"identifier":"r1","managerIdentifier":"m"}`, 415},
		{"none with a body", "POST", "/v1/rooms", "-", `{"identifier":"r1","managerIdentifier":"m"}`, 415},
		{"another charset", "POST", "/v1/rooms", "application/json; charset=iso-8859-1", `{"identifier":"r1","managerIdentifier":"m"}`, 415},
		{"publish as text", "POST", "/v1/rooms/orders/messages", "text/plain", `{"eventType":"order.created","payload":{"orderId":"1"}}`, 415},
		{"JSON with charset", "POST", "/v1/rooms", "application/json; charset=UTF-8", `{"identifier":"r1","managerIdentifier":"m"}`, 201},
		{"merge patch", "PATCH", "/v1/rooms/r1", "application/merge-patch+json", `{"deliveryAttempts":4}`, 200},
		{"none without a body", "POST", "/v1/retry-schedule:preview", "-", ``, 200},
		{"any without a body", "POST", "/v1/retry-schedule:preview", "text/plain", ``, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := send(tc.method, tc.path, tc.contentType, tc.body)
			apptest.Want(t, r, tc.status)
		})
	}

	t.Run("405", func(t *testing.T) {
		for path, allow := range map[string][]string{
			"/v1/rooms/orders":                          {"GET", "PATCH", "DELETE"},
			"/v1/rooms":                                 {"GET", "POST"},
			"/v1/rooms/orders/messages:batch":           {"POST"},
			"/v1/rooms/orders/event-types/x/versions/1": {"GET", "DELETE"},
		} {
			r := a.Do("PUT", path, `{}`)
			apptest.Want(t, r, http.StatusMethodNotAllowed)
			for _, m := range allow {
				if !strings.Contains(r.Header.Get("Allow"), m) {
					t.Errorf("PUT %s: Allow %q lacks %s", path, r.Header.Get("Allow"), m)
				}
			}
		}
		apptest.Want(t, a.Do("PUT", "/v1/nothing", `{}`), http.StatusNotFound)
	})

	t.Run("batch names the message", func(t *testing.T) {
		r := a.Do("POST", "/v1/rooms/orders/messages:batch", `{"messages":[
			{"eventType":"order.created","payload":{"orderId":"1"}},
			{"eventType":"order.created","eventTypeVersion":9,"payload":{"orderId":"1"}}]}`)
		apptest.Want(t, r, http.StatusNotFound)
		if !apptest.NamesField(t, r, "messages[1].eventTypeVersion") {
			t.Errorf("the version is not named: %s", r.Body)
		}
		r = a.Do("POST", "/v1/rooms/orders/messages:batch", `{"messages":[
			{"eventType":"order.created","payload":{"orderId":"1"}},
			{"eventType":"order.created","payload":{"orderId":"1"}},
			{"eventType":"order.deleted","payload":{}}]}`)
		apptest.Want(t, r, http.StatusNotFound)
		if !apptest.NamesField(t, r, "messages[2].eventType") || !strings.Contains(r.JSON(t)["detail"].(string), "messages[2].eventType") {
			t.Errorf("the message is not named: %s", r.Body)
		}
	})

	t.Run("no-store", func(t *testing.T) {
		r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"http://127.0.0.1:9/hook","eventTypes":[{"eventType":"order.created"}]}`)
		apptest.Want(t, r, http.StatusCreated)
		if r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("subscription creation: Cache-Control %q", r.Header.Get("Cache-Control"))
		}
		r = a.Do("POST", "/v1/rooms/orders/subscriptions/"+r.JSON(t)["id"].(string)+"/secret:rotate", nil)
		apptest.Want(t, r, http.StatusOK)
		if r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("rotation: Cache-Control %q", r.Header.Get("Cache-Control"))
		}
		r = a.Do("POST", "/v1/api-keys", `{"name":"k","role":"admin"}`)
		apptest.Want(t, r, http.StatusCreated)
		if r.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("API key creation: Cache-Control %q", r.Header.Get("Cache-Control"))
		}
	})

	t.Run("431", func(t *testing.T) {
		// Every route, the probes included, answers it as the spec says.
		for _, path := range []string{"/v1/rooms", "/healthz", "/readyz", "/metrics"} {
			r := raw(a, "GET", path, "", map[string]string{"X-Pad": strings.Repeat("a", 100<<10)})
			if r.Status != http.StatusRequestHeaderFieldsTooLarge || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("%s: %d %q: %s", path, r.Status, r.Header.Get("Content-Type"), r.Body)
			}
		}
	})
}

// Test405WithKeys: with authentication on, a key that may use the path
// gets the 405 too (not a 404 for a route its rules do not list).
func Test405WithKeys(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t, "sqlite")
	for _, role := range []string{"a", "m", "p"} {
		r := f.as(role, "PUT", "/v1/rooms/"+f.roomA, `{}`)
		apptest.Want(t, r, http.StatusMethodNotAllowed)
		if !strings.Contains(r.Header.Get("Allow"), "GET") {
			t.Errorf("%s: Allow %q", role, r.Header.Get("Allow"))
		}
	}
	// Without a key: 401 first, as for every path under /v1.
	req, _ := http.NewRequest(http.MethodPut, f.URL+"/v1/rooms/"+f.roomA, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a key: %d, want 401", resp.StatusCode)
	}
}

// raw sends body as it is with exactly the headers given (no Content-Type
// unless given) and checks the answer against the spec.
func raw(a *apptest.API, method, path, body string, headers map[string]string) apptest.Response {
	a.T.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	r := a.Send(method, path, b, headers)
	a.CheckSpec(method, path, b, r)
	return r
}
