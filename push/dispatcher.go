package push

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/loglimit"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
	"github.com/roomhub/messaging-api/tracing"
)

// Directory finds a subscription with its room (the store is one).
type Directory interface {
	PushTarget(ctx context.Context, roomID, subscriptionID uuid.UUID) (rooms.Room, subscriptions.Subscription, error)
}

// Log stores outcomes (the store is one).
type Log interface {
	Settle(ctx context.Context, s delivery.Settlement) error
	MarkSent(ctx context.Context, ids []uuid.UUID, at time.Time) error
	Release(ctx context.Context, ids []uuid.UUID) error
	// ReleaseParked ends the leases of a subscription's parked copies (see
	// outbox.ParkedOwner).
	outbox.ParkedStore
}

// BatchLog stores many outcomes in one transaction (one fsync instead of
// one per message).
type BatchLog interface {
	SettleAll(ctx context.Context, ss []delivery.Settlement) error
}

// maxCommitBatch bounds the outcomes one transaction stores.
const maxCommitBatch = 128

// parkDeferrals is how many deferrals in a row of one message may wait in
// the outbox (1, 2 and 4 s with the default DeferDelay; see slowDelay);
// longer ones go to the broker's scheduler, so that the outbox's claims
// never step over more than a few seconds' worth of a hanging
// subscription's messages.
const parkDeferrals = 3

// maxSlowDelay caps the delay of a slow subscription's deferred message,
// as PAUSED holds are capped.
const maxSlowDelay = 5 * time.Minute

// longHang is how long an endpoint must have been hanging before its
// messages skip the outbox and wait in the broker's scheduler from their
// first deferral (see slowDelay).
const longHang = 30 * time.Second

// parkedDelay is the longest deferral that is parked in the outbox.
func (p *Dispatcher) parkedDelay() time.Duration { return p.cfg.DeferDelay << (parkDeferrals - 1) }

// slowDelay is how long a slow subscription's message is deferred: DeferDelay
// doubled by each earlier deferral in a row (held), and at least as long as
// the endpoint has been hanging (stuck).
//
//   - Early in a hang (stuck under longHang) the first parkDeferrals
//     deferrals are parked in the outbox, which can bring them back as soon as
//     the endpoint answers quickly again (releaseParked); they last at most
//     parkedDelay (4 s), so that the outbox's claims step over a few seconds'
//     worth of copies at most.
//   - Later deferrals, and every deferral once the endpoint has hung for
//     longHang, go to the broker's scheduler and last as long as the hang so
//     far, up to maxSlowDelay: the longer an endpoint hangs, the fewer times
//     each of its messages comes back to find it still hanging (an hour-long
//     hang cycles its backlog once per maxSlowDelay, not once a minute), and
//     a recovered endpoint waits for its messages about as long as it hung.
//
// The doubling alone stops at a minute. Stretching never takes a deferral
// past halfway to the message's expiry (expiresIn > 0), lest the copy come
// back just as it expires.
func (p *Dispatcher) slowDelay(held int, stuck, expiresIn time.Duration) time.Duration {
	base := min(p.cfg.DeferDelay<<min(held, 10), time.Minute)
	var delay time.Duration
	if held < parkDeferrals && stuck < longHang {
		delay = min(max(base, stuck), p.parkedDelay())
	} else {
		delay = max(base, min(stuck, maxSlowDelay))
	}
	if expiresIn > 0 && delay > base && delay > expiresIn/2 {
		delay = max(base, expiresIn/2)
	}
	return delay
}

// Broker is what the dispatcher needs of the broker.
type Broker interface {
	Send(ctx context.Context, msg broker.Message) error
	Subscribe(ctx context.Context, dest broker.Destination, opts broker.SubscribeOptions) (broker.Subscription, error)
}

// Config tunes the Dispatcher.
type Config struct {
	Queue broker.Destination
	// Workers is how many deliveries run at once.
	Workers int
	// PerSubscription bounds one subscription's concurrent deliveries, and
	// Backlog how many more of its messages may wait in memory while it
	// makes no progress for SlowAfter; past both, messages are deferred.
	PerSubscription int
	Backlog         int
	SlowAfter       time.Duration
	// Prefetch is the broker consumer's window (messages).
	Prefetch int
	// Timeout bounds one HTTP request.
	Timeout time.Duration
	// MaxResponseBody is how much of a response body is read and stored.
	MaxResponseBody int64
	// MaxRetryAfter bounds how far a Retry-After header can push a retry.
	MaxRetryAfter time.Duration
	// DeferDelay is how long a slow subscription's deferred message first
	// waits (see slowDelay); PausedDelay the first wait of a PAUSED
	// subscription's message (it doubles up to 5 min).
	DeferDelay  time.Duration
	PausedDelay time.Duration
	// CacheTTL is how long a subscription's settings are reused.
	CacheTTL time.Duration
	// ShutdownGrace is how long Run lets in-flight deliveries finish after
	// its context ends.
	ShutdownGrace time.Duration
}

