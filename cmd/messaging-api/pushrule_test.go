package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/app/apptest"
)

// mergeEnv is env with k set to v.
func mergeEnv(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for key, val := range env {
		if key != k {
			out[key] = val
		}
	}
	return out
}

// TestOnePushRule: processes sharing a database share one push target
// rule. A dispatcher started without the allowlist the API process stored
// refuses to start, naming both rules; once push-rule replaced the stored
// rule, a process with the new settings starts and one with the old refuses.
func TestOnePushRule(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "rule.db")
	apptest.StartService(t, map[string]string{"DATABASE_URL": db}) // loopback allowed

	strict := map[string]string{"DATABASE_URL": db, "AUTH_DISABLED": "true", "PUSH_ALLOWED_CIDRS": ""}
	getenv := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	// Should a process start after all, it stops at this deadline.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var logs bytes.Buffer
	err := run(ctx, []string{"dispatcher"}, env{getenv: getenv(mergeEnv(strict, "HTTP_ADDR", "127.0.0.1:0")), stdout: &logs, stderr: &logs})
	if err == nil || !strings.Contains(err.Error(), "allow=none https-only=false") ||
		!strings.Contains(err.Error(), "allow=127.0.0.0/8,::1/128 https-only=false") {
		t.Fatalf("a dispatcher with another rule: %v, want a refusal naming both rules", err)
	}

	var out bytes.Buffer
	if err := runPushRule(ctx, nil, getenv(strict), &out, &logs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "push target rule: allow=none https-only=false (was: allow=127.0.0.0/8,::1/128 https-only=false)") {
		t.Errorf("push-rule says %q", out.String())
	}
	apptest.StartService(t, strict)
	old := map[string]string{"DATABASE_URL": db, "AUTH_DISABLED": "true", "PUSH_ALLOWED_CIDRS": apptest.LoopbackCIDRs, "HTTP_ADDR": "127.0.0.1:0"}
	if err := run(ctx, []string{"api"}, env{getenv: getenv(old), stdout: &logs, stderr: &logs}); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Fatalf("a process with the replaced rule: %v, want a refusal", err)
	}
}
