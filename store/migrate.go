package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockID keys the PostgreSQL advisory lock that serialises migrators,
// so several processes starting at once apply each migration once.
const migrationLockID = 7_243_001

type migration struct {
	version int
	name    string
	sql     string
}

// dialectTypes fills the placeholders of the shared migration files; a line
// starting with {{postgres}} runs on PostgreSQL only. {{json}} is a JSON
// document: PostgreSQL checks and stores it as JSONB, SQLite as text.
var dialectTypes = map[Dialect]*strings.Replacer{
	Postgres: strings.NewReplacer("{{uuid}}", "UUID", "{{timestamp}}", "TIMESTAMPTZ", "{{json}}", "JSONB", "{{postgres}}", ""),
	SQLite:   strings.NewReplacer("{{uuid}}", "TEXT", "{{timestamp}}", "DATETIME", "{{json}}", "TEXT", "{{postgres}}", "-- "),
}

func loadMigrations(d Dialect) ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration file %q must be named NNNN_name.sql", name)
		}
		body, err := migrationFiles.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: dialectTypes[d].Replace(string(body))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("two migrations numbered %d", out[i].version)
		}
	}
	return out, nil
}

// Migrate applies the migrations not yet applied, each in its own transaction,
// and returns how many it applied.
func (db *DB) Migrate(ctx context.Context, log *slog.Logger) (int, error) {
	return db.migrate(ctx, log, 0)
}

// migrate applies the migrations not yet applied up to version upTo (all
// when upTo is 0); tests of a migration's data move stop before it.
func (db *DB) migrate(ctx context.Context, log *slog.Logger, upTo int) (int, error) {
	migs, err := loadMigrations(db.dialect)
	if err != nil {
		return 0, err
	}
	applied := 0
	err = db.gorm.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		if db.dialect == Postgres {
			if err := conn.Exec("SELECT pg_advisory_lock(?)", migrationLockID).Error; err != nil {
				return fmt.Errorf("take migration lock: %w", err)
			}
			defer conn.Exec("SELECT pg_advisory_unlock(?)", migrationLockID)
		}
		if err := conn.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at ` +
			dialectTypes[db.dialect].Replace("{{timestamp}}") + ` NOT NULL)`).Error; err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var done []int
		if err := conn.Raw("SELECT version FROM schema_migrations").Scan(&done).Error; err != nil {
			return err
		}
		have := map[int]bool{}
		for _, v := range done {
			have[v] = true
		}
		for _, m := range migs {
			if have[m.version] || (upTo > 0 && m.version > upTo) {
				continue
			}
			err := conn.Transaction(func(tx *gorm.DB) error {
				for _, stmt := range splitStatements(m.sql) {
					if err := tx.Exec(stmt).Error; err != nil {
						return fmt.Errorf("%s: %w", m.name, err)
					}
				}
				return tx.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
					m.version, m.name, time.Now().UTC()).Error
			})
			if err != nil {
				return err
			}
			applied++
			log.Info("migration applied", slog.Int("version", m.version), slog.String("name", m.name))
		}
		return nil
	})
	return applied, translate(err, nil, nil)
}

// splitStatements splits a migration on semicolons at line ends; migrations
// hold no procedural code, so that is enough, and SQLite needs one per Exec.
func splitStatements(sql string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") || trimmed == "" {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
