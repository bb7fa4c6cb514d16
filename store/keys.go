package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/roomhub/messaging-api/auth"
)

// Keys implements auth.Store.
type Keys struct{ db *DB }

var _ auth.Store = (*Keys)(nil)

// Keys returns the API key store.
func (db *DB) Keys() *Keys { return &Keys{db: db} }

type keyRow struct {
	ID               uuid.UUID `gorm:"primaryKey"`
	Name             string
	Role             string
	Subject          string
	Rooms            string
	PublishRateLimit *float64
	PublishBurst     *int
	Prefix           string
	KeyHash          string
	CreatedAt        time.Time `gorm:"autoCreateTime:false"`
	ExpiresAt        *time.Time
	RevokedAt        *time.Time
}

func (keyRow) TableName() string { return "api_keys" }

type grantJSON struct {
	RoomID     uuid.UUID `json:"roomId"`
	EventTypes []string  `json:"eventTypes,omitempty"`
}

func toKeyRow(k auth.Key) keyRow {
	grants := make([]grantJSON, len(k.Rooms))
	for i, g := range k.Rooms {
		grants[i] = grantJSON(g)
	}
	b, _ := json.Marshal(grants)
	r := keyRow{
		ID: k.ID, Name: k.Name, Role: k.Role, Subject: k.Subject, Rooms: string(b),
		PublishRateLimit: k.PublishRateLimit, PublishBurst: k.PublishBurst, Prefix: k.Prefix,
		KeyHash: k.Hash, CreatedAt: k.CreatedAt.UTC(),
	}
	if k.ExpiresAt != nil {
		r.ExpiresAt = timePtr(*k.ExpiresAt)
	}
	if k.RevokedAt != nil {
		r.RevokedAt = timePtr(*k.RevokedAt)
	}
	return r
}

func (r keyRow) domain() auth.Key {
	var grants []grantJSON
	_ = json.Unmarshal([]byte(r.Rooms), &grants)
	k := auth.Key{
		ID: r.ID, Name: r.Name, Role: r.Role, Subject: r.Subject,
		PublishRateLimit: r.PublishRateLimit, PublishBurst: r.PublishBurst, Prefix: r.Prefix,
		Hash: r.KeyHash, CreatedAt: r.CreatedAt.UTC(), ExpiresAt: utcPtr(r.ExpiresAt), RevokedAt: utcPtr(r.RevokedAt),
	}
	for _, g := range grants {
		k.Rooms = append(k.Rooms, auth.Grant(g))
	}
	return k
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func (s *Keys) tx(ctx context.Context) *gorm.DB { return s.db.gorm.WithContext(ctx) }

// CreateKey implements auth.Store.
func (s *Keys) CreateKey(ctx context.Context, k auth.Key) error {
	row := toKeyRow(k)
	return translate(s.tx(ctx).Create(&row).Error, nil, nil)
}

// KeyByHash implements auth.Store.
func (s *Keys) KeyByHash(ctx context.Context, hash string) (auth.Key, error) {
	var row keyRow
	if err := s.tx(ctx).Where("key_hash = ?", hash).Take(&row).Error; err != nil {
		return auth.Key{}, translate(err, auth.ErrNotFound, nil)
	}
	return row.domain(), nil
}

// Key implements auth.Store.
func (s *Keys) Key(ctx context.Context, id uuid.UUID) (auth.Key, error) {
	var row keyRow
	if err := s.tx(ctx).Where("id = ?", id).Take(&row).Error; err != nil {
		return auth.Key{}, translate(err, auth.ErrNotFound, nil)
	}
	return row.domain(), nil
}

// Keys implements auth.Store.
func (s *Keys) Keys(ctx context.Context, q auth.ListQuery) ([]auth.Key, error) {
	var rows []keyRow
	tx := s.tx(ctx).Order("id").Limit(q.Limit)
	if q.After != uuid.Nil {
		tx = tx.Where("id > ?", q.After)
	}
	if err := tx.Find(&rows).Error; err != nil {
		return nil, translate(err, nil, nil)
	}
	out := make([]auth.Key, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// RevokeKey implements auth.Store.
func (s *Keys) RevokeKey(ctx context.Context, id uuid.UUID, at time.Time) error {
	res := s.tx(ctx).Model(&keyRow{}).Where("id = ? AND revoked_at IS NULL", id).Update("revoked_at", at.UTC())
	if res.Error != nil {
		return translate(res.Error, nil, nil)
	}
	if res.RowsAffected == 0 {
		if _, err := s.Key(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// ActiveKeys implements auth.Store.
func (s *Keys) ActiveKeys(ctx context.Context, role string, now time.Time) (int, error) {
	var n int64
	tx := s.tx(ctx).Model(&keyRow{}).Where("revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)", now.UTC())
	if role != "" {
		tx = tx.Where("role = ?", role)
	}
	if err := tx.Count(&n).Error; err != nil {
		return 0, translate(err, nil, nil)
	}
	return int(n), nil
}
