package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/roomhub/messaging-api/rooms"
)

// Rooms implements rooms.Store.
type Rooms struct{ db *DB }

var _ rooms.Store = (*Rooms)(nil)

// Rooms returns the room store.
func (db *DB) Rooms() *Rooms { return &Rooms{db: db} }

type roomRow struct {
	ID                      uuid.UUID `gorm:"primaryKey"`
	Identifier              string
	ManagerIdentifier       string
	MessageExpiration       int64
	DeliveryDelay           int64
	DeliveryDelayMultiplier float64
	DeliveryAttempts        int
	MaxDeliveryDelay        int64
	DeliveryJitter          float64
	RetryPolicy             *string
	SubscriptionApproval    string
	CircuitBreaker          *string
	Status                  string
	CreatedAt               time.Time `gorm:"autoCreateTime:false"`
	UpdatedAt               time.Time `gorm:"autoUpdateTime:false"`
}

func (roomRow) TableName() string { return "rooms" }

func toRoomRow(r rooms.Room) roomRow {
	if r.SubscriptionApproval == "" {
		r.SubscriptionApproval = rooms.ApprovalAutomatic
	}
	return roomRow{
		ID: r.ID, Identifier: r.Identifier, ManagerIdentifier: r.ManagerIdentifier,
		MessageExpiration: r.MessageExpiration, DeliveryDelay: r.DeliveryDelay,
		DeliveryDelayMultiplier: r.DeliveryDelayMultiplier, DeliveryAttempts: r.DeliveryAttempts,
		MaxDeliveryDelay: r.MaxDeliveryDelay, DeliveryJitter: r.DeliveryJitter, RetryPolicy: policyText(r.RetryPolicy),
		SubscriptionApproval: string(r.SubscriptionApproval),
		CircuitBreaker:       jsonText(r.CircuitBreaker),
		Status:               string(r.Status), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// jsonText stores a setting as JSON (NULL when there is none).
func jsonText[T any](v *T) *string {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	s := string(b)
	return &s
}

// jsonOf reads a setting stored by jsonText.
func jsonOf[T any](s *string) *T {
	if s == nil {
		return nil
	}
	var v T
	if err := json.Unmarshal([]byte(*s), &v); err != nil {
		return nil
	}
	return &v
}

// policyText stores a retry policy as JSON (NULL when there is none).
func policyText(p *rooms.RetryPolicy) *string {
	if p == nil {
		return nil
	}
	b, _ := json.Marshal(p)
	s := string(b)
	return &s
}

func policyOf(s *string) *rooms.RetryPolicy {
	if s == nil {
		return nil
	}
	var p rooms.RetryPolicy
	if err := json.Unmarshal([]byte(*s), &p); err != nil {
		return nil
	}
	return &p
}

func (r roomRow) domain() rooms.Room {
	return rooms.Room{
		ID: r.ID, Identifier: r.Identifier, ManagerIdentifier: r.ManagerIdentifier,
		MessageExpiration: r.MessageExpiration, DeliveryDelay: r.DeliveryDelay,
		DeliveryDelayMultiplier: r.DeliveryDelayMultiplier, DeliveryAttempts: r.DeliveryAttempts,
		MaxDeliveryDelay: r.MaxDeliveryDelay, DeliveryJitter: r.DeliveryJitter, RetryPolicy: policyOf(r.RetryPolicy),
		SubscriptionApproval: rooms.Approval(r.SubscriptionApproval),
		CircuitBreaker:       jsonOf[rooms.CircuitBreaker](r.CircuitBreaker),
		Status:               rooms.Status(r.Status), CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

type eventTypeRow struct {
	ID          uuid.UUID `gorm:"primaryKey"`
	RoomID      uuid.UUID
	Identifier  string
	Description string
	CreatedAt   time.Time `gorm:"autoCreateTime:false"`
}

func (eventTypeRow) TableName() string { return "event_types" }

func (r eventTypeRow) domain() rooms.EventType {
	return rooms.EventType{ID: r.ID, RoomID: r.RoomID, Identifier: r.Identifier, Description: r.Description, CreatedAt: r.CreatedAt.UTC()}
}

type versionRow struct {
	EventTypeID uuid.UUID `gorm:"primaryKey"`
	Version     int       `gorm:"primaryKey;autoIncrement:false"`
	Schema      string
	CreatedAt   time.Time `gorm:"autoCreateTime:false"`
}

func (versionRow) TableName() string { return "event_type_versions" }

func (r versionRow) domain() rooms.Version {
	return rooms.Version{EventTypeID: r.EventTypeID, Version: r.Version, Schema: []byte(r.Schema), CreatedAt: r.CreatedAt.UTC()}
}

func (s *Rooms) tx(ctx context.Context) *gorm.DB { return s.db.gorm.WithContext(ctx) }

// CreateRoom implements rooms.Store.
func (s *Rooms) CreateRoom(ctx context.Context, r rooms.Room) error {
	row := toRoomRow(r)
	return translate(s.tx(ctx).Create(&row).Error, nil, rooms.ErrIdentifierTaken)
}

// Room implements rooms.Store.
func (s *Rooms) Room(ctx context.Context, id uuid.UUID) (rooms.Room, error) {
	var row roomRow
	err := s.tx(ctx).Where("id = ?", id).Take(&row).Error
	return row.domain(), translate(err, rooms.ErrNotFound, nil)
}

// RoomByIdentifier implements rooms.Store.
func (s *Rooms) RoomByIdentifier(ctx context.Context, identifier string) (rooms.Room, error) {
	var row roomRow
	err := s.tx(ctx).Where("identifier = ?", identifier).Take(&row).Error
	return row.domain(), translate(err, rooms.ErrNotFound, nil)
}

// Rooms implements rooms.Store.
func (s *Rooms) Rooms(ctx context.Context, q rooms.ListQuery) ([]rooms.Room, error) {
	var rows []roomRow
	tx := s.tx(ctx).Order("id").Limit(q.Limit)
	if q.After != uuid.Nil {
		tx = tx.Where("id > ?", q.After)
	}
	switch {
	case !q.Restricted:
	case q.ManagerIdentifier != "":
		tx = tx.Where("manager_identifier = ?", q.ManagerIdentifier)
	case len(q.IDs) == 0:
		return nil, nil
	default:
		tx = tx.Where("id IN ?", q.IDs)
	}
	if err := tx.Find(&rows).Error; err != nil {
		return nil, translate(err, nil, nil)
	}
	out := make([]rooms.Room, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// UpdateRoom implements rooms.Store.
func (s *Rooms) UpdateRoom(ctx context.Context, r rooms.Room) error {
	row := toRoomRow(r)
	res := s.tx(ctx).Model(&roomRow{}).Where("id = ?", r.ID).Select("*").Omit("id", "created_at").Updates(&row)
	if res.Error == nil && res.RowsAffected == 0 {
		return rooms.ErrNotFound
	}
	return translate(res.Error, rooms.ErrNotFound, rooms.ErrIdentifierTaken)
}

// DeleteRoom implements rooms.Store.
func (s *Rooms) DeleteRoom(ctx context.Context, id uuid.UUID, force bool) ([]uuid.UUID, error) {
	var pulls []uuid.UUID
	// Retried on a deadlock, as DeleteSubscription.
	err := retryConflicts(ctx, func() error {
		return s.tx(ctx).Transaction(func(tx *gorm.DB) error {
			pulls = nil
			var room roomRow
			if err := s.db.lock(tx).Where("id = ?", id).Take(&room).Error; err != nil {
				return err
			}
			var subs int64
			if err := tx.Model(&subscriptionRow{}).Where("room_id = ?", id).Count(&subs).Error; err != nil {
				return err
			}
			if subs > 0 && !force {
				return rooms.ErrHasSubscriptions
			}
			if err := tx.Model(&subscriptionRow{}).Where("room_id = ? AND type = ?", id, "PULL").Pluck("id", &pulls).Error; err != nil {
				return err
			}
			if err := dropOwedCopies(tx, s.db.dialect, id, true); err != nil {
				return err
			}
			subIDs := tx.Model(&subscriptionRow{}).Select("id").Where("room_id = ?", id)
			etIDs := tx.Model(&eventTypeRow{}).Select("id").Where("room_id = ?", id)
			steps := []*gorm.DB{
				tx.Where("subscription_id IN (?)", subIDs).Delete(&filterRow{}),
				tx.Where("room_id = ?", id).Delete(&deadLetterRow{}),
				tx.Where("room_id = ?", id).Delete(&subscriptionRow{}),
				tx.Where("event_type_id IN (?)", etIDs).Delete(&versionRow{}),
				tx.Where("room_id = ?", id).Delete(&eventTypeRow{}),
				tx.Where("id = ?", id).Delete(&roomRow{}),
			}
			for _, st := range steps {
				if st.Error != nil {
					return st.Error
				}
			}
			return nil
		})
	})
	return pulls, translate(err, rooms.ErrNotFound, nil)
}

// lock adds FOR UPDATE on PostgreSQL; SQLite serialises writers by itself.
func (db *DB) lock(tx *gorm.DB) *gorm.DB {
	if db.dialect == Postgres {
		return tx.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	return tx
}

// CreateEventType implements rooms.Store.
func (s *Rooms) CreateEventType(ctx context.Context, et rooms.EventType) error {
	row := eventTypeRow{ID: et.ID, RoomID: et.RoomID, Identifier: et.Identifier, Description: et.Description, CreatedAt: et.CreatedAt}
	return translate(s.tx(ctx).Create(&row).Error, nil, rooms.ErrEventTypeExists)
}

// EventType implements rooms.Store.
func (s *Rooms) EventType(ctx context.Context, roomID uuid.UUID, identifier string) (rooms.EventType, error) {
	var row eventTypeRow
	err := s.tx(ctx).Where("room_id = ? AND identifier = ?", roomID, identifier).Take(&row).Error
	return row.domain(), translate(err, rooms.ErrEventTypeNotFound, nil)
}

// EventTypes implements rooms.Store.
func (s *Rooms) EventTypes(ctx context.Context, roomID uuid.UUID, limit int, after string) ([]rooms.EventType, error) {
	var rows []eventTypeRow
	tx := s.tx(ctx).Where("room_id = ?", roomID).Order("identifier").Limit(limit)
	if after != "" {
		tx = tx.Where("identifier > ?", after)
	}
	if err := tx.Find(&rows).Error; err != nil {
		return nil, translate(err, nil, nil)
	}
	out := make([]rooms.EventType, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// DeleteEventType implements rooms.Store.
func (s *Rooms) DeleteEventType(ctx context.Context, id uuid.UUID) error {
	err := s.tx(ctx).Transaction(func(tx *gorm.DB) error {
		var et eventTypeRow
		if err := s.db.lock(tx).Where("id = ?", id).Take(&et).Error; err != nil {
			return err
		}
		var used int64
		if err := tx.Model(&filterRow{}).Where("event_type_id = ?", id).Count(&used).Error; err != nil {
			return err
		}
		if used > 0 {
			return rooms.ErrEventTypeInUse
		}
		if err := tx.Where("event_type_id = ?", id).Delete(&versionRow{}).Error; err != nil {
			return err
		}
		return tx.Where("id = ?", id).Delete(&eventTypeRow{}).Error
	})
	return translate(err, rooms.ErrEventTypeNotFound, nil)
}

// CreateVersion implements rooms.Store.
func (s *Rooms) CreateVersion(ctx context.Context, v rooms.Version) error {
	row := versionRow{EventTypeID: v.EventTypeID, Version: v.Version, Schema: string(v.Schema), CreatedAt: v.CreatedAt}
	return translate(s.tx(ctx).Create(&row).Error, nil, rooms.ErrVersionExists)
}

// Version implements rooms.Store.
func (s *Rooms) Version(ctx context.Context, eventTypeID uuid.UUID, version int) (rooms.Version, error) {
	var row versionRow
	err := s.tx(ctx).Where("event_type_id = ? AND version = ?", eventTypeID, version).Take(&row).Error
	return row.domain(), translate(err, rooms.ErrVersionNotFound, nil)
}

// Versions implements rooms.Store.
func (s *Rooms) Versions(ctx context.Context, eventTypeID uuid.UUID) ([]rooms.Version, error) {
	var rows []versionRow
	if err := s.tx(ctx).Where("event_type_id = ?", eventTypeID).Order("version").Find(&rows).Error; err != nil {
		return nil, translate(err, nil, nil)
	}
	out := make([]rooms.Version, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// ExistingVersions implements rooms.Store: one query, whatever the number
// of versions (the caller bounds it: each is a statement parameter).
func (s *Rooms) ExistingVersions(ctx context.Context, eventTypeID uuid.UUID, versions []int) ([]int, error) {
	if len(versions) == 0 {
		return nil, nil
	}
	var out []int
	err := s.tx(ctx).Model(&versionRow{}).Where("event_type_id = ? AND version IN ?", eventTypeID, versions).
		Order("version").Pluck("version", &out).Error
	if err != nil {
		return nil, translate(err, nil, nil)
	}
	return out, nil
}

// DeleteVersion implements rooms.Store.
func (s *Rooms) DeleteVersion(ctx context.Context, eventTypeID uuid.UUID, version int) error {
	err := s.tx(ctx).Transaction(func(tx *gorm.DB) error {
		var et eventTypeRow
		if err := s.db.lock(tx).Where("id = ?", eventTypeID).Take(&et).Error; err != nil {
			return err
		}
		var used int64
		if err := tx.Model(&filterRow{}).Where("event_type_id = ? AND version = ?", eventTypeID, version).Count(&used).Error; err != nil {
			return err
		}
		if used > 0 {
			return rooms.ErrVersionInUse
		}
		res := tx.Where("event_type_id = ? AND version = ?", eventTypeID, version).Delete(&versionRow{})
		if res.Error == nil && res.RowsAffected == 0 {
			return gorm.ErrRecordNotFound
		}
		return res.Error
	})
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return rooms.ErrVersionNotFound
	}
	return translate(err, nil, nil)
}
