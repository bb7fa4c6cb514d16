package store

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/publish"
)

// Events implements publish.Store and outbox.Store: events, the
// published-messages log, and the outbox (one narrow row per logged send the
// broker has not confirmed).
type Events struct{ db *DB }

var (
	_ publish.Store      = (*Events)(nil)
	_ publish.BatchStore = (*Events)(nil)
	_ outbox.Store       = (*Events)(nil)
	_ outbox.Vacuumer    = (*Events)(nil)
	_ outbox.PurgeStore  = (*Events)(nil)
)

// Events returns the event store.
func (db *DB) Events() *Events { return &Events{db: db} }

type eventRow struct {
	ID             uuid.UUID `gorm:"primaryKey"`
	RoomID         uuid.UUID
	RequestID      uuid.UUID
	CorrelationID  string
	EventTypeID    uuid.UUID
	EventType      string
	Version        int
	Payload        string
	Attributes     string
	IdempotencyKey *string
	RequestHash    string
	Destinations   int
	PublishedAt    time.Time `gorm:"autoCreateTime:false"`
	ExpiresAt      *time.Time
	Traceparent    string
	Tracestate     string
}

func (eventRow) TableName() string { return "events" }

type sendRow struct {
	ID               uuid.UUID `gorm:"primaryKey"`
	EventID          uuid.UUID
	RoomID           uuid.UUID
	CorrelationID    string
	SubscriptionID   uuid.UUID
	SubscriptionType string
	Destination      string
	Attempt          int
	Held             int
	ScheduledDelay   int64
	CreatedAt        time.Time `gorm:"autoCreateTime:false"`
	SentAt           *time.Time
	Status           string
	StatusCode       *int
	Error            string
	CompletedAt      *time.Time
	LatencyMs        *int64
	ResponseBody     string
	NextAttemptAt    *time.Time
}

func (sendRow) TableName() string { return "published_messages" }

// outboxRow is a send the relay still owes the broker; claimed_by and
// claimed_until lease it to one relay (or dispatcher) at a time.
type outboxRow struct {
	SendID       uuid.UUID `gorm:"primaryKey"`
	CreatedAt    time.Time `gorm:"autoCreateTime:false"`
	ClaimedBy    string
	ClaimedUntil *time.Time
	Refusals     int // how often the broker refused the copy (outbox.Refusal)
}

func (outboxRow) TableName() string { return "outbox" }

// claimedRow is a claimed send's log row with its outbox refusal count.
type claimedRow struct {
	Log      sendRow `gorm:"embedded"` // exported: gorm cannot fill an unexported embedded struct
	Refusals int
}

// insertSends logs sends within tx and puts the unsent pending ones in the
// outbox, leased to owner until until when owner is not "".
func insertSends(tx *gorm.DB, sends []message.Send, owner string, until time.Time) error {
	if len(sends) == 0 {
		return nil
	}
	rows := make([]sendRow, len(sends))
	out := make([]outboxRow, 0, len(sends))
	for i, sd := range sends {
		rows[i] = toSendRow(sd)
		if sd.Status == message.StatusPending && sd.SentAt.IsZero() {
			o := outboxRow{SendID: sd.ID, CreatedAt: rows[i].CreatedAt}
			if owner != "" {
				o.ClaimedBy, o.ClaimedUntil = owner, timePtr(until)
			}
			out = append(out, o)
		}
	}
	if err := tx.CreateInBatches(rows, 500).Error; err != nil {
		return err
	}
	if len(out) == 0 {
		return nil
	}
	return tx.CreateInBatches(out, 500).Error
}

