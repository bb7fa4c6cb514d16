package pull

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// Subscriptions finds a subscription with its room (subscriptions.Service is one).
type Subscriptions interface {
	Get(ctx context.Context, roomRef, id string) (rooms.Room, subscriptions.Subscription, error)
}

// Directory finds a subscription with its room (the store is one).
type Directory interface {
	PushTarget(ctx context.Context, roomID, subscriptionID uuid.UUID) (rooms.Room, subscriptions.Subscription, error)
}

// Notifier wakes the outbox relay to send new pending copies (outbox.Relay is one).
type Notifier interface{ Notify() }

// Consumer is what a pull needs of the broker.
type Consumer interface {
	Subscribe(ctx context.Context, dest broker.Destination, opts broker.SubscribeOptions) (broker.Subscription, error)
}

// Service pulls, acks and nacks.
type Service struct {
	subs   Subscriptions
	dir    Directory
	broker Consumer
	store  Store
	relay  Notifier
	now    func() time.Time
	rand   func() float64
	logger *slog.Logger
	obs    Observer
}

// Deps is what a Service works with.
type Deps struct {
	Subscriptions Subscriptions
	Directory     Directory
	Broker        Consumer
	Store         Store
	Relay         Notifier
	Now           func() time.Time
	// Rand draws retry jitter (uniform in [0, 1)).
	Rand   func() float64
	Logger *slog.Logger
	// Observer sees every outcome; nil: nothing does.
	Observer Observer
}

// NewService wires a Service.
func NewService(d Deps) *Service {
	s := &Service{subs: d.Subscriptions, dir: d.Directory, broker: d.Broker, store: d.Store, relay: d.Relay, now: d.Now,
		rand: d.Rand, logger: d.Logger, obs: d.Observer}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	return s
}

func (s *Service) pullable(ctx context.Context, roomRef, id string) (rooms.Room, subscriptions.Subscription, error) {
	room, sub, err := s.subs.Get(ctx, roomRef, id)
	switch {
	case err != nil:
		return room, sub, err
	case sub.Type != subscriptions.TypePull:
		return room, sub, ErrNotPull
	case sub.Status == subscriptions.StatusPending:
		return room, sub, subscriptions.ErrPending
	case sub.Status == subscriptions.StatusRejected:
		return room, sub, subscriptions.ErrRejected
	case sub.Status != subscriptions.StatusActive:
		return room, sub, ErrNotActive
	}
	return room, sub, nil
}

// Pull takes up to n messages from the subscription's queue, waiting up to
// wait for the first, and leases them until the subscription's ack deadline.
func (s *Service) Pull(ctx context.Context, roomRef, id string, n int, wait time.Duration) ([]Message, error) {
	_, sub, err := s.pullable(ctx, roomRef, id)
	if err != nil {
		return nil, err
	}
	annotate(ctx, sub)
	ctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()
	bs, err := s.broker.Subscribe(ctx, sub.Queue(), broker.SubscribeOptions{Prefetch: n})
	if err != nil {
		return nil, fmt.Errorf("broker: %w: %w", err, api.ErrUnavailable)
	}
	// Closing hands back to the queue what the broker prefetched but this
	// pull did not take.
	defer bs.Close()

	// A pull asks the broker for n messages, but Artemis bounds what it sends
	// in bytes (see broker.SubscribeOptions): when larger messages fill the
	// window first, the ones taken are leased and acked, which opens it again,
	// and the pull takes more, until it has n or the queue has no more.
	out := []Message{}
	for taken := 0; taken < n; {
		got, full := s.receive(ctx, bs, n-taken, wait)
		if len(got) == 0 {
			break
		}
		msgs, err := s.lease(ctx, sub, got)
		if err != nil {
			if len(out) > 0 {
				// The earlier rounds' leases are stored and their messages
				// acked: answer them; this round's come again.
				s.logger.WarnContext(ctx, "pull: leasing more messages failed", slog.Any("error", err))
				break
			}
			return nil, err
		}
		out = append(out, msgs...)
		taken += len(got)
		if !full {
			break
		}
		wait = linger
	}
	linkMessages(ctx, out)
	return out, nil
}

