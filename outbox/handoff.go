package outbox

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/loglimit"
)

// The hand-off: a publish stores its sends leased to this process's relay and
// passes them over in memory, and the relay sends each at once, then records
// the receipts of whatever finished meanwhile in one write. Without it every
// publish waits for the round in flight and for a claim of its own (a round
// trip and a lease write) before its sends start. Claims remain for what the
// hand-off does not take: rows left by a crash or a broker outage, or a
// publish that found the hand-off full.

// handed is one send in the hand-off queue, with the end of its lease.
type handed struct {
	p     Pending
	until time.Time
}

// handoff is the relay's in-memory queue of fresh sends and the record of
// their outcomes.
type handoff struct {
	mu   sync.Mutex
	free int  // places not reserved
	on   bool // the relay runs and takes hand-offs
	down bool // the last handed-off send failed: publishes go through claims
	q    chan handed

	// Outcomes waiting to be recorded.
	recMu    sync.Mutex
	sent     []uuid.UUID
	sentFrom time.Time // when the first of sent began (see Store.MarkSent)
	failed   []uuid.UUID
	refused  []Refusal
	recWake  chan struct{}
	inflight sync.WaitGroup

	// Sends released because they waited too long in the queue come in
	// floods when the broker is slow: one line per lapseLogInterval, then
	// a count.
	lapses *loglimit.Limiter[struct{}]
}

// lapseLogInterval is how often a hand-off whose sends wait too long for
// their lease says so, with a count of those it did not log.
const lapseLogInterval = 10 * time.Second

func newHandoff(n int) *handoff {
	return &handoff{free: n, q: make(chan handed, n), recWake: make(chan struct{}, 1)}
}

