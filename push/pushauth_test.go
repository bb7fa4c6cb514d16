package push

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestRequestHeadersAreReserved: no pushAuth header may have the name of a
// header a push request carries already, so a credential can neither
// replace nor break one. The transport's own (Host, Content-Length,
// Accept-Encoding) are checked by name.
func TestRequestHeadersAreReserved(t *testing.T) {
	t.Parallel()
	sub := subscriptions.Subscription{ID: uuid.New(), PushURL: "http://h/x", SigningSecret: newTestSecret(t)}
	ev := message.Event{ID: uuid.New(), EventType: "t", Version: 1, Attributes: map[string]string{"region": "eu"},
		Trace: message.Trace{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", State: "a=b"}}
	r := (&Dispatcher{}).request(sub, ev, &broker.Delivery{}, time.Now(), ev.Trace.Parent)
	names := []string{"Host", "Content-Length", "Accept-Encoding", "Transfer-Encoding", "Connection"}
	for name := range r.Headers {
		names = append(names, name)
	}
	for _, name := range names {
		if !subscriptions.ReservedHeader(name) {
			t.Errorf("a push request sets %s, which a pushAuth header may replace", name)
		}
	}
	if subscriptions.ReservedHeader("Authorization") || subscriptions.ReservedHeader("X-Api-Key") {
		t.Error("Authorization or X-Api-Key is reserved: a headers credential could not use it")
	}
}

// TestRequestCarriesPushAuth: each kind of credential is sent as its
// header, and the service's own headers stay as they are.
func TestRequestCarriesPushAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		auth subscriptions.PushAuth
		want map[string]string
	}{
		{subscriptions.PushAuth{Type: subscriptions.AuthBasic, Username: "alice", Password: "s3cret:pw"},
			map[string]string{"Authorization": "Basic YWxpY2U6czNjcmV0OnB3"}},
		{subscriptions.PushAuth{Type: subscriptions.AuthBearer, Token: "tok.en-1"}, map[string]string{"Authorization": "Bearer tok.en-1"}},
		{subscriptions.PushAuth{Type: subscriptions.AuthHeaders, Headers: map[string]string{"X-Api-Key": "k1", "authorization": "ApiKey k2"}},
			map[string]string{"X-Api-Key": "k1", "Authorization": "ApiKey k2"}},
	} {
		sub := subscriptions.Subscription{ID: uuid.New(), PushURL: "http://h/x", SigningSecret: newTestSecret(t), PushAuth: &tc.auth}
		ev := message.Event{ID: uuid.New(), EventType: "t", Version: 1}
		r := (&Dispatcher{}).request(sub, ev, &broker.Delivery{}, time.Now(), "")
		for name, v := range tc.want {
			if got := r.Headers.Values(name); len(got) != 1 || got[0] != v {
				t.Errorf("%s: %s = %q, want %q", tc.auth.Type, name, got, v)
			}
		}
		if r.Headers.Get("Webhook-Signature") == "" || r.Headers.Get("Content-Type") != "application/json" {
			t.Errorf("%s: the service's headers are gone: %v", tc.auth.Type, r.Headers)
		}
		if len(r.Secrets) == 0 {
			t.Errorf("%s: no secrets to mask", tc.auth.Type)
		}
	}
}

// TestPostMasksSecrets: an endpoint that echoes its request does not get
// the credential into the outcome, even one cut by the response cap.
func TestPostMasksSecrets(t *testing.T) {
	t.Parallel()
	const token = "tok-0123456789abcdef"
	srv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		// The token starts 10 bytes before the cap of 64 bytes.
		_, _ = w.Write([]byte(strings.Repeat(".", 54) + r.Header.Get("X-Api-Key") + " and " + r.Header.Get("Authorization")))
	})
	auth := &subscriptions.PushAuth{Type: subscriptions.AuthHeaders, Headers: map[string]string{"X-Api-Key": token}}
	h := http.Header{}
	auth.Apply(h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := post(ctx, NewHTTPClient(5*time.Second, loopbackAllowed()), Request{URL: srv.URL, Headers: h, Secrets: auth.Secrets()}, 64, time.Now)
	if out.StatusCode != http.StatusInternalServerError || strings.Contains(out.Body, "tok-") || !strings.Contains(out.Body, "xxxxx") || len(out.Body) > 64 {
		t.Errorf("body %q (%d bytes): want the token masked within 64 bytes", out.Body, len(out.Body))
	}

	// A transport error that quotes the URL: a secret in it is masked too.
	out = post(ctx, NewHTTPClient(5*time.Second, loopbackAllowed()), Request{URL: "http://127.0.0.1:1/" + token, Headers: h, Secrets: auth.Secrets()}, 64, time.Now)
	if out.Err == "" || strings.Contains(out.Err, token) {
		t.Errorf("error %q: want the token masked", out.Err)
	}
}
