// Package auth authenticates API requests by API key and authorizes them by
// role: admin (everything), manager (the rooms whose managerIdentifier is the
// key's subject), publisher (publish to granted rooms and event types) and
// subscriber (its own subscriptions in granted rooms).
//
// A key is a 256-bit random token shown once at creation; only its SHA-256
// hash is stored, so a database dump does not reveal usable keys. Plain
// SHA-256 (not a slow password hash) is right for keys of this entropy.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
)

// ErrNotFound: no such key.
var ErrNotFound = fmt.Errorf("api key %w", api.ErrNotFound)

// TokenPrefix starts every key, so secret scanners and people recognise one.
const TokenPrefix = "mapi_"

// CacheTTL is how long a process trusts a key it has checked: a revoked key
// stops working within this time on every process (at once on the one that
// revoked it).
const CacheTTL = 2 * time.Second

// Grant gives a publisher or subscriber one room; EventTypes (identifiers)
// limits what a publisher may publish there, empty meaning every type.
type Grant struct {
	RoomID     uuid.UUID
	EventTypes []string
}

// Key is an API key as stored: never the token itself.
type Key struct {
	ID      uuid.UUID
	Name    string
	Role    string
	Subject string
	Rooms   []Grant
	// PublishRateLimit (events per second) and PublishBurst override the
	// service's default publish rate limit for this key; nil keeps it.
	PublishRateLimit *float64
	PublishBurst     *int
	// Prefix is the start of the token, enough to tell keys apart in lists.
	Prefix    string
	Hash      string
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
}

// Active reports whether k authenticates requests at now.
func (k Key) Active(now time.Time) bool {
	return k.RevokedAt == nil && (k.ExpiresAt == nil || now.Before(*k.ExpiresAt))
}

// Caller is what a request made with k may do.
func (k Key) Caller() *api.Caller {
	c := &api.Caller{KeyID: k.ID, Role: k.Role, Subject: k.Subject}
	if len(k.Rooms) > 0 {
		c.Rooms = make(map[uuid.UUID][]string, len(k.Rooms))
		for _, g := range k.Rooms {
			c.Rooms[g.RoomID] = append(c.Rooms[g.RoomID], g.EventTypes...)
		}
	}
	if k.PublishRateLimit != nil {
		c.PublishRate = *k.PublishRateLimit
	}
	if k.PublishBurst != nil {
		c.PublishBurst = *k.PublishBurst
	}
	return c
}

// ListQuery selects a page of keys ordered by id.
type ListQuery struct {
	Limit int
	After uuid.UUID
}

// Store is what the service needs from persistence.
type Store interface {
	CreateKey(ctx context.Context, k Key) error
	KeyByHash(ctx context.Context, hash string) (Key, error)
	Key(ctx context.Context, id uuid.UUID) (Key, error)
	Keys(ctx context.Context, q ListQuery) ([]Key, error)
	// RevokeKey sets revoked_at on an active key; ErrNotFound when there is
	// no such key.
	RevokeKey(ctx context.Context, id uuid.UUID, at time.Time) error
	// ActiveKeys counts the keys of role (any role if "") usable at now.
	ActiveKeys(ctx context.Context, role string, now time.Time) (int, error)
}

// RoomFinder resolves a room reference (id or identifier) to its id, to check
// grants when keys are made (rooms.Service is one).
type RoomFinder interface {
	RoomID(ctx context.Context, ref string) (uuid.UUID, error)
}

// Service creates, lists, revokes and checks API keys.
type Service struct {
	store Store
	rooms RoomFinder
	now   func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	key   Key
	err   error
	until time.Time
}

// NewService returns the key service.
func NewService(s Store, rooms RoomFinder, now func() time.Time) *Service {
	return &Service{store: s, rooms: rooms, now: now, cache: map[string]cached{}}
}

// NewToken makes a fresh random key token and its stored hash.
func NewToken() (token, hash string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, HashToken(token)
}

// HashToken is the stored form of a token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Create validates spec, stores a new key and returns it with its token,
// which is never available again.
func (s *Service) Create(ctx context.Context, spec Spec) (Key, string, error) {
	k, err := s.validate(ctx, spec)
	if err != nil {
		return Key{}, "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Key{}, "", err
	}
	token, hash := NewToken()
	k.ID, k.Hash, k.Prefix, k.CreatedAt = id, hash, token[:len(TokenPrefix)+6], s.now()
	if err := s.store.CreateKey(ctx, k); err != nil {
		return Key{}, "", err
	}
	return k, token, nil
}

