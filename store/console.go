package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/roomhub/messaging-api/console"
)

// Console implements console.Sessions and console.Stats.
type Console struct{ db *DB }

var (
	_ console.Sessions = (*Console)(nil)
	_ console.Stats    = (*Console)(nil)
)

// Console returns the web console's store.
func (db *DB) Console() *Console { return &Console{db: db} }

type sessionRow struct {
	IDHash     string `gorm:"primaryKey"`
	KeyID      *uuid.UUID
	CreatedAt  time.Time `gorm:"autoCreateTime:false"`
	LastSeenAt time.Time
	ExpiresAt  time.Time
}

func (sessionRow) TableName() string { return "console_sessions" }

func (s *Console) tx(ctx context.Context) *gorm.DB { return s.db.gorm.WithContext(ctx) }

// CreateSession implements console.Sessions.
func (s *Console) CreateSession(ctx context.Context, se console.Session) error {
	row := sessionRow{IDHash: se.IDHash, CreatedAt: se.CreatedAt.UTC(), LastSeenAt: se.SeenAt.UTC(), ExpiresAt: se.ExpiresAt.UTC()}
	if se.KeyID != uuid.Nil {
		id := se.KeyID
		row.KeyID = &id
	}
	return translate(s.tx(ctx).Create(&row).Error, nil, nil)
}

// Session implements console.Sessions.
func (s *Console) Session(ctx context.Context, idHash string) (console.Session, error) {
	var r sessionRow
	if err := s.tx(ctx).Where("id_hash = ?", idHash).Take(&r).Error; err != nil {
		return console.Session{}, translate(err, console.ErrSessionNotFound, nil)
	}
	out := console.Session{IDHash: r.IDHash, CreatedAt: r.CreatedAt.UTC(), SeenAt: r.LastSeenAt.UTC(), ExpiresAt: r.ExpiresAt.UTC()}
	if r.KeyID != nil {
		out.KeyID = *r.KeyID
	}
	return out, nil
}

// TouchSession implements console.Sessions.
func (s *Console) TouchSession(ctx context.Context, idHash string, at time.Time) error {
	err := s.tx(ctx).Model(&sessionRow{}).Where("id_hash = ?", idHash).Update("last_seen_at", at.UTC()).Error
	return translate(err, nil, nil)
}

// DeleteSession implements console.Sessions.
func (s *Console) DeleteSession(ctx context.Context, idHash string) error {
	return translate(s.tx(ctx).Where("id_hash = ?", idHash).Delete(&sessionRow{}).Error, nil, nil)
}

// PurgeSessions implements console.Sessions: it deletes the sessions that
// ran out, sat idle, or whose key is revoked or expired.
func (s *Console) PurgeSessions(ctx context.Context, q console.PurgeQuery) (int, error) {
	now := q.Now.UTC()
	res := s.tx(ctx).Where(`expires_at <= ? OR last_seen_at <= ? OR key_id IN
		(SELECT id FROM api_keys WHERE revoked_at IS NOT NULL OR expires_at <= ?)`, now, q.IdleBefore.UTC(), now).
		Delete(&sessionRow{})
	return int(res.RowsAffected), translate(res.Error, nil, nil)
}

// OutboxBacklog implements console.Stats (see Events.OutboxBacklog).
func (s *Console) OutboxBacklog(ctx context.Context) (int, time.Time, error) {
	return s.db.Events().OutboxBacklog(ctx)
}

// DeadLetterCount implements console.Stats: it counts up to limit rows.
func (s *Console) DeadLetterCount(ctx context.Context, limit int) (int, error) {
	var n int64
	err := s.tx(ctx).Raw(`SELECT COUNT(*) FROM (SELECT 1 FROM dead_letters LIMIT ?) d`, limit).Scan(&n).Error
	return int(n), translate(err, nil, nil)
}

// SlowestSubscriptions implements console.Stats. Send ids are time-ordered
// (UUIDv7), so the newest q.Rows sends since q.Since are a backward walk of
// the primary key from its end, bounded whatever the table holds.
func (s *Console) SlowestSubscriptions(ctx context.Context, q console.SlowQuery) ([]console.SubscriptionLatency, error) {
	var rows []struct {
		SubscriptionID uuid.UUID
		RoomID         uuid.UUID
		Room           string
		Requests       int
		MeanMs, MaxMs  float64
	}
	err := s.tx(ctx).Raw(`SELECT s.subscription_id, s.room_id, COALESCE(r.identifier, '') AS room, s.requests, s.mean_ms, s.max_ms
		FROM (SELECT subscription_id, room_id, COUNT(*) AS requests,
		             CAST(AVG(latency_ms) AS DOUBLE PRECISION) AS mean_ms, CAST(MAX(latency_ms) AS DOUBLE PRECISION) AS max_ms
		      FROM (SELECT subscription_id, room_id, latency_ms FROM published_messages
		            WHERE id >= ? ORDER BY id DESC LIMIT ?) recent
		      WHERE latency_ms IS NOT NULL
		      GROUP BY subscription_id, room_id
		      ORDER BY mean_ms DESC LIMIT ?) s
		LEFT JOIN rooms r ON r.id = s.room_id
		ORDER BY s.mean_ms DESC`, firstIDAt(q.Since), q.Rows, q.Top).Scan(&rows).Error
	if err != nil {
		return nil, translate(err, nil, nil)
	}
	out := make([]console.SubscriptionLatency, len(rows))
	for i, r := range rows {
		out[i] = console.SubscriptionLatency{
			SubscriptionID: r.SubscriptionID, RoomID: r.RoomID, Room: r.Room, Requests: r.Requests,
			Mean: time.Duration(r.MeanMs * float64(time.Millisecond)), Max: time.Duration(r.MaxMs * float64(time.Millisecond)),
		}
	}
	return out, nil
}

// firstIDAt is the smallest UUIDv7 of the millisecond t: every id made at
// or after t sorts at or after it.
func firstIDAt(t time.Time) uuid.UUID {
	var u uuid.UUID
	ms := uint64(max(0, t.UnixMilli()))
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6], u[8] = 0x70, 0x80 // version 7, RFC 4122 variant
	return u
}
