package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/loglimit"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/tracing"
)

// Config tunes the Relay.
type Config struct {
	// Batch is how many pending sends one round claims.
	Batch int
	// Concurrency is how many broker sends are in flight at once.
	Concurrency int
	// Poll is how often the relay looks for pending sends it was not told about
	// (left by a crashed process, or by a broker outage).
	Poll time.Duration
	// Lease is how long a claim lasts before another relay may take the row.
	Lease time.Duration
	// SendTimeout bounds one broker send.
	SendTimeout time.Duration
	// HandOff is how many fresh sends may wait in memory for the relay to
	// send them (see Reserve); 0 turns the hand-off off, so that every
	// publish waits for a claim.
	HandOff int
	// MaxRefusals is how often the broker may refuse one copy before the
	// relay gives it up as a dead letter (reason broker_refused); between
	// refusals it waits RefusalBackoff(n). 0 means DefaultMaxRefusals.
	MaxRefusals int
}

// DefaultMaxRefusals gives a refused copy about four minutes (1 s, 2 s, 4 s,
// ... then a minute apart) to become acceptable: long enough for a full
// address to drain or a queue to be created, short enough that a copy the
// broker will never take does not linger.
const DefaultMaxRefusals = 10

// MaxFullWait is how long a copy the broker refuses because its address is
// full may wait for room before it becomes a dead letter (once it has been
// refused MaxRefusals times): a full address drains once its consumers
// catch up, but one nobody reads never does, and its copies must not be
// tried forever.
const MaxFullWait = 24 * time.Hour

// RefusalBackoff is how long the relay waits before it sends a copy the
// broker has refused n+1 times (n from 0) again: 1 s doubling, at most a minute.
func RefusalBackoff(n int) time.Duration {
	if n >= 6 {
		return time.Minute
	}
	return time.Second << max(n, 0)
}

// DefaultConfig suits one API process.
var DefaultConfig = Config{Batch: 200, Concurrency: 32, Poll: time.Second, Lease: 30 * time.Second, SendTimeout: 10 * time.Second, HandOff: 4096, MaxRefusals: DefaultMaxRefusals}

// Relay sends the outbox's pending rows to the broker and marks each sent after
// the broker's receipt. It runs in every API process; the store's claim keeps
// processes off each other's rows. A crash between send and mark gives a
// duplicate copy, never a lost one. A copy the broker refuses (as opposed to
// a broker it cannot reach) is tried again with a growing pause and given up
// as a dead letter in the end (see Refusal), without making the relay
// unhealthy: one poisoned copy must not hold up the others or readiness.
type Relay struct {
	store  Store
	vacuum Vacuumer // nil: left to autovacuum
	broker Sender
	cfg    Config
	owner  string
	now    func() time.Time
	logger *slog.Logger
	wake   chan struct{}
	sem    chan struct{} // a slot per broker send in flight
	obs    Observer
	hand   *handoff     // nil: no hand-off
	tracer trace.Tracer // nil: off

	mu        sync.Mutex
	lastError error // the outcome of the main loop's last round

	// Outbox vacuuming (see Vacuumer).
	vacMu      sync.Mutex
	vacDone    int       // rows recorded since the last vacuum
	vacLast    time.Time // when the last vacuum started
	vacRunning bool
	vacOff     bool
}

// Vacuumer cleans the outbox of the dead row versions that recorded sends
// leave behind (PostgreSQL's VACUUM). Under a few thousand sends a second
// autovacuum falls behind, and every claim walks the outbox's index across
// the dead entries, so the relay vacuums after every VacuumEvery recorded
// rows, at most once per VacuumInterval (docs/operations.md#scaling-out).
type Vacuumer interface {
	VacuumOutbox(ctx context.Context) error
}

// Vacuum tuning.
const (
	VacuumEvery    = 5000
	VacuumInterval = 5 * time.Second
)

