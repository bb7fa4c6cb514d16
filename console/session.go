package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
)

// ErrSessionNotFound: no such session (ended, purged, or never made).
var ErrSessionNotFound = fmt.Errorf("console session %w", api.ErrNotFound)

// Session is a signed-in browser as stored: never its id, only the id's hash.
type Session struct {
	IDHash string
	// KeyID is the API key the browser signed in with; uuid.Nil when the
	// service runs without keys (AUTH_DISABLED).
	KeyID     uuid.UUID
	CreatedAt time.Time
	// SeenAt is the last request's time, written at most once per
	// touchEvery: the idle timeout counts from it.
	SeenAt    time.Time
	ExpiresAt time.Time // the absolute end
}

// PurgeQuery says which sessions have ended.
type PurgeQuery struct {
	Now        time.Time // sessions whose ExpiresAt is not after it, or whose key is revoked or expired at it
	IdleBefore time.Time // sessions not seen since
}

// Sessions stores console sessions (store.Console is one).
type Sessions interface {
	CreateSession(ctx context.Context, s Session) error
	// Session finds a session by the hash of its id; ErrSessionNotFound.
	Session(ctx context.Context, idHash string) (Session, error)
	TouchSession(ctx context.Context, idHash string, at time.Time) error
	DeleteSession(ctx context.Context, idHash string) error
	PurgeSessions(ctx context.Context, q PurgeQuery) (int, error)
}

// Cookie names. The session cookie is scoped to the console's path.
const (
	sessionCookie = "console_session"
	loginCookie   = "console_login"
	cookiePath    = "/console/"
)

// touchEvery bounds the writes idle tracking costs: one per session per
// minute, so the idle timeout is exact to within a minute.
const touchEvery = time.Minute

// newSecret is 256 random bits, URL-safe.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// hashID is the stored form of a session id.
func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// csrfToken is the CSRF token of the session whose id is id: derived, so
// any process can check it without storing it, and under another prefix
// than the stored hash, so the database's hashes do not give it away.
func csrfToken(id string) string {
	sum := sha256.Sum256([]byte("console-csrf\x00" + id))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// sameToken compares tokens in constant time.
func sameToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// secure says whether cookies set in answer to r get the Secure attribute:
// r came over TLS, or a proxy in front says so in X-Forwarded-Proto. The
// header is trusted because it can only add the attribute: a client that
// forges it gets a cookie its own browser will not send back over plain
// HTTP, and no one else's cookie changes.
func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// cookie is a console cookie: HttpOnly, SameSite=Strict, Secure over TLS.
func cookie(r *http.Request, name, value, path string, maxAge time.Duration) *http.Cookie {
	c := &http.Cookie{
		Name: name, Value: value, Path: path,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r),
	}
	switch {
	case maxAge > 0:
		c.MaxAge = int(maxAge / time.Second)
	case maxAge < 0:
		c.MaxAge = -1 // delete
	}
	return c
}

// Stats are the store queries of the dashboard's service-wide figures, each
// bounded (store.Console is one).
type Stats interface {
	// OutboxBacklog is how many sends the outbox owes the broker, and when
	// the oldest was made.
	OutboxBacklog(ctx context.Context) (int, time.Time, error)
	// DeadLetterCount counts dead letters, up to limit.
	DeadLetterCount(ctx context.Context, limit int) (int, error)
	// SlowestSubscriptions ranks subscriptions by their mean push request
	// latency among the newest q.Rows sends since q.Since.
	SlowestSubscriptions(ctx context.Context, q SlowQuery) ([]SubscriptionLatency, error)
}

// SlowQuery bounds SlowestSubscriptions.
type SlowQuery struct {
	Since time.Time
	Rows  int // the newest sends looked at
	Top   int // subscriptions answered
}

// SubscriptionLatency is one subscription's push request latency.
type SubscriptionLatency struct {
	SubscriptionID uuid.UUID
	RoomID         uuid.UUID
	Room           string // the room's identifier
	Requests       int
	Mean, Max      time.Duration
}
