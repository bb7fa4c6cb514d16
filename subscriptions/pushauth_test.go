package subscriptions_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/subscriptions"
)

const pushBody = `"type":"PUSH","pushUrl":"https://example.com/hook","eventTypes":[{"eventType":"order.created"}]`

// noSecret fails if an answer holds any of the secrets.
func noSecret(t *testing.T, r apptest.Response, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(string(r.Body), s) {
			t.Errorf("the answer holds the secret %q: %s", s, r.Body)
		}
	}
}

// TestPushAuth: a PUSH subscription's credential is written whole, shown
// without its secrets (type, username, header names), kept by a PATCH that
// does not name it, replaced by one that does, and removed by null.
func TestPushAuth(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		secrets := []string{"pa55-w0rd", "tok-bearer-1", "key-value-1", "YWxpY2U6cGE1NS13MHJk"}
		r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{`+pushBody+`,"pushAuth":{"type":"basic","username":"alice","password":"pa55-w0rd"}}`)
		apptest.Want(t, r, http.StatusCreated)
		noSecret(t, r, secrets...)
		s := apptest.Decode[subscriptions.Response](t, r)
		if s.PushAuth == nil || s.PushAuth.Type != subscriptions.AuthBasic || s.PushAuth.Username != "alice" || !s.PushAuth.Configured || s.PushAuth.HeaderNames != nil {
			t.Fatalf("pushAuth %+v", s.PushAuth)
		}
		path := "/v1/rooms/orders/subscriptions/" + s.ID

		for _, p := range []string{path, "/v1/rooms/orders/subscriptions"} {
			r = a.Do("GET", p, nil)
			apptest.Want(t, r, http.StatusOK)
			noSecret(t, r, secrets...)
			if !strings.Contains(string(r.Body), `"pushAuth":{"type":"basic","username":"alice","configured":true}`) {
				t.Errorf("GET %s: %s", p, r.Body)
			}
		}

		// A PATCH of other fields keeps it.
		r = a.Do("PATCH", path, `{"status":"PAUSED"}`)
		apptest.Want(t, r, http.StatusOK)
		if got := apptest.Decode[subscriptions.Response](t, r).PushAuth; got == nil || got.Type != subscriptions.AuthBasic {
			t.Errorf("after a PATCH without pushAuth: %+v", got)
		}

		r = a.Do("PATCH", path, `{"pushAuth":{"type":"bearer","token":"tok-bearer-1"}}`)
		apptest.Want(t, r, http.StatusOK)
		noSecret(t, r, secrets...)
		if got := apptest.Decode[subscriptions.Response](t, r).PushAuth; got == nil || got.Type != subscriptions.AuthBearer || !got.Configured || got.Username != "" || got.HeaderNames != nil {
			t.Errorf("bearer: %+v", got)
		}

		r = a.Do("PATCH", path, `{"pushAuth":{"type":"headers","headers":{"X-Tenant":"t-1","X-Api-Key":"key-value-1","Authorization":"ApiKey key-value-1"}}}`)
		apptest.Want(t, r, http.StatusOK)
		noSecret(t, r, secrets...)
		if got := apptest.Decode[subscriptions.Response](t, r).PushAuth; got == nil || got.Type != subscriptions.AuthHeaders ||
			!slices.Equal(got.HeaderNames, []string{"Authorization", "X-Api-Key", "X-Tenant"}) || got.Username != "" {
			t.Errorf("headers: %+v", got)
		}

		r = a.Do("PATCH", path, `{"pushAuth":null}`)
		apptest.Want(t, r, http.StatusOK)
		if got := apptest.Decode[subscriptions.Response](t, r).PushAuth; got != nil {
			t.Errorf("after pushAuth null: %+v", got)
		}
		r = a.Do("GET", path, nil)
		if !strings.Contains(string(r.Body), `"pushAuth":null`) {
			t.Errorf("after pushAuth null, GET: %s", r.Body)
		}

		// PULL subscriptions have none; null is accepted as "none".
		apptest.WantField(t, a.Do("POST", "/v1/rooms/orders/subscriptions",
			`{"type":"PULL","eventTypes":[{"eventType":"order.created"}],"pushAuth":{"type":"bearer","token":"t"}}`), "pushAuth")
		r = a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"}],"pushAuth":null}`)
		apptest.Want(t, r, http.StatusCreated)
		pull := apptest.Decode[subscriptions.Response](t, r)
		if pull.PushAuth != nil {
			t.Errorf("PULL subscription with pushAuth %+v", pull.PushAuth)
		}
		apptest.WantField(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+pull.ID, `{"pushAuth":{"type":"bearer","token":"t"}}`), "pushAuth")
	})
}

