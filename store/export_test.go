package store

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// MigrateTo applies the migrations up to version upTo, for tests of a
// migration's data move.
func (db *DB) MigrateTo(ctx context.Context, log *slog.Logger, upTo int) (int, error) {
	return db.migrate(ctx, log, upTo)
}

// SetClock makes db's outbox claims read now for the time, so that a test
// moves past a lease instead of waiting for it to end. Call it before db is
// used concurrently.
func (db *DB) SetClock(now func() time.Time) { db.now = now }

// NoConflictRetries makes deadlocks surface as errors until the test ends;
// call it from a test that is not parallel.
func NoConflictRetries(t interface{ Cleanup(func()) }) {
	old := conflictRetries
	conflictRetries = 0
	t.Cleanup(func() { conflictRetries = old })
}

// CountQueries counts the reading statements db sends from now on, for
// tests that a lookup is one query.
func (db *DB) CountQueries(t testing.TB) *atomic.Int64 {
	var n atomic.Int64
	count := func(*gorm.DB) { n.Add(1) }
	cb := db.gorm.Callback()
	for name, err := range map[string]error{
		"query": cb.Query().After("gorm:query").Register("test:count_query", count),
		"row":   cb.Row().After("gorm:row").Register("test:count_row", count),
		"raw":   cb.Raw().After("gorm:raw").Register("test:count_raw", count),
	} {
		if err != nil {
			t.Fatalf("count %s statements: %v", name, err)
		}
	}
	return &n
}

// RawPushAuth is a subscription's push_auth and push_auth_key columns as
// stored.
func (db *DB) RawPushAuth(t testing.TB, id uuid.UUID) (sealed, keyID string) {
	t.Helper()
	var row subscriptionRow
	if err := db.gorm.Select("push_auth", "push_auth_key").Where("id = ?", id).Take(&row).Error; err != nil {
		t.Fatal(err)
	}
	return row.PushAuth, row.PushAuthKey
}

// SetRawPushAuth overwrites a subscription's sealed push credential, as a
// write straight to the database would.
func (db *DB) SetRawPushAuth(t testing.TB, id uuid.UUID, sealed, keyID string) {
	t.Helper()
	if err := db.gorm.Model(&subscriptionRow{}).Where("id = ?", id).
		Updates(map[string]any{"push_auth": sealed, "push_auth_key": keyID}).Error; err != nil {
		t.Fatal(err)
	}
}
