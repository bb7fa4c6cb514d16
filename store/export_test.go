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