func toEventRow(e message.Event) eventRow {
	attrs, _ := json.Marshal(e.Attributes)
	r := eventRow{
		ID: e.ID, RoomID: e.RoomID, RequestID: e.RequestID, CorrelationID: e.CorrelationID,
		EventTypeID: e.EventTypeID, EventType: e.EventType, Version: e.Version,
		Payload: string(e.Payload), Attributes: string(attrs), RequestHash: e.RequestHash,
		Destinations: e.Destinations, PublishedAt: e.PublishedAt, ExpiresAt: timePtr(e.ExpiresAt),
		Traceparent: e.Trace.Parent, Tracestate: e.Trace.State,
	}
	if e.IdempotencyKey != "" {
		k := e.IdempotencyKey
		r.IdempotencyKey = &k
	}
	return r
}

func (r eventRow) domain() message.Event {
	e := message.Event{
		ID: r.ID, RoomID: r.RoomID, RequestID: r.RequestID, CorrelationID: r.CorrelationID,
		EventTypeID: r.EventTypeID, EventType: r.EventType, Version: r.Version,
		Payload: json.RawMessage(r.Payload), RequestHash: r.RequestHash,
		Destinations: r.Destinations, PublishedAt: r.PublishedAt.UTC(), ExpiresAt: timeVal(r.ExpiresAt),
		Trace: message.Trace{Parent: r.Traceparent, State: r.Tracestate},
	}
	_ = json.Unmarshal([]byte(r.Attributes), &e.Attributes)
	if r.IdempotencyKey != nil {
		e.IdempotencyKey = *r.IdempotencyKey
	}
	return e
}

func toSendRow(s message.Send) sendRow {
	r := sendRow{
		ID: s.ID, EventID: s.EventID, RoomID: s.RoomID, CorrelationID: s.CorrelationID,
		SubscriptionID: s.SubscriptionID, SubscriptionType: s.SubscriptionType,
		Destination: s.Destination, Attempt: s.Attempt, Held: s.Held, ScheduledDelay: s.ScheduledDelay.Milliseconds(),
		CreatedAt: s.CreatedAt, SentAt: timePtr(s.SentAt), Status: string(s.Status),
		Error: s.Error, CompletedAt: timePtr(s.CompletedAt),
	}
	if s.StatusCode != 0 {
		c := s.StatusCode
		r.StatusCode = &c
	}
	return r
}

