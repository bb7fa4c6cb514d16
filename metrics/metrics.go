// Package metrics exposes the service's Prometheus metrics. cmd builds one
// Metrics per process over a registry of its own and hands it to the features
// as their observers (push.Observer, pull.Observer, publish.Observer,
// outbox.Observer, delivery.Observer): the features declare those small
// interfaces and never import this package, and this package imports no
// feature.
//
// Label cardinality is bounded by construction: no label carries an event,
// message, correlation or subscription id. The one open-ended label is room
// (the room's identifier) on the publish counters: a deployment has as many
// rooms as its managers create (tens to a few thousand), each adding two
// series. Where rooms are created per tenant without bound, turn it off with
// METRICS_ROOM_LABEL=false and every publish counts under room="_all".
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

const namespace = "messaging"

// AllRooms is the room label value when per-room labels are turned off.
const AllRooms = "_all"

// Metrics holds every metric of one process.
type Metrics struct {
	reg      *prometheus.Registry
	roomWide bool

	published       *prometheus.CounterVec
	sends           *prometheus.CounterVec
	deliveries      *prometheus.CounterVec
	attempts        *prometheus.HistogramVec
	latency         *prometheus.HistogramVec
	pushRequests    *prometheus.HistogramVec
	retryDelay      *prometheus.HistogramVec
	deferred        *prometheus.CounterVec
	circuitOpened   *prometheus.CounterVec
	circuitClosed   prometheus.Counter
	circuitProbes   *prometheus.CounterVec
	dispatcherPause prometheus.Gauge
	relayed         *prometheus.CounterVec
	replayed        *prometheus.CounterVec
	brokerUp        *brokerGauge
	reconnects      prometheus.Counter
	httpDuration    *prometheus.HistogramVec
}

// Options tune New.
type Options struct {
	// RoomLabel keeps the room label on the publish counters; false counts
	// every room under AllRooms.
	RoomLabel bool
}

// New registers every metric, with the Go runtime and process collectors, on
// a fresh registry.
func New(opts Options) *Metrics {
	m := &Metrics{
		reg:      prometheus.NewRegistry(),
		roomWide: !opts.RoomLabel,
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "published_events_total",
			Help: "Events accepted by the publish endpoints (idempotent replays excluded), by room.",
		}, []string{"room"}),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "sends_total",
			Help: "First copies of published events owed to subscriptions (one per matching subscription), by room and subscription type.",
		}, []string{"room", "type"}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "dead_letters_replayed_total",
			Help: "Dead letters published again (each as a new event with one first copy), by subscription type.",
		}, []string{"type"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "deliveries_total",
			Help: "What became of each copy handled by the dispatcher (push) or a pull (ack, nack, ack deadline): delivered, retried, dead_lettered (attempts exhausted), expired, refused (permanent failure), dropped (subscription gone).",
		}, []string{"type", "outcome"}),
		attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "delivery_attempts",
			Help:    "Attempt number at which a message reached its final outcome (every outcome but retried).",
			Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50},
		}, []string{"type", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "delivery_latency_seconds",
			Help:    "Time from publish to delivery (a 2xx push response, or a pull's ack).",
			Buckets: prometheus.ExponentialBucketsRange(0.005, 3600, 18),
		}, []string{"type"}),
		pushRequests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "push_request_duration_seconds",
			Help:    "Duration of push HTTP requests, by result: delivered, retryable, permanent.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30},
		}, []string{"result"}),
		retryDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "retry_delay_seconds",
			Help:    "Delays of the retries scheduled (one per retried outcome).",
			Buckets: prometheus.ExponentialBucketsRange(0.05, 3600, 16),
		}, []string{"type"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "push_deferred_total",
			Help: "Push messages re-queued without an attempt: reason paused (PAUSED subscription), slow (its endpoint is slow and its backlog full), circuit (its circuit is open or half-open) or rate (no request slot soon enough under its maxDeliveryRate).",
		}, []string{"reason"}),
		circuitOpened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "push_circuit_opened_total",
			Help: "Circuits this process opened: reason failures (the breaker's failure rate reached) or gone (410).",
		}, []string{"reason"}),
		circuitClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "push_circuit_closed_total",
			Help: "Circuits this process closed (a probe succeeded, or the breaker was turned off).",
		}),
		circuitProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "push_circuit_probes_total",
			Help: "Probes of open circuits this process sent, by result: succeeded (the circuit closed) or failed (it opened again).",
		}, []string{"result"}),
		dispatcherPause: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "dispatcher_paused",
			Help: "1 while the push dispatcher has stopped taking messages because the database does not answer.",
		}),
		relayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "outbox_relayed_total",
			Help: "Outbox rows the relay handled: sent (broker receipt), failed (broker unreachable: released for a later round), refused (the broker refused the copy: tried again later), given_up (refused for good: a dead letter, or dropped if its subscription is gone).",
		}, []string{"result"}),
		brokerUp: &brokerGauge{desc: prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "broker_connected"),
			"1 while the broker is connected (read at each scrape).", nil, nil)},
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "broker_reconnects_total",
			Help: "Times the broker connection came back after being seen down (sampled every second).",
		}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "http_request_duration_seconds",
			Help:    "HTTP request durations by method, route template and status code.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"method", "route", "status"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.published, m.sends, m.deliveries, m.attempts, m.latency, m.pushRequests, m.retryDelay,
		m.deferred, m.circuitOpened, m.circuitClosed, m.circuitProbes, m.dispatcherPause, m.relayed, m.replayed, m.brokerUp, m.reconnects, m.httpDuration,
	)
	// Outcomes appear at 0 from the start, so rate() and sums over them
	// work before the first of each happens.
	for _, typ := range []string{"push", "pull"} {
		m.replayed.WithLabelValues(typ)
		for _, o := range []string{"delivered", "retried", "dead_lettered", "expired", "refused", "dropped"} {
			m.deliveries.WithLabelValues(typ, o)
		}
	}
	for _, r := range []string{"sent", "failed", "refused", "given_up"} {
		m.relayed.WithLabelValues(r)
	}
	for _, r := range []string{"paused", "slow", "circuit", "rate"} {
		m.deferred.WithLabelValues(r)
	}
	m.circuitOpened.WithLabelValues("failures")
	m.circuitOpened.WithLabelValues("gone")
	m.circuitProbes.WithLabelValues("succeeded")
	m.circuitProbes.WithLabelValues("failed")
	for _, r := range []string{"delivered", "retryable", "permanent"} {
		m.pushRequests.WithLabelValues(r)
	}
	return m
}

