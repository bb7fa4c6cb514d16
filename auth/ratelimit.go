package auth

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/roomhub/messaging-api/api"
)

// RateLimiter is a token bucket per API key (one shared bucket for requests
// without a key when authentication is off), counting events: a batch of 50
// takes 50 tokens. Each API process keeps its own buckets, so with N
// processes behind a load balancer a key may publish up to N times its rate.
type RateLimiter struct {
	rate  float64
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[uuid.UUID]*rate.Limiter
}

// NewRateLimiter limits every key to perSecond events with bursts of burst
// (perSecond 0: no default limit; keys with their own limit still have one).
func NewRateLimiter(perSecond float64, burst int, now func() time.Time) *RateLimiter {
	if burst < 1 {
		burst = max(1, int(math.Ceil(perSecond)))
	}
	return &RateLimiter{rate: perSecond, burst: burst, now: now, buckets: map[uuid.UUID]*rate.Limiter{}}
}

// Take takes n events from the caller's bucket or says when to retry.
func (l *RateLimiter) Take(ctx context.Context, n int) error {
	c := api.CallerFrom(ctx)
	r, burst, id := l.rate, l.burst, uuid.Nil
	if c != nil {
		id = c.KeyID
		if c.PublishRate > 0 {
			r, burst = c.PublishRate, max(1, int(math.Ceil(c.PublishRate)))
		}
		if c.PublishBurst > 0 {
			burst = c.PublishBurst
		}
	}
	if r <= 0 {
		return nil
	}
	l.mu.Lock()
	b, ok := l.buckets[id]
	if !ok || b.Limit() != rate.Limit(r) || b.Burst() != burst {
		b = rate.NewLimiter(rate.Limit(r), burst)
		l.buckets[id] = b
	}
	l.mu.Unlock()
	// A request larger than the burst could never pass; it waits for a full
	// bucket instead.
	n = min(n, burst)
	now := l.now()
	res := b.ReserveN(now, n)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return &api.RateLimitedError{RetryAfter: d, Detail: fmt.Sprintf(
			"publish rate limit exceeded: %g events/s with bursts of %d for this key; retry after %s",
			r, burst, d.Round(time.Millisecond))}
	}
	return nil
}
