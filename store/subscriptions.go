package store

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// Subscriptions implements subscriptions.Store.
type Subscriptions struct{ db *DB }

var _ subscriptions.Store = (*Subscriptions)(nil)

// Subscriptions returns the subscription store.
func (db *DB) Subscriptions() *Subscriptions { return &Subscriptions{db: db} }

type subscriptionRow struct {
	ID                      uuid.UUID `gorm:"primaryKey"`
	RoomID                  uuid.UUID
	Type                    string
	PushURL                 string
	PushAuth                string // sealed (see sealPushAuth), "" for none
	PushAuthKey             string // the id of the key that sealed it
	DeliveryDelay           *int64
	DeliveryDelayMultiplier *float64
	DeliveryAttempts        *int
	MaxDeliveryDelay        *int64
	DeliveryJitter          *float64
	RetryPolicy             *string
	CircuitBreaker          *string
	MaxDeliveryRate         *float64
	AckDeadline             int64
	Status                  string
	SigningSecret           string
	PreviousSigningSecret   string
	PreviousSecretExpiresAt *time.Time
	Owner                   string
	// AttributeFilter is the filter's canonical JSON (JSONB on PostgreSQL).
	AttributeFilter *string
	DecidedBy       string
	DecidedAt       *time.Time
	RejectionReason string
	CreatedAt       time.Time `gorm:"autoCreateTime:false"`
	UpdatedAt       time.Time `gorm:"autoUpdateTime:false"`
	// The circuit is read with the subscription and written only by the
	// dispatchers' conditional updates (Push.SwapCircuit) and resets.
	Circuit circuitColumns `gorm:"embedded"`
}

// circuitColumns are a PUSH subscription's circuit, read-only here.
type circuitColumns struct {
	CircuitState          string     `gorm:"->"`
	CircuitVersion        int64      `gorm:"->"`
	CircuitOpenedAt       *time.Time `gorm:"->"`
	CircuitCooldownMs     int64      `gorm:"->"`
	CircuitProbeAt        *time.Time `gorm:"->"`
	CircuitLastError      string     `gorm:"->"`
	CircuitLastStatusCode *int       `gorm:"->"`
}

func (c circuitColumns) domain() subscriptions.Circuit {
	out := subscriptions.Circuit{
		State: subscriptions.CircuitState(c.CircuitState), Version: c.CircuitVersion,
		OpenedAt: timeVal(c.CircuitOpenedAt), Cooldown: time.Duration(c.CircuitCooldownMs) * time.Millisecond,
		ProbeAt: timeVal(c.CircuitProbeAt), LastError: c.CircuitLastError,
	}
	if c.CircuitLastStatusCode != nil {
		out.LastStatusCode = *c.CircuitLastStatusCode
	}
	if out.State == "" {
		out.State = subscriptions.CircuitClosed
	}
	return out
}

// circuitColumnNames are the columns of circuitColumns, which only their
// own statements write.
var circuitColumnNames = []string{"circuit_state", "circuit_version", "circuit_opened_at", "circuit_cooldown_ms",
	"circuit_probe_at", "circuit_last_error", "circuit_last_status_code"}

func (subscriptionRow) TableName() string { return "subscriptions" }

// filterRow is one (event type, version) a subscription receives; version 0
// stands for every version.
type filterRow struct {
	SubscriptionID uuid.UUID `gorm:"primaryKey"`
	EventTypeID    uuid.UUID `gorm:"primaryKey"`
	Version        int       `gorm:"primaryKey;autoIncrement:false"`
}

func (filterRow) TableName() string { return "subscription_event_types" }

func (s *Subscriptions) toRow(sub subscriptions.Subscription) (subscriptionRow, error) {
	row := toSubscriptionRow(sub)
	var err error
	row.PushAuthKey, row.PushAuth, err = s.sealPushAuth(sub.ID, sub.PushAuth)
	return row, err
}

