package push

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// Circuits stores the circuits of PUSH subscriptions, which every
// dispatcher process shares (the store is one). A circuit is read with its
// subscription (Directory.PushTarget); it changes only here.
type Circuits interface {
	// Circuit reads the subscription's circuit.
	Circuit(ctx context.Context, subscription uuid.UUID) (subscriptions.Circuit, error)
	// SwapCircuit stores c, with version c.Version, if the stored circuit's
	// version is still c.Version-1; false when another process (or a reset)
	// changed it first.
	SwapCircuit(ctx context.Context, subscription uuid.UUID, c subscriptions.Circuit) (bool, error)
}

// probeMargin is how much later than the probe the held messages of an open
// circuit come back, but for one per process (the carrier, which comes back
// on time to be the probe): the probe has answered by then, so they find the
// circuit closed, or open again with a longer cool-down, and are held once
// per probe rather than twice.
const probeMargin = 2 * time.Second

// breakers is this process's view of the circuits: the state each had when
// last read or changed here, and the outcomes of the attempts made here
// while it was closed. Counting them costs no database round trip; only a
// change of state is written (and read back when another process changed it
// first).
type breakers struct {
	store    Circuits
	now      func() time.Time
	logger   *slog.Logger
	obs      Observer
	probeFor time.Duration // how long a probe holds a half-open circuit

	mu sync.Mutex
	m  map[uuid.UUID]*breaker
}

type breaker struct {
	mu      sync.Mutex
	circuit subscriptions.Circuit
	// window holds the outcomes (true: failed) of the attempts made here
	// since circuit.Version, the last len(window) of them; next is where the
	// next goes, n how many it holds, failed how many of those failed.
	window         []bool
	next, n, fails int
	// carrier is the version of the open circuit for which a held message
	// was sent back to come at the probe time (see probeMargin).
	carrier int64
}

func newBreakers(store Circuits, probeFor time.Duration, now func() time.Time, logger *slog.Logger, obs Observer) *breakers {
	return &breakers{store: store, now: now, logger: logger, obs: obs, probeFor: probeFor, m: map[uuid.UUID]*breaker{}}
}

// get is the breaker of subscription id, up to date with c (the circuit as
// last read with the subscription) when c is newer than what it knows.
func (bs *breakers) get(id uuid.UUID, c subscriptions.Circuit) *breaker {
	bs.mu.Lock()
	b, ok := bs.m[id]
	if !ok {
		if len(bs.m) >= 100_000 {
			clear(bs.m) // deleted subscriptions' breakers go; the others are read again
		}
		b = &breaker{circuit: subscriptions.Circuit{State: subscriptions.CircuitClosed, Version: -1}}
		bs.m[id] = b
	}
	bs.mu.Unlock()
	b.mu.Lock()
	b.adopt(c)
	b.mu.Unlock()
	return b
}

// adopt takes c if it is newer than what b knows; a new version starts a new
// count. Called with mu held.
func (b *breaker) adopt(c subscriptions.Circuit) {
	if c.Version <= b.circuit.Version {
		return
	}
	if c.State == "" {
		c.State = subscriptions.CircuitClosed
	}
	b.circuit = c
	b.next, b.n, b.fails = 0, 0, 0
}

// verdict is what the circuit says of a message about to be attempted.
type verdict struct {
	// hold: do not attempt it; hold it for delay, saying why.
	hold  bool
	delay time.Duration
	why   string
	// probe: it may be the probe of an open circuit, if claimProbe wins.
	probe bool
}