// Registry is the registry /metrics serves; cmd registers more collectors on it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format (or OpenMetrics
// when the scraper asks for it).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

func (m *Metrics) room(r string) string {
	if m.roomWide || r == "" {
		return AllRooms
	}
	return r
}

// Published implements publish.Observer.
func (m *Metrics) Published(room string, events int, sends map[string]int) {
	r := m.room(room)
	m.published.WithLabelValues(r).Add(float64(events))
	for typ, n := range sends {
		m.sends.WithLabelValues(r, typ).Add(float64(n))
	}
}

// Replayed implements delivery.Observer.
func (m *Metrics) Replayed(typ string, n int) {
	if n > 0 {
		m.replayed.WithLabelValues(typ).Add(float64(n))
	}
}

// Relayed implements outbox.Observer.
func (m *Metrics) Relayed(result string, n int) {
	if n > 0 {
		m.relayed.WithLabelValues(result).Add(float64(n))
	}
}

// Handled implements push.Observer and pull.Observer: one outcome of one copy
// at attempt; age is the time since publish (used for delivered only).
func (m *Metrics) Handled(typ, outcome string, attempt int, age time.Duration) {
	// The outcome counter goes last: whoever sees it has its details too.
	if outcome != "retried" {
		m.attempts.WithLabelValues(typ, outcome).Observe(float64(attempt))
		if outcome == "delivered" && age > 0 {
			m.latency.WithLabelValues(typ).Observe(age.Seconds())
		}
	}
	m.deliveries.WithLabelValues(typ, outcome).Inc()
}

// RetryScheduled implements push.Observer and pull.Observer.
func (m *Metrics) RetryScheduled(typ string, delay time.Duration) {
	m.retryDelay.WithLabelValues(typ).Observe(delay.Seconds())
}

// PushRequest implements push.Observer.
func (m *Metrics) PushRequest(result string, d time.Duration) {
	m.pushRequests.WithLabelValues(result).Observe(d.Seconds())
}

// Deferred implements push.Observer.
func (m *Metrics) Deferred(reason string) { m.deferred.WithLabelValues(reason).Inc() }

// CircuitOpened implements push.Observer.
func (m *Metrics) CircuitOpened(reason string) { m.circuitOpened.WithLabelValues(reason).Inc() }

// CircuitClosed implements push.Observer.
func (m *Metrics) CircuitClosed() { m.circuitClosed.Inc() }

// CircuitProbe implements push.Observer.
func (m *Metrics) CircuitProbe(succeeded bool) {
	if succeeded {
		m.circuitProbes.WithLabelValues("succeeded").Inc()
	} else {
		m.circuitProbes.WithLabelValues("failed").Inc()
	}
}

// Paused implements push.Observer.
func (m *Metrics) Paused(paused bool) {
	if paused {
		m.dispatcherPause.Set(1)
	} else {
		m.dispatcherPause.Set(0)
	}
}

// Middleware records the duration of every request under its echo route
// template (never the raw path: ids would make a series each) and status.
// It hands a returned error to the error handler itself, so the status
// recorded is the one the client gets.
func (m *Metrics) Middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			if err := next(c); err != nil {
				c.Error(err)
			}
			route := c.Path()
			if route == "" || c.Response().Status == http.StatusNotFound && route == "/*" {
				route = "unmatched"
			}
			m.httpDuration.WithLabelValues(method(c.Request().Method), route, strconv.Itoa(c.Response().Status)).
				Observe(time.Since(start).Seconds())
			return nil
		}
	}
}

// method bounds the method label: a client can send any token as a method.
func method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// Totals are counts since the process started, for the console's dashboard.
type Totals struct {
	// Published is the events accepted.
	Published float64
	// Outcomes counts what became of each copy (push and pull together), by
	// outcome: delivered, retried, dead_lettered, expired, refused, dropped.
	Outcomes map[string]float64
}

// Totals reads the counters of the dashboard from the process's registry.
func (m *Metrics) Totals() Totals {
	t := Totals{Outcomes: map[string]float64{}}
	for _, s := range counterValues(m.published) {
		t.Published += s.value
	}
	for _, s := range counterValues(m.deliveries) {
		t.Outcomes[s.labels["outcome"]] += s.value
	}
	return t
}

type counterSample struct {
	labels map[string]string
	value  float64
}

// counterValues reads every series of a counter vector.
func counterValues(c prometheus.Collector) []counterSample {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var out []counterSample
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil || d.GetCounter() == nil {
			continue
		}
		s := counterSample{labels: map[string]string{}, value: d.GetCounter().GetValue()}
		for _, l := range d.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		out = append(out, s)
	}
	return out
}
