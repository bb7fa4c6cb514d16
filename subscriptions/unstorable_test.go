package subscriptions_test

import (
	"net/http"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestUnstorableInput: what PostgreSQL cannot hold (a NUL character in
// text, text that is not UTF-8, an integer past its column) and what could
// not mean anything (a member given twice) get a 4xx naming the field, alike
// on both databases; nothing answers 500.
func TestUnstorableInput(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"}]}`)
		apptest.Want(t, r, http.StatusCreated)
		sub := "/v1/rooms/orders/subscriptions/" + apptest.Decode[subscriptions.Response](t, r).ID
		const pull = `{"type":"PULL","eventTypes":[{"eventType":"order.created"`
		const push = `{"type":"PUSH","pushUrl":"https://example.com/hook","eventTypes":[{"eventType":"order.created"}]`
		cases := []struct {
			name, method, path, body string
			status                   int
			field                    string
		}{
			// A NUL character in text.
			{"subscription owner", "POST", "/v1/rooms/orders/subscriptions", pull + `}],"owner":"a\u0000"}`, 422, "owner"},
			{"subscription event type", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order\u0000created"}]}`, 422, "eventTypes[0].eventType"},
			{"subscription push URL", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"http://127.0.0.1/\u0000","eventTypes":[{"eventType":"order.created"}]}`, 422, "pushUrl"},

			// Integers past their column (PostgreSQL INTEGER: 2147483647).
			{"subscription versions", "POST", "/v1/rooms/orders/subscriptions", pull + `,"versions":[1,2147483648]}]}`, 422, "eventTypes[0].versions[1]"},
			{"subscription attempts", "POST", "/v1/rooms/orders/subscriptions", pull + `}],"deliveryAttempts":2147483648}`, 422, "deliveryAttempts"},
			{"rotation grace", "POST", sub + "/secret:rotate", `{"gracePeriod":9223372036854775807}`, 422, "gracePeriod"},
			{"subscription ack deadline", "PATCH", sub, `{"ackDeadline":9223372036854775807}`, 422, "ackDeadline"},

			{"breaker window", "POST", "/v1/rooms/orders/subscriptions", push + `,"circuitBreaker":{"window":2147483648}}`, 422, "circuitBreaker.window"},
			{"breaker cool-down", "PATCH", sub, `{"circuitBreaker":{"cooldown":9223372036854775807}}`, 422, "circuitBreaker.cooldown"},
			{"delivery rate", "POST", "/v1/rooms/orders/subscriptions", push + `,"maxDeliveryRate":1e308}`, 422, "maxDeliveryRate"},

			// A member given twice (encoding/json would keep the last).
			{"filter twice", "POST", "/v1/rooms/orders/subscriptions", pull + `,"eventType":"order.created"}]}`, 422, "eventTypes[0].eventType"},
			{"breaker field twice", "POST", "/v1/rooms/orders/subscriptions", push + `,"circuitBreaker":{"cooldown":1000,"cooldown":2000}}`, 422, "circuitBreaker.cooldown"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var body any
				if tc.body != "" {
					body = tc.body
				}
				r := a.Do(tc.method, tc.path, body)
				apptest.Want(t, r, tc.status)
				if tc.field != "" && !apptest.NamesField(t, r, tc.field) {
					t.Errorf("no error names %q: %s", tc.field, r.Body)
				}
			})
		}
	})
}
