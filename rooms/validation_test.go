package rooms_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
)

// TestBadInput sends a bad value for every field of every request about
// rooms, event types and versions and checks the problem response names that
// field (and is a 4xx, never a 500).
func TestBadInput(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 201)
	const room = `"identifier":"r2","managerIdentifier":"m"`
	cases := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		field  string
	}{
		{"empty body", "POST", "/v1/rooms", ``, 400, "body"},
		{"malformed JSON", "POST", "/v1/rooms", `{"identifier":`, 400, "body"},
		{"not an object", "POST", "/v1/rooms", `[1]`, 422, "body"},
		{"trailing data", "POST", "/v1/rooms", `{` + room + `} {}`, 400, "body"},
		{"unknown field", "POST", "/v1/rooms", `{` + room + `,"deliveryDelays":5}`, 422, "deliveryDelays"},
		{"identifier missing", "POST", "/v1/rooms", `{"managerIdentifier":"m"}`, 422, "identifier"},
		{"identifier empty", "POST", "/v1/rooms", `{"identifier":"","managerIdentifier":"m"}`, 422, "identifier"},
		{"identifier null", "POST", "/v1/rooms", `{"identifier":null,"managerIdentifier":"m"}`, 422, "identifier"},
		{"identifier pattern", "POST", "/v1/rooms", `{"identifier":"a b","managerIdentifier":"m"}`, 422, "identifier"},
		{"identifier too long", "POST", "/v1/rooms", `{"identifier":"` + long + `","managerIdentifier":"m"}`, 422, "identifier"},
		{"identifier is a UUID", "POST", "/v1/rooms", `{"identifier":"0190b5a8-0000-7000-8000-000000000000","managerIdentifier":"m"}`, 422, "identifier"},
		{"identifier type", "POST", "/v1/rooms", `{"identifier":5,"managerIdentifier":"m"}`, 422, "identifier"},
		{"identifier taken", "POST", "/v1/rooms", `{"identifier":"orders","managerIdentifier":"m"}`, 409, ""},
		{"manager missing", "POST", "/v1/rooms", `{"identifier":"r2"}`, 422, "managerIdentifier"},
		{"manager blank", "POST", "/v1/rooms", `{"identifier":"r2","managerIdentifier":"  "}`, 422, "managerIdentifier"},
		{"manager too long", "POST", "/v1/rooms", `{"identifier":"r2","managerIdentifier":"` + long + `"}`, 422, "managerIdentifier"},
		{"manager type", "POST", "/v1/rooms", `{"identifier":"r2","managerIdentifier":true}`, 422, "managerIdentifier"},
		{"expiration negative", "POST", "/v1/rooms", `{` + room + `,"messageExpiration":-1}`, 422, "messageExpiration"},
		{"expiration fraction", "POST", "/v1/rooms", `{` + room + `,"messageExpiration":1.5}`, 422, "messageExpiration"},
		{"expiration too large", "POST", "/v1/rooms", `{` + room + `,"messageExpiration":999999999999999}`, 422, "messageExpiration"},
		{"expiration string", "POST", "/v1/rooms", `{` + room + `,"messageExpiration":"1h"}`, 422, "messageExpiration"},
		{"delay zero", "POST", "/v1/rooms", `{` + room + `,"deliveryDelay":0}`, 422, "deliveryDelay"},
		{"delay null", "POST", "/v1/rooms", `{` + room + `,"deliveryDelay":null}`, 422, "deliveryDelay"},
		{"delay too large", "POST", "/v1/rooms", `{` + room + `,"deliveryDelay":604800001}`, 422, "deliveryDelay"},
		{"delay string", "POST", "/v1/rooms", `{` + room + `,"deliveryDelay":"5"}`, 422, "deliveryDelay"},
		{"multiplier below 1", "POST", "/v1/rooms", `{` + room + `,"deliveryDelayMultiplier":0.5}`, 422, "deliveryDelayMultiplier"},
		{"multiplier too large", "POST", "/v1/rooms", `{` + room + `,"deliveryDelayMultiplier":1001}`, 422, "deliveryDelayMultiplier"},
		{"multiplier null", "POST", "/v1/rooms", `{` + room + `,"deliveryDelayMultiplier":null}`, 422, "deliveryDelayMultiplier"},
		{"attempts negative", "POST", "/v1/rooms", `{` + room + `,"deliveryAttempts":-1}`, 422, "deliveryAttempts"},
		{"attempts too many", "POST", "/v1/rooms", `{` + room + `,"deliveryAttempts":1001}`, 422, "deliveryAttempts"},
		{"attempts fraction", "POST", "/v1/rooms", `{` + room + `,"deliveryAttempts":2.5}`, 422, "deliveryAttempts"},
		{"status unknown", "POST", "/v1/rooms", `{` + room + `,"status":"DONE"}`, 422, "status"},
		{"room created terminated", "POST", "/v1/rooms", `{` + room + `,"status":"TERMINATED"}`, 422, "status"},
		{"patch identifier bad", "PATCH", "/v1/rooms/orders", `{"identifier":"no/slash"}`, 422, "identifier"},
		{"patch delay bad", "PATCH", "/v1/rooms/orders", `{"deliveryDelay":-3}`, 422, "deliveryDelay"},
		{"patch missing room", "PATCH", "/v1/rooms/nope", `{"deliveryDelay":3}`, 404, ""},
		{"limit zero", "GET", "/v1/rooms?limit=0", ``, 422, "limit"},
		{"limit text", "GET", "/v1/rooms?limit=ten", ``, 422, "limit"},
		{"limit too large", "GET", "/v1/rooms?limit=501", ``, 422, "limit"},
		{"cursor bad", "GET", "/v1/rooms?cursor=!!", ``, 422, "cursor"},
		{"force bad", "DELETE", "/v1/rooms/orders?force=maybe", ``, 422, "force"},

		{"event type missing id", "POST", "/v1/rooms/orders/event-types", `{}`, 422, "identifier"},
		{"event type bad id", "POST", "/v1/rooms/orders/event-types", `{"identifier":"a:b"}`, 422, "identifier"},
		{"event type long description", "POST", "/v1/rooms/orders/event-types", `{"identifier":"x","description":"` + strings.Repeat("d", 1001) + `"}`, 422, "description"},
		{"event type unknown field", "POST", "/v1/rooms/orders/event-types", `{"identifier":"x","name":"y"}`, 422, "name"},
		{"event type missing room", "POST", "/v1/rooms/nope/event-types", `{"identifier":"x"}`, 404, ""},

		{"version zero", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":0,"schema":{}}`, 422, "version"},
		{"version negative", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":-2,"schema":{}}`, 422, "version"},
		{"version null", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":null,"schema":{}}`, 422, "version"},
		{"version string", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":"3","schema":{}}`, 422, "version"},
		{"version too large", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":1000001,"schema":{}}`, 422, "version"},
		{"schema missing", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":3}`, 422, "schema"},
		{"schema null", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":3,"schema":null}`, 422, "schema"},
		{"schema not a schema", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":3,"schema":5}`, 422, "schema"},
		{"schema invalid keyword", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":3,"schema":{"type":"colour"}}`, 422, "schema"},
		{"schema remote ref", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":3,"schema":{"$ref":"https://example.com/s.json"}}`, 422, "schema"},
		{"version of missing type", "POST", "/v1/rooms/orders/event-types/nope/versions", `{"version":3,"schema":{}}`, 404, ""},
		{"version path not a number", "GET", "/v1/rooms/orders/event-types/order.created/versions/x", ``, 404, ""},
		{"unknown route", "GET", "/v1/nothing", ``, 404, ""},
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

	t.Run("body too large", func(t *testing.T) {
		r := a.Do("POST", "/v1/rooms", `{"identifier":"`+strings.Repeat("x", 70<<10)+`"}`)
		apptest.Want(t, r, http.StatusRequestEntityTooLarge)
	})
}