// admit says whether a message of the subscription goes now. A closed
// circuit lets everything through (what a disabled breaker also does, after
// closing the circuit); an open one holds messages until the probe is due,
// and then offers each as the probe; a half-open one holds them until its
// probe has answered.
func (bs *breakers) admit(ctx context.Context, id uuid.UUID, b *breaker, settings rooms.Breaker, minHold, maxParked time.Duration) verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, now := b.circuit, bs.now()
	switch {
	case c.Closed():
		return verdict{}
	case !settings.Enabled:
		bs.closeLocked(ctx, id, b, "the circuit breaker is turned off")
		return verdict{}
	case !now.Before(c.ProbeAt):
		return verdict{probe: true} // open and due, or a probe that never answered
	case c.State == subscriptions.CircuitHalfOpen:
		// The probe answers within PUSH_TIMEOUT: wait in the outbox, from
		// which closing the circuit releases the message at once.
		return verdict{hold: true, delay: min(max(c.ProbeAt.Sub(now), minHold), maxParked),
			why: "held: the circuit is half-open, waiting for its probe (" + c.LastError + ")"}
	}
	delay := c.ProbeAt.Sub(now)
	if b.carrier == c.Version {
		delay += probeMargin
	} else {
		b.carrier = c.Version
	}
	return verdict{hold: true, delay: min(delay, maxSlowDelay),
		why: fmt.Sprintf("held: the circuit is open (%s); next probe at %s", c.LastError, c.ProbeAt.UTC().Format(time.RFC3339))}
}

// claimProbe makes the caller's message the probe of an open circuit whose
// probe is due: the circuit becomes half-open for every process. False when
// another message (of this process or another) is the probe.
func (bs *breakers) claimProbe(ctx context.Context, id uuid.UUID, b *breaker) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, now := b.circuit, bs.now()
	if c.Closed() {
		return true, nil // closed meanwhile: no probe needed, the message just goes
	}
	if now.Before(c.ProbeAt) {
		return false, nil
	}
	next := c
	next.State, next.ProbeAt, next.Version = subscriptions.CircuitHalfOpen, now.Add(bs.probeFor), c.Version+1
	won, err := bs.swap(ctx, id, b, next)
	if err != nil || !won {
		return false, err
	}
	bs.logger.DebugContext(ctx, "push: circuit half-open: a probe goes", slog.String("subscription_id", id.String()))
	return true, nil
}

// swap stores next (next.Version = the known version + 1) and adopts it; when
// another process changed the circuit first, it reads and adopts that
// instead. Called with b.mu held.
func (bs *breakers) swap(ctx context.Context, id uuid.UUID, b *breaker, next subscriptions.Circuit) (bool, error) {
	won, err := bs.store.SwapCircuit(ctx, id, next)
	if err != nil {
		return false, fmt.Errorf("store the circuit of %s: %w", id, err)
	}
	if won {
		b.adopt(next)
		return true, nil
	}
	c, err := bs.store.Circuit(ctx, id)
	if err != nil {
		return false, fmt.Errorf("read the circuit of %s: %w", id, err)
	}
	b.adopt(c)
	return false, nil
}

// failure is how an attempt's outcome counts against the circuit.
type failure struct {
	failed bool
	gone   bool // 410 Gone: the circuit opens at once
	code   int
	err    string
}