// DefaultConfig suits one dispatcher process on two cores.
func DefaultConfig(queue broker.Destination) Config {
	return Config{
		// Prefetch 256: a hanging subscription holds up to 80 messages
		// (PerSubscription running + Backlog waiting) and its deferrals in
		// progress more; with 128 the fast ones beside it had too few slots
		// left once a subscription's slot was freed before the commit.
		// SlowAfter: a quarter of a second marks a hanging endpoint soon
		// enough that its backlog takes few prefetch slots for long, and is
		// still far above what a webhook receiver that answers at once takes
		// (docs/benchmarks.md#what-limits-each-figure).
		Queue: queue, Workers: 64, PerSubscription: 16, Backlog: 64, SlowAfter: 250 * time.Millisecond, Prefetch: 256,
		Timeout: 15 * time.Second, MaxResponseBody: 4 << 10, MaxRetryAfter: time.Hour,
		DeferDelay: time.Second, PausedDelay: 10 * time.Second, CacheTTL: 2 * time.Second,
		ShutdownGrace: 10 * time.Second,
	}
}

// Deps is what a Dispatcher works with.
type Deps struct {
	Broker    Broker
	Directory Directory
	Log       Log
	// Batches stores the outcomes that arrive together in one transaction
	// (the store is one); nil stores each alone.
	Batches BatchLog
	Client  *http.Client
	Now     func() time.Time
	Logger  *slog.Logger
	// Observer sees every outcome; nil: nothing does.
	Observer Observer
	// Ping, when set, is called every PingEvery (a second if 0), and at once
	// after any failure to store an outcome: while it fails, Run takes no
	// message. Nil: Run never stops for the database.
	Ping      func(context.Context) error
	PingEvery time.Duration
	// OnParkedReleased runs after parked copies were released: the process's
	// outbox relay's Notify, so that they go at once rather than at its next
	// poll. Nil: nothing runs.
	OnParkedReleased func()
	// Circuits keeps the subscriptions' circuits and Pace their delivery
	// rates, for every dispatcher process (the store is both). Nil: no
	// circuit breaker, no rate limit.
	Circuits Circuits
	Pace     Pace
	// Tracer makes the spans of each delivery (see tracing.go); nil:
	// tracing is off.
	Tracer trace.TracerProvider
}

// Dispatcher consumes the push queue and delivers to push URLs.
type Dispatcher struct {
	cfg    Config
	broker Broker
	dir    Directory
	log    Log
	client *http.Client
	now    func() time.Time
	logger *slog.Logger
	owner  string
	cache  targetCache
	// policy returns the retry policy of a subscription (retry.For by default).
	policy func(rooms.Room, subscriptions.Subscription) retry.Policy
	// rand draws the jitter: uniform in [0, 1).
	rand func() float64
	// spanRand draws the span id of each attempt's traceparent.
	spanRand func() uint64
	obs      Observer
	gate     *gate
	commit   *outbox.GroupCommit[delivery.Settlement]
	parking  *outbox.Parking
	breakers *breakers // nil: no circuit breaker
	pacer    *pacer    // nil: no rate limit
	// failures caps the lines about failed attempts per subscription.
	failures *loglimit.Limiter[uuid.UUID]
	tracer   trace.Tracer // nil: off
	// processName names the process span of each message.
	processName string
}

// New returns a Dispatcher; Run starts it.
func New(cfg Config, d Deps) *Dispatcher {
	p := &Dispatcher{
		cfg: cfg, broker: d.Broker, dir: d.Directory, log: d.Log, client: d.Client, now: d.Now, logger: d.Logger,
		owner:       "dispatcher-" + uuid.NewString(),
		cache:       targetCache{ttl: cfg.CacheTTL, m: map[uuid.UUID]cachedTarget{}},
		policy:      retry.For,
		rand:        rand.Float64,
		spanRand:    rand.Uint64,
		obs:         d.Observer,
		gate:        newGate(d.Ping, d.PingEvery),
		parking:     outbox.NewParking(d.Log, cfg.DeferDelay, d.OnParkedReleased, d.Now, d.Logger),
		tracer:      tracing.Tracer(d.Tracer, "push"),
		processName: tracing.OpProcess + " " + cfg.Queue.FQQN(),
	}
	if p.obs == nil {
		p.obs = nopObserver{}
	}
	p.failures = loglimit.New(failureLines, failureInterval, failureKeys, p.logSuppressed)
	if d.Circuits != nil {
		// A probe holds the circuit for as long as its request may take.
		p.breakers = newBreakers(d.Circuits, cfg.Timeout+probeMargin, d.Now, d.Logger, p.obs)
	}
	if d.Pace != nil {
		p.pacer = newPacer(d.Pace)
	}
	var all func(context.Context, []delivery.Settlement) error
	if d.Batches != nil {
		all = d.Batches.SettleAll
	}
	p.commit = outbox.NewGroupCommit(maxCommitBatch, all, func(ctx context.Context, s delivery.Settlement) error {
		return p.log.Settle(ctx, s)
	})
	return p
}

