package metrics

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StoreQueries are the queries a scrape runs against the database (the store
// provides them; nil skips that metric, as in a process without pulls).
type StoreQueries struct {
	// Outbox returns how many sends the outbox still owes the broker and
	// when the oldest of them was created (zero when none).
	Outbox func(ctx context.Context) (int, time.Time, error)
	// Parked returns how many slow subscriptions' deferred copies wait out
	// their deferral in the outbox.
	Parked func(ctx context.Context) (int, error)
	// Leases returns how many pulled messages await their ack.
	Leases func(ctx context.Context) (int, error)
	// OpenCircuits returns how many PUSH subscriptions' circuits are not
	// closed (open or half-open).
	OpenCircuits func(ctx context.Context) (int, error)
}

// storeCollector queries the database at scrape time, bounded by timeout, so
// the numbers are current and nothing polls while nobody scrapes. Every
// process sees the same database: aggregate these with max(), not sum().
type storeCollector struct {
	q       StoreQueries
	timeout time.Duration
	now     func() time.Time
	logger  *slog.Logger

	backlog, oldest, parked, leases, circuits, up *prometheus.Desc
}

// CollectStore registers the scrape-time database metrics; each scrape's
// queries get timeout together.
func (m *Metrics) CollectStore(q StoreQueries, timeout time.Duration, now func() time.Time, logger *slog.Logger) {
	m.reg.MustRegister(&storeCollector{
		q: q, timeout: timeout, now: now, logger: logger,
		backlog:  prometheus.NewDesc(namespace+"_outbox_backlog", "Sends the outbox owes the broker now (pending rows, not counting parked copies still in their deferral), read from the database at scrape time.", nil, nil),
		parked:   prometheus.NewDesc(namespace+"_outbox_parked", "Slow subscriptions' deferred copies waiting out their deferral in the outbox, read at scrape time.", nil, nil),
		oldest:   prometheus.NewDesc(namespace+"_outbox_oldest_age_seconds", "Age of the oldest pending outbox row (0 when none), read at scrape time.", nil, nil),
		leases:   prometheus.NewDesc(namespace+"_pull_leases_outstanding", "Pulled messages awaiting ack, nack or their ack deadline, read at scrape time.", nil, nil),
		circuits: prometheus.NewDesc(namespace+"_push_circuits_open", "PUSH subscriptions whose circuit is open or half-open (their messages are held), read at scrape time.", nil, nil),
		up:       prometheus.NewDesc(namespace+"_store_stats_up", "1 when the scrape-time database queries answered within their timeout, else 0 (and the outbox and lease metrics are absent).", nil, nil),
	})
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.oldest
	ch <- c.parked
	ch <- c.leases
	ch <- c.circuits
	ch <- c.up
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	up := 1.0
	fail := func(what string, err error) {
		up = 0
		c.logger.WarnContext(ctx, "metrics: scrape-time query failed", slog.String("query", what), slog.Any("error", err))
	}
	if c.q.Outbox != nil {
		n, oldest, err := c.q.Outbox(ctx)
		if err != nil {
			fail("outbox", err)
		} else {
			age := 0.0
			if !oldest.IsZero() {
				age = max(0, c.now().Sub(oldest).Seconds())
			}
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(n))
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
		}
	}
	if c.q.Parked != nil {
		if n, err := c.q.Parked(ctx); err != nil {
			fail("parked", err)
		} else {
			ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(n))
		}
	}
	if c.q.Leases != nil {
		if n, err := c.q.Leases(ctx); err != nil {
			fail("leases", err)
		} else {
			ch <- prometheus.MustNewConstMetric(c.leases, prometheus.GaugeValue, float64(n))
		}
	}
	if c.q.OpenCircuits != nil {
		if n, err := c.q.OpenCircuits(ctx); err != nil {
			fail("circuits", err)
		} else {
			ch <- prometheus.MustNewConstMetric(c.circuits, prometheus.GaugeValue, float64(n))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}

// brokerGauge reads the broker's state when scraped, so the gauge is never
// a sampling interval behind.
type brokerGauge struct {
	desc      *prometheus.Desc
	connected atomic.Pointer[func() bool]
}

func (g *brokerGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *brokerGauge) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if f := g.connected.Load(); f != nil && (*f)() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
}

// WatchBroker makes broker_connected report connected, and samples it every
// interval until ctx ends to count a reconnect each time it is seen up after
// down. A drop and redial within one interval goes uncounted; the broker logs
// each.
func (m *Metrics) WatchBroker(ctx context.Context, connected func() bool, every time.Duration) {
	m.brokerUp.connected.Store(&connected)
	t := time.NewTicker(every)
	defer t.Stop()
	was := connected()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := connected()
		if now && !was {
			m.reconnects.Inc()
		}
		was = now
	}
}