// record counts the outcome of an attempt made while the circuit was
// closed, and opens it when the breaker's threshold is reached or the
// endpoint is gone. Outcomes of attempts that were under way when the
// circuit opened are not counted.
func (bs *breakers) record(ctx context.Context, id uuid.UUID, b *breaker, settings rooms.Breaker, f failure) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !settings.Enabled || !b.circuit.Closed() {
		return
	}
	if len(b.window) != settings.Window {
		b.window = make([]bool, settings.Window)
		b.next, b.n, b.fails = 0, 0, 0
	}
	if b.n == len(b.window) && b.window[b.next] {
		b.fails--
	}
	b.window[b.next] = f.failed
	b.next = (b.next + 1) % len(b.window)
	b.n = min(b.n+1, len(b.window))
	if f.failed {
		b.fails++
	}
	tripped := b.n >= settings.MinimumAttempts && float64(b.fails) >= math.Ceil(settings.FailureRate*float64(b.n)-1e-9)
	if !f.gone && (!f.failed || !tripped) {
		return
	}
	now := bs.now()
	cooldown := rooms.CooldownOf(settings.Cooldown)
	next := subscriptions.Circuit{
		State: subscriptions.CircuitOpen, Version: b.circuit.Version + 1, OpenedAt: now, Cooldown: cooldown,
		ProbeAt: now.Add(cooldown), LastError: f.err, LastStatusCode: f.code,
	}
	attempts, fails := b.n, b.fails
	won, err := bs.swap(ctx, id, b, next)
	switch {
	case err != nil:
		// This process holds the messages all the same; its probe (a
		// change from the stored version) tells the others.
		bs.logger.WarnContext(ctx, "push: could not store an opened circuit; holding this process's messages all the same",
			slog.String("subscription_id", id.String()), slog.Any("error", err))
		next.Version = b.circuit.Version
		b.circuit, b.next, b.n, b.fails = next, 0, 0, 0
	case !won:
		return // another process changed it first: its state is adopted
	}
	reason := "failures"
	if f.gone {
		reason = "gone"
	}
	bs.obs.CircuitOpened(reason)
	bs.logger.WarnContext(ctx, "push: circuit opened; the subscription's messages are held until a probe succeeds",
		slog.String("subscription_id", id.String()), slog.String("reason", reason), slog.Int("failed", fails),
		slog.Int("attempts", attempts), slog.String("last_error", f.err), slog.Int("status_code", f.code),
		slog.Duration("cooldown", cooldown))
}

// probed records the outcome of the probe: an answer that is not a failure
// (2xx, or a refusal of that one message) closes the circuit; a failure
// opens it again with the cool-down doubled, up to the cap. It reports
// whether the circuit closed.
func (bs *breakers) probed(ctx context.Context, id uuid.UUID, b *breaker, settings rooms.Breaker, f failure) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	bs.obs.CircuitProbe(!f.failed)
	if !f.failed {
		return bs.closeLocked(ctx, id, b, "a probe succeeded")
	}
	now := bs.now()
	c := b.circuit
	cooldown := min(max(2*c.Cooldown, rooms.CooldownOf(settings.Cooldown)), rooms.CooldownOf(settings.MaxCooldown))
	next := subscriptions.Circuit{
		State: subscriptions.CircuitOpen, Version: c.Version + 1, OpenedAt: c.OpenedAt, Cooldown: cooldown,
		ProbeAt: now.Add(cooldown), LastError: f.err, LastStatusCode: f.code,
	}
	if next.OpenedAt.IsZero() {
		next.OpenedAt = now
	}
	won, err := bs.swap(ctx, id, b, next)
	switch {
	case err != nil:
		bs.logger.WarnContext(ctx, "push: could not store a failed probe; the circuit stays half-open until its probe expires",
			slog.String("subscription_id", id.String()), slog.Any("error", err))
	case won:
		bs.logger.InfoContext(ctx, "push: circuit probe failed; the circuit stays open", slog.String("subscription_id", id.String()),
			slog.String("last_error", f.err), slog.Int("status_code", f.code), slog.Duration("cooldown", cooldown))
	}
	return false
}

// closeLocked closes the circuit and reports whether it did (false when
// another process changed it first, or the database failed). Called with
// b.mu held.
func (bs *breakers) closeLocked(ctx context.Context, id uuid.UUID, b *breaker, why string) bool {
	c := b.circuit
	next := subscriptions.Circuit{State: subscriptions.CircuitClosed, Version: c.Version + 1}
	won, err := bs.swap(ctx, id, b, next)
	if err != nil {
		bs.logger.WarnContext(ctx, "push: could not store a closed circuit", slog.String("subscription_id", id.String()), slog.Any("error", err))
		return false
	}
	if !won {
		return b.circuit.Closed()
	}
	bs.obs.CircuitClosed()
	attrs := []any{slog.String("subscription_id", id.String()), slog.String("why", why)}
	if !c.OpenedAt.IsZero() {
		attrs = append(attrs, slog.Duration("open_for", bs.now().Sub(c.OpenedAt).Round(time.Millisecond)))
	}
	bs.logger.InfoContext(ctx, "push: circuit closed; deliveries resume", attrs...)
	return true
}