func (r sendRow) domain() message.Send {
	s := message.Send{
		ID: r.ID, EventID: r.EventID, RoomID: r.RoomID, CorrelationID: r.CorrelationID,
		SubscriptionID: r.SubscriptionID, SubscriptionType: r.SubscriptionType,
		Destination: r.Destination, Attempt: r.Attempt, Held: r.Held,
		ScheduledDelay: time.Duration(r.ScheduledDelay) * time.Millisecond,
		CreatedAt:      r.CreatedAt.UTC(), SentAt: timeVal(r.SentAt), Status: message.Status(r.Status),
		Error: r.Error, CompletedAt: timeVal(r.CompletedAt),
	}
	if r.StatusCode != nil {
		s.StatusCode = *r.StatusCode
	}
	if r.LatencyMs != nil {
		s.Latency = time.Duration(*r.LatencyMs) * time.Millisecond
	}
	return s
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func timeVal(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func (s *Events) tx(ctx context.Context) *gorm.DB { return s.db.gorm.WithContext(ctx) }

// Publish implements publish.Store.
func (s *Events) Publish(ctx context.Context, events []message.Event, sends []message.Send, lease outbox.Lease) error {
	return s.PublishAll(ctx, []publish.Batch{{Events: events, Sends: sends, Lease: lease}})
}

// PublishAll implements publish.BatchStore: every batch's rows in one
// transaction, in one statement on PostgreSQL when it fits.
func (s *Events) PublishAll(ctx context.Context, batches []publish.Batch) error {
	var events, sends int
	for _, b := range batches {
		events += len(b.Events)
		sends += len(b.Sends)
	}
	params := events*len(eventColumns) + sends*(len(sendColumns)+len(outboxColumns))
	if s.db.dialect == Postgres && sends > 0 && params <= maxOneStatementArgs {
		sql, args := publishStatement(batches)
		return translate(s.tx(ctx).Exec(sql, args...).Error, nil, publish.ErrDuplicateKey)
	}
	err := s.tx(ctx).Transaction(func(tx *gorm.DB) error {
		rows := make([]eventRow, 0, events)
		for _, b := range batches {
			for _, e := range b.Events {
				rows = append(rows, toEventRow(e))
			}
		}
		if err := tx.CreateInBatches(rows, 500).Error; err != nil {
			return err
		}
		for _, b := range batches {
			if err := insertSends(tx, b.Sends, b.Lease.Owner, b.Lease.Until); err != nil {
				return err
			}
		}
		return nil
	})
	return translate(err, nil, publish.ErrDuplicateKey)
}

// The columns publishStatement writes; every other column keeps its default.
var (
	eventColumns = []string{"id", "room_id", "request_id", "correlation_id", "event_type_id", "event_type", "version",
		"payload", "attributes", "idempotency_key", "request_hash", "destinations", "published_at", "expires_at",
		"traceparent", "tracestate"}
	sendColumns = []string{"id", "event_id", "room_id", "correlation_id", "subscription_id", "subscription_type",
		"destination", "attempt", "held", "scheduled_delay", "created_at", "sent_at", "status", "status_code", "error", "completed_at"}
	outboxColumns = []string{"send_id", "created_at", "claimed_by", "claimed_until"}
)

// maxOneStatementArgs bounds the parameters of one publish statement
// (PostgreSQL allows 65535); a larger batch takes the transaction.
const maxOneStatementArgs = 30000

// publishStatement writes the batches' events, their sends and the outbox
// rows of the pending ones (each leased as its batch says) in one
// PostgreSQL statement: one round trip instead of five (BEGIN, three
// INSERTs, COMMIT), the same atomicity (a statement is its own transaction;
// foreign keys are checked at its end).
func publishStatement(batches []publish.Batch) (string, []any) {
	var events, sends int
	for _, bt := range batches {
		events += len(bt.Events)
		sends += len(bt.Sends)
	}
	var b strings.Builder
	args := make([]any, 0, events*len(eventColumns)+sends*(len(sendColumns)+len(outboxColumns)))
	values := func(n, cols int) { placeholders(&b, n, cols) }
	b.WriteString("WITH e AS (INSERT INTO events (" + strings.Join(eventColumns, ", ") + ") VALUES ")
	values(events, len(eventColumns))
	for _, bt := range batches {
		for _, e := range bt.Events {
			r := toEventRow(e)
			args = append(args, r.ID, r.RoomID, r.RequestID, r.CorrelationID, r.EventTypeID, r.EventType, r.Version,
				r.Payload, r.Attributes, r.IdempotencyKey, r.RequestHash, r.Destinations, r.PublishedAt.UTC(), r.ExpiresAt,
				r.Traceparent, r.Tracestate)
		}
	}
	b.WriteString("), s AS (INSERT INTO published_messages (" + strings.Join(sendColumns, ", ") + ") VALUES ")
	values(sends, len(sendColumns))
	type owedRow struct {
		r     sendRow
		lease outbox.Lease
	}
	var owed []owedRow
	for _, bt := range batches {
		for _, sd := range bt.Sends {
			r := toSendRow(sd)
			args = append(args, r.ID, r.EventID, r.RoomID, r.CorrelationID, r.SubscriptionID, r.SubscriptionType,
				r.Destination, r.Attempt, r.Held, r.ScheduledDelay, r.CreatedAt.UTC(), r.SentAt, r.Status, r.StatusCode, r.Error, r.CompletedAt)
			if sd.Status == message.StatusPending && sd.SentAt.IsZero() {
				owed = append(owed, owedRow{r, bt.Lease})
			}
		}
	}
	b.WriteString(")")
	if len(owed) == 0 {
		b.WriteString(" SELECT 1")
		return b.String(), args
	}
	b.WriteString(" INSERT INTO outbox (" + strings.Join(outboxColumns, ", ") + ") VALUES ")
	values(len(owed), len(outboxColumns))
	for _, o := range owed {
		args = append(args, o.r.ID, o.r.CreatedAt.UTC(), o.lease.Owner, timePtr(o.lease.Until))
	}
	return b.String(), args
}

// placeholders writes n rows of cols placeholders: (?, ?), (?, ?), ...
func placeholders(b *strings.Builder, n, cols int) {
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(")
		for c := range cols {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteString("?")
		}
		b.WriteString(")")
	}
}

// EventByIdempotencyKey implements publish.Store.
func (s *Events) EventByIdempotencyKey(ctx context.Context, roomID uuid.UUID, key string) (message.Event, error) {
	var r eventRow
	err := s.tx(ctx).Where("room_id = ? AND idempotency_key = ?", roomID, key).Take(&r).Error
	return r.domain(), translate(err, publish.ErrEventNotFound, nil)
}

// EventsByRequest implements publish.Store.
func (s *Events) EventsByRequest(ctx context.Context, roomID, requestID uuid.UUID) ([]message.Event, error) {
	var rows []eventRow
	if err := s.tx(ctx).Where("room_id = ? AND request_id = ?", roomID, requestID).Order("id").Find(&rows).Error; err != nil {
		return nil, translate(err, nil, nil)
	}
	return eventsOf(rows), nil
}

func eventsOf(rows []eventRow) []message.Event {
	out := make([]message.Event, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out
}

// Event implements publish.Store.
func (s *Events) Event(ctx context.Context, roomID, id uuid.UUID) (message.Event, error) {
	var r eventRow
	err := s.tx(ctx).Where("room_id = ? AND id = ?", roomID, id).Take(&r).Error
	return r.domain(), translate(err, publish.ErrEventNotFound, nil)
}

// Events implements publish.Store.
func (s *Events) Events(ctx context.Context, q publish.EventQuery) ([]message.Event, error) {
	tx := s.tx(ctx).Where("room_id = ?", q.RoomID).Order("id DESC")
	if q.CorrelationID != "" {
		tx = tx.Where("correlation_id = ?", q.CorrelationID)
	}
	if q.Before != uuid.Nil {
		tx = tx.Where("id < ?", q.Before)
	}
	if q.Limit > 0 {
		tx = tx.Limit(q.Limit)
	}
	var rows []eventRow
	if err := tx.Find(&rows).Error; err != nil {
		return nil, translate(err, nil, nil)
	}
	return eventsOf(rows), nil
}

// Sends implements publish.Store.
func (s *Events) Sends(ctx context.Context, eventIDs []uuid.UUID) ([]message.Send, error) {
	if len(eventIDs) == 0 {
		return nil, nil
	}
	var rows []sendRow
	if err := s.tx(ctx).Where("event_id IN ?", eventIDs).Order("id").Find(&rows).Error; err != nil {
		return nil, translate(err, nil, nil)
	}
	out := make([]message.Send, len(rows))
	for i, r := range rows {
		out[i] = r.domain()
	}
	return out, nil
}

// ClaimPending implements outbox.Store: it leases outbox rows in id (that
// is, creation) order. On PostgreSQL, SKIP LOCKED lets relays in several
// processes claim disjoint rows at once; SQLite has a single writer, so the
// UPDATE alone is atomic. A row whose send was settled (the consumer got the
// copy before its relay recorded the receipt and then died) or purged is
// dropped rather than sent again.
func (s *Events) ClaimPending(ctx context.Context, owner string, until time.Time, limit int) ([]outbox.Pending, error) {
	now := s.db.now().UTC()
	var ids []uuid.UUID
	var rows []claimedRow
	if s.db.dialect == Postgres {
		// One round trip: the claim and its log rows. (A log row cannot be
		// missing: purging it deletes its outbox row, ON DELETE CASCADE.)
		// The candidates are locked in a CTE of their own, evaluated once:
		// as a subquery of the UPDATE's WHERE, PostgreSQL re-ran it when the
		// UPDATE met a row another relay had just changed, and the claim
		// took more than limit rows (484 of 200 seen, in a claim that took
		// 7.5 s while two relays claimed from a 5000-row outbox).
		err := s.tx(ctx).Raw(`WITH picked AS MATERIALIZED (SELECT send_id FROM outbox
				WHERE claimed_until IS NULL OR claimed_until < ?
				ORDER BY send_id LIMIT ? FOR UPDATE SKIP LOCKED),
			c AS (UPDATE outbox o SET claimed_by = ?, claimed_until = ? FROM picked
				WHERE o.send_id = picked.send_id RETURNING o.send_id, o.refusals)
			SELECT p.*, c.refusals FROM c JOIN published_messages p ON p.id = c.send_id ORDER BY p.id`,
			now, limit, owner, until.UTC()).Scan(&rows).Error
		if err != nil {
			return nil, translate(err, nil, nil)
		}
		for _, r := range rows {
			ids = append(ids, r.Log.ID)
		}
	} else {
		// SQLite has no UPDATE in a WITH clause, nor row locks: one writer.
		claim := `UPDATE outbox SET claimed_by = ?, claimed_until = ?
			WHERE send_id IN (SELECT send_id FROM outbox
				WHERE claimed_until IS NULL OR claimed_until < ?
				ORDER BY send_id LIMIT ?)
			RETURNING send_id, refusals`
		var claimed []outboxRow
		if err := s.tx(ctx).Raw(claim, owner, until.UTC(), now, limit).Scan(&claimed).Error; err != nil {
			return nil, translate(err, nil, nil)
		}
		if len(claimed) == 0 {
			return nil, nil
		}
		refusals := make(map[uuid.UUID]int, len(claimed))
		for _, c := range claimed {
			ids = append(ids, c.SendID)
			refusals[c.SendID] = c.Refusals
		}
		var logRows []sendRow
		if err := s.tx(ctx).Where("id IN ?", ids).Order("id").Find(&logRows).Error; err != nil {
			return nil, translate(err, nil, nil)
		}
		for _, r := range logRows {
			rows = append(rows, claimedRow{Log: r, Refusals: refusals[r.ID]})
		}
	}
	if len(rows) == 0 {
		return nil, nil
	}
	eventIDs := make([]uuid.UUID, 0, len(rows))
	for _, r := range rows {
		eventIDs = append(eventIDs, r.Log.EventID)
	}
	var evRows []eventRow
	if err := s.tx(ctx).Where("id IN ?", eventIDs).Find(&evRows).Error; err != nil {
		return nil, translate(err, nil, nil)
	}
	events := make(map[uuid.UUID]message.Event, len(evRows))
	for _, r := range evRows {
		events[r.ID] = r.domain()
	}
	out := make([]outbox.Pending, 0, len(rows))
	owed := make(map[uuid.UUID]bool, len(rows))
	for _, c := range rows {
		r := c.Log
		ev, ok := events[r.EventID]
		if !ok || r.SentAt != nil || r.Status != string(message.StatusPending) {
			continue // purged, or settled: nothing left to send
		}
		owed[r.ID] = true
		out = append(out, outbox.Pending{Send: r.domain(), Event: ev, Refusals: c.Refusals})
	}
	if len(owed) < len(ids) {
		var stale []uuid.UUID
		for _, id := range ids {
			if !owed[id] {
				stale = append(stale, id)
			}
		}
		// Best effort: should this fail (a late MarkSent of the same rows
		// holding their locks), the rows stay leased and the next claim that
		// meets them drops them. The claim itself stands.
		_ = s.tx(ctx).Where("send_id IN ?", stale).Delete(&outboxRow{}).Error
	}
	return out, nil
}

// VacuumOutbox implements outbox.Vacuumer: on PostgreSQL a VACUUM of the
// outbox (skipped when another process is vacuuming it; the table holds only
// pending rows, so it takes milliseconds); nothing on SQLite.
func (s *Events) VacuumOutbox(ctx context.Context) error {
	if s.db.dialect != Postgres {
		return nil
	}
	return s.tx(ctx).Exec("VACUUM (ANALYZE, SKIP_LOCKED) outbox").Error
}

// MarkSent implements outbox.Store: the sends leave the outbox.
func (s *Events) MarkSent(ctx context.Context, ids []uuid.UUID, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	// The consumer may have settled the copy already (delivered before the
	// receipt was recorded): keep its outcome, only fill in sent_at. A
	// pending copy's error is a refusal the broker has now got over. at is
	// no later than any send began; a copy created after it was sent at its
	// creation.
	pending := string(message.StatusPending)
	at = at.UTC()
	return s.recordAndRemove(ctx, ids, "sent_at = COALESCE(sent_at, CASE WHEN created_at > ? THEN created_at ELSE ? END), "+
		"error = CASE WHEN status = ? THEN '' ELSE error END, status = CASE WHEN status = ? THEN ? ELSE status END",
		at, at, pending, pending, string(message.StatusSent))
}

// recordAndRemove runs UPDATE published_messages SET set on the log rows ids
// and deletes their outbox rows, atomically: on PostgreSQL in one statement
// (one round trip instead of four with BEGIN and COMMIT), on SQLite in a
// transaction (a single writer: no deadlocks). On PostgreSQL the rows are
// locked in id order: the push dispatcher records a copy's outcome while the
// relay records the same copies sent (a consumer can be faster than the
// receipt), and with both locking in id order they cannot deadlock. (They
// did: each deadlock cost deadlock_timeout, 1 s, and failed the relay's round.)
func (s *Events) recordAndRemove(ctx context.Context, ids []uuid.UUID, set string, args ...any) error {
	err := retryConflicts(ctx, func() error {
		if s.db.dialect == Postgres {
			a := append([]any{ids}, args...)
			return s.tx(ctx).Exec(`WITH gone AS (DELETE FROM outbox WHERE send_id IN ?)
				UPDATE published_messages SET `+set+`
				WHERE id IN (SELECT id FROM published_messages WHERE id IN ? ORDER BY id FOR NO KEY UPDATE)`,
				append(a, ids)...).Error
		}
		return s.tx(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("UPDATE published_messages SET "+set+" WHERE id IN ?", append(args, ids)...).Error; err != nil {
				return err
			}
			return tx.Where("send_id IN ?", ids).Delete(&outboxRow{}).Error
		})
	})
	return translate(err, nil, nil)
}

// Release implements outbox.Store: the sends' leases end, so any relay may
// claim them again.
func (s *Events) Release(ctx context.Context, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	err := retryConflicts(ctx, func() error {
		return s.tx(ctx).Model(&outboxRow{}).Where("send_id IN ?", ids).
			Updates(map[string]any{"claimed_by": "", "claimed_until": nil}).Error
	})
	return translate(err, nil, nil)
}

// RefusedOwner holds the outbox lease of a copy the broker refused until the
// relay may try it again.
const RefusedOwner = "refused"

// Refuse implements outbox.Store. A copy to try again stays in the outbox,
// leased to RefusedOwner until its RetryAt, with its refusal counted and the
// broker's answer in its log row's error. A copy given up leaves the outbox
// with its final status and becomes a dead letter, in one transaction; if
// its subscription is gone meanwhile, it is dropped instead (no dead letter
// outlives its subscription), and if it was settled meanwhile it keeps that
// outcome.
func (s *Events) Refuse(ctx context.Context, refusals []outbox.Refusal) error {
	if len(refusals) == 0 {
		return nil
	}
	// Log rows are locked in id order, as every writer does (see recordAndRemove).
	refusals = slices.Clone(refusals)
	slices.SortFunc(refusals, func(a, b outbox.Refusal) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	err := retryConflicts(ctx, func() error {
		return s.tx(ctx).Transaction(func(tx *gorm.DB) error {
			for _, f := range refusals {
				if err := refuse(tx, f); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return translate(err, nil, nil)
}

// refuse records one refusal within tx.
func refuse(tx *gorm.DB, f outbox.Refusal) error {
	pending := string(message.StatusPending)
	if !f.RetryAt.IsZero() {
		if err := tx.Model(&sendRow{}).Where("id = ? AND status = ?", f.ID, pending).Update("error", f.Error).Error; err != nil {
			return err
		}
		return tx.Model(&outboxRow{}).Where("send_id = ?", f.ID).Updates(map[string]any{
			"refusals": gorm.Expr("refusals + 1"), "claimed_by": RefusedOwner, "claimed_until": f.RetryAt.UTC()}).Error
	}
	var subs int64
	if err := tx.Model(&subscriptionRow{}).Where("id = ?", f.SubscriptionID).Count(&subs).Error; err != nil {
		return err
	}
	status, errText := f.Status, f.Error
	if subs == 0 {
		status, errText = message.StatusDropped, "subscription deleted; "+f.Error
	}
	res := tx.Model(&sendRow{}).Where("id = ? AND status = ?", f.ID, pending).
		Updates(map[string]any{"status": string(status), "error": errText, "completed_at": f.At.UTC()})
	if res.Error != nil {
		return res.Error
	}
	if err := tx.Where("send_id = ?", f.ID).Delete(&outboxRow{}).Error; err != nil {
		return err
	}
	if res.RowsAffected == 0 || status == message.StatusDropped {
		return nil // settled meanwhile, or its subscription is gone
	}
	row := toDeadLetterRow(delivery.DeadLetter{
		ID: uuid.Must(uuid.NewV7()), RoomID: f.RoomID, SubscriptionID: f.SubscriptionID, Event: f.Event,
		Attempts: f.Attempt, Reason: f.Reason, LastError: f.Error, CreatedAt: f.At.UTC(),
	})
	return tx.Create(&row).Error
}

// PurgeEvents implements outbox.PurgeStore. An event that still owes the broker
// a send is kept, expired or not: an expired one's copy is still sent, for
// its consumer to make it a dead letter (see outbox.Relay).
func (s *Events) PurgeEvents(ctx context.Context, q outbox.PurgeQuery) (int, error) {
	var ids []uuid.UUID
	err := s.tx(ctx).Model(&eventRow{}).Select("id").
		Where("published_at < ?", q.PublishedBefore.UTC()).
		Where("published_at < ? OR (expires_at IS NOT NULL AND expires_at < ?)", q.RetainedBefore.UTC(), q.Now.UTC()).
		Where("NOT EXISTS (SELECT 1 FROM published_messages p JOIN outbox o ON o.send_id = p.id WHERE p.event_id = events.id AND p.sent_at IS NULL AND p.status = ?)",
			string(message.StatusPending)).
		Order("id").Limit(q.Limit).Scan(&ids).Error
	if err != nil || len(ids) == 0 {
		return 0, translate(err, nil, nil)
	}
	err = retryConflicts(ctx, func() error {
		return s.tx(ctx).Transaction(func(tx *gorm.DB) error {
			// Log rows locked in id order, as every writer does (see
			// recordAndRemove); their outbox rows go with them (cascade).
			logRows := "event_id IN ?"
			if s.db.dialect == Postgres {
				logRows = "id IN (SELECT id FROM published_messages WHERE event_id IN ? ORDER BY id FOR UPDATE)"
			}
			if err := tx.Where(logRows, ids).Delete(&sendRow{}).Error; err != nil {
				return err
			}
			return tx.Where("id IN ?", ids).Delete(&eventRow{}).Error
		})
	})
	if err != nil {
		return 0, translate(err, nil, nil)
	}
	return len(ids), nil
}