// lease stores a lease for each delivery and then acks it on the broker;
// those that expired before they could be pulled become dead letters.
func (s *Service) lease(ctx context.Context, sub subscriptions.Subscription, got []*broker.Delivery) ([]Message, error) {
	now := s.now()
	leases := make([]Lease, 0, len(got))
	var expired []Settlement
	for _, d := range got {
		sendID, _ := uuid.Parse(d.Headers[message.HeaderSendID])
		l := Lease{
			AckID: uuid.Must(uuid.NewV7()), SubscriptionID: sub.ID, RoomID: sub.RoomID, SendID: sendID,
			Event: message.Decode(d), Attempt: max(d.Attempt, 1), Deadline: now.Add(sub.AckDeadline), LeasedAt: now,
		}
		if !l.Event.ExpiresAt.IsZero() && !now.Before(l.Event.ExpiresAt) {
			// Never returned: it becomes a dead letter, as an expired push does.
			const why = "expired before it was pulled"
			expired = append(expired, Settlement{SendID: sendID,
				Attempt:    delivery.Attempt{Status: message.StatusExpired, Error: why, At: now},
				DeadLetter: s.deadLetter(l, delivery.ReasonExpired, why, now)})
			s.logger.InfoContext(ctx, "pull: expired message dead-lettered", slog.String("correlation_id", d.CorrelationID))
			continue
		}
		leases = append(leases, l)
	}
	// The lease is stored before the broker forgets the message: a crash
	// between the two gives a duplicate, never a loss.
	if err := s.store.AddLeases(ctx, leases, expired); err != nil {
		return nil, err
	}
	for _, st := range expired {
		s.obs.Handled(typ, delivery.OutcomeExpired, st.DeadLetter.Attempts, 0)
	}
	for _, d := range got {
		if err := d.Ack(ctx); err != nil {
			s.logger.WarnContext(ctx, "pull: broker ack failed; the message will come again", slog.Any("error", err),
				slog.String("correlation_id", d.CorrelationID))
		}
	}
	out := make([]Message, len(leases))
	for i, l := range leases {
		out[i] = toMessage(l)
	}
	return out, nil
}

// receive collects up to n deliveries: it waits up to wait for the first,
// then only briefly for more, so a long poll answers as soon as one arrives,
// and not at all once the subscription is full (nothing more comes until an
// ack) and has handed over what it holds. full reports whether it ended so.
func (s *Service) receive(ctx context.Context, bs broker.Subscription, n int, wait time.Duration) (got []*broker.Delivery, full bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var lingerEnd time.Time // maxLinger after the first message
	for len(got) < n {
		select {
		case d, ok := <-bs.C():
			if !ok {
				return got, false
			}
			got = append(got, d)
			if len(got) == 1 {
				lingerEnd = time.Now().Add(maxLinger)
			}
			switch {
			case bs.Full():
				timer.Reset(handOver)
			default:
				timer.Reset(max(min(linger, time.Until(lingerEnd)), 0))
			}
		case <-timer.C:
			return got, bs.Full()
		case <-ctx.Done():
			return got, false
		}
	}
	return got, false
}

// Result is what became of one ack id.
type Result struct {
	AckID  string `json:"ackId"`
	Status string `json:"status"` // acked, nacked, extended, unknown (expired, settled or never leased), invalid
}

func parseAckIDs(raw []string) ([]uuid.UUID, []Result) {
	ids := make([]uuid.UUID, 0, len(raw))
	results := make([]Result, len(raw))
	for i, r := range raw {
		results[i] = Result{AckID: r, Status: "unknown"}
		id, err := uuid.Parse(r)
		if err != nil {
			results[i].Status = "invalid"
			continue
		}
		ids = append(ids, id)
	}
	return ids, results
}

