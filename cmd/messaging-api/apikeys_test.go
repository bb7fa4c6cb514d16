package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestAPIKeyCommand makes, lists and revokes keys with the CLI.
func TestAPIKeyCommand(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "keys.db")}
	getenv := func(k string) string { return env[k] }
	cli := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := runAPIKey(context.Background(), args, getenv, &out, &errOut)
		return out.String(), errOut.String(), err
	}

	token, _, err := cli("create", "-role", "admin", "-name", "ops")
	if err != nil {
		t.Fatal(err)
	}
	token = strings.TrimSpace(token)
	if !strings.HasPrefix(token, "mapi_") || len(token) != len("mapi_")+43 {
		t.Fatalf("stdout %q is not a key", token)
	}
	_, stderr, err := cli("create", "-role", "publisher", "-name", "p", "-room", "nope=order.created")
	if err == nil || !strings.Contains(stderr, "rooms[0].roomId: no such room") {
		t.Errorf("grant of a missing room: err %v, stderr %q", err, stderr)
	}
	if _, _, err := cli("create", "-role", "root", "-name", "x"); err == nil {
		t.Error("a key of an unknown role was made")
	}

	list, _, err := cli("list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list, token[:11]) || strings.Contains(list, token) || !strings.Contains(list, "active") {
		t.Errorf("list shows no prefix, or the whole key:\n%s", list)
	}
	id := strings.Fields(strings.Split(list, "\n")[1])[0]
	if _, _, err := cli("revoke", id); err != nil {
		t.Fatal(err)
	}
	if list, _, _ = cli("list"); !strings.Contains(list, "revoked") {
		t.Errorf("revoked key not shown revoked:\n%s", list)
	}
	if _, _, err := cli("frobnicate"); err == nil {
		t.Error("unknown subcommand accepted")
	}
}

// TestStartWithoutKeys: outside the embedded defaults a service with no key
// refuses to start, unless a bootstrap key or AUTH_DISABLED says otherwise.
func TestStartWithoutKeys(t *testing.T) {
	t.Parallel()
	db := storetest.PostgresSchemaURL(t)
	// The push target rule of startService below: the first process stores it.
	settings := map[string]string{"DATABASE_URL": db, "BROKER_URL": "embedded", "HTTP_ADDR": "127.0.0.1:0", "LOG_LEVEL": "error", "PUSH_ALLOWED_CIDRS": apptest.LoopbackCIDRs}
	err := run(context.Background(), []string{"api"}, env{getenv: func(k string) string { return settings[k] }, stdout: io.Discard, stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "apikey create") {
		t.Fatalf("started without any API key: %v", err)
	}

	const bootstrap = "mapi_bootstrap-key-for-the-test-0123456789"
	base := apptest.StartService(t, map[string]string{"DATABASE_URL": db, "AUTH_DISABLED": "", "AUTH_BOOTSTRAP_ADMIN_KEY": bootstrap}).Base
	get := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/api-keys/current", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(bootstrap); s != http.StatusOK {
		t.Errorf("bootstrap key: %d, want 200", s)
	}
	if s := get(bootstrap + "x"); s != http.StatusUnauthorized {
		t.Errorf("wrong key: %d, want 401", s)
	}
}
