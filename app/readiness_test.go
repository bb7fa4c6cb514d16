package app_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// switchRelay is an outbox relay whose health the test sets.
type switchRelay struct {
	apptest.IdleRelay
	failing atomic.Bool
}

func (r *switchRelay) Healthy() error {
	if r.failing.Load() {
		return errors.New("relay round failed")
	}
	return nil
}

// TestReadyzReportsEachDependency: /readyz names each dependency and answers
// 503 while any of them is down, 200 once all are back.
func TestReadyzReportsEachDependency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		breakIt   func(db *store.DB, q *apptest.Queues, r *switchRelay)
		wantCode  int
		wantCheck map[string]string
	}{
		{"all up", func(*store.DB, *apptest.Queues, *switchRelay) {}, 200,
			map[string]string{"database": "ok", "broker": "ok", "outbox": "ok"}},
		{"broker down", func(_ *store.DB, q *apptest.Queues, _ *switchRelay) { q.SetDown(true) }, 503,
			map[string]string{"database": "ok", "broker": "disconnected", "outbox": "ok"}},
		{"outbox relay failing", func(_ *store.DB, _ *apptest.Queues, r *switchRelay) { r.failing.Store(true) }, 503,
			map[string]string{"database": "ok", "broker": "ok", "outbox": "failing"}},
		{"database unreachable", func(db *store.DB, _ *apptest.Queues, _ *switchRelay) { _ = db.Close() }, 503,
			map[string]string{"database": "unreachable", "broker": "ok", "outbox": "ok"}},
		{"everything down", func(db *store.DB, q *apptest.Queues, r *switchRelay) {
			_ = db.Close()
			q.SetDown(true)
			r.failing.Store(true)
		}, 503, map[string]string{"database": "unreachable", "broker": "disconnected", "outbox": "failing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := storetest.Open(t, store.SQLite)
			q, relay := &apptest.Queues{}, &switchRelay{}
			a := apptest.Serve(t, db, q, relay, apptest.Config())
			apptest.Want(t, a.Do("GET", "/readyz", nil), 200)
			tt.breakIt(db, q, relay)
			r := a.Do("GET", "/readyz", nil)
			apptest.Want(t, r, tt.wantCode)
			body := r.JSON(t)
			checks, _ := body["checks"].(map[string]any)
			for k, v := range tt.wantCheck {
				if checks[k] != v {
					t.Errorf("checks.%s = %v, want %s (body %s)", k, checks[k], v, r.Body)
				}
			}
			if wantStatus := map[int]string{200: "ready", 503: "unavailable"}[tt.wantCode]; body["status"] != wantStatus {
				t.Errorf("status %v, want %s", body["status"], wantStatus)
			}
			// Recovery of what can come back in place.
			q.SetDown(false)
			relay.failing.Store(false)
			if tt.name != "database unreachable" && tt.name != "everything down" {
				apptest.Want(t, a.Do("GET", "/readyz", nil), 200)
			}
		})
	}
}

// TestMetricsEndpoint: /metrics is in openapi.yaml, answers without a key in
// the text format, and labels requests by route template, never by path.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, store.SQLite)
	apptest.Want(t, a.Do("POST", "/v1/rooms", map[string]any{"identifier": "m-room", "managerIdentifier": "m"}), 201)
	apptest.Want(t, a.Do("GET", "/v1/rooms/m-room", nil), 200)
	apptest.Want(t, a.Do("GET", "/v1/rooms/no-such-room", nil), 404)
	apptest.Want(t, a.Do("GET", "/no/such/route", nil), 404)
	r := a.Do("GET", "/metrics", nil)
	apptest.Want(t, r, 200)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	m := apptest.Scrape(t, a.URL)
	for _, c := range []struct {
		route, status string
		want          float64
	}{
		{"/v1/rooms", "201", 1},
		{"/v1/rooms/:roomId", "200", 1},
		{"/v1/rooms/:roomId", "404", 1},
		{"unmatched", "404", 1},
	} {
		if got := apptest.Sum(m, "messaging_http_request_duration_seconds_count", "route", c.route, "status", c.status); got != c.want {
			t.Errorf("requests to %s with %s: %v, want %v", c.route, c.status, got, c.want)
		}
	}
	for _, s := range m {
		if strings.Contains(s.Labels["route"], "room") && !strings.Contains(s.Labels["route"], ":roomId") && s.Labels["route"] != "/v1/rooms" {
			t.Errorf("raw path in a route label: %v", s)
		}
	}
	if got := apptest.Sum(m, "messaging_store_stats_up"); got != 1 {
		t.Errorf("store stats up %v", got)
	}
	_ = http.StatusOK
}
