package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/seal"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestPushAuthKeyRotation: a process without the key of a stored push
// credential refuses to start, naming the key by id; one with the new key
// and the old one among PUSH_AUTH_OLD_KEYS starts and encrypts every
// credential again with the new key, after which the old key can go.
func TestPushAuthKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "rotate.db")
	const keyB = "q3Jx5mYb0Jw8m3m2oQ6m1d7h0b8W2Zy9QxV4u5t6s7A="
	oldKey, err := seal.ParseKey(apptest.PushAuthKey)
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := seal.ParseKey(keyB)
	if err != nil {
		t.Fatal(err)
	}
	open := func() *store.DB {
		db, err := store.Open(ctx, dbURL, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}

	// A credential sealed with the tests' key.
	db := open()
	if _, err := db.Migrate(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	a := apptest.Serve(t, db, &apptest.Queues{}, apptest.IdleRelay{}, apptest.Config())
	a.Seed(t)
	r := a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"https://example.com/h","eventTypes":[{"eventType":"order.created"}],`+
		`"pushAuth":{"type":"bearer","token":"tok-rotate-1"}}`)
	apptest.Want(t, r, http.StatusCreated)
	sub := apptest.Decode[subscriptions.Response](t, r)

	// Without the old key: no start, the key named by id only.
	var logs bytes.Buffer
	err = app.Main(ctx, "serve", nil, func(k string) string {
		return map[string]string{"DATABASE_URL": dbURL, "PUSH_AUTH_KEY": keyB, "HTTP_ADDR": "127.0.0.1:0", "PUSH_ALLOWED_CIDRS": apptest.LoopbackCIDRs}[k]
	}, &logs)
	if err == nil || !strings.Contains(err.Error(), oldKey.ID()) || strings.Contains(err.Error()+logs.String(), apptest.PushAuthKey) ||
		strings.Contains(err.Error()+logs.String(), keyB) {
		t.Fatalf("start without the old key: %v\n%s", err, logs.String())
	}

	// With both: it starts and re-encrypts.
	_, serviceLogs := apptest.StartServiceLogs(t, map[string]string{
		"DATABASE_URL": dbURL, "PUSH_AUTH_KEY": keyB, "PUSH_AUTH_OLD_KEYS": apptest.PushAuthKey, "LOG_LEVEL": "info",
	})
	if !strings.Contains(serviceLogs.String(), "push credentials re-encrypted") {
		t.Errorf("no re-encryption logged:\n%s", serviceLogs.String())
	}
	onlyNew := open().WithKeyring(seal.NewKeyring(newKey))
	if ids, err := onlyNew.Subscriptions().PushAuthKeys(ctx); err != nil || !slices.Equal(ids, []string{newKey.ID()}) {
		t.Fatalf("keys in use: %v, %v", ids, err)
	}
	got, err := onlyNew.Subscriptions().Subscription(ctx, uuid.MustParse(sub.RoomID), uuid.MustParse(sub.ID))
	if err != nil || got.PushAuth == nil || got.PushAuth.Token != "tok-rotate-1" {
		t.Fatalf("with the new key alone: %v, %v", got.PushAuth, err)
	}
	for _, secret := range []string{"tok-rotate-1", apptest.PushAuthKey, keyB} {
		if strings.Contains(serviceLogs.String(), secret) {
			t.Errorf("the log shows %q", secret)
		}
	}
}

// TestEmbeddedPushAuthKey: on the embedded defaults (an SQLite file, no
// PUSH_AUTH_KEY) the service makes a key file beside the database once, so
// that pushAuth works out of the box, and reads it at the next start.
func TestEmbeddedPushAuthKey(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "embedded.db")
	env := map[string]string{"DATABASE_URL": "sqlite:" + dbPath, "PUSH_AUTH_KEY": ""}
	var id string
	t.Run("first start", func(t *testing.T) {
		c := apptest.StartService(t, env)
		c.Call("POST", "/v1/rooms", `{"identifier":"orders","managerIdentifier":"m"}`, 201)
		c.Call("POST", "/v1/rooms/orders/event-types", `{"identifier":"tick"}`, 201)
		sub := c.Call("POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"https://example.com/h",`+
			`"eventTypes":[{"eventType":"tick"}],"pushAuth":{"type":"bearer","token":"tok-embedded"}}`, 201)
		id = sub["id"].(string)
	})
	info, err := os.Stat(dbPath + ".push-auth-key")
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", info.Mode().Perm())
	}
	if t.Failed() {
		return
	}
	c := apptest.StartService(t, env)
	sub := c.Call("GET", "/v1/rooms/orders/subscriptions/"+id, "", 200)
	if auth, _ := sub["pushAuth"].(map[string]any); auth["type"] != "bearer" || auth["configured"] != true {
		t.Errorf("after a restart: pushAuth %v", sub["pushAuth"])
	}
}