func toSubscriptionRow(s subscriptions.Subscription) subscriptionRow {
	return subscriptionRow{
		ID: s.ID, RoomID: s.RoomID, Type: string(s.Type), PushURL: s.PushURL,
		DeliveryDelay: s.DeliveryDelay, DeliveryDelayMultiplier: s.DeliveryDelayMultiplier,
		DeliveryAttempts: s.DeliveryAttempts, Status: string(s.Status),
		MaxDeliveryDelay: s.MaxDeliveryDelay, DeliveryJitter: s.DeliveryJitter, RetryPolicy: policyText(s.RetryPolicy),
		CircuitBreaker: jsonText(s.CircuitBreaker), MaxDeliveryRate: s.MaxDeliveryRate,
		AckDeadline:   s.AckDeadline.Milliseconds(),
		SigningSecret: s.SigningSecret, PreviousSigningSecret: s.PreviousSecret,
		PreviousSecretExpiresAt: timePtr(s.PreviousSecretExpiresAt),
		Owner:                   s.Owner, AttributeFilter: filterText(s.AttributeFilter),
		DecidedBy: s.DecidedBy, DecidedAt: timePtr(s.DecidedAt), RejectionReason: s.RejectionReason,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

// filterText is the stored form of an attribute filter (NULL for none).
func filterText(f *subscriptions.AttributeFilter) *string {
	if f == nil {
		return nil
	}
	t := f.Text()
	return &t
}

func toFilterRows(s subscriptions.Subscription) []filterRow {
	var rows []filterRow
	for _, f := range s.EventTypes {
		if len(f.Versions) == 0 {
			rows = append(rows, filterRow{SubscriptionID: s.ID, EventTypeID: f.EventTypeID})
		}
		for _, v := range f.Versions {
			rows = append(rows, filterRow{SubscriptionID: s.ID, EventTypeID: f.EventTypeID, Version: v})
		}
	}
	return rows
}

func (s *Subscriptions) tx(ctx context.Context) *gorm.DB { return s.db.gorm.WithContext(ctx) }

// CreateSubscription implements subscriptions.Store.
func (s *Subscriptions) CreateSubscription(ctx context.Context, sub subscriptions.Subscription) error {
	err := s.tx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.lockEventTypes(tx, sub); err != nil {
			return err
		}
		row, err := s.toRow(sub)
		if err != nil {
			return err
		}
		if err := tx.Omit(circuitColumnNames...).Create(&row).Error; err != nil {
			return err
		}
		return tx.Create(toFilterRows(sub)).Error
	})
	return translate(err, nil, nil)
}

// lockEventTypes holds the filters' event types against a concurrent delete of
// a version or event type between validation and insert (PostgreSQL; SQLite
// has a single writer).
func (s *Subscriptions) lockEventTypes(tx *gorm.DB, sub subscriptions.Subscription) error {
	if s.db.dialect != Postgres || len(sub.EventTypes) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(sub.EventTypes))
	for i, f := range sub.EventTypes {
		ids[i] = f.EventTypeID
	}
	var locked []eventTypeRow
	return tx.Clauses(clause.Locking{Strength: "SHARE"}).Where("id IN ?", ids).Find(&locked).Error
}

// Subscription implements subscriptions.Store.
func (s *Subscriptions) Subscription(ctx context.Context, roomID, id uuid.UUID) (subscriptions.Subscription, error) {
	var row subscriptionRow
	if err := s.tx(ctx).Where("room_id = ? AND id = ?", roomID, id).Take(&row).Error; err != nil {
		return subscriptions.Subscription{}, translate(err, subscriptions.ErrNotFound, nil)
	}
	subs, err := s.withFilters(ctx, []subscriptionRow{row})
	if err != nil {
		return subscriptions.Subscription{}, err
	}
	return subs[0], nil
}