// job is one message being handled.
type job struct {
	key uuid.UUID // subscription id
	d   *broker.Delivery
	// finished is set by the scheduler's done (guarded by its lock), which
	// may be called twice: once the request is over, and by the worker.
	finished bool
	// slot is the request slot reserved for the job under its
	// subscription's delivery rate while it sleeps until then.
	slot time.Time
	// span is the job's process span while it is handled (tracing on).
	span trace.Span
}

// Run consumes until ctx is done, then stops taking messages, lets in-flight
// deliveries finish for ShutdownGrace, cancels the rest (the broker
// redelivers what was not acked) and returns.
func (p *Dispatcher) Run(ctx context.Context) error {
	sub, err := p.broker.Subscribe(ctx, p.cfg.Queue, broker.SubscribeOptions{Prefetch: p.cfg.Prefetch})
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", p.cfg.Queue, err)
	}
	defer sub.Close()

	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	sched := newScheduler(p.cfg.PerSubscription, p.cfg.Backlog, p.cfg.SlowAfter, time.Now)
	var wg, watcher sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(workCtx)
	defer func() { stopWatch(); watcher.Wait() }()
	if p.gate.ping != nil {
		watcher.Go(func() { p.gate.watch(watchCtx, p.logger, p.obs) })
	}
	for range max(1, p.cfg.Workers) {
		wg.Go(func() {
			// A job starts only while the database answers: one taken
			// during an outage waits here, unacked, and is not attempted.
			for j := sched.take(); j != nil; j = sched.take() {
				if p.gate.wait(workCtx) {
					if wait := p.handle(workCtx, sched, j); wait > 0 {
						sched.sleep(j, wait) // its turn under the rate limit
						continue
					}
				}
				sched.done(j)
			}
		})
	}
	p.logger.InfoContext(ctx, "push dispatcher consuming", slog.String("queue", p.cfg.Queue.FQQN()), slog.Int("workers", p.cfg.Workers))
	// How often slow subscriptions' backlogs are cut back (see scheduler.shed).
	var shed <-chan time.Time
	if p.cfg.SlowAfter > 0 {
		t := time.NewTicker(max(p.cfg.SlowAfter/4, 10*time.Millisecond))
		defer t.Stop()
		shed = t.C
	}
	sweep := time.NewTicker(failureInterval)
	defer sweep.Stop()

read:
	for {
		// While the database is down nothing is read: the messages stay
		// with the broker (or unacked in the prefetch window), and none is
		// attempted, counted or dead-lettered.
		in, changed := sub.C(), p.gate.downCh()
		if down, up := p.gate.state(); down {
			in, changed = nil, up
		}
		select {
		case <-ctx.Done():
			break read
		case <-changed:
		case <-sweep.C:
			p.failures.Sweep(p.now())
		case <-shed:
			for _, j := range sched.shed() {
				p.deferSlow(workCtx, sched, j)
			}
		case d, ok := <-in:
			if !ok {
				break read
			}
			p.accept(workCtx, sched, d)
		}
	}

	sched.close()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(p.cfg.ShutdownGrace):
		p.logger.Warn("push dispatcher: cancelling deliveries still running after the grace period", slog.Int("pending", sched.pending()))
		cancelWork()
		<-finished
	}
	p.parking.Wait()
	p.failures.Flush()
	p.logger.Info("push dispatcher stopped")
	return nil
}

// accept routes a delivery to the scheduler, or defers it when its
// subscription already has too many messages waiting.
func (p *Dispatcher) accept(ctx context.Context, sched *scheduler, d *broker.Delivery) {
	subID, err := uuid.Parse(d.Headers[message.HeaderSubscriptionID])
	if err != nil {
		// Nothing can deliver or dead-letter a message that names no
		// subscription; it was not sent by this service.
		p.logger.ErrorContext(ctx, "push message without a valid subscription id dropped",
			slog.String("message_id", d.ID), slog.String("correlation_id", d.CorrelationID))
		p.ack(ctx, d)
		return
	}
	j := &job{key: subID, d: d}
	if !sched.add(j) {
		p.deferSlow(ctx, sched, j)
	}
}

// deferSlow re-queues a message of a slow subscription for later, without
// an attempt, for as long as slowDelay says given how long the
// subscription's endpoint has been hanging (scheduler.stuckFor).
func (p *Dispatcher) deferSlow(ctx context.Context, sched *scheduler, j *job) {
	stuck := sched.stuckFor(j.key)
	d := j.d
	held, _ := strconv.Atoi(d.Headers[message.HeaderHeld])
	var expiresIn time.Duration
	if exp := message.ExpiresAt(d); !exp.IsZero() {
		expiresIn = max(time.Nanosecond, exp.Sub(p.now()))
	}
	delay := p.slowDelay(held, stuck, expiresIn)
	sched.deferredFor(j.key, delay)
	go func() {
		if j.span != nil {
			// Taken before, then put to sleep for its turn under a rate.
			ctx = trace.ContextWithSpan(ctx, j.span)
		}
		p.retryUntilDone(ctx, j, func(context.Context) (decision, error) {
			dec := p.requeue(j, delay, "deferred: the subscription is slow and has too many messages in flight", deferSlow)
			j.decided(dec)
			return dec, nil
		})
		j.endProcess()
	}()
}

