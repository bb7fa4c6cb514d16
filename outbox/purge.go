package outbox

import (
	"context"
	"log/slog"
	"time"
)

// IdempotencyWindow is how long a publish's Idempotency-Key is honoured:
// no event is purged sooner.
const IdempotencyWindow = 24 * time.Hour

// PurgeQuery selects events to delete: published before PublishedBefore (the
// idempotency window) and either published before RetainedBefore or expired
// by Now; never one that still owes the broker a send, even expired (the
// copy's consumer dead-letters it once the relay has sent it).
type PurgeQuery struct {
	PublishedBefore time.Time
	RetainedBefore  time.Time
	Now             time.Time
	Limit           int
}

// PurgeStore deletes old events.
type PurgeStore interface {
	// PurgeEvents deletes events (with their log rows) that q selects and
	// returns how many went.
	PurgeEvents(ctx context.Context, q PurgeQuery) (int, error)
}

// Purger deletes events and their log rows once they are past the room's
// expiration or the retention, and past the idempotency window.
type Purger struct {
	store     PurgeStore
	retention time.Duration
	interval  time.Duration
	now       func() time.Time
	logger    *slog.Logger
}

// NewPurger returns a Purger; retention below IdempotencyWindow is raised
// to it.
func NewPurger(store PurgeStore, retention, interval time.Duration, now func() time.Time, logger *slog.Logger) *Purger {
	return &Purger{store: store, retention: max(retention, IdempotencyWindow), interval: interval, now: now, logger: logger}
}

// Run purges every interval until ctx is done.
func (p *Purger) Run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		if n, err := p.PurgeOnce(ctx); err != nil {
			p.logger.WarnContext(ctx, "purge failed", slog.Any("error", err))
		} else if n > 0 {
			p.logger.InfoContext(ctx, "purged events", slog.Int("events", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PurgeOnce deletes what is due, in batches, and returns how many events went.
func (p *Purger) PurgeOnce(ctx context.Context) (int, error) {
	now := p.now().UTC()
	q := PurgeQuery{
		PublishedBefore: now.Add(-IdempotencyWindow),
		RetainedBefore:  now.Add(-p.retention),
		Now:             now,
		Limit:           1000,
	}
	total := 0
	for {
		n, err := p.store.PurgeEvents(ctx, q)
		total += n
		if err != nil || n < q.Limit {
			return total, err
		}
	}
}