func mark(results []Result, done []uuid.UUID, status string) []Result {
	set := map[string]bool{}
	for _, id := range done {
		set[id.String()] = true
	}
	for i := range results {
		if id, err := uuid.Parse(results[i].AckID); err == nil && set[id.String()] {
			results[i].Status = status
		}
	}
	return results
}

// Ack settles leases as delivered.
func (s *Service) Ack(ctx context.Context, roomRef, id string, ackIDs []string) ([]Result, error) {
	return s.settle(ctx, roomRef, id, ackIDs, "acked", func(_ rooms.Room, _ subscriptions.Subscription, l Lease, now time.Time) Settlement {
		return Settlement{AckID: l.AckID, SendID: l.SendID, Attempt: delivery.Attempt{Status: message.StatusDelivered, At: now}}
	})
}

// Nack settles leases as failed: each is delivered again after its policy's
// delay, or dead-lettered past the last attempt.
func (s *Service) Nack(ctx context.Context, roomRef, id string, ackIDs []string) ([]Result, error) {
	res, err := s.settle(ctx, roomRef, id, ackIDs, "nacked", func(room rooms.Room, sub subscriptions.Subscription, l Lease, now time.Time) Settlement {
		return s.redeliver(room, sub, l, now, "nacked", true)
	})
	if err == nil {
		s.relay.Notify()
	}
	return res, err
}

// settle applies one to each live lease of the subscription among ackIDs and
// reports status for those it settled.
func (s *Service) settle(ctx context.Context, roomRef, id string, ackIDs []string, status string,
	one func(rooms.Room, subscriptions.Subscription, Lease, time.Time) Settlement) ([]Result, error) {
	room, sub, err := s.subs.Get(ctx, roomRef, id)
	if err != nil {
		return nil, err
	}
	annotate(ctx, sub)
	ids, results := parseAckIDs(ackIDs)
	now := s.now()
	var decided []settled
	done, err := s.store.SettleLeases(ctx, Selector{SubscriptionID: sub.ID, AckIDs: ids, Now: now},
		func(ls []Lease) ([]Settlement, error) {
			out := make([]Settlement, len(ls))
			decided = make([]settled, len(ls))
			for i, l := range ls {
				out[i] = one(room, sub, l, now)
				decided[i] = settled{l, out[i]}
			}
			return out, nil
		})
	if err != nil {
		return nil, err
	}
	s.observe(decided, done, now, status)
	return mark(results, done, status), nil
}

// ModifyAckDeadline moves the deadline of live leases to now + d; 0 gives
// them up for redelivery at once.
func (s *Service) ModifyAckDeadline(ctx context.Context, roomRef, id string, ackIDs []string, d time.Duration) ([]Result, error) {
	_, sub, err := s.subs.Get(ctx, roomRef, id)
	if err != nil {
		return nil, err
	}
	ids, results := parseAckIDs(ackIDs)
	now := s.now()
	done, err := s.store.ExtendLeases(ctx, sub.ID, ids, now.Add(d), now)
	if err != nil {
		return nil, err
	}
	return mark(results, done, "extended"), nil
}