// Reasons a message is re-queued without an attempt.
const (
	deferPaused  = "paused"
	deferSlow    = "slow"
	deferCircuit = "circuit" // the circuit is open or half-open
	deferRate    = "rate"    // no request slot soon enough under maxDeliveryRate
)

// decision is what one handling of a message settles: made once (the HTTP
// request included) and stored, however often storing must be retried.
type decision struct {
	s        delivery.Settlement
	outcome  string // "" for a deferral
	deferred string // deferPaused, deferSlow, deferCircuit or deferRate
	age      time.Duration
	stored   bool // s is in the database; what is left is the resend and the ack
	// wait, when not 0, decides nothing: the message's request slot under
	// its subscription's delivery rate begins this much later.
	wait time.Duration
	// paced: the subscription has a delivery rate limit.
	paced bool
}

// handle attempts j and settles the outcome, retrying while the database or
// broker fails. j's slot is freed once the attempt is decided, before its
// outcome is stored: a subscription's slot bounds the requests to its
// endpoint, not the group commit its worker waits on afterwards. Held
// through the commit, it capped one subscription at PerSubscription
// outcomes per commit latency.
//
// It returns how long j must wait for its turn under its subscription's
// delivery rate (0 once j is settled): j is then neither attempted nor
// settled, and the caller puts it back to sleep.
func (p *Dispatcher) handle(ctx context.Context, sched *scheduler, j *job) time.Duration {
	wait := p.retryUntilDone(p.startProcess(ctx, j), j, func(ctx context.Context) (decision, error) {
		dec, err := p.deliver(ctx, j)
		if err == nil && dec.wait == 0 {
			j.decided(dec)
			sched.done(j)
			if a := dec.s.Attempt; a.StatusCode != 0 || a.Latency > 0 {
				// A request was made: did it hang (see scheduler.stuckFor)?
				sched.requestEnded(j.key, a.Latency, p.cfg.SlowAfter > 0 && a.Latency >= p.cfg.SlowAfter && (a.StatusCode == 0 || a.StatusCode >= 500))
			}
			// A rate-limited subscription's deferred copies wait for their
			// turn, not for the endpoint to be quick.
			if dec.outcome == delivery.OutcomeDelivered && !dec.paced {
				p.releaseParked(ctx, sched, j, dec.s.Attempt.Latency)
			}
		}
		return dec, err
	})
	if wait == 0 {
		j.endProcess()
	}
	return wait
}

// releaseParked ends the deferral of the subscription's parked copies early
// once it answers quickly again: a delivery that took less than SlowAfter
// while none of the subscription's requests has been running that long.
// Without it, a recovered endpoint's messages would wait out their
// deferrals (up to 4 s each, parkDeferrals of them in a row). Parking
// releases them at most once per DeferDelay per subscription.
func (p *Dispatcher) releaseParked(ctx context.Context, sched *scheduler, j *job, latency time.Duration) {
	if p.cfg.SlowAfter <= 0 || latency >= p.cfg.SlowAfter || !sched.quick(j.key) {
		return
	}
	p.parking.Release(ctx, j.key, j.d.Headers[message.HeaderHeld] != "")
}

// retryUntilDone decides what to do with j once (decide retried until it
// answers) and settles that until it is stored and acked or ctx ends (the
// message then stays unacked and the broker redelivers it after this
// consumer goes away). A failure asks the gate to check the database: while
// it is down nothing is retried, so an outage neither repeats a request
// nor counts as an attempt. A decision to wait (see decision.wait) is
// returned as it is, unsettled.
func (p *Dispatcher) retryUntilDone(ctx context.Context, j *job, decide func(context.Context) (decision, error)) time.Duration {
	var dec *decision
	for wait := 100 * time.Millisecond; ; wait = min(wait*2, 5*time.Second) {
		err := ctx.Err()
		if dec == nil && err == nil {
			var dd decision
			if dd, err = decide(ctx); err == nil {
				if dd.wait > 0 {
					return dd.wait
				}
				dec = &dd
			}
		}
		if dec != nil && err == nil {
			if err = p.settle(ctx, j.d, dec); err == nil {
				return 0
			}
		}
		if ctx.Err() != nil {
			return 0
		}
		p.logger.WarnContext(ctx, "push: could not settle a message; retrying", slog.Any("error", err),
			slog.String("correlation_id", j.d.CorrelationID), slog.String("subscription_id", j.key.String()))
		p.gate.suspect()
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(wait):
		}
		if !p.gate.wait(ctx) {
			return 0
		}
	}
}

