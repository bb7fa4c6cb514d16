package app_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/store"
)

// TestAccessLog: a request is one line, INFO (DEBUG for the probes), with its
// route template, status, latency, request id, size and API key id, never the
// key; a client's flood of rejected requests is rate limited.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t, store.SQLite)
	rec := &apitest.LogRecorder{}
	srv, _ := app.NewHandler(authConfig(), slog.New(rec), f.DB, &apptest.Queues{}, apptest.IdleRelay{}, true, metrics.New(metrics.Options{}))
	rec.Take() // what building the server logged
	call := func(method, path, token string) int {
		req := httptest.NewRequest(method, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		return w.Code
	}
	one := func(t *testing.T, wantLevel slog.Level) map[string]string {
		t.Helper()
		recs, attrs, text := rec.Take()
		if len(recs) != 1 || recs[0].Message != "request" || recs[0].Level != wantLevel {
			t.Fatalf("want one %s request line, got:\n%s", wantLevel, text)
		}
		for _, secret := range f.keys {
			if strings.Contains(text, secret) {
				t.Errorf("an API key was logged:\n%s", text)
			}
		}
		return attrs[0]
	}

	if code := call("GET", "/v1/rooms/"+f.roomA, f.keys['a']); code != http.StatusOK {
		t.Fatalf("GET room: %d", code)
	}
	a := one(t, slog.LevelInfo)
	want := map[string]string{"method": "GET", "route": "/v1/rooms/:roomId", "status": "200", "api_key_id": f.adminKeyID}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("%s = %q, want %q (line %v)", k, a[k], v, a)
		}
	}
	for _, k := range []string{"latency", "request_id", "bytes_out"} {
		if a[k] == "" || a[k] == "0" {
			t.Errorf("no %s: %v", k, a)
		}
	}

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		call("GET", path, "")
		if a := one(t, slog.LevelDebug); a["route"] != path {
			t.Errorf("probe %s logged as route %q", path, a["route"])
		}
	}

	if code := call("GET", "/v1/rooms/"+f.roomA, "not-a-valid-key-but-secret"); code != http.StatusUnauthorized {
		t.Fatalf("bad key: %d", code)
	}
	if a := one(t, slog.LevelInfo); a["status"] != "401" || a["error"] == "" || a["api_key_id"] != "" {
		t.Errorf("rejected request line %v", a)
	}
	if _, _, text := rec.Take(); strings.Contains(text, "not-a-valid-key-but-secret") {
		t.Errorf("the token sent was logged")
	}

	if code := call("GET", "/v1/no/such/route", f.keys['a']); code != http.StatusNotFound {
		t.Fatalf("unknown route: %d", code)
	}
	if a := one(t, slog.LevelInfo); a["route"] != "unmatched" {
		t.Errorf("unknown route logged as %q, want unmatched (never the raw path)", a["route"])
	}

	// The 401 and the 404 above used two of the client's 20 lines.
	for range 1000 {
		call("GET", "/v1/rooms/"+f.roomA, "bad")
	}
	recs, _, text := rec.Take()
	if len(recs) != 18 {
		t.Errorf("a flood of 1000 rejected requests: %d lines, want the 18 left of 20:\n%s", len(recs), text)
	}
}