// Subscriptions implements subscriptions.Store.
func (s *Subscriptions) Subscriptions(ctx context.Context, q subscriptions.Query) ([]subscriptions.Subscription, error) {
	tx := s.tx(ctx).Where("room_id = ?", q.RoomID).Order("id")
	if q.Type != "" {
		tx = tx.Where("type = ?", string(q.Type))
	}
	if q.OwnerSet {
		tx = tx.Where("owner = ?", q.Owner)
	}
	if q.Status != "" {
		tx = tx.Where("status = ?", string(q.Status))
	}
	if q.After != uuid.Nil {
		tx = tx.Where("id > ?", q.After)
	}
	if q.Limit > 0 {
		tx = tx.Limit(q.Limit)
	}
	var rows []subscriptionRow
	if err := tx.Find(&rows).Error; err != nil {
		return nil, translate(err, nil, nil)
	}
	return s.withFilters(ctx, rows)
}

// withFilters loads the filters of rows in one query and builds the domain values.
func (s *Subscriptions) withFilters(ctx context.Context, rows []subscriptionRow) ([]subscriptions.Subscription, error) {
	out := make([]subscriptions.Subscription, len(rows))
	if len(rows) == 0 {
		return out, nil
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	var filters []struct {
		SubscriptionID uuid.UUID
		EventTypeID    uuid.UUID
		Identifier     string
		Version        int
	}
	err := s.tx(ctx).Table("subscription_event_types AS f").
		Select("f.subscription_id, f.event_type_id, et.identifier, f.version").
		Joins("JOIN event_types et ON et.id = f.event_type_id").
		Where("f.subscription_id IN ?", ids).
		Order("et.identifier, f.version").
		Scan(&filters).Error
	if err != nil {
		return nil, translate(err, nil, nil)
	}
	byID := make(map[uuid.UUID][]subscriptions.Filter, len(rows))
	for _, f := range filters {
		list := byID[f.SubscriptionID]
		i := slices.IndexFunc(list, func(x subscriptions.Filter) bool { return x.EventTypeID == f.EventTypeID })
		if i < 0 {
			list = append(list, subscriptions.Filter{EventTypeID: f.EventTypeID, EventType: f.Identifier, Versions: []int{}})
			i = len(list) - 1
		}
		if f.Version != 0 {
			list[i].Versions = append(list[i].Versions, f.Version)
		}
		byID[f.SubscriptionID] = list
	}
	for i, r := range rows {
		auth, err := s.openPushAuth(r)
		if err != nil {
			return nil, err
		}
		out[i] = subscriptions.Subscription{
			PushAuth: auth,
			ID:       r.ID, RoomID: r.RoomID, Type: subscriptions.Type(r.Type), PushURL: r.PushURL,
			EventTypes: byID[r.ID], Owner: r.Owner,
			DeliveryDelay: r.DeliveryDelay, DeliveryDelayMultiplier: r.DeliveryDelayMultiplier,
			DeliveryAttempts: r.DeliveryAttempts, Status: subscriptions.Status(r.Status),
			MaxDeliveryDelay: r.MaxDeliveryDelay, DeliveryJitter: r.DeliveryJitter, RetryPolicy: policyOf(r.RetryPolicy),
			CircuitBreaker: jsonOf[rooms.CircuitBreaker](r.CircuitBreaker), MaxDeliveryRate: r.MaxDeliveryRate,
			Circuit:       r.Circuit.domain(),
			AckDeadline:   time.Duration(r.AckDeadline) * time.Millisecond,
			SigningSecret: r.SigningSecret, PreviousSecret: r.PreviousSigningSecret,
			PreviousSecretExpiresAt: timeVal(r.PreviousSecretExpiresAt),
			// Compiled here, once per load, not per event routed.
			AttributeFilter: subscriptions.LoadAttributeFilter(strVal(r.AttributeFilter)),
			DecidedBy:       r.DecidedBy, DecidedAt: timeVal(r.DecidedAt), RejectionReason: r.RejectionReason,
			CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
		}
	}
	return out, nil
}

func strVal(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// UpdateSubscription implements subscriptions.Store.
func (s *Subscriptions) UpdateSubscription(ctx context.Context, sub subscriptions.Subscription) error {
	err := s.tx(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.lockEventTypes(tx, sub); err != nil {
			return err
		}
		row, err := s.toRow(sub)
		if err != nil {
			return err
		}
		q := tx.Model(&subscriptionRow{}).Where("room_id = ? AND id = ?", sub.RoomID, sub.ID)
		if sub.Status == subscriptions.StatusPending {
			// A change to a PENDING subscription must not undo its
			// approval or rejection committed meanwhile.
			q = q.Where("status = ?", string(subscriptions.StatusPending))
		}
		omit := append([]string{"id", "room_id", "type", "created_at", "signing_secret", "previous_signing_secret",
			"previous_secret_expires_at", "decided_by", "decided_at", "rejection_reason"}, circuitColumnNames...)
		res := q.Select("*").Omit(omit...).Updates(&row)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return s.missingOrDecided(tx, sub)
		}
		if err := tx.Where("subscription_id = ?", sub.ID).Delete(&filterRow{}).Error; err != nil {
			return err
		}
		return tx.Create(toFilterRows(sub)).Error
	})
	return translate(err, subscriptions.ErrNotFound, nil)
}