// observe reports a stored outcome, before its resend can reach the broker:
// a retry is counted before the attempt it schedules.
func (p *Dispatcher) observe(d *broker.Delivery, dec *decision) {
	switch {
	case dec.deferred != "":
		p.obs.Deferred(dec.deferred)
	case dec.outcome != "":
		p.obs.Handled("push", dec.outcome, d.Attempt, dec.age)
		if dec.outcome == delivery.OutcomeRetried && dec.s.Resend != nil {
			p.obs.RetryScheduled("push", dec.s.Resend.ScheduledDelay)
		}
	}
}

// deliver runs one delivery attempt and decides its outcome; an error means
// nothing was attempted (the subscription could not be looked up).
func (p *Dispatcher) deliver(ctx context.Context, j *job) (decision, error) {
	d := j.d
	ev := message.Decode(d)
	sendID, _ := uuid.Parse(d.Headers[message.HeaderSendID])
	room, sub, err := p.cache.get(ctx, p.dir, ev.RoomID, j.key)
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		return decision{}, err
	}
	now := p.now()
	logAttrs := []any{slog.String("correlation_id", d.CorrelationID), slog.String("event_id", ev.ID.String()),
		slog.String("subscription_id", j.key.String()), slog.Int("attempt", d.Attempt)}

	switch {
	case err != nil || sub.Status == subscriptions.StatusTerminated:
		p.logger.InfoContext(ctx, "push: subscription gone or terminated; message dropped", logAttrs...)
		return decision{outcome: delivery.OutcomeDropped, s: delivery.Settlement{SendID: sendID, Attempt: delivery.Attempt{Status: message.StatusDropped, Error: "subscription terminated or deleted", At: now}}}, nil
	case !ev.ExpiresAt.IsZero() && !now.Before(ev.ExpiresAt):
		p.logger.InfoContext(ctx, "push: expired before delivery; dead-lettered", logAttrs...)
		return decision{outcome: delivery.OutcomeExpired, s: p.deadLetter(delivery.Settlement{SendID: sendID, Attempt: delivery.Attempt{Status: message.StatusExpired, Error: "expired before delivery", At: now}}, ev, d, delivery.ReasonExpired)}, nil
	case sub.Status == subscriptions.StatusPaused:
		held, _ := strconv.Atoi(d.Headers[message.HeaderHeld])
		delay := min(p.cfg.PausedDelay<<min(held, 10), 5*time.Minute)
		return p.requeue(j, delay, "held: the subscription is PAUSED", deferPaused), nil
	}

	// The circuit first: an open one holds the message without taking a
	// request slot. Then the rate: the message waits for its slot (or is
	// deferred). Then, if the circuit's probe is due, this message tries to
	// be it.
	c := p.circuitOf(ctx, j.key, room, sub)
	if c.hold {
		return p.requeue(j, c.delay, c.why, deferCircuit), nil
	}
	paced := sub.MaxDeliveryRate != nil && p.pacer != nil
	if paced {
		wait, later, err := p.pace(ctx, j, *sub.MaxDeliveryRate)
		switch {
		case err != nil:
			return decision{}, err
		case later > 0:
			dec := p.requeue(j, later, fmt.Sprintf("waiting: the subscription's maxDeliveryRate (%g per second) has no request slot free within %v",
				*sub.MaxDeliveryRate, slotHorizon(slotInterval(*sub.MaxDeliveryRate))), deferRate)
			dec.paced = true
			return dec, nil
		case wait > 0:
			return decision{wait: wait}, nil
		}
	}
	if c.probe {
		won, err := p.breakers.claimProbe(ctx, j.key, c.b)
		if err != nil {
			return decision{}, err
		}
		if !won {
			if again := p.circuitOf(ctx, j.key, room, sub); again.hold || again.probe {
				dec := p.requeue(j, max(again.delay, p.cfg.DeferDelay), "held: another message is the circuit's probe", deferCircuit)
				dec.paced = paced
				return dec, nil
			}
			c.probe = false // closed meanwhile
		}
	}

	attemptSpan, traceparent := p.startAttempt(ctx, sub, ev, d.Attempt)
	out := post(ctx, p.client, p.request(sub, ev, d, now, traceparent), p.cfg.MaxResponseBody, p.now)
	endAttempt(attemptSpan, out)
	if ctx.Err() != nil {
		return decision{}, ctx.Err() // shutting down mid-request: leave it unacked
	}
	p.obs.PushRequest(out.Result.String(), out.Latency)
	logAttrs = append(logAttrs, slog.String("traceparent", traceparent), slog.Int("status_code", out.StatusCode))
	failed := attemptFailure{sub: j.key, room: ev.RoomID, event: ev.ID, correlation: d.CorrelationID, traceparent: traceparent, attempt: d.Attempt, out: &out}
	if c.b != nil && out.StatusCode == http.StatusGone && c.settings.Enabled {
		// The endpoint is gone, perhaps for a while: open the circuit and
		// retry the message rather than dead-letter it.
		out.Result = Retryable
	}
	if c.b != nil {
		f := failure{failed: out.Result == Retryable, gone: out.StatusCode == http.StatusGone, code: out.StatusCode, err: storableText([]byte(out.Err))}
		if !c.probe {
			p.breakers.record(ctx, j.key, c.b, c.settings, f)
		} else if p.breakers.probed(ctx, j.key, c.b, c.settings, f) {
			p.parking.Release(ctx, j.key, true) // the messages parked while it was open go at once
		} else if held := p.circuitOf(ctx, j.key, room, sub); held.hold {
			// A failed probe is not an attempt of its message: the circuit
			// is to blame, not the message.
			dec := p.requeue(j, held.delay, "probe failed ("+out.Err+"); "+held.why, deferCircuit)
			dec.s.Attempt.StatusCode, dec.s.Attempt.Latency, dec.s.Attempt.Body = out.StatusCode, out.Latency, out.Body
			dec.paced = paced
			return dec, nil
		}
	}
	at := p.now()
	attempt := delivery.Attempt{StatusCode: out.StatusCode, Latency: out.Latency, Body: out.Body, Error: out.Err, At: at}
	switch out.Result {
	case Delivered:
		attempt.Status = message.StatusDelivered
		p.logger.DebugContext(ctx, "push: delivered", append(logAttrs, slog.String("room_id", ev.RoomID.String()), slog.Duration("latency", out.Latency))...)
		return decision{outcome: delivery.OutcomeDelivered, age: at.Sub(ev.PublishedAt), paced: paced, s: delivery.Settlement{SendID: sendID, Attempt: attempt}}, nil
	case Permanent:
		attempt.Status = message.StatusDeadLettered
		p.logFailure(ctx, failed, 0, delivery.ReasonPermanent)
		return decision{outcome: delivery.OutcomeRefused, s: p.deadLetter(delivery.Settlement{SendID: sendID, Attempt: attempt}, ev, d, delivery.ReasonPermanent)}, nil
	}

	step, ok := p.policy(room, sub).Next(d.Attempt)
	delay := step.Draw(p.rand())
	if !ok {
		attempt.Status = message.StatusDeadLettered
		p.logFailure(ctx, failed, 0, delivery.ReasonExhausted)
		return decision{outcome: delivery.OutcomeDeadLettered, s: p.deadLetter(delivery.Settlement{SendID: sendID, Attempt: attempt}, ev, d, delivery.ReasonExhausted)}, nil
	}
	if out.RetryAfter > delay {
		delay = min(out.RetryAfter, p.cfg.MaxRetryAfter) // raises a delay, never lowers one
	}
	next := at.Add(delay)
	if !ev.ExpiresAt.IsZero() && !next.Before(ev.ExpiresAt) {
		attempt.Status = message.StatusDeadLettered
		attempt.Error += "; would expire before the next attempt"
		p.logFailure(ctx, failed, 0, delivery.ReasonExpired)
		return decision{outcome: delivery.OutcomeExpired, s: p.deadLetter(delivery.Settlement{SendID: sendID, Attempt: attempt}, ev, d, delivery.ReasonExpired)}, nil
	}
	attempt.Status = message.StatusFailed
	attempt.NextAttemptAt = next
	p.logFailure(ctx, failed, delay, "")
	resend := p.newSend(ev, d, j.key, d.Attempt+1, 0, delay, at)
	return decision{outcome: delivery.OutcomeRetried, s: delivery.Settlement{SendID: sendID, Attempt: attempt, Resend: &resend}}, nil
}

