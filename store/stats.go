package store

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/roomhub/messaging-api/outbox"
)

// OutboxBacklog counts the sends the outbox still owes the broker and
// returns the creation time of the oldest (zero when none), for the
// scrape-time metrics. A slow subscription's parked copy (see
// outbox.ParkedOwner) counts only once its deferral has ended: until then it
// is not owed yet (ParkedCopies counts those). The outbox holds only pending
// rows, so this is cheap.
func (s *Events) OutboxBacklog(ctx context.Context) (int, time.Time, error) {
	owed := s.tx(ctx).Model(&outboxRow{}).
		Where("claimed_by NOT LIKE ? OR claimed_until IS NULL OR claimed_until <= ?", outbox.ParkedPrefix+"%", time.Now().UTC())
	var n int64
	if err := owed.Session(&gorm.Session{}).Count(&n).Error; err != nil || n == 0 {
		return int(n), time.Time{}, translate(err, nil, nil)
	}
	// MIN(created_at) would come back untyped from SQLite; a row keeps its
	// type. Send ids are time-ordered (UUIDv7): the primary key finds the
	// oldest without sorting the backlog.
	var oldest outboxRow
	if err := owed.Session(&gorm.Session{}).Select("created_at").Order("send_id").Limit(1).Find(&oldest).Error; err != nil {
		return 0, time.Time{}, translate(err, nil, nil)
	}
	return int(n), oldest.CreatedAt.UTC(), nil
}

// ParkedCopies counts slow subscriptions' parked copies still waiting out
// their deferral in the outbox (see outbox.ParkedOwner).
func (s *Events) ParkedCopies(ctx context.Context) (int, error) {
	var n int64
	err := s.tx(ctx).Model(&outboxRow{}).
		Where("claimed_by LIKE ? AND claimed_until > ?", outbox.ParkedPrefix+"%", time.Now().UTC()).Count(&n).Error
	return int(n), translate(err, nil, nil)
}

// Outstanding counts the pulled messages awaiting ack, nack or their deadline.
func (s *Leases) Outstanding(ctx context.Context) (int, error) {
	var n int64
	err := s.db.gorm.WithContext(ctx).Table("pull_leases").Count(&n).Error
	return int(n), translate(err, nil, nil)
}
