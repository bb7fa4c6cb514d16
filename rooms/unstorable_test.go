package rooms_test

import (
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
)

// TestUnstorableInput: what PostgreSQL cannot hold (a NUL character in
// text, text that is not UTF-8, an integer past its column) and what could
// not mean anything (a member given twice) get a 4xx naming the field, alike
// on both databases; nothing answers 500.
func TestUnstorableInput(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
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
			{"event type path", "GET", "/v1/rooms/orders/event-types/a%00b", ``, 404, ""},
			{"cursor", "GET", "/v1/rooms/orders/event-types?cursor=AA", ``, 422, "cursor"},

			// Text that is not UTF-8.
			{"room manager not UTF-8", "POST", "/v1/rooms", "{\"identifier\":\"r9\",\"managerIdentifier\":\"a\xffb\"}", 422, "managerIdentifier"},
			{"schema", "POST", "/v1/rooms/orders/event-types/order.created/versions", "{\"schema\":{\"const\":\"\xff\"}}", 422, "schema.const"},
			{"event type path not UTF-8", "GET", "/v1/rooms/orders/event-types/a%FFb", ``, 404, ""},
			{"cursor not UTF-8", "GET", "/v1/rooms/orders/event-types?cursor=_w", ``, 422, "cursor"},

			// Integers past their column (PostgreSQL INTEGER: 2147483647).
			{"version created", "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":2147483648,"schema":{}}`, 422, "version"},
			{"version path", "GET", "/v1/rooms/orders/event-types/order.created/versions/2147483648", ``, 404, ""},
			{"version path deleted", "DELETE", "/v1/rooms/orders/event-types/order.created/versions/9223372036854775807", ``, 404, ""},
			{"room attempts", "POST", "/v1/rooms", `{"identifier":"r9","managerIdentifier":"m","deliveryAttempts":2147483648}`, 422, "deliveryAttempts"},
			{"room expiration", "PATCH", "/v1/rooms/orders", `{"messageExpiration":9223372036854775807}`, 422, "messageExpiration"},
			{"room expiration past int64", "PATCH", "/v1/rooms/orders", `{"messageExpiration":9223372036854775808}`, 422, "messageExpiration"},
			{"room policy", "PATCH", "/v1/rooms/orders", `{"retryPolicy":{"backoffRetries":2147483648}}`, 422, "retryPolicy.backoffRetries"},
			{"list limit", "GET", "/v1/rooms?limit=2147483648", ``, 422, "limit"},

			// A member given twice (encoding/json would keep the last).
			{"room identifier twice", "POST", "/v1/rooms", `{"identifier":"r9","managerIdentifier":"m","identifier":"r10"}`, 422, "identifier"},
			{"escaped name twice", "POST", "/v1/rooms", `{"identifier":"r9","managerIdentifier":"m","\u0069dentifier":"r10"}`, 422, "identifier"},
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
