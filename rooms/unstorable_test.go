package main

import (
	"net/http"
	"slices"
	"testing"
)

// TestUnstorableInput: what PostgreSQL cannot hold (a NUL character in
// text, text that is not UTF-8, an integer past its column) and what could
// not mean anything (a member given twice) get a 4xx naming the field, alike
// on both databases; nothing answers 500.
func TestUnstorableInput(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		a.seed(t)
		r := a.do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"}]}`)
		want(t, r, http.StatusCreated)
		sub := "/v1/rooms/orders/subscriptions/" + r.JSON(t)["id"].(string)
		const (
			msg  = `"eventType":"order.created","payload":{"orderId":"1"}`
			pull = `{"type":"PULL","eventTypes":[{"eventType":"order.created"`
		)
		cases := []struct {
			name, method, path, body string
			status                   int
			field                    string
		}{
			// A NUL character in text.
			{"room manager", "POST", "/v1/rooms", `{"identifier":"r9","managerIdentifier":"a\u0000b"}`, 422, "managerIdentifier"},
			{"room manager patched", "PATCH", "/v1/rooms/orders", `{"managerIdentifier":"\u0000"}`, 422, "managerIdentifier"},
			{"room identifier", "POST", "/v1/rooms", `{"identifier":"r\u0000","managerIdentifier":"m"}`, 422, "identifier"},
			{"event type description", "POST", "/v1/rooms/orders/event-types", `{"identifier":"x1","description":"a\u0000b"}`, 422, "description"},
			{"subscription owner", "POST", "/v1/rooms/orders/subscriptions", pull + `}],"owner":"a\u0000"}`, 422, "owner"},
			{"subscription event type", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order\u0000created"}]}`, 422, "eventTypes[0].eventType"},
			{"subscription push URL", "POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"http://127.0.0.1/\u0000","eventTypes":[{"eventType":"order.created"}]}`, 422, "pushUrl"},
			{"API key name", "POST", "/v1/api-keys", `{"name":"a\u0000","role":"admin"}`, 422, "name"},
			{"API key subject", "POST", "/v1/api-keys", `{"name":"k","role":"manager","subject":"\u0000"}`, 422, "subject"},
			{"API key grant", "POST", "/v1/api-keys", `{"name":"k","role":"publisher","rooms":[{"roomId":"orders","eventTypes":["a\u0000"]}]}`, 422, "rooms[0].eventTypes[0]"},
			{"publish event type", "POST", "/v1/rooms/orders/messages", `{"eventType":"order\u0000created","payload":{}}`, 422, "eventType"},
			{"publish correlation id", "POST", "/v1/rooms/orders/messages", `{` + msg + `,"correlationId":"c\u0000"}`, 422, "correlationId"},
			{"publish attribute", "POST", "/v1/rooms/orders/messages", `{` + msg + `,"attributes":{"k":"v\u0000"}}`, 422, "attributes.k"},
			{"batch event type", "POST", "/v1/rooms/orders/messages:batch", `{"messages":[{` + msg + `},{"eventType":"\u0000","payload":{}}]}`, 422, "messages[1].eventType"},
			{"ack id", "POST", sub + "/ack", `{"ackIds":["\u0000"]}`, 422, "ackIds[0]"},
			{"dead letter id", "POST", sub + "/dead-letters:replay", `{"ids":["\u0000"]}`, 422, "ids[0]"},
			{"event type path", "GET", "/v1/rooms/orders/event-types/a%00b", ``, 404, ""},
			{"correlation id query", "GET", "/v1/rooms/orders/messages?correlationId=a%00b", ``, 422, "correlationId"},
			{"cursor", "GET", "/v1/rooms/orders/event-types?cursor=AA", ``, 422, "cursor"},

			// Text that is not UTF-8.
			{"payload", "POST", "/v1/rooms/orders/messages", "{\"eventType\":\"order.created\",\"payload\":{\"orderId\":\"a\xffb\"}}", 422, "payload.orderId"},
			{"batch payload", "POST", "/v1/rooms/orders/messages:batch", "{\"messages\":[{" + msg + "},{\"eventType\":\"order.created\",\"payload\":[\"\xc3\"]}]}", 422, "messages[1].payload[0]"},
			{"room manager not UTF-8", "POST", "/v1/rooms", "{\"identifier\":\"r9\",\"managerIdentifier\":\"a\xffb\"}", 422, "managerIdentifier"},
			{"schema", "POST", "/v1/rooms/orders/event-types/order.created/versions", "{\"schema\":{\"const\":\"\xff\"}}", 422, "schema.const"},
			{"member name", "POST", "/v1/rooms/orders/messages", "{\"eventType\":\"order.created\",\"payload\":{\"\xff\":1}}", 422, "payload"},
			{"event type path not UTF-8", "GET", "/v1/rooms/orders/event-types/a%FFb", ``, 404, ""},
			{"correlation id query not UTF-8", "GET", "/v1/rooms/orders/messages?correlationId=a%FFb", ``, 422, "correlationId"},
			{"cursor not UTF-8", "GET", "/v1/rooms/orders/event-types?cursor=_w", ``, 422, "cursor"},

			// Integers past their column (PostgreSQL INTEGER: 2147483647).
			{"publish version", "POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","eventTypeVersion":2147483648,"payload":{"orderId":"1"}}`, 422, "eventTypeVersion"},
			{"publish version past the limit", "POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","eventTypeVersion":1000001,"payload":{"orderId":"1"}}`, 422, "eventTypeVersion"},
			{"batch version", "POST", "/v1/rooms/orders/messages:batch", `{"messages":[{` + msg + `},{"eventType":"order.created","eventTypeVersion":-2147483649,"payload":{}}]}`, 422, "messages[1].eventTypeVersion"},
			{"subscription versions", "POST", "/v1/rooms/orders/subscriptions", pull + `,"versions":[1,2147483648]}]}`, 422, "eventTypes[0].versions[1]"},
			{"version created", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":2147483648,"schema":{}}`, 422, "version"},
			{"version path", "GET", "/v1/rooms/orders/event-types/order.created/versions/2147483648", ``, 404, ""},
			{"version path deleted", "DELETE", "/v1/rooms/orders/event-types/order.created/versions/9223372036854775807", ``, 404, ""},
			{"room attempts", "POST", "/v1/rooms", `{"identifier":"r9","managerIdentifier":"m","deliveryAttempts":2147483648}`, 422, "deliveryAttempts"},
			{"room expiration", "PATCH", "/v1/rooms/orders", `{"messageExpiration":9223372036854775807}`, 422, "messageExpiration"},
			{"room expiration past int64", "PATCH", "/v1/rooms/orders", `{"messageExpiration":9223372036854775808}`, 422, "messageExpiration"},
			{"room policy", "PATCH", "/v1/rooms/orders", `{"retryPolicy":{"backoffRetries":2147483648}}`, 422, "retryPolicy.backoffRetries"},
			{"subscription attempts", "POST", "/v1/rooms/orders/subscriptions", pull + `}],"deliveryAttempts":2147483648}`, 422, "deliveryAttempts"},
			{"subscription ack deadline", "PATCH", sub, `{"ackDeadline":9223372036854775807}`, 422, "ackDeadline"},
			{"API key burst", "POST", "/v1/api-keys", `{"name":"k","role":"publisher","rooms":[{"roomId":"orders"}],"publishBurst":2147483648}`, 422, "publishBurst"},
			{"pull max messages", "POST", sub + "/pull", `{"maxMessages":2147483648}`, 422, "maxMessages"},
			{"pull wait", "POST", sub + "/pull", `{"waitMs":9223372036854775807}`, 422, "waitMs"},
			{"ack deadline", "POST", sub + "/modify-ack-deadline", `{"ackIds":["x"],"ackDeadlineMs":9223372036854775807}`, 422, "ackDeadlineMs"},
			{"rotation grace", "POST", sub + "/secret:rotate", `{"gracePeriod":9223372036854775807}`, 422, "gracePeriod"},
			{"list limit", "GET", "/v1/rooms?limit=2147483648", ``, 422, "limit"},

			// A member given twice (encoding/json would keep the last).
			{"room identifier twice", "POST", "/v1/rooms", `{"identifier":"r9","managerIdentifier":"m","identifier":"r10"}`, 422, "identifier"},
			{"escaped name twice", "POST", "/v1/rooms", `{"identifier":"r9","managerIdentifier":"m","\u0069dentifier":"r10"}`, 422, "identifier"},
			{"payload member twice", "POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","payload":{"orderId":"1","orderId":"2"}}`, 422, "payload.orderId"},
			{"batch payload member twice", "POST", "/v1/rooms/orders/messages:batch", `{"messages":[{` + msg + `},{"eventType":"order.created","payload":{"a":{"b":1,"b":1}}}]}`, 422, "messages[1].payload.a.b"},
			{"filter twice", "POST", "/v1/rooms/orders/subscriptions", pull + `,"eventType":"order.created"}]}`, 422, "eventTypes[0].eventType"},
			{"attribute twice", "POST", "/v1/rooms/orders/messages", `{` + msg + `,"attributes":{"k":"1","k":"2"}}`, 422, "attributes.k"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var body any
				if tc.body != "" {
					body = tc.body
				}
				r := a.do(tc.method, tc.path, body)
				want(t, r, tc.status)
				if tc.field != "" && !namesField(t, r, tc.field) {
					t.Errorf("no error names %q: %s", tc.field, r.Body)
				}
			})
		}
		// Nothing of the refused requests was stored.
		r = a.do("GET", "/v1/rooms/orders/messages", nil)
		want(t, r, http.StatusOK)
		if items := r.JSON(t)["items"].([]any); len(items) != 0 {
			t.Errorf("refused publishes were stored: %s", r.Body)
		}
	})
}

func namesField(t *testing.T, r response, field string) bool {
	t.Helper()
	errs, _ := r.JSON(t)["errors"].([]any)
	return slices.ContainsFunc(errs, func(e any) bool { return e.(map[string]any)["field"] == field })
}
