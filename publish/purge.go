package publish

import (
	"context"
	"log/slog"
	"time"
)

// Purger deletes events and their log rows once they are past the room's
// expiration or the retention, and past the idempotency window.
type Purger struct {
	store     Store
	retention time.Duration
	interval  time.Duration
	now       func() time.Time
	logger    *slog.Logger
}

// NewPurger returns a Purger; retention below the idempotency window (24 h)
// is raised to it.
func NewPurger(store Store, retention, interval time.Duration, now func() time.Time, logger *slog.Logger) *Purger {
	return &Purger{store: store, retention: max(retention, idempotencyRetention), interval: interval, now: now, logger: logger}
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
		PublishedBefore: now.Add(-idempotencyRetention),
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