// TestPushAuthNeedsKey: a service without PUSH_AUTH_KEY refuses pushAuth
// (422 naming it) and takes PUSH subscriptions without one.
func TestPushAuthNeedsKey(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config()
	cfg.PushAuth = app.PushAuthConfig{}
	a := apptest.NewConfig(t, "sqlite", cfg)
	a.Seed(t)
	r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{`+pushBody+`,"pushAuth":{"type":"bearer","token":"tok-1"}}`)
	apptest.WantField(t, r, "pushAuth")
	noSecret(t, r, "tok-1")
	if !strings.Contains(string(r.Body), "PUSH_AUTH_KEY") {
		t.Errorf("the problem does not say what is missing: %s", r.Body)
	}
	r = a.Do("POST", "/v1/rooms/orders/subscriptions", `{`+pushBody+`}`)
	apptest.Want(t, r, http.StatusCreated)
	id := apptest.Decode[subscriptions.Response](t, r).ID
	apptest.WantField(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+id, `{"pushAuth":{"type":"bearer","token":"tok-1"}}`), "pushAuth")
	apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+id, `{"pushAuth":null}`), http.StatusOK)
}

// TestPushAuthValidation: every bad pushAuth is a 422 naming the member
// with its JSON pointer, never quoting a value, never a 500.
func TestPushAuthValidation(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	many := `{` + apptest.Repeat(17, `"X-H-%d":"v"`) + `}`
	cases := []struct {
		name, auth, field, pointer string
	}{
		{"type missing", `{"token":"t"}`, "pushAuth.type", "/pushAuth/type"},
		{"type unknown", `{"type":"digest"}`, "pushAuth.type", "/pushAuth/type"},
		{"type case", `{"type":"Basic","username":"u","password":"p"}`, "pushAuth.type", "/pushAuth/type"},
		{"basic without username", `{"type":"basic","password":"p"}`, "pushAuth.username", "/pushAuth/username"},
		{"basic empty username", `{"type":"basic","username":"","password":"p"}`, "pushAuth.username", "/pushAuth/username"},
		{"basic username colon", `{"type":"basic","username":"a:b","password":"p"}`, "pushAuth.username", "/pushAuth/username"},
		{"basic username newline", `{"type":"basic","username":"a\nb","password":"p"}`, "pushAuth.username", "/pushAuth/username"},
		{"basic username long", `{"type":"basic","username":"` + long(257) + `","password":"p"}`, "pushAuth.username", "/pushAuth/username"},
		{"basic without password", `{"type":"basic","username":"u"}`, "pushAuth.password", "/pushAuth/password"},
		{"basic password CRLF", `{"type":"basic","username":"u","password":"p\r\nX-Evil: 1"}`, "pushAuth.password", "/pushAuth/password"},
		{"basic password long", `{"type":"basic","username":"u","password":"` + long(1025) + `"}`, "pushAuth.password", "/pushAuth/password"},
		{"basic with token", `{"type":"basic","username":"u","password":"p","token":"t"}`, "pushAuth.token", "/pushAuth/token"},
		{"basic with headers", `{"type":"basic","username":"u","password":"p","headers":{"X-A":"1"}}`, "pushAuth.headers", "/pushAuth/headers"},
		{"bearer without token", `{"type":"bearer"}`, "pushAuth.token", "/pushAuth/token"},
		{"bearer token space", `{"type":"bearer","token":"a b"}`, "pushAuth.token", "/pushAuth/token"},
		{"bearer token LF", `{"type":"bearer","token":"a\nb"}`, "pushAuth.token", "/pushAuth/token"},
		{"bearer token non-ASCII", `{"type":"bearer","token":"café"}`, "pushAuth.token", "/pushAuth/token"},
		{"bearer token long", `{"type":"bearer","token":"` + long(4097) + `"}`, "pushAuth.token", "/pushAuth/token"},
		{"bearer with username", `{"type":"bearer","token":"t","username":"u"}`, "pushAuth.username", "/pushAuth/username"},
		{"headers missing", `{"type":"headers"}`, "pushAuth.headers", "/pushAuth/headers"},
		{"headers empty", `{"type":"headers","headers":{}}`, "pushAuth.headers", "/pushAuth/headers"},
		{"headers too many", `{"type":"headers","headers":` + many + `}`, "pushAuth.headers", "/pushAuth/headers"},
		{"headers too big", `{"type":"headers","headers":{"X-A":"` + long(4100) + `","X-B":"` + long(4100) + `"}}`, "pushAuth.headers", "/pushAuth/headers"},
		{"header name space", `{"type":"headers","headers":{"X Api":"1"}}`, "pushAuth.headers", "/pushAuth/headers/X Api"},
		{"header name colon", `{"type":"headers","headers":{"X-A:":"1"}}`, "pushAuth.headers", "/pushAuth/headers/X-A:"},
		{"header name slash", `{"type":"headers","headers":{"a/b":"1"}}`, "pushAuth.headers", "/pushAuth/headers/a~1b"},
		{"header name empty", `{"type":"headers","headers":{"":"1"}}`, "pushAuth.headers", "/pushAuth/headers/"},
		{"header name long", `{"type":"headers","headers":{"` + long(129) + `":"1"}}`, "pushAuth.headers", "/pushAuth/headers/" + long(129)},
		{"header Content-Type", `{"type":"headers","headers":{"content-type":"text/plain"}}`, "pushAuth.headers", "/pushAuth/headers/content-type"},
		{"header Host", `{"type":"headers","headers":{"Host":"evil"}}`, "pushAuth.headers", "/pushAuth/headers/Host"},
		{"header Content-Length", `{"type":"headers","headers":{"Content-Length":"1"}}`, "pushAuth.headers", "/pushAuth/headers/Content-Length"},
		{"header signature", `{"type":"headers","headers":{"Webhook-Signature":"v1,x"}}`, "pushAuth.headers", "/pushAuth/headers/Webhook-Signature"},
		{"header webhook-id", `{"type":"headers","headers":{"webhook-id":"x"}}`, "pushAuth.headers", "/pushAuth/headers/webhook-id"},
		{"header traceparent", `{"type":"headers","headers":{"Traceparent":"x"}}`, "pushAuth.headers", "/pushAuth/headers/Traceparent"},
		{"header X-Attempt", `{"type":"headers","headers":{"X-Attempt":"9"}}`, "pushAuth.headers", "/pushAuth/headers/X-Attempt"},
		{"header X-Event-Type", `{"type":"headers","headers":{"X-Event-Type":"x"}}`, "pushAuth.headers", "/pushAuth/headers/X-Event-Type"},
		{"header X-Attr-", `{"type":"headers","headers":{"X-Attr-Region":"eu"}}`, "pushAuth.headers", "/pushAuth/headers/X-Attr-Region"},
		{"header Transfer-Encoding", `{"type":"headers","headers":{"Transfer-Encoding":"chunked"}}`, "pushAuth.headers", "/pushAuth/headers/Transfer-Encoding"},
		{"header twice", `{"type":"headers","headers":{"X-Key":"1","x-key":"2"}}`, "pushAuth.headers", "/pushAuth/headers/x-key"},
		{"header value empty", `{"type":"headers","headers":{"X-Key":""}}`, "pushAuth.headers", "/pushAuth/headers/X-Key"},
		{"header value CRLF", `{"type":"headers","headers":{"X-Key":"a\r\nHost: evil"}}`, "pushAuth.headers", "/pushAuth/headers/X-Key"},
		{"header value NUL", `{"type":"headers","headers":{"X-Key":"a\u0001b"}}`, "pushAuth.headers", "/pushAuth/headers/X-Key"},
		{"header value spaces", `{"type":"headers","headers":{"X-Key":" a "}}`, "pushAuth.headers", "/pushAuth/headers/X-Key"},
		{"header value non-ASCII", `{"type":"headers","headers":{"X-Key":"clé"}}`, "pushAuth.headers", "/pushAuth/headers/X-Key"},
		{"header value number", `{"type":"headers","headers":{"X-Key":1}}`, "pushAuth.headers", ""},
		{"headers with token", `{"type":"headers","headers":{"X-Key":"1"},"token":"t"}`, "pushAuth.token", "/pushAuth/token"},
		{"unknown member", `{"type":"bearer","token":"t","scheme":"x"}`, "scheme", ""},
		{"not an object", `"bearer"`, "pushAuth", ""},
	}
	a := apptest.New(t, "sqlite")
	a.Seed(t)
	r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{`+pushBody+`}`)
	apptest.Want(t, r, http.StatusCreated)
	path := "/v1/rooms/orders/subscriptions/" + apptest.Decode[subscriptions.Response](t, r).ID
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, req := range []struct{ method, path, body string }{
				{"POST", "/v1/rooms/orders/subscriptions", `{` + pushBody + `,"pushAuth":` + tc.auth + `}`},
				{"PATCH", path, `{"pushAuth":` + tc.auth + `}`},
			} {
				r := a.Do(req.method, req.path, req.body)
				apptest.Want(t, r, http.StatusUnprocessableEntity)
				p := apptest.Decode[api.Problem](t, r)
				found := false
				for _, f := range p.Errors {
					found = found || (f.Field == tc.field && f.Pointer == tc.pointer)
					for _, v := range []string{"pa55", "p\r\n", "evil", "key-value", "café", "clé"} {
						if strings.Contains(f.Message, v) {
							t.Errorf("%s: the message quotes a value: %q", req.method, f.Message)
						}
					}
				}
				if !found {
					t.Errorf("%s: want field %q pointer %q; got %+v", req.method, tc.field, tc.pointer, p.Errors)
				}
			}
		})
	}
	// Nothing bad was stored: the subscription has no pushAuth still.
	if got := apptest.Decode[subscriptions.Response](t, a.Do("GET", path, nil)).PushAuth; got != nil {
		t.Errorf("a refused PATCH stored %+v", got)
	}
}