// redeliver settles one lease as a failed attempt: a resend after the policy's
// delay (none when withDelay is false), or a dead letter.
func (s *Service) redeliver(room rooms.Room, sub subscriptions.Subscription, l Lease, now time.Time, why string, withDelay bool) Settlement {
	st := Settlement{AckID: l.AckID, SendID: l.SendID, Attempt: delivery.Attempt{Status: message.StatusFailed, Error: why, At: now}}
	if sub.Status == subscriptions.StatusTerminated {
		st.Attempt.Status, st.Attempt.Error = message.StatusDropped, why+"; the subscription is terminated"
		return st
	}
	step, ok := retry.For(room, sub).Next(l.Attempt)
	var delay time.Duration
	if withDelay {
		delay = step.Draw(s.rand())
	}
	next := now.Add(delay)
	switch {
	case !ok:
		st.Attempt.Status = message.StatusDeadLettered
		st.DeadLetter = s.deadLetter(l, delivery.ReasonExhausted, why, now)
	case !l.Event.ExpiresAt.IsZero() && !next.Before(l.Event.ExpiresAt):
		st.Attempt.Status = message.StatusDeadLettered
		st.Attempt.Error = why + "; would expire before the next attempt"
		st.DeadLetter = s.deadLetter(l, delivery.ReasonExpired, st.Attempt.Error, now)
	default:
		st.Attempt.NextAttemptAt = next
		st.Resend = &message.Send{
			ID: uuid.Must(uuid.NewV7()), EventID: l.Event.ID, RoomID: l.RoomID, CorrelationID: l.Event.CorrelationID,
			SubscriptionID: sub.ID, SubscriptionType: string(subscriptions.TypePull), Destination: sub.Queue().FQQN(),
			Attempt: l.Attempt + 1, ScheduledDelay: delay, CreatedAt: now, Status: message.StatusPending,
		}
	}
	return st
}

func (s *Service) deadLetter(l Lease, reason, why string, now time.Time) *delivery.DeadLetter {
	return &delivery.DeadLetter{
		ID: uuid.Must(uuid.NewV7()), RoomID: l.RoomID, SubscriptionID: l.SubscriptionID, Event: l.Event,
		Attempts: l.Attempt, Reason: reason, LastError: why, CreatedAt: now,
	}
}

// RunReaper redelivers leases whose ack deadline passed, until ctx is done.
// It runs in every API process; the store's locks keep them apart.
func (s *Service) RunReaper(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			n, err := s.reapOnce(ctx)
			if err != nil {
				s.logger.WarnContext(ctx, "pull: reaping expired leases failed", slog.Any("error", err))
			}
			if err != nil || n < 500 {
				break
			}
		}
	}
}

func (s *Service) reapOnce(ctx context.Context) (int, error) {
	now := s.now()
	subs, err := s.store.ExpiredSubscriptions(ctx, now, 500)
	if err != nil || len(subs) == 0 {
		return 0, err
	}
	// Look the subscriptions up before the transaction: decide may not
	// query, and a settled lease needs its subscription's policy.
	type target struct {
		room rooms.Room
		sub  subscriptions.Subscription
		gone bool
	}
	targets := make(map[uuid.UUID]target, len(subs))
	for subID, roomID := range subs {
		room, sub, err := s.dir.PushTarget(ctx, roomID, subID)
		switch {
		case api.IsNotFound(err):
			targets[subID] = target{gone: true}
		case err != nil:
			return 0, err
		default:
			targets[subID] = target{room: room, sub: sub}
		}
	}
	var decided []settled
	done, err := s.store.SettleLeases(ctx, Selector{Expired: true, Now: now, Limit: 500},
		func(ls []Lease) ([]Settlement, error) {
			out := make([]Settlement, 0, len(ls))
			decided = decided[:0]
			defer func() {
				for i := range out {
					decided = append(decided, settled{leaseOf(ls, out[i].AckID), out[i]})
				}
			}()
			for _, l := range ls {
				t, ok := targets[l.SubscriptionID]
				switch {
				case !ok:
					continue // expired after the lookup: the next round takes it
				case t.gone:
					out = append(out, Settlement{AckID: l.AckID, SendID: l.SendID,
						Attempt: delivery.Attempt{Status: message.StatusDropped, Error: "subscription deleted", At: now}})
				default:
					out = append(out, s.redeliver(t.room, t.sub, l, now, "ack deadline exceeded", false))
				}
			}
			return out, nil
		})
	if err == nil {
		s.observe(decided, done, now, "expired")
	}
	if len(done) > 0 {
		s.relay.Notify()
	}
	return len(done), err
}
