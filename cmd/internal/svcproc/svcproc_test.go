package svcproc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitReady(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) < 3 {
			http.Error(w, `{"status":"unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ctx := context.Background()
	if err := WaitReady(ctx, srv.URL, 5*time.Second, nil); err != nil || calls.Load() != 3 {
		t.Fatalf("ready after %d calls: %v; want nil after 3", calls.Load(), err)
	}

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "broker: disconnected", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	err := WaitReady(ctx, down.URL, 150*time.Millisecond, nil)
	if err == nil || !strings.Contains(err.Error(), "readyz 503: broker: disconnected") {
		t.Errorf("never ready: %v; want the last answer quoted", err)
	}
	exited := make(chan struct{})
	close(exited)
	if err := WaitReady(ctx, down.URL, time.Minute, exited); !errors.Is(err, ErrExited) {
		t.Errorf("exited process: %v; want ErrExited", err)
	}
}

func TestModuleDir(t *testing.T) {
	t.Parallel()
	dir := ModuleDir()
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); dir == "" || err != nil {
		t.Fatalf("ModuleDir() = %q from a checkout: no go.mod there (%v)", dir, err)
	}
}
