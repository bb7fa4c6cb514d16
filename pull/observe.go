package pull

import (
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
)

// typ is the subscription type observers see.
const typ = "pull"

// Observer is told what becomes of each pulled message (metrics.Metrics is
// one): outcomes are push's Outcome* constants.
type Observer interface {
	Handled(typ, outcome string, attempt int, age time.Duration)
	RetryScheduled(typ string, delay time.Duration)
}

type nopObserver struct{}

func (nopObserver) Handled(string, string, int, time.Duration) {}
func (nopObserver) RetryScheduled(string, time.Duration)       {}

// settled is a lease with the settlement decided for it.
type settled struct {
	lease Lease
	st    Settlement
}

func leaseOf(ls []Lease, ackID uuid.UUID) Lease {
	for _, l := range ls {
		if l.AckID == ackID {
			return l
		}
	}
	return Lease{}
}

// observe reports the settlements the store applied (done), and logs each
// with its correlation id; why is acked, nacked or expired (the deadline).
func (s *Service) observe(decided []settled, done []uuid.UUID, now time.Time, why string) {
	applied := make(map[uuid.UUID]bool, len(done))
	for _, id := range done {
		applied[id] = true
	}
	for _, d := range decided {
		if !applied[d.st.AckID] {
			continue
		}
		outcome := outcomeOf(d.st)
		var age time.Duration
		if outcome == delivery.OutcomeDelivered {
			age = now.Sub(d.lease.Event.PublishedAt)
		}
		s.obs.Handled(typ, outcome, d.lease.Attempt, age)
		if d.st.Resend != nil {
			s.obs.RetryScheduled(typ, d.st.Resend.ScheduledDelay)
		}
		s.logger.Debug("pull: lease settled", slog.String("correlation_id", d.lease.Event.CorrelationID),
			slog.String("event_id", d.lease.Event.ID.String()), slog.String("subscription_id", d.lease.SubscriptionID.String()),
			slog.String("ack_id", d.st.AckID.String()), slog.Int("attempt", d.lease.Attempt),
			slog.String("by", why), slog.String("outcome", outcome))
	}
}

func outcomeOf(st Settlement) string {
	switch {
	case st.Attempt.Status == message.StatusDelivered:
		return delivery.OutcomeDelivered
	case st.Attempt.Status == message.StatusDropped:
		return delivery.OutcomeDropped
	case st.Resend != nil:
		return delivery.OutcomeRetried
	case st.DeadLetter != nil && st.DeadLetter.Reason == delivery.ReasonExpired:
		return delivery.OutcomeExpired
	default:
		return delivery.OutcomeDeadLettered
	}
}