// missingOrDecided tells why a write of sub guarded by its PENDING status
// changed no row.
func (s *Subscriptions) missingOrDecided(tx *gorm.DB, sub subscriptions.Subscription) error {
	var n int64
	if err := tx.Model(&subscriptionRow{}).Where("room_id = ? AND id = ?", sub.RoomID, sub.ID).Count(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		return gorm.ErrRecordNotFound
	}
	return subscriptions.ErrDecided
}

// Decide implements subscriptions.Store.
func (s *Subscriptions) Decide(ctx context.Context, sub subscriptions.Subscription) error {
	tx := s.tx(ctx)
	res := tx.Model(&subscriptionRow{}).
		Where("room_id = ? AND id = ? AND status = ?", sub.RoomID, sub.ID, string(subscriptions.StatusPending)).
		Updates(map[string]any{
			"status": string(sub.Status), "decided_by": sub.DecidedBy, "decided_at": timePtr(sub.DecidedAt),
			"rejection_reason": sub.RejectionReason, "updated_at": sub.UpdatedAt,
		})
	err := res.Error
	if err == nil && res.RowsAffected == 0 {
		err = s.missingOrDecided(tx, sub)
	}
	return translate(err, subscriptions.ErrNotFound, nil)
}

// UpdateSecrets implements subscriptions.Store.
func (s *Subscriptions) UpdateSecrets(ctx context.Context, sub subscriptions.Subscription) error {
	res := s.tx(ctx).Model(&subscriptionRow{}).Where("room_id = ? AND id = ?", sub.RoomID, sub.ID).
		Updates(map[string]any{
			"signing_secret": sub.SigningSecret, "previous_signing_secret": sub.PreviousSecret,
			"previous_secret_expires_at": timePtr(sub.PreviousSecretExpiresAt), "updated_at": sub.UpdatedAt,
		})
	if res.Error == nil && res.RowsAffected == 0 {
		return subscriptions.ErrNotFound
	}
	return translate(res.Error, nil, nil)
}

