package store

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/push"
	"github.com/roomhub/messaging-api/subscriptions"
)

var (
	_ push.Circuits = (*Push)(nil)
	_ push.Pace     = (*Push)(nil)
)

// Circuit implements push.Circuits.
func (s *Push) Circuit(ctx context.Context, subscription uuid.UUID) (subscriptions.Circuit, error) {
	var row circuitColumns
	err := s.tx(ctx).Table("subscriptions").Select(circuitColumnNames).Where("id = ?", subscription).Take(&row).Error
	return row.domain(), translate(err, subscriptions.ErrNotFound, nil)
}

// SwapCircuit implements push.Circuits: one UPDATE, which only a row still
// at the version before c's matches.
func (s *Push) SwapCircuit(ctx context.Context, subscription uuid.UUID, c subscriptions.Circuit) (bool, error) {
	var code *int
	if c.LastStatusCode != 0 {
		code = &c.LastStatusCode
	}
	res := s.tx(ctx).Exec(`UPDATE subscriptions SET circuit_state = ?, circuit_version = ?, circuit_opened_at = ?,
		circuit_cooldown_ms = ?, circuit_probe_at = ?, circuit_last_error = ?, circuit_last_status_code = ?
		WHERE id = ? AND circuit_version = ?`,
		string(c.State), c.Version, timePtr(c.OpenedAt), c.Cooldown.Milliseconds(), timePtr(c.ProbeAt), c.LastError, code,
		subscription, c.Version-1)
	if res.Error != nil {
		return false, translate(res.Error, nil, nil)
	}
	return res.RowsAffected == 1, nil
}

// OpenCircuits counts the PUSH subscriptions whose circuit is not closed
// (open or half-open), for the gauge.
func (s *Push) OpenCircuits(ctx context.Context) (int, error) {
	var n int64
	err := s.tx(ctx).Table("subscriptions").Where("circuit_state <> ?", string(subscriptions.CircuitClosed)).Count(&n).Error
	return int(n), translate(err, nil, nil)
}

// reserveSlots is ReserveSlots's one statement: an upsert that moves the
// subscription's next free slot on past the slots it grants (g of them,
// those of the want that begin before the horizon), or, granting none,
// moves the deferral cursor on by one slot. Integer microseconds, so that
// PostgreSQL and SQLite compute alike; {{max}} and {{min}} are the
// dialect's two-argument GREATEST and LEAST.
const reserveSlots = `INSERT INTO delivery_rates (subscription_id, next_slot_us, granted, deferred_us)
	VALUES (@id, @now + @first * @iv, @first, 0)
	ON CONFLICT (subscription_id) DO UPDATE SET
		granted = {{grant}},
		next_slot_us = {{max}}(delivery_rates.next_slot_us, @now) + @iv * {{grant}},
		deferred_us = CASE WHEN {{grant}} = 0
			THEN {{max}}(delivery_rates.deferred_us, delivery_rates.next_slot_us) + @iv
			ELSE delivery_rates.deferred_us END
	RETURNING next_slot_us, granted, deferred_us`

// grantedSlots is how many of the want slots from the first free one
// begin before now + horizon: ceil((now + horizon - start) / iv), from 0 to
// want.
const grantedSlots = `{{min}}(@want, {{max}}(0, (@now + @horizon - {{max}}(delivery_rates.next_slot_us, @now) + @iv - 1) / @iv))`

var reserveSlotsSQL = map[Dialect]string{
	Postgres: slotsStatement("GREATEST", "LEAST"),
	SQLite:   slotsStatement("max", "min"),
}

// slotsStatement writes reserveSlots with the dialect's functions, and its
// numbers typed (PostgreSQL cannot infer a type for a parameter that only
// meets other parameters).
func slotsStatement(greatest, least string) string {
	grant := strings.NewReplacer("{{min}}", least, "{{max}}", greatest).Replace(grantedSlots)
	sql := strings.NewReplacer("{{grant}}", grant, "{{max}}", greatest).Replace(reserveSlots)
	var typed []string
	for _, p := range []string{"@now", "@iv", "@first", "@want", "@horizon"} {
		typed = append(typed, p, "CAST("+p+" AS BIGINT)")
	}
	return strings.NewReplacer(typed...).Replace(sql)
}

// ReserveSlots implements push.Pace in one round trip.
func (s *Push) ReserveSlots(ctx context.Context, subscription uuid.UUID, interval time.Duration, now time.Time,
	horizon time.Duration, want int) (push.Slots, error) {
	iv, nowUs, h := interval.Microseconds(), now.UnixMicro(), horizon.Microseconds()
	first := min(int64(want), (h+iv-1)/iv) // a new row: its first slot is now
	var row struct {
		NextSlotUs int64
		Granted    int
		DeferredUs int64
	}
	err := s.tx(ctx).Raw(reserveSlotsSQL[s.db.dialect], map[string]any{
		"id": subscription, "now": nowUs, "iv": iv, "first": first, "want": int64(want), "horizon": h,
	}).Scan(&row).Error
	if err != nil {
		return push.Slots{}, translate(err, nil, nil)
	}
	if row.Granted == 0 {
		return push.Slots{Retry: time.UnixMicro(row.DeferredUs).UTC()}, nil
	}
	return push.Slots{First: time.UnixMicro(row.NextSlotUs - int64(row.Granted)*iv).UTC(), N: row.Granted}, nil
}