// circuitState is what the circuit says of a message (see breakers.admit),
// with what the dispatcher needs to report its outcome.
type circuitState struct {
	verdict
	b        *breaker // nil: no circuit breaker
	settings rooms.Breaker
}

// circuitOf is the subscription's circuit's verdict on one of its messages.
func (p *Dispatcher) circuitOf(ctx context.Context, id uuid.UUID, room rooms.Room, sub subscriptions.Subscription) circuitState {
	if p.breakers == nil {
		return circuitState{}
	}
	c := circuitState{b: p.breakers.get(id, sub.Circuit), settings: sub.Breaker(room)}
	c.verdict = p.breakers.admit(ctx, id, c.b, c.settings, p.cfg.DeferDelay, p.parkedDelay())
	return c
}

// pace finds j's request slot under its subscription's delivery rate: how
// long to wait for it (0: go now), or, when none is free soon enough, how
// long to defer the message (later).
func (p *Dispatcher) pace(ctx context.Context, j *job, rate float64) (wait, later time.Duration, err error) {
	now := p.now()
	if slot := j.slot; !slot.IsZero() {
		if wait := slot.Sub(now); wait > 0 {
			return wait, 0, nil // woken early
		}
		j.slot = time.Time{}
		if now.Sub(slot) <= maxLate {
			return 0, 0, nil
		}
	}
	slot, retry, err := p.pacer.take(ctx, j.key, rate, now)
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("reserve a request slot: %w", err)
	case slot.IsZero():
		return 0, min(max(retry.Sub(now), time.Millisecond), maxSlowDelay), nil
	case slot.After(now):
		j.slot = slot
		return slot.Sub(now), 0, nil
	}
	return 0, 0, nil
}