// Reserve takes n places in the hand-off queue and returns the lease to
// store the sends with, or false when the queue is full, the hand-off is
// off, the relay is not running, or the broker failed the last handed-off
// send (then claims, which back off, carry the load).
func (r *Relay) Reserve(n int) (Lease, bool) {
	h := r.hand
	if h == nil {
		return Lease{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.on || h.down || n > h.free {
		return Lease{}, false
	}
	h.free -= n
	return Lease{Owner: r.owner, Until: r.now().Add(r.cfg.Lease)}, true
}

// Unreserve gives back places of a publish that failed.
func (r *Relay) Unreserve(n int) {
	r.hand.mu.Lock()
	r.hand.free += n
	r.hand.mu.Unlock()
}

// HandOff takes the sends of a committed publish, stored with lease. It
// never blocks: their places were reserved. Should the relay have stopped
// meanwhile (a shutdown that outlasted its grace), it releases them at once,
// so that the next claim takes them instead of waiting for the lease.
func (r *Relay) HandOff(lease Lease, p []Pending) {
	h := r.hand
	h.mu.Lock()
	if h.on {
		for _, x := range p {
			h.q <- handed{p: x, until: lease.Until}
		}
		h.mu.Unlock()
		return
	}
	h.free += len(p)
	h.mu.Unlock()
	ids := make([]uuid.UUID, len(p))
	for i, x := range p {
		ids[i] = x.ID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.store.Release(ctx, ids); err != nil {
		r.logger.Warn("outbox relay: could not release sends handed off after it stopped; they wait for their lease",
			slog.Any("error", err), slog.Int("sends", len(ids)))
	}
}

// setHandOff turns the hand-off on or off (off: Reserve fails).
func (r *Relay) setHandOff(on bool) {
	r.hand.mu.Lock()
	r.hand.on = on
	r.hand.mu.Unlock()
}

// setDown records whether the broker failed the last handed-off send.
func (r *Relay) setDown(down bool) {
	r.hand.mu.Lock()
	r.hand.down = down
	r.hand.mu.Unlock()
}

// stream sends handed-off sends until ctx is done, then gives the leases of
// those it did not send back, so that a restart claims them at once.
func (r *Relay) stream(ctx context.Context) {
	h := r.hand
	for {
		select {
		case <-ctx.Done():
			r.setHandOff(false)
			var left []uuid.UUID
		drain:
			for {
				select {
				case x := <-h.q:
					left = append(left, x.p.ID)
				default:
					break drain
				}
			}
			h.recMu.Lock()
			h.failed = append(h.failed, left...)
			h.recMu.Unlock()
			return
		case x := <-h.q:
			h.mu.Lock()
			h.free++
			h.mu.Unlock()
			r.streamOne(ctx, x)
		}
	}
}

// streamOne sends one handed-off send.
func (r *Relay) streamOne(ctx context.Context, x handed) {
	h := r.hand
	now := r.now() // an expired event's copy is sent too (see relayOnce)
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		r.recordLater(func() { h.failed = append(h.failed, x.p.ID) })
		return
	}
	if r.now().Add(r.cfg.SendTimeout).After(x.until) {
		// The queue waited so long that the send could outlive its lease
		// (and another relay could claim and send it too): release it for
		// a claim, which leases it afresh.
		<-r.sem
		if h.lapses.Allow(struct{}{}, r.now()) {
			r.logger.WarnContext(ctx, "outbox relay: a handed-off send waited too long to be sent within its lease; released for a claim "+
				"(a hand-off queue longer than the broker sends within a lease: see OUTBOX_HANDOFF)",
				slog.String("send_id", x.p.ID.String()), slog.Duration("lease", r.cfg.Lease))
		}
		r.recordLater(func() { h.failed = append(h.failed, x.p.ID) })
		return
	}
	h.inflight.Add(1)
	go func() {
		defer h.inflight.Done()
		defer func() { <-r.sem }()
		// Not cancelled by a shutdown: a send cut off mid-way may have
		// reached the broker, and would then go out twice.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.SendTimeout)
		err := r.send(sctx, x.p, now)
		cancel()
		switch {
		case refused(err):
			// The broker's answer, not an outage: the hand-off stays on.
			f := r.refusal(x.p, err, r.now())
			r.recordLater(func() { h.refused = append(h.refused, f) })
		case err != nil:
			r.setDown(true)
			r.logger.DebugContext(ctx, "outbox relay: handed-off send failed; released for a claim", slog.Any("error", err),
				slog.String("correlation_id", x.p.CorrelationID), slog.String("send_id", x.p.ID.String()))
			r.recordLater(func() { h.failed = append(h.failed, x.p.ID) })
		default:
			r.setDown(false)
			r.recordLater(func() { h.addSent(now, x.p.ID) })
		}
	}()
}

// addSent adds sends that began at from to those waiting to be recorded;
// the caller holds recMu.
func (h *handoff) addSent(from time.Time, ids ...uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	if len(h.sent) == 0 || from.Before(h.sentFrom) {
		h.sentFrom = from
	}
	h.sent = append(h.sent, ids...)
}

// recordLater adds an outcome under the record lock and wakes the recorder.
func (r *Relay) recordLater(add func()) {
	r.hand.recMu.Lock()
	add()
	r.hand.recMu.Unlock()
	select {
	case r.hand.recWake <- struct{}{}:
	default:
	}
}

// record writes the outcomes of handed-off sends as they come: each write
// takes all that finished while the one before ran (a group commit). When
// ctx is done it waits for the sends in flight and writes the rest. It is
// not a GroupCommit: no send waits for its outcome to be written, a failed
// write keeps its outcomes for the next one, and it lingers to gather them.
func (r *Relay) record(ctx context.Context, streamDone <-chan struct{}) {
	h := r.hand
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-h.recWake:
		case <-streamDone:
			h.inflight.Wait()
			h.lapses.Flush()
			if err := r.flush(ctx); err != nil {
				r.logger.WarnContext(ctx, "outbox relay: could not record the last handed-off sends; sent ones may go out again after their lease",
					slog.Any("error", err))
			}
			return
		}
		r.linger(streamDone)
		if err := r.flush(ctx); err != nil {
			r.logger.WarnContext(ctx, "outbox relay: recording handed-off sends failed; retrying", slog.Any("error", err), slog.Duration("retry_in", backoff))
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-streamDone:
				t.Stop()
			}
			backoff = min(backoff*2, 5*time.Second)
			select {
			case h.recWake <- struct{}{}:
			default:
			}
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// recordLinger is how long the recorder gathers outcomes before it writes
// them, unless a batch's worth came sooner. Recording a receipt is not on
// any delivery's path (only a lease lapsing before it would matter), and
// writing as soon as each send finished cost one statement per 1–2 sends.
const recordLinger = 20 * time.Millisecond

// linger waits up to recordLinger for a batch of outcomes to gather.
func (r *Relay) linger(streamDone <-chan struct{}) {
	h := r.hand
	t := time.NewTimer(recordLinger)
	defer t.Stop()
	for {
		h.recMu.Lock()
		n := len(h.sent) + len(h.failed) + len(h.refused)
		h.recMu.Unlock()
		if n >= r.cfg.Batch {
			return
		}
		select {
		case <-t.C:
			return
		case <-streamDone:
			return
		case <-h.recWake:
		}
	}
}

// flush records the outcomes gathered so far; on failure they stay for the
// next flush.
func (r *Relay) flush(ctx context.Context) error {
	h := r.hand
	// The count of lapsed sends not logged comes with a later outcome's
	// write, once its window ended (a lapse is itself an outcome).
	h.lapses.Sweep(r.now())
	h.recMu.Lock()
	sent, sentFrom, failed, refusals := h.sent, h.sentFrom, h.failed, h.refused
	h.sent, h.failed, h.refused = nil, nil, nil
	h.recMu.Unlock()
	if len(sent)+len(failed)+len(refusals) == 0 {
		return nil
	}
	recorded := len(sent) + len(refusals)
	start := time.Now()
	// As in a round: a confirmed send should be marked even during shutdown.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := r.store.MarkSent(rctx, sent, sentFrom)
	if err == nil {
		r.obs.Relayed("sent", len(sent))
		sent = nil
		err = r.recordRefusals(rctx, refusals)
	}
	if err == nil {
		refusals = nil
		err = r.store.Release(rctx, failed)
	}
	if err == nil {
		r.obs.Relayed("failed", len(failed))
		if len(failed) > 0 {
			r.Notify() // a claim takes them (and backs off while the broker fails)
		}
		failed = nil
	}
	if err != nil {
		h.recMu.Lock()
		h.addSent(sentFrom, sent...)
		h.failed, h.refused = append(h.failed, failed...), append(h.refused, refusals...)
		h.recMu.Unlock()
		return err
	}
	r.maybeVacuum(ctx, recorded)
	if r.logger.Enabled(ctx, slog.LevelDebug) {
		r.logger.DebugContext(ctx, "outbox relay: handed-off sends recorded", slog.Duration("record", time.Since(start)))
	}
	return nil
}
