package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	_ "github.com/glebarez/go-sqlite"  // database/sql driver "sqlite", the one store uses
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/roomhub/messaging-api/store"
)

// benchDB is the run's own database: a fresh schema in PostgreSQL, or an
// SQLite file in the temp dir. The bench reads the outbox in it to know when
// the relay has sent everything a phase published.
type benchDB struct {
	serviceURL string // DATABASE_URL of the service
	redacted   string
	dialect    store.Dialect
	conn       *sql.DB // for the bench's reads
	admin      *sql.DB // PostgreSQL: creates and drops the schema
	schema     string
	file       string
}

func openBenchDB(ctx context.Context, cfg config, tmp, id string) (*benchDB, error) {
	if cfg.embedded {
		file := filepath.Join(tmp, "messaging-api.db")
		conn, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(5000)")
		if err != nil {
			return nil, err
		}
		return &benchDB{serviceURL: "sqlite:" + file, redacted: "sqlite:" + file, dialect: store.SQLite, conn: conn, file: file}, nil
	}
	admin, err := sql.Open("pgx", cfg.dbURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := admin.PingContext(pingCtx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("postgres at %s: %w", store.Redact(cfg.dbURL), err)
	}
	schema := "msgbench_" + id
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return nil, fmt.Errorf("create schema: %w", err)
	}
	u, err := url.Parse(cfg.dbURL)
	if err != nil {
		admin.Close()
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	conn, err := sql.Open("pgx", u.String())
	if err != nil {
		admin.Close()
		return nil, err
	}
	conn.SetMaxOpenConns(2)
	return &benchDB{serviceURL: u.String(), redacted: store.Redact(u.String()), dialect: store.Postgres, conn: conn, admin: admin, schema: schema}, nil
}

func (d *benchDB) ph(n int) string {
	if d.dialect == store.Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// pending counts the sends of a room the relay still owes the broker.
func (d *benchDB) pending(ctx context.Context, roomID string) (int, error) {
	return d.count(ctx, "room_id = "+d.ph(1)+" AND id IN (SELECT send_id FROM outbox)", roomID)
}

// withStatus counts the log rows of a room in status.
func (d *benchDB) withStatus(ctx context.Context, roomID, status string) (int, error) {
	return d.count(ctx, "room_id = "+d.ph(1)+" AND status = "+d.ph(2), roomID, status)
}

func (d *benchDB) count(ctx context.Context, where string, args ...any) (int, error) {
	var n int
	err := d.conn.QueryRowContext(ctx, "SELECT count(*) FROM published_messages WHERE "+where, args...).Scan(&n)
	return n, err
}

// waitRelayed polls until the relay has sent every send of the room, and
// returns when it saw that; the poll period bounds the error of that time.
func (d *benchDB) waitRelayed(ctx context.Context, roomID string, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		n, err := d.pending(ctx, roomID)
		if err != nil {
			return time.Time{}, fmt.Errorf("count pending sends: %w", err)
		}
		if n == 0 {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d sends still pending after %s", n, within)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// claimable counts the outbox rows no relay holds now: those waiting for a
// claim (PostgreSQL).
func (d *benchDB) claimable(ctx context.Context) (int, error) {
	var n int
	err := d.conn.QueryRowContext(ctx, "SELECT count(*) FROM outbox WHERE claimed_until IS NULL OR claimed_until < now()").Scan(&n)
	return n, err
}

func (d *benchDB) close(keep bool) error {
	var err error
	if d.conn != nil {
		_ = d.conn.Close()
	}
	if d.admin != nil {
		if !keep {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err = d.admin.ExecContext(ctx, "DROP SCHEMA "+d.schema+" CASCADE")
			cancel()
		}
		_ = d.admin.Close()
	}
	return err
}
