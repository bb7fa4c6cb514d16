package store_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := storetest.Open(t, d) // already migrated once
			n, err := db.Migrate(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil || n != 0 {
				t.Fatalf("second migrate applied %d, err %v", n, err)
			}
		})
	}
}

// TestConcurrentMigrators starts several migrators on one fresh PostgreSQL
// schema at once: the advisory lock must let each migration apply once.
func TestConcurrentMigrators(t *testing.T) {
	t.Parallel()
	base := storetest.PostgresURL(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	admin, err := store.Open(ctx, base, log)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const schema = "t_concurrent_migrate"
	_ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	if err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	url := base + "&search_path=" + schema

	var wg sync.WaitGroup
	applied := make([]int, 4)
	errs := make([]error, 4)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := store.Open(ctx, url, log)
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			applied[i], errs[i] = db.Migrate(ctx, log)
		}()
	}
	wg.Wait()
	total := 0
	for i := range applied {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	if total == 0 || total != max(applied[0], applied[1], applied[2], applied[3]) {
		t.Errorf("applied per migrator %v: each migration must apply exactly once", applied)
	}
}

func TestOpenRejectsUnknownURL(t *testing.T) {
	t.Parallel()
	_, err := store.Open(context.Background(), "mysql://root:pw@localhost/x", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		t.Fatal("mysql URL accepted")
	}
	if got := err.Error(); !strings.Contains(got, "DATABASE_URL") || strings.Contains(got, "pw@") {
		t.Errorf("error %q should name DATABASE_URL and hide the password", got)
	}
}