// requeue decides to republish a message with the same attempt after delay,
// without counting an attempt (message.HeaderHeld counts these; each wait
// doubles), and ack the original.
func (p *Dispatcher) requeue(j *job, delay time.Duration, why, reason string) decision {
	d := j.d
	ev := message.Decode(d)
	sendID, _ := uuid.Parse(d.Headers[message.HeaderSendID])
	now := p.now()
	if !ev.ExpiresAt.IsZero() && !now.Add(delay).Before(ev.ExpiresAt) {
		// Held or deferred past its expiry it could never be delivered.
		return decision{outcome: delivery.OutcomeExpired, s: p.deadLetter(delivery.Settlement{SendID: sendID,
			Attempt: delivery.Attempt{Status: message.StatusExpired, Error: why + "; would expire first", At: now}}, ev, d, delivery.ReasonExpired)}
	}
	held, _ := strconv.Atoi(d.Headers[message.HeaderHeld])
	resend := p.newSend(ev, d, j.key, d.Attempt, held+1, delay, now)
	return decision{deferred: reason, s: delivery.Settlement{
		SendID:  sendID,
		Attempt: delivery.Attempt{Status: delivery.StatusDeferred, Error: why, At: now, NextAttemptAt: now.Add(delay)},
		Resend:  &resend,
	}}
}

func (p *Dispatcher) newSend(ev message.Event, d *broker.Delivery, subID uuid.UUID, attempt, held int, delay time.Duration, now time.Time) message.Send {
	return message.Send{
		ID: uuid.Must(uuid.NewV7()), EventID: ev.ID, RoomID: ev.RoomID, CorrelationID: d.CorrelationID,
		SubscriptionID: subID, SubscriptionType: string(subscriptions.TypePush), Destination: p.cfg.Queue.FQQN(),
		Attempt: attempt, Held: held, ScheduledDelay: delay, CreatedAt: now, Status: message.StatusPending,
	}
}

func (p *Dispatcher) deadLetter(s delivery.Settlement, ev message.Event, d *broker.Delivery, reason string) delivery.Settlement {
	s.DeadLetter = &delivery.DeadLetter{
		ID: uuid.Must(uuid.NewV7()), RoomID: ev.RoomID, SubscriptionID: uuid.MustParse(d.Headers[message.HeaderSubscriptionID]),
		Event: ev, Attempts: d.Attempt, Reason: reason, LastStatusCode: s.Attempt.StatusCode,
		LastError: s.Attempt.Error, CreatedAt: s.Attempt.At,
	}
	return s
}

// settle stores the outcome, sends the next copy if any, then acks. The
// order is what makes a crash give a duplicate rather than a loss. Called
// again after an error, it does not store the outcome twice.
//
// The copy of a slow subscription's deferred message is not sent here (for
// its first parkDeferrals deferrals, while they are short), nor are short
// holds of an open circuit (closing it releases them) and short waits for a
// turn under a delivery rate: its outbox row
// is leased to outbox.ParkedOwner until the deferral ends, and the outbox relay of whichever
// process claims it then sends it; releaseParked may end the lease sooner. A deferral is thus one row in
// the group commit and an ack, where sending it at once took a scheduled
// broker send and a second database write (marking the row sent), which
// slowed a fast endpoint beside a hanging one by a quarter
// (docs/benchmarks.md#what-limits-each-figure). A PAUSED subscription's held
// messages still go to the broker's scheduler: they may be many and wait
// minutes, which the outbox's claims would have to step over.
func (p *Dispatcher) settle(ctx context.Context, d *broker.Delivery, dec *decision) error {
	s := &dec.s
	parked := s.Resend != nil && s.Resend.ScheduledDelay <= p.parkedDelay() &&
		(dec.deferred == deferSlow && s.Resend.Held <= parkDeferrals || dec.deferred == deferCircuit || dec.deferred == deferRate)
	if !dec.stored {
		switch {
		case parked:
			s.Owner, s.Until = outbox.ParkedOwner(s.Resend.SubscriptionID), s.Resend.CreatedAt.Add(s.Resend.ScheduledDelay)
		case s.Resend != nil:
			s.Owner, s.Until = p.owner, p.now().Add(time.Minute)
		}
		// Written with a context of its own: a shutdown must not abort a
		// transaction that other workers' outcomes share.
		if err := p.commit.Commit(context.WithoutCancel(ctx), *s); err != nil {
			return fmt.Errorf("store outcome: %w", err)
		}
		dec.stored = true
		p.observe(d, dec)
		if parked {
			p.parking.Note(s.Resend.SubscriptionID)
		}
	}
	if s.Resend != nil && !parked {
		sentAt := p.now()
		if err := p.send(ctx, *s.Resend, d, sentAt); err != nil {
			// The row is in the outbox: the relay sends it once its claim
			// lapses. The original can be acked all the same.
			p.logger.WarnContext(ctx, "push: resend failed; the outbox relay will send it", slog.Any("error", err),
				slog.String("correlation_id", d.CorrelationID))
			if rerr := p.log.Release(context.WithoutCancel(ctx), []uuid.UUID{s.Resend.ID}); rerr != nil {
				return rerr
			}
		} else if err := p.log.MarkSent(context.WithoutCancel(ctx), []uuid.UUID{s.Resend.ID}, sentAt); err != nil {
			p.logger.WarnContext(ctx, "push: could not mark a resend sent; it may be sent twice", slog.Any("error", err),
				slog.String("correlation_id", d.CorrelationID))
		}
	}
	p.ack(ctx, d)
	return nil
}

