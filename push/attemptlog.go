package push

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/loglimit"
)

// A failing endpoint can fail thousands of attempts a second: each
// subscription gets failureLines lines per failureInterval, then one summary
// of what was held back. failureKeys bounds the subscriptions remembered
// (about 60 bytes each); beyond it, the others share one allowance.
const (
	failureLines    = 5
	failureInterval = 10 * time.Second
	failureKeys     = 10_000
)

// attemptFailure is what the log says of a failed attempt.
type attemptFailure struct {
	sub, room, event uuid.UUID
	correlation      string
	traceparent      string
	attempt          int
	out              *Outcome
}

// logFailure writes the INFO line of a failed attempt, unless its
// subscription has had its share of lines in this interval: retryIn is the
// delay of the retry, or reason why the message was dead-lettered.
func (p *Dispatcher) logFailure(ctx context.Context, f attemptFailure, retryIn time.Duration, reason string) {
	if !p.logger.Enabled(ctx, slog.LevelInfo) || !p.failures.Allow(f.sub, p.now()) {
		return
	}
	attrs := make([]slog.Attr, 0, 13)
	attrs = append(attrs,
		slog.String("subscription_id", f.sub.String()), slog.String("room_id", f.room.String()),
		slog.String("event_id", f.event.String()), slog.String("correlation_id", f.correlation),
		slog.Int("attempt", f.attempt), slog.String("traceparent", f.traceparent), slog.String("error_class", errorClass(f.out)))
	if f.out.StatusCode != 0 {
		attrs = append(attrs, slog.Int("status_code", f.out.StatusCode))
	}
	attrs = append(attrs, slog.String("error", f.out.Err), slog.Duration("latency", f.out.Latency))
	if reason == "" {
		attrs = append(attrs, slog.String("next", "retry"), slog.Duration("retry_in", retryIn))
	} else {
		attrs = append(attrs, slog.String("next", "dead-lettered"), slog.String("reason", reason))
	}
	p.logger.LogAttrs(ctx, slog.LevelInfo, "push: attempt failed", attrs...)
}

// logSuppressed writes the summary of a subscription's failure lines held
// back in one interval.
func (p *Dispatcher) logSuppressed(s loglimit.Summary[uuid.UUID]) {
	sub := s.Key.String()
	if s.Others {
		sub = "others" // beyond failureKeys
	}
	p.logger.LogAttrs(context.Background(), slog.LevelInfo, "push: more failed attempts not logged",
		slog.String("subscription_id", sub), slog.Int("not_logged", s.Suppressed),
		slog.Duration("in_the_last", p.now().Sub(s.Since).Round(time.Second)))
}

// errorClass names the kind of a failure, for the log: http_status (the
// endpoint answered), timeout, refused (the SSRF guard refused the target),
// invalid_url or connection.
func errorClass(out *Outcome) string {
	switch {
	case out.StatusCode != 0:
		return "http_status"
	case strings.HasPrefix(out.Err, "timeout:"):
		return "timeout"
	case strings.HasPrefix(out.Err, "invalid push URL"):
		return "invalid_url"
	case out.Result == Permanent:
		return "refused"
	default:
		return "connection"
	}
}
