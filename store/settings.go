package store

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// ClaimSetting stores value under name unless a value is stored there
// already, and returns the stored value: the first process to claim a
// setting sets it, and each later one learns whether it agrees.
func (db *DB) ClaimSetting(ctx context.Context, name, value string) (string, error) {
	g := db.gorm.WithContext(ctx)
	if err := g.Exec(`INSERT INTO settings (name, value, updated_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`,
		name, value, time.Now().UTC()).Error; err != nil {
		return "", translate(err, nil, nil)
	}
	var stored string
	err := g.Raw(`SELECT value FROM settings WHERE name = ?`, name).Scan(&stored).Error
	return stored, translate(err, nil, nil)
}

// ReplaceSetting stores value under name, whatever was stored, and returns
// what was ("" when nothing was).
func (db *DB) ReplaceSetting(ctx context.Context, name, value string) (previous string, err error) {
	err = db.gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		lock := ""
		if db.dialect == Postgres {
			lock = " FOR UPDATE"
		}
		if err := tx.Raw(`SELECT value FROM settings WHERE name = ?`+lock, name).Scan(&previous).Error; err != nil {
			return err
		}
		return tx.Exec(`INSERT INTO settings (name, value, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
			name, value, time.Now().UTC()).Error
	})
	return previous, translate(err, nil, nil)
}
