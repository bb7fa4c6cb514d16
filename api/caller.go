package api

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
)

// Roles of API keys.
const (
	RoleAdmin      = "admin"
	RoleManager    = "manager"
	RolePublisher  = "publisher"
	RoleSubscriber = "subscriber"
)

// MaxSubjectLength bounds a key's subject, and so the managerIdentifier of a
// room and the owner of a subscription, which name one.
const MaxSubjectLength = 200

// Caller is who sent a request, as authentication established it. Features
// consult it where a rule depends on the request body or on which rows to
// list; a request without a Caller (authentication disabled) may do anything.
type Caller struct {
	KeyID uuid.UUID
	Role  string
	// Subject is the identity behind the key: the managerIdentifier of the
	// rooms a manager manages, the owner of a subscriber's subscriptions.
	Subject string
	// Rooms maps each room granted to a publisher or subscriber to the event
	// types granted in it; an empty list grants every event type.
	Rooms map[uuid.UUID][]string
	// PublishRate (events per second) and PublishBurst override the
	// service's publish rate limit for this caller when not zero.
	PublishRate  float64
	PublishBurst int
}

// Admin reports whether c may do anything: an admin key, or no
// authentication at all.
func (c *Caller) Admin() bool { return c == nil || c.Role == RoleAdmin }

// Manages reports whether c may configure a room with this managerIdentifier.
func (c *Caller) Manages(managerIdentifier string) bool {
	return c.Admin() || (c.Role == RoleManager && c.Subject == managerIdentifier)
}

// Granted reports whether room is granted to c (admins: every room; managers
// answer through Manages).
func (c *Caller) Granted(room uuid.UUID) bool {
	if c.Admin() {
		return true
	}
	_, ok := c.Rooms[room]
	return ok
}

// MayPublish reports whether c may publish events of eventType to room.
func (c *Caller) MayPublish(room uuid.UUID, eventType string) bool {
	if c.Admin() {
		return true
	}
	if c.Role != RolePublisher {
		return false
	}
	types, ok := c.Rooms[room]
	if !ok {
		return false
	}
	if len(types) == 0 {
		return true
	}
	for _, t := range types {
		if t == eventType {
			return true
		}
	}
	return false
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom is the caller ctx carries, nil when authentication is off.
func CallerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// Forbidden is a 403 whose detail says what the caller may not do.
func Forbidden(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrForbidden}, args...)...)
}

// RateLimitedError is a 429: the caller may try again after RetryAfter.
type RateLimitedError struct {
	RetryAfter time.Duration
	Detail     string
}

func (e *RateLimitedError) Error() string { return e.Detail }

// Unwrap is the error's kind, ErrRateLimited.
func (e *RateLimitedError) Unwrap() error { return ErrRateLimited }

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