// DeleteSubscription implements subscriptions.Store.
//
// Its owed copies are dropped first: a relay giving one up at the same
// moment (outbox.Refusal) holds the copy's log row until it commits its
// dead letter, which the DELETE of dead letters below then sees. The
// transaction is retried on a deadlock (a release of parked copies locks
// outbox rows before log rows).
func (s *Subscriptions) DeleteSubscription(ctx context.Context, roomID, id uuid.UUID) error {
	err := retryConflicts(ctx, func() error {
		return s.tx(ctx).Transaction(func(tx *gorm.DB) error {
			if err := dropOwedCopies(tx, s.db.dialect, id, false); err != nil {
				return err
			}
			if err := tx.Where("subscription_id = ?", id).Delete(&filterRow{}).Error; err != nil {
				return err
			}
			if err := tx.Where("subscription_id = ?", id).Delete(&deadLetterRow{}).Error; err != nil {
				return err
			}
			res := tx.Where("room_id = ? AND id = ?", roomID, id).Delete(&subscriptionRow{})
			if res.Error == nil && res.RowsAffected == 0 {
				return gorm.ErrRecordNotFound
			}
			return res.Error
		})
	})
	return translate(err, subscriptions.ErrNotFound, nil)
}

// dropOwedCopies ends the copies the relay still owes the broker for the
// subscription id as dropped, within tx: sent after its deletion, a PULL
// copy would recreate the deleted queue (Artemis and ActiveMQ create queues
// on first use) or be refused by a broker that does not (a PUSH copy would
// only be dropped by the dispatcher). A copy a relay is sending at this
// moment still reaches the broker (its log keeps dropped), and so do copies
// of events other processes publish while their catalog cache still holds
// the subscription (CATALOG_CACHE_TTL).
// With byRoom, id is a room's, and every copy of the room goes (the room is
// deleted with its subscriptions).
func dropOwedCopies(tx *gorm.DB, dialect Dialect, id uuid.UUID, byRoom bool) error {
	col := "p.subscription_id"
	if byRoom {
		col = "p.room_id"
	}
	owed := "SELECT p.id FROM outbox o JOIN published_messages p ON p.id = o.send_id WHERE " + col + " = ? AND p.status = ?"
	if dialect == Postgres {
		owed += " ORDER BY p.id FOR NO KEY UPDATE OF p" // in id order, as every writer of the log (see recordAndRemove)
	}
	var ids []uuid.UUID
	if err := tx.Raw(owed, id, string(message.StatusPending)).Scan(&ids).Error; err != nil || len(ids) == 0 {
		return err
	}
	errText := "subscription deleted before the broker took the copy"
	if byRoom {
		errText = "room deleted before the broker took the copy"
	}
	for chunk := range slices.Chunk(ids, 1000) {
		if err := tx.Model(&sendRow{}).Where("id IN ?", chunk).Updates(map[string]any{
			"status": string(message.StatusDropped), "error": errText,
			"completed_at": time.Now().UTC()}).Error; err != nil {
			return err
		}
		if err := tx.Where("send_id IN ?", chunk).Delete(&outboxRow{}).Error; err != nil {
			return err
		}
	}
	return nil
}

// ResetCircuit implements subscriptions.Store: closed, with a new version,
// so that every dispatcher also forgets the failures it counted.
func (s *Subscriptions) ResetCircuit(ctx context.Context, roomID, id uuid.UUID) error {
	res := s.tx(ctx).Exec(`UPDATE subscriptions SET circuit_state = ?, circuit_version = circuit_version + 1, circuit_opened_at = NULL,
		circuit_cooldown_ms = 0, circuit_probe_at = NULL, circuit_last_error = '', circuit_last_status_code = NULL
		WHERE room_id = ? AND id = ?`, string(subscriptions.CircuitClosed), roomID, id)
	if res.Error == nil && res.RowsAffected == 0 {
		return subscriptions.ErrNotFound
	}
	return translate(res.Error, nil, nil)
}

// CountSubscriptions implements subscriptions.Store.
func (s *Subscriptions) CountSubscriptions(ctx context.Context, roomID uuid.UUID) (int, error) {
	var n int64
	err := s.tx(ctx).Model(&subscriptionRow{}).Where("room_id = ? AND status NOT IN ?", roomID,
		[]string{string(subscriptions.StatusTerminated), string(subscriptions.StatusRejected)}).Count(&n).Error
	return int(n), translate(err, nil, nil)
}