func (p *Dispatcher) ack(ctx context.Context, d *broker.Delivery) {
	if err := d.Ack(ctx); err != nil {
		// The connection dropped: the broker redelivers the message, and the
		// outcome stored above makes the duplicate harmless to the log.
		p.logger.WarnContext(ctx, "push: ack failed; the broker will redeliver", slog.Any("error", err), slog.String("correlation_id", d.CorrelationID))
	}
}

// request builds the POST for a delivery, signed per Standard Webhooks;
// traceparent is this attempt's (a new span under the publish's trace).
func (p *Dispatcher) request(sub subscriptions.Subscription, ev message.Event, d *broker.Delivery, now time.Time, traceparent string) Request {
	r := newRequest(sub, pushEvent{
		ID: ev.ID.String(), Type: ev.EventType, Version: ev.Version, CorrelationID: d.CorrelationID, Attempt: d.Attempt,
		Trace: message.Trace{Parent: traceparent, State: ev.Trace.State},
	}, d.Body, now)
	for k, v := range ev.Attributes {
		r.Headers.Set("X-Attr-"+k, v)
	}
	return r
}

// pushEvent is what the headers of a push request say of its event.
type pushEvent struct {
	ID, Type      string
	Version       int
	CorrelationID string
	Attempt       int
	Trace         message.Trace // Parent: this attempt's traceparent
}

// newRequest builds a push request to sub of body, an attempt's or a test
// event's: the endpoint's credential (pushAuth) first, then the headers the
// service sets, which a credential cannot replace
// (subscriptions.ReservedHeader), signed per Standard Webhooks.
func newRequest(sub subscriptions.Subscription, ev pushEvent, body []byte, now time.Time) Request {
	h := http.Header{}
	sub.PushAuth.Apply(h)
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "messaging-api-push/1")
	h.Set("Webhook-Id", ev.ID)
	h.Set("Webhook-Timestamp", strconv.FormatInt(now.Unix(), 10))
	if sig := Sign(sub.Secrets(now), ev.ID, now, body); sig != "" {
		h.Set("Webhook-Signature", sig)
	}
	h.Set("X-Event-Id", ev.ID)
	h.Set("X-Correlation-Id", ev.CorrelationID)
	h.Set("X-Event-Type", ev.Type)
	h.Set("X-Event-Version", strconv.Itoa(ev.Version))
	h.Set("X-Attempt", strconv.Itoa(ev.Attempt))
	h.Set("X-Subscription-Id", sub.ID.String())
	if ev.Trace.Parent != "" {
		h.Set(message.HeaderTraceparent, ev.Trace.Parent)
		if ev.Trace.State != "" {
			h.Set(message.HeaderTracestate, ev.Trace.State)
		}
	}
	return Request{URL: sub.PushURL, Body: body, Headers: h, Secrets: sub.PushAuth.Secrets()}
}

type cachedTarget struct {
	room    rooms.Room
	sub     subscriptions.Subscription
	err     error
	fetched time.Time
}

// targetCache keeps subscriptions for a short while so that a burst of
// messages costs one lookup; a status change takes effect within ttl.
type targetCache struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[uuid.UUID]cachedTarget
}

func (c *targetCache) get(ctx context.Context, dir Directory, roomID, subID uuid.UUID) (rooms.Room, subscriptions.Subscription, error) {
	c.mu.Lock()
	t, ok := c.m[subID]
	c.mu.Unlock()
	if ok && time.Since(t.fetched) < c.ttl {
		return t.room, t.sub, t.err
	}
	room, sub, err := dir.PushTarget(ctx, roomID, subID)
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		return room, sub, err // not cached: a database hiccup
	}
	c.mu.Lock()
	if len(c.m) > 100_000 {
		c.m = map[uuid.UUID]cachedTarget{}
	}
	c.m[subID] = cachedTarget{room: room, sub: sub, err: err, fetched: time.Now()}
	c.mu.Unlock()
	return room, sub, err
}
