package publish_test

import (
	"net/http"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
)

// TestPublishUnstorableInput: what PostgreSQL cannot hold (a NUL character in
// text, text that is not UTF-8, an integer past its column) and what could
// not mean anything (a member given twice) get a 4xx naming the field, alike
// on both databases; nothing answers 500.
func TestPublishUnstorableInput(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		const msg = `"eventType":"order.created","payload":{"orderId":"1"}`
		cases := []struct {
			name, method, path, body string
			status                   int
			field                    string
		}{
			// A NUL character in text.
			{"publish event type", "POST", "/v1/rooms/orders/messages", `{"eventType":"order\u0000created","payload":{}}`, 422, "eventType"},
			{"publish correlation id", "POST", "/v1/rooms/orders/messages", `{` + msg + `,"correlationId":"c\u0000"}`, 422, "correlationId"},
			{"publish attribute", "POST", "/v1/rooms/orders/messages", `{` + msg + `,"attributes":{"k":"v\u0000"}}`, 422, "attributes.k"},
			{"batch event type", "POST", "/v1/rooms/orders/messages:batch", `{"messages":[{` + msg + `},{"eventType":"\u0000","payload":{}}]}`, 422, "messages[1].eventType"},
			{"correlation id query", "GET", "/v1/rooms/orders/messages?correlationId=a%00b", ``, 422, "correlationId"},

			// Text that is not UTF-8.
			{"payload", "POST", "/v1/rooms/orders/messages", "{\"eventType\":\"order.created\",\"payload\":{\"orderId\":\"a\xffb\"}}", 422, "payload.orderId"},
			{"batch payload", "POST", "/v1/rooms/orders/messages:batch", "{\"messages\":[{" + msg + "},{\"eventType\":\"order.created\",\"payload\":[\"\xc3\"]}]}", 422, "messages[1].payload[0]"},
			{"member name", "POST", "/v1/rooms/orders/messages", "{\"eventType\":\"order.created\",\"payload\":{\"\xff\":1}}", 422, "payload"},
			{"correlation id query not UTF-8", "GET", "/v1/rooms/orders/messages?correlationId=a%FFb", ``, 422, "correlationId"},

			// Integers past their column (PostgreSQL INTEGER: 2147483647).
			{"publish version", "POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","eventTypeVersion":2147483648,"payload":{"orderId":"1"}}`, 422, "eventTypeVersion"},
			{"publish version past the limit", "POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","eventTypeVersion":1000001,"payload":{"orderId":"1"}}`, 422, "eventTypeVersion"},
			{"batch version", "POST", "/v1/rooms/orders/messages:batch", `{"messages":[{` + msg + `},{"eventType":"order.created","eventTypeVersion":-2147483649,"payload":{}}]}`, 422, "messages[1].eventTypeVersion"},

			// A member given twice (encoding/json would keep the last).
			{"payload member twice", "POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","payload":{"orderId":"1","orderId":"2"}}`, 422, "payload.orderId"},
			{"batch payload member twice", "POST", "/v1/rooms/orders/messages:batch", `{"messages":[{` + msg + `},{"eventType":"order.created","payload":{"a":{"b":1,"b":1}}}]}`, 422, "messages[1].payload.a.b"},
			{"attribute twice", "POST", "/v1/rooms/orders/messages", `{` + msg + `,"attributes":{"k":"1","k":"2"}}`, 422, "attributes.k"},
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
		// Nothing of the refused requests was stored.
		r := a.Do("GET", "/v1/rooms/orders/messages", nil)
		apptest.Want(t, r, http.StatusOK)
		if items := r.JSON(t)["items"].([]any); len(items) != 0 {
			t.Errorf("refused publishes were stored: %s", r.Body)
		}
	})
}