// maybeVacuum counts recorded rows and vacuums the outbox in the background
// when enough went by.
func (r *Relay) maybeVacuum(ctx context.Context, n int) {
	if r.vacuum == nil || n == 0 {
		return
	}
	r.vacMu.Lock()
	defer r.vacMu.Unlock()
	r.vacDone += n
	if r.vacOff || r.vacRunning || r.vacDone < VacuumEvery || r.now().Sub(r.vacLast) < VacuumInterval {
		return
	}
	r.vacRunning, r.vacDone, r.vacLast = true, 0, r.now()
	go func() {
		vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		err := r.vacuum.VacuumOutbox(vctx)
		r.vacMu.Lock()
		defer r.vacMu.Unlock()
		r.vacRunning = false
		if err != nil {
			// Most likely the database user does not own the table: leave it
			// to autovacuum (see docs/operations.md).
			r.vacOff = true
			r.logger.WarnContext(ctx, "outbox relay: cannot vacuum the outbox; leaving it to autovacuum", slog.Any("error", err))
		}
	}()
}

// Deps is what a Relay works with.
type Deps struct {
	Store  Store
	Broker Sender
	// Vacuum cleans the outbox (the store on PostgreSQL); nil leaves it to
	// the database's autovacuum.
	Vacuum Vacuumer
	Now    func() time.Time
	Logger *slog.Logger
	// Observer sees what each round did; nil: nothing does.
	Observer Observer
	// Tracer makes a span of each send; nil: tracing is off.
	Tracer trace.TracerProvider
}

// NewRelay returns a relay; Run starts it.
func NewRelay(cfg Config, d Deps) *Relay {
	r := &Relay{
		store: d.Store, vacuum: d.Vacuum, broker: d.Broker, cfg: cfg, now: d.Now, logger: d.Logger,
		owner:  "relay-" + uuid.NewString(),
		wake:   make(chan struct{}, 1),
		sem:    make(chan struct{}, max(1, cfg.Concurrency)),
		obs:    d.Observer,
		tracer: tracing.Tracer(d.Tracer, "outbox"),
	}
	if r.obs == nil {
		r.obs = nopObserver{}
	}
	if cfg.HandOff > 0 {
		r.hand = newHandoff(cfg.HandOff)
		r.hand.lapses = loglimit.New(1, lapseLogInterval, 1, func(s loglimit.Summary[struct{}]) {
			r.logger.Warn("outbox relay: more handed-off sends waited too long to be sent within their lease; released for a claim",
				slog.Int("sends", s.Suppressed), slog.Time("since", s.Since))
		})
	}
	if r.cfg.MaxRefusals <= 0 {
		r.cfg.MaxRefusals = DefaultMaxRefusals
	}
	return r
}

// refusal decides what becomes of copy p, which the broker refused with err
// at now. An expired copy is given up as a dead letter of reason expired
// (as its consumer would have made it), one refused MaxRefusals times as one
// of reason broker_refused; any other is tried again after RefusalBackoff,
// or at its expiry when that is sooner. A refusal because the address is
// full (broker.ErrFull) is back-pressure, not a verdict on the copy: it
// ends the copy only once the copy has waited MaxFullWait. ErrExpired (the
// broker would drop the copy before its delay ends) counts as expired.
func (r *Relay) refusal(p Pending, err error, now time.Time) Refusal {
	f := Refusal{Pending: p, Error: err.Error(), At: now}
	exp := p.Event.ExpiresAt
	full := errors.Is(err, broker.ErrFull)
	switch {
	case errors.Is(err, broker.ErrExpired) || (!exp.IsZero() && !exp.After(now)):
		f.Status, f.Reason = message.StatusExpired, delivery.ReasonExpired
	case p.Refusals+1 >= r.cfg.MaxRefusals && (!full || now.Sub(p.CreatedAt) >= MaxFullWait):
		f.Status, f.Reason = message.StatusDeadLettered, delivery.ReasonBrokerRefused
		f.Error = fmt.Sprintf("refused %d times; the last time: %v", p.Refusals+1, err)
	default:
		f.RetryAt = now.Add(RefusalBackoff(p.Refusals))
		if !exp.IsZero() && exp.Before(f.RetryAt) {
			f.RetryAt = exp
		}
	}
	return f
}

