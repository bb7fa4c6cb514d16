package publish

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
)

// Headers every copy of an event carries, besides correlation-id, x-attempt,
// expires and persistent (see broker).
const (
	HeaderEventID        = "x-event-id"
	HeaderRoomID         = "x-room-id"
	HeaderSubscriptionID = "x-subscription-id"
	HeaderEventType      = "x-event-type"
	HeaderEventVersion   = "x-event-version"
	HeaderPublishedAt    = "x-published-at" // epoch µs
	HeaderSendID         = "x-send-id"      // the published_messages row of this copy
	// HeaderExpiresAt carries a copy's expiry (epoch ms) instead of the
	// broker's expires: an expired message must become a dead letter, which
	// only the dispatcher or a pull can make; the broker would drop it silently.
	HeaderExpiresAt = "x-expires-at"
	// AttributePrefix prefixes each publisher attribute's header name.
	AttributePrefix = "x-attr-"
)

// Sender is what the relay needs of the broker.
type Sender interface {
	Send(ctx context.Context, msg broker.Message) error
}

// RelayConfig tunes the Relay.
type RelayConfig struct {
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
}

// DefaultRelayConfig suits one API process.
var DefaultRelayConfig = RelayConfig{Batch: 200, Concurrency: 32, Poll: time.Second, Lease: 30 * time.Second, SendTimeout: 10 * time.Second}

// Relay sends the outbox's pending rows to the broker and marks each sent after
// the broker's receipt. It runs in every API process; the store's claim keeps
// processes off each other's rows. A crash between send and mark gives a
// duplicate copy, never a lost one.
type Relay struct {
	store  Store
	broker Sender
	cfg    RelayConfig
	owner  string
	now    func() time.Time
	logger *slog.Logger
	wake   chan struct{}
	obs    RelayObserver

	mu        sync.Mutex
	lastError error

	// Outbox vacuuming (see Vacuumer).
	vacMu      sync.Mutex
	vacDone    int       // rows recorded since the last vacuum
	vacLast    time.Time // when the last vacuum started
	vacRunning bool
	vacOff     bool
}

