package subscriptions_test

import (
	"net/http"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestBadInput sends a bad value for every field of every request about
// subscriptions and checks the problem response names that field (and is a
// 4xx, never a 500).
func TestBadInput(t *testing.T) {
	t.Parallel()
	const et = `"eventTypes":[{"eventType":"order.created"}]`
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		field  string
	}{
		{"sub type missing", "POST", "/v1/rooms/orders/subscriptions", `{` + et + `}`, 422, "type"},
		{"sub type unknown", "POST", "/v1/rooms/orders/subscriptions", `{"type":"POLL",` + et + `}`, 422, "type"},
		{"sub push url missing", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH",` + et + `}`, 422, "pushUrl"},
		{"sub push url scheme", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"ftp://h/x",` + et + `}`, 422, "pushUrl"},
		{"sub push url relative", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"/hook",` + et + `}`, 422, "pushUrl"},
		{"sub push url no host", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"http://",` + et + `}`, 422, "pushUrl"},
		{"sub push url on pull", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","pushUrl":"http://h/x",` + et + `}`, 422, "pushUrl"},
		{"sub event types missing", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL"}`, 422, "eventTypes"},
		{"sub event types empty", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[]}`, 422, "eventTypes"},
		{"sub event types null", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":null}`, 422, "eventTypes"},
		{"sub event type blank", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":""}]}`, 422, "eventTypes[0].eventType"},
		{"sub event type unknown", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"},{"eventType":"nope"}]}`, 422, "eventTypes[1].eventType"},
		{"sub event type twice", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"},{"eventType":"order.created"}]}`, 422, "eventTypes[1].eventType"},
		{"sub version unknown", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created","versions":[1,7]}]}`, 422, "eventTypes[0].versions[1]"},
		{"sub version type", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created","versions":["1"]}]}`, 422, "eventTypes.versions"},
		{"sub delay zero", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL",` + et + `,"deliveryDelay":0}`, 422, "deliveryDelay"},
		{"sub multiplier", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL",` + et + `,"deliveryDelayMultiplier":0.9}`, 422, "deliveryDelayMultiplier"},
		{"sub attempts", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL",` + et + `,"deliveryAttempts":-1}`, 422, "deliveryAttempts"},
		{"sub expiration not overridable", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL",` + et + `,"messageExpiration":5}`, 422, "messageExpiration"},
		{"sub status", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL",` + et + `,"status":"OFF"}`, 422, "status"},
		{"sub created terminated", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL",` + et + `,"status":"TERMINATED"}`, 422, "status"},
		{"sub filter unknown field", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created","version":[2]}]}`, 422, "version"},
		{"sub missing room", "POST", "/v1/rooms/nope/subscriptions", `{"type":"PULL",` + et + `}`, 404, ""},
		{"sub list type", "GET", "/v1/rooms/orders/subscriptions?type=BOTH", ``, 422, "type"},
		{"sub list status", "GET", "/v1/rooms/orders/subscriptions?status=OK", ``, 422, "status"},
		{"sub get bad id", "GET", "/v1/rooms/orders/subscriptions/not-a-uuid", ``, 404, ""},
		{"sub get missing", "GET", "/v1/rooms/orders/subscriptions/0190b5a8-0000-7000-8000-000000000000", ``, 404, ""},
	}
	a := apptest.New(t, "sqlite")
	a.Seed(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" || tc.method == "POST" {
				body = tc.body
			}
			r := a.Do(tc.method, tc.path, body)
			apptest.Want(t, r, tc.status)
			if tc.field != "" && !apptest.NamesField(t, r, tc.field) {
				t.Errorf("no error names field %q: %s", tc.field, r.Body)
			}
		})
	}

	t.Run("type cannot change", func(t *testing.T) {
		r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL",`+et+`}`)
		apptest.Want(t, r, http.StatusCreated)
		id := apptest.Decode[subscriptions.Response](t, r).ID
		r = a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+id, `{"type":"PUSH","pushUrl":"http://h/x"}`)
		apptest.WantField(t, r, "type")
	})
}