// Import stores token (one an operator chose, e.g. a bootstrap admin key
// from the environment) as a key made from spec, unless it exists already.
func (s *Service) Import(ctx context.Context, token string, spec Spec) (created bool, err error) {
	if err := CheckTokenShape(token); err != nil {
		return false, err
	}
	hash := HashToken(token)
	if _, err := s.store.KeyByHash(ctx, hash); err == nil {
		return false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return false, err
	}
	k, err := s.validate(ctx, spec)
	if err != nil {
		return false, err
	}
	if k.ID, err = uuid.NewV7(); err != nil {
		return false, err
	}
	k.Hash, k.Prefix, k.CreatedAt = hash, token[:min(len(token), len(TokenPrefix)+6)], s.now()
	return true, s.store.CreateKey(ctx, k)
}

// CheckTokenShape refuses tokens too short to be secret.
func CheckTokenShape(token string) error {
	if len(token) < 32 || strings.ContainsAny(token, " \t\r\n") {
		return errors.New("an API key must be at least 32 characters without spaces")
	}
	return nil
}

// Keys lists keys in creation order.
func (s *Service) Keys(ctx context.Context, page api.Page) ([]Key, error) {
	after, err := page.AfterID()
	if err != nil {
		return nil, err
	}
	return s.store.Keys(ctx, ListQuery{Limit: page.Limit, After: after})
}

// Key finds a key by id.
func (s *Service) Key(ctx context.Context, ref string) (Key, error) {
	id, err := uuid.Parse(ref)
	if err != nil {
		return Key{}, ErrNotFound
	}
	return s.store.Key(ctx, id)
}

// Revoke revokes a key at once on this process (within CacheTTL elsewhere).
func (s *Service) Revoke(ctx context.Context, ref string) (Key, error) {
	k, err := s.Key(ctx, ref)
	if err != nil {
		return Key{}, err
	}
	if k.RevokedAt == nil {
		now := s.now()
		if err := s.store.RevokeKey(ctx, k.ID, now); err != nil {
			return Key{}, err
		}
		k.RevokedAt = &now
	}
	s.mu.Lock()
	delete(s.cache, k.Hash)
	delete(s.cache, "id:"+k.ID.String())
	s.mu.Unlock()
	return k, nil
}

// ActiveKeys counts usable keys of role ("" for any).
func (s *Service) ActiveKeys(ctx context.Context, role string) (int, error) {
	return s.store.ActiveKeys(ctx, role, s.now())
}

// errBadKey is the one answer to every unusable key, so that the reply does
// not tell a guessed key from a revoked or expired one.
var errBadKey = fmt.Errorf("%w: the API key is missing, malformed, expired or revoked", api.ErrUnauthorized)

// Authenticate finds the key behind an Authorization header value.
func (s *Service) Authenticate(ctx context.Context, header string) (Key, error) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Key{}, fmt.Errorf("%w: send the API key as \"Authorization: Bearer <key>\"", api.ErrUnauthorized)
	}
	token = strings.TrimSpace(token)
	if token == "" || len(token) > 512 {
		return Key{}, errBadKey
	}
	hash := HashToken(token)
	return s.lookup(ctx, hash, func() (Key, error) { return s.store.KeyByHash(ctx, hash) })
}

// AuthenticateID finds the active key whose id is id: the key behind a
// console session, which holds the key's id and never its token. It answers
// as Authenticate does, so a revoked or expired key ends its sessions.
func (s *Service) AuthenticateID(ctx context.Context, id uuid.UUID) (Key, error) {
	return s.lookup(ctx, "id:"+id.String(), func() (Key, error) { return s.store.Key(ctx, id) })
}

// lookup answers from the cache entry under name, loading it with load when
// it is missing or older than CacheTTL.
func (s *Service) lookup(ctx context.Context, name string, load func() (Key, error)) (Key, error) {
	now := s.now()
	s.mu.Lock()
	c, hit := s.cache[name]
	s.mu.Unlock()
	if !hit || now.After(c.until) {
		c = cached{until: now.Add(CacheTTL)}
		c.key, c.err = load()
		if errors.Is(c.err, api.ErrUnavailable) {
			return Key{}, c.err // not cached: the next request tries again
		}
		s.mu.Lock()
		if len(s.cache) >= 10000 {
			clear(s.cache) // bounded: random tokens cannot grow it forever
		}
		s.cache[name] = c
		s.mu.Unlock()
	}
	if c.err != nil {
		if errors.Is(c.err, ErrNotFound) {
			return Key{}, errBadKey
		}
		return Key{}, c.err
	}
	if !c.key.Active(now) {
		return Key{}, errBadKey
	}
	return c.key, nil
}
