// Package store is the service's persistence: gorm over PostgreSQL, or over an
// embedded SQLite file when nothing is configured, the versioned migrations both
// share, the row structs (unexported; the features own the domain types), and
// the translation of database errors onto the features' sentinels.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/redact"
	"github.com/roomhub/messaging-api/seal"
)

// Dialect names the database behind a DB.
type Dialect string

const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// DB is an open database.
type DB struct {
	gorm    *gorm.DB
	dialect Dialect
	now     func() time.Time // when outbox leases end; tests move it (export_test.go)
	// keys seal the push credentials of subscriptions; nil: none can be
	// stored (see WithKeyring).
	keys *seal.Keyring
}

// WithKeyring returns db sealing and opening the push credentials of
// subscriptions with keys; it shares db's connections.
func (db *DB) WithKeyring(keys *seal.Keyring) *DB {
	c := *db
	c.keys = keys
	return &c
}

// Open connects to databaseURL: postgres://… or postgresql://… for PostgreSQL,
// sqlite:PATH (or sqlite::memory:) for the embedded SQLite. Its errors never
// quote a password of databaseURL.
func Open(ctx context.Context, databaseURL string, log *slog.Logger) (*DB, error) {
	db, err := open(ctx, databaseURL, log)
	// The driver quotes the URL in some errors, masking only some of its
	// forms (not ?password=).
	return db, redact.Error(err, databaseURL)
}

func open(ctx context.Context, databaseURL string, log *slog.Logger) (*DB, error) {
	cfg := &gorm.Config{
		TranslateError: true,
		// Single statements need no BEGIN/COMMIT around them (a round trip
		// each on the hot paths); multi-statement writes use Transaction.
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	}
	var (
		db      *gorm.DB
		dialect Dialect
		err     error
	)
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		dialect = Postgres
		db, err = gorm.Open(postgres.New(postgres.Config{
			DSN:          databaseURL,
			OptionOpenDB: []stdlib.OptionOpenDB{stdlib.OptionAfterConnect(registerUUID)},
		}), cfg)
	case strings.HasPrefix(databaseURL, "sqlite:"):
		dialect = SQLite
		var dsn string
		dsn, err = sqliteDSN(strings.TrimPrefix(strings.TrimPrefix(databaseURL, "sqlite:"), "//"))
		if err == nil {
			db, err = gorm.Open(sqlite.Open(dsn), cfg)
		}
	default:
		return nil, fmt.Errorf("DATABASE_URL must start with postgres://, postgresql:// or sqlite:, got %q", Redact(databaseURL))
	}
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", dialect, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if dialect == SQLite {
		// One connection: SQLite has one writer anyway, and an in-memory
		// database exists per connection.
		sqlDB.SetMaxOpenConns(1)
	} else {
		sqlDB.SetMaxOpenConns(20)
		sqlDB.SetMaxIdleConns(20)
		sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pingCtx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("connect to %s database %s: %w", dialect, Redact(databaseURL), err)
	}
	log.Info("database connected", slog.String("dialect", string(dialect)), slog.String("url", Redact(databaseURL)))
	return &DB{gorm: db, dialect: dialect, now: time.Now}, nil
}

func sqliteDSN(path string) (string, error) {
	pragmas := "_pragma=foreign_keys(1)&_pragma=busy_timeout(5000)"
	if path == ":memory:" || path == "" {
		return ":memory:?" + pragmas, nil
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("create directory for the SQLite database: %w", err)
		}
	}
	return "file:" + path + "?" + pragmas + "&_pragma=journal_mode(WAL)", nil
}

// Redact hides the passwords of a database URL (or of a key=value
// connection string) for logs.
func Redact(u string) string { return redact.ConnString(u) }

// Dialect tells which database this is.
func (db *DB) Dialect() Dialect { return db.dialect }

// Ping checks the database answers.
func (db *DB) Ping(ctx context.Context) error {
	sqlDB, err := db.gorm.DB()
	if err != nil {
		return err
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("database: %w: %w", err, api.ErrUnavailable)
	}
	return nil
}

// Close closes the connection pool.
func (db *DB) Close() error {
	sqlDB, err := db.gorm.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// translate maps a database error onto the features' errors: a missing row to
// notFound, a duplicate key to conflict, a lost connection to ErrUnavailable,
// a value PostgreSQL cannot hold to a validation error.
func translate(err, notFound, conflict error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gorm.ErrRecordNotFound) && notFound != nil:
		return notFound
	case errors.Is(err, gorm.ErrDuplicatedKey) && conflict != nil:
		return conflict
	case unavailable(err):
		return fmt.Errorf("database: %w: %w", err, api.ErrUnavailable)
	case unstorable(err):
		// The features refuse these values first, naming the field; this
		// answers 422 rather than 500 for one they let through.
		return fmt.Errorf("database: %w: %w", err, api.Invalid("request",
			"holds a value the database cannot store: a NUL character or invalid UTF-8 in text, or a number out of range"))
	}
	return err
}

// unstorable reports whether PostgreSQL (or pgx, encoding a parameter)
// refused a value as such: text with a NUL character or invalid UTF-8
// (22021, 22P05), a number out of its column's range (22003, or pgx's
// "greater than maximum value" before sending it). SQLite stores them all.
func unstorable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "22021" || pgErr.Code == "22P05" || pgErr.Code == "22003"
	}
	msg := err.Error()
	return strings.Contains(msg, "failed to encode args") &&
		(strings.Contains(msg, "greater than maximum value") || strings.Contains(msg, "less than minimum value"))
}

// conflicted reports whether PostgreSQL aborted a transaction to break a
// deadlock (40P01) or a serialization conflict (40001): running it again
// succeeds.
func conflicted(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// conflictRetries is how often retryConflicts runs a transaction again (a
// variable so that a test can see the conflicts it would hide).
var conflictRetries = 3

// retryConflicts runs fn again, up to conflictRetries times, when it failed on a
// deadlock or a serialization conflict. Writes lock rows in id order so that
// the service's own writes do not deadlock; this covers what they cannot
// order (an operator's statement, a foreign-key check).
func retryConflicts(ctx context.Context, fn func() error) error {
	err := fn()
	for i := 1; i <= conflictRetries && conflicted(err); i++ {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(i) * 5 * time.Millisecond):
		}
		err = fn()
	}
	return err
}

func unavailable(err error) bool {
	var netErr net.Error
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF), errors.Is(err, sql.ErrConnDone):
		// EOF: the server (or the network) closed the connection mid-query.
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P0x: the server is shutting down.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "database is locked") ||
		strings.Contains(msg, "conn closed") || strings.Contains(msg, "closed pool")
}

// Exec runs one statement; tests and operators use it for DDL outside migrations.
func (db *DB) Exec(ctx context.Context, sql string, args ...any) error {
	return translate(db.gorm.WithContext(ctx).Exec(sql, args...).Error, nil, nil)
}
