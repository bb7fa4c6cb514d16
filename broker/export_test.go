package broker

import (
	"context"
	"log/slog"
	"time"
)

// OpenWithClock is Open for a STOMP URL whose limits on redials after
// refusals read now, a clock the test moves.
func OpenWithClock(ctx context.Context, rawURL string, logger *slog.Logger, now func() time.Time) (Broker, error) {
	cfg, err := parseStompURL(rawURL)
	if err != nil {
		return nil, err
	}
	return openStomp(ctx, cfg, logger, now)
}
