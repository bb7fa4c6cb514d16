package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/push"
	"github.com/roomhub/messaging-api/subscriptions"
)

var _ push.Circuits = (*Push)(nil)

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