// refused reports whether err is the broker's final word on a copy, as
// opposed to a failure to reach it.
func refused(err error) bool {
	return errors.Is(err, broker.ErrRefused) || errors.Is(err, broker.ErrExpired)
}

// recordRefusals stores refusals and logs and counts them.
func (r *Relay) recordRefusals(ctx context.Context, refusals []Refusal) error {
	if len(refusals) == 0 {
		return nil
	}
	if err := r.store.Refuse(ctx, refusals); err != nil {
		return err
	}
	gaveUp := 0
	for _, f := range refusals {
		attrs := []any{slog.String("send_id", f.ID.String()), slog.String("correlation_id", f.CorrelationID),
			slog.String("subscription_id", f.SubscriptionID.String()), slog.String("destination", f.Destination), slog.String("error", f.Error)}
		if f.RetryAt.IsZero() {
			gaveUp++
			r.logger.WarnContext(ctx, "outbox relay: the broker refused a copy; given up (a dead letter, or dropped if its subscription is gone)",
				append(attrs, slog.String("reason", f.Reason))...)
			continue
		}
		r.logger.WarnContext(ctx, "outbox relay: the broker refused a copy; trying again later",
			append(attrs, slog.Int("refusals", f.Refusals+1), slog.Time("retry_at", f.RetryAt))...)
	}
	r.obs.Relayed("refused", len(refusals)-gaveUp)
	r.obs.Relayed("given_up", gaveUp)
	return nil
}

// Notify wakes the relay at once; it never blocks.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Healthy reports whether the last round worked (or no round failed yet).
func (r *Relay) Healthy() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastError
}

// Run relays until ctx is done: handed-off sends as they come, the rest in
// rounds of claims, one at a time: several at once raised latency and did not
// drain a backlog faster (docs/benchmarks.md#tried-and-not-adopted). It
// returns when the outcomes of the last sends are recorded.
func (r *Relay) Run(ctx context.Context) {
	if r.hand == nil {
		r.loop(ctx)
		return
	}
	var wg sync.WaitGroup
	streamDone := make(chan struct{})
	r.setHandOff(true) // before stream starts: it turns the hand-off off when ctx ends
	wg.Go(func() {
		defer close(streamDone)
		r.stream(ctx)
	})
	wg.Go(func() { r.record(ctx, streamDone) })
	r.loop(ctx)
	wg.Wait()
}