// Vacuumer is a Store that can clean its outbox of the row versions that
// recorded sends leave behind (PostgreSQL's VACUUM). The claim query walks
// the outbox's index in order, and under a few thousand sends a second
// autovacuum falls behind: the walk then crosses every dead entry (450 ms per
// claim at 200k rows instead of under 1 ms, measured), so the relay vacuums
// after every VacuumEvery recorded rows, at most once per VacuumInterval.
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
	v, ok := r.store.(Vacuumer)
	if !ok || n == 0 {
		return
	}
	r.vacMu.Lock()
	defer r.vacMu.Unlock()
	r.vacDone += n
	if r.vacOff || r.vacRunning || r.vacDone < VacuumEvery || time.Since(r.vacLast) < VacuumInterval {
		return
	}
	r.vacRunning, r.vacDone, r.vacLast = true, 0, time.Now()
	go func() {
		vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		err := v.VacuumOutbox(vctx)
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

// NewRelay returns a relay; Run starts it.
func NewRelay(store Store, b Sender, cfg RelayConfig, now func() time.Time, logger *slog.Logger) *Relay {
	return &Relay{
		store: store, broker: b, cfg: cfg, now: now, logger: logger,
		owner: "relay-" + uuid.NewString(),
		wake:  make(chan struct{}, 1),
		obs:   nopObserver{},
	}
}

// Observe makes o see what each round did; call it before Run.
func (r *Relay) Observe(o RelayObserver) *Relay {
	r.obs = o
	return r
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

// Run relays until ctx is done. It streams: a claimer keeps up to two
// batches of rows claimed (claiming another batch as soon as one is done),
// Concurrency senders send them as they come, and a recorder marks their
// outcomes in batches (whatever finished while the previous batch was
// written), so no send waits for a round to end.
func (r *Relay) Run(ctx context.Context) {
	conc, batch := max(1, r.cfg.Concurrency), max(1, r.cfg.Batch)
	q := &inflight{limit: 2 * batch, freed: make(chan struct{}, 1)}
	work := make(chan Pending, q.limit)
	results := make(chan relayResult, q.limit)
	var senders, recorder sync.WaitGroup
	for range conc {
		senders.Go(func() {
			for p := range work {
				results <- r.send(ctx, p)
			}
		})
	}
	recorder.Go(func() { r.record(ctx, results, q) })
	r.claim(ctx, work, q, batch)
	close(work)
	senders.Wait()
	close(results)
	recorder.Wait()
}

// inflight counts the rows claimed and not yet recorded.
type inflight struct {
	mu    sync.Mutex
	n     int
	limit int
	freed chan struct{} // signalled when the recorder frees rows
}

func (q *inflight) add(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.n += n
}

func (q *inflight) done(n int) {
	q.mu.Lock()
	q.n -= n
	q.mu.Unlock()
	select {
	case q.freed <- struct{}{}:
	default:
	}
}

// room is how many rows may be claimed now: a whole batch, or all that is
// left when nothing is in flight; 0 means wait for freed.
func (q *inflight) room(batch int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	free := q.limit - q.n
	if free >= batch || q.n == 0 {
		return min(free, batch)
	}
	return 0
}

type relayResult struct {
	p   Pending
	err error // nil: sent; broker.ErrExpired: expired; else failed
}

// claim claims pending rows while there are free slots and hands them to the
// senders; it waits for a Notify, the poll interval or a free slot when
// there is nothing to claim or no room for it.
func (r *Relay) claim(ctx context.Context, work chan<- Pending, q *inflight, batch int) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		limit := q.room(batch)
		if limit == 0 {
			// A batch is still being sent: claim the next when it is done.
			select {
			case <-ctx.Done():
				return
			case <-q.freed:
			}
			continue
		}
		pending, err := r.store.ClaimPending(ctx, r.owner, r.now().Add(r.cfg.Lease), limit)
		if err != nil && ctx.Err() == nil {
			r.setError(err)
			r.logger.WarnContext(ctx, "outbox relay: claim failed; retrying", slog.Any("error", err), slog.Duration("retry_in", backoff))
		}
		q.add(len(pending))
		for _, p := range pending {
			work <- p
		}
		wake := r.wake
		wait := r.cfg.Poll
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && !r.failing():
			backoff = 100 * time.Millisecond
			if len(pending) == limit {
				continue // more may be waiting
			}
		default:
			// The database or the broker fails: back off, deaf to Notify,
			// rather than spin on rows that come straight back.
			wait, backoff, wake = backoff, min(backoff*2, 5*time.Second), nil
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

// send sends one row (unless it expired), bounded by SendTimeout.
func (r *Relay) send(ctx context.Context, p Pending) relayResult {
	now := r.now()
	if !p.Event.ExpiresAt.IsZero() && !now.Before(p.Event.ExpiresAt) {
		return relayResult{p: p, err: broker.ErrExpired}
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.SendTimeout)
	defer cancel()
	return relayResult{p: p, err: r.broker.Send(sctx, Message(p, now))}
}

// record writes the outcomes of sends in batches: it takes what has
// finished, writes it, and frees those rows' slots.
func (r *Relay) record(ctx context.Context, results <-chan relayResult, q *inflight) {
	for first := range results {
		batch := []relayResult{first}
	more:
		for len(batch) < r.cfg.Batch {
			select {
			case res, ok := <-results:
				if !ok {
					break more
				}
				batch = append(batch, res)
			default:
				break more
			}
		}
		for err := r.recordBatch(ctx, batch); err != nil; err = r.recordBatch(ctx, batch) {
			// Unrecorded rows stay claimed until their lease ends, then
			// another round sends them again: a duplicate, never a loss.
			r.setError(err)
			r.logger.WarnContext(ctx, "outbox relay: could not record sends; retrying", slog.Any("error", err))
			if ctx.Err() != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		q.done(len(batch))
	}
}

func (r *Relay) recordBatch(ctx context.Context, batch []relayResult) error {
	var (
		sent, failed, expired []uuid.UUID
		firstErr              error
	)
	for _, res := range batch {
		switch {
		case res.err == nil:
			sent = append(sent, res.p.ID)
		case errors.Is(res.err, broker.ErrExpired):
			expired = append(expired, res.p.ID)
			r.logger.InfoContext(ctx, "send expired before it reached the broker", slog.String("send_id", res.p.ID.String()),
				slog.String("correlation_id", res.p.CorrelationID))
		default:
			failed = append(failed, res.p.ID)
			if firstErr == nil {
				firstErr = res.err
			}
			r.logger.DebugContext(ctx, "outbox relay: send failed; released for a later round", slog.Any("error", res.err),
				slog.String("correlation_id", res.p.CorrelationID), slog.String("send_id", res.p.ID.String()))
		}
	}
	// Record outcomes with a context that outlives a shutdown signal: a send
	// the broker confirmed should be marked, or it is sent again on restart.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.store.MarkSent(rctx, sent, r.now()); err != nil {
		return err
	}
	if err := r.store.Complete(rctx, expired, StatusExpired, "expired before the broker accepted it", r.now()); err != nil {
		return err
	}
	if err := r.store.Release(rctx, failed); err != nil {
		return err
	}
	r.obs.Relayed("sent", len(sent))
	r.obs.Relayed("failed", len(failed))
	r.obs.Relayed("expired", len(expired))
	r.setError(firstErr)
	r.maybeVacuum(ctx, len(sent)+len(expired))
	return nil
}

// setError records the latest outcome for Healthy (nil: working).
func (r *Relay) setError(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastError = err
}

// failing reports whether the latest outcome was an error.
func (r *Relay) failing() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastError != nil
}

// Message builds the broker message for a pending send. A scheduled resend
// that waited in the outbox (broker down) keeps its planned time: the delay
// is what is left of it at now.
func Message(p Pending, now time.Time) broker.Message {
	delay := p.ScheduledDelay
	if delay > 0 {
		delay = max(0, p.CreatedAt.Add(p.ScheduledDelay).Sub(now))
	}
	h := map[string]string{
		HeaderEventID:        p.Event.ID.String(),
		HeaderRoomID:         p.Event.RoomID.String(),
		HeaderSubscriptionID: p.SubscriptionID.String(),
		HeaderEventType:      p.Event.EventType,
		HeaderEventVersion:   strconv.Itoa(p.Event.Version),
		HeaderPublishedAt:    strconv.FormatInt(p.Event.PublishedAt.UnixMicro(), 10),
		HeaderSendID:         p.ID.String(),
	}
	for k, v := range p.Event.Attributes {
		h[AttributePrefix+k] = v
	}
	if p.Event.Trace.Parent != "" {
		h[HeaderTraceparent] = p.Event.Trace.Parent
	}
	if p.Event.Trace.State != "" {
		h[HeaderTracestate] = p.Event.Trace.State
	}
	expires := p.Event.ExpiresAt
	if !expires.IsZero() {
		h[HeaderExpiresAt] = strconv.FormatInt(expires.UnixMilli(), 10)
		expires = time.Time{}
	}
	addr, queue := splitFQQN(p.Destination)
	return broker.Message{
		Destination:   broker.Destination{Address: addr, Queue: queue},
		Headers:       h,
		Body:          p.Event.Payload,
		ContentType:   "application/json",
		CorrelationID: p.CorrelationID,
		Attempt:       p.Attempt,
		Delay:         delay,
		Expires:       expires,
	}
}

func splitFQQN(s string) (string, string) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == ':' && s[i+1] == ':' {
			return s[:i], s[i+2:]
		}
	}
	return s, s
}
