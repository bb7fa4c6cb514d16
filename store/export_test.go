package store

import (
	"context"
	"log/slog"
)

// MigrateTo applies the migrations up to version upTo, for tests of a
// migration's data move.
func (db *DB) MigrateTo(ctx context.Context, log *slog.Logger, upTo int) (int, error) {
	return db.migrate(ctx, log, upTo)
}

// NoConflictRetries makes deadlocks surface as errors until the test ends;
// call it from a test that is not parallel.
func NoConflictRetries(t interface{ Cleanup(func()) }) {
	old := conflictRetries
	conflictRetries = 0
	t.Cleanup(func() { conflictRetries = old })
}
