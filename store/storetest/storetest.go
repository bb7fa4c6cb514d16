// Package storetest gives tests a fresh, migrated database of each dialect:
// a private schema in the PostgreSQL of TEST_DATABASE_URL, or an in-memory
// SQLite. With CI=true a PostgreSQL that cannot be reached fails the test
// instead of skipping it.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/url"
	"os"
	"testing"

	"github.com/roomhub/messaging-api/store"
)

// DefaultPostgresURL is used when TEST_DATABASE_URL is not set.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Dialects are the databases every store test runs against.
var Dialects = []store.Dialect{store.SQLite, store.Postgres}

// Open returns a migrated database of dialect d that disappears with the test.
func Open(t testing.TB, d store.Dialect) *store.DB {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dbURL := "sqlite::memory:"
	if d == store.Postgres {
		dbURL = PostgresSchemaURL(t)
	}
	db, err := store.Open(ctx, dbURL, log)
	if err != nil {
		t.Fatalf("open %s: %v", d, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Migrate(ctx, log); err != nil {
		t.Fatalf("migrate %s: %v", d, err)
	}
	return db
}

// PostgresURL is the test PostgreSQL, skipping (or, in CI, failing) the test
// when it cannot be reached.
func PostgresURL(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no PostgreSQL")
	}
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		base = DefaultPostgresURL
	}
	db, err := store.Open(context.Background(), base, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is required in CI: %v", err)
		}
		t.Skipf("PostgreSQL not reachable (set TEST_DATABASE_URL): %v", err)
	}
	_ = db.Close()
	return base
}

// PostgresSchemaURL creates a private, empty schema and returns a URL whose
// search_path points at it; the schema is dropped when the test ends.
func PostgresSchemaURL(t testing.TB) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := PostgresURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_" + hex.EncodeToString(b)
	admin, err := store.Open(context.Background(), base, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		_ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
