package auth_test

import (
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
)

// TestAPIKeysUnstorableInput: what PostgreSQL cannot hold (a NUL character
// in text, an integer past its column) gets a 422 naming the field, alike on
// both databases; nothing answers 500.
func TestAPIKeysUnstorableInput(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		cases := []struct {
			name, method, path, body string
			status                   int
			field                    string
		}{
			// A NUL character in text.
			{"API key name", "POST", "/v1/api-keys", `{"name":"a\u0000","role":"admin"}`, 422, "name"},
			{"API key subject", "POST", "/v1/api-keys", `{"name":"k","role":"manager","subject":"\u0000"}`, 422, "subject"},
			{"API key grant", "POST", "/v1/api-keys", `{"name":"k","role":"publisher","rooms":[{"roomId":"orders","eventTypes":["a\u0000"]}]}`, 422, "rooms[0].eventTypes[0]"},

			// Integers past their column (PostgreSQL INTEGER: 2147483647).
			{"API key burst", "POST", "/v1/api-keys", `{"name":"k","role":"publisher","rooms":[{"roomId":"orders"}],"publishBurst":2147483648}`, 422, "publishBurst"},
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