// loop runs rounds one after another until ctx is done.
func (r *Relay) loop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		n, err := r.relayOnce(ctx)
		r.mu.Lock()
		r.lastError = err
		r.mu.Unlock()
		wait, wake := r.cfg.Poll, r.wake
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// Deaf to Notify while the database or broker fails, so that
			// publishes do not make the relay spin on rows that come back.
			r.logger.WarnContext(ctx, "outbox relay round failed; retrying", slog.Any("error", err), slog.Duration("retry_in", backoff))
			wait, wake = backoff, nil
			backoff = min(backoff*2, 5*time.Second)
		case n >= r.cfg.Batch:
			backoff = 100 * time.Millisecond
			continue // more are waiting
		default:
			backoff = 100 * time.Millisecond
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// relayOnce claims a batch, sends it and records the outcome. It returns how
// many rows it claimed; an error means some could not be sent.
func (r *Relay) relayOnce(ctx context.Context) (int, error) {
	start := time.Now()
	leaseEnd := r.now().Add(r.cfg.Lease)
	pending, err := r.store.ClaimPending(ctx, r.owner, leaseEnd, r.cfg.Batch)
	if err != nil || len(pending) == 0 {
		return 0, err
	}
	claimed := time.Now()
	now := r.now()
	var (
		mu           sync.Mutex
		sent, failed []uuid.UUID
		refusals     []Refusal
		firstErr     error
		lapsing      int // not sent: the lease would lapse first
		wg           sync.WaitGroup
		sem          = r.sem
	)
	// A copy whose event has expired is sent all the same: its consumer
	// (the push dispatcher or a pull) makes it a dead letter, as it does
	// with one that expires in the queue. Completing it here left it
	// `expired` with no dead letter (a parked deferral whose lease ended
	// just before its expiry, or any copy held up by a broker outage).
	for _, p := range pending {
		sem <- struct{}{}
		if r.now().Add(r.cfg.SendTimeout).After(leaseEnd) {
			// The broker is so slow that this send could outlive the lease,
			// and another relay may then claim and send the row too: leave
			// it leased, for whoever claims it after the lease.
			<-sem
			mu.Lock()
			lapsing++
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(ctx, r.cfg.SendTimeout)
			err := r.send(sctx, p, now)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if refused(err) {
				// The broker's answer, not an outage: the relay is healthy.
				refusals = append(refusals, r.refusal(p, err, r.now()))
				return
			}
			if err != nil {
				r.logger.DebugContext(ctx, "outbox relay: send failed; released for a later round", slog.Any("error", err),
					slog.String("correlation_id", p.CorrelationID), slog.String("send_id", p.ID.String()))
				failed = append(failed, p.ID)
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			sent = append(sent, p.ID)
		}()
	}
	wg.Wait()
	sentAll := time.Now()
	// Record outcomes with a context that outlives a shutdown signal: a send
	// the broker confirmed should be marked, or it is sent again on restart.
	// Each write is retried while the database fails, until the rows'
	// lease ends: given up at once, a blip left the sent rows to another
	// relay after the lease (30 s later, and sent twice).
	if err := r.retryRecord(ctx, leaseEnd, func(rctx context.Context) error { return r.store.MarkSent(rctx, sent, now) }); err != nil {
		return len(pending), err
	}
	if err := r.retryRecord(ctx, leaseEnd, func(rctx context.Context) error { return r.recordRefusals(rctx, refusals) }); err != nil {
		return len(pending), err
	}
	if err := r.retryRecord(ctx, leaseEnd, func(rctx context.Context) error { return r.store.Release(rctx, failed) }); err != nil {
		return len(pending), err
	}
	if len(sent) > 0 && r.hand != nil {
		r.setDown(false) // the broker takes sends again: hand off again
	}
	r.obs.Relayed("sent", len(sent))
	r.obs.Relayed("failed", len(failed))
	r.maybeVacuum(ctx, len(sent)+len(refusals))
	if r.logger.Enabled(ctx, slog.LevelDebug) {
		r.logger.DebugContext(ctx, "outbox relay round", slog.Int("claimed", len(pending)), slog.Int("sent", len(sent)),
			slog.Duration("claim", claimed.Sub(start)), slog.Duration("send", sentAll.Sub(claimed)), slog.Duration("record", time.Since(sentAll)))
	}
	if lapsing > 0 && firstErr == nil {
		firstErr = fmt.Errorf("%d sends left for a later claim: the broker is too slow to send them within their %s lease", lapsing, r.cfg.Lease)
	}
	return len(pending), firstErr
}

// send sends copy p to the broker, under a span of its own when tracing is on.
func (r *Relay) send(ctx context.Context, p Pending, now time.Time) error {
	return tracing.Send(ctx, r.tracer, r.broker, p.Send, p.Event, message.Encode(p.Send, p.Event, now))
}

// retryRecord runs write, which records outcomes of rows leased until
// until, with a context that outlives a shutdown signal (a send the broker
// confirmed should be marked, or it is sent again). While it fails it is
// tried again, 100 ms doubling to 2 s apart, as long as the lease lasts
// (and for 10 s at most once ctx is done); its last error is returned.
func (r *Relay) retryRecord(ctx context.Context, until time.Time, write func(context.Context) error) error {
	giveUp := until
	backoff := 100 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := write(wctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			if stop := r.now().Add(10 * time.Second); giveUp.After(stop) {
				giveUp = stop
			}
		}
		if r.now().Add(backoff).After(giveUp) {
			return err
		}
		r.logger.WarnContext(ctx, "outbox relay: recording a round's outcomes failed; retrying", slog.Any("error", err), slog.Duration("retry_in", backoff))
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}
