package auth

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)} }

func TestRateLimiter(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := NewRateLimiter(1, 2, clk.now)
	ctx := api.WithCaller(context.Background(), &api.Caller{KeyID: uuid.New(), Role: api.RolePublisher})
	other := api.WithCaller(context.Background(), &api.Caller{KeyID: uuid.New(), Role: api.RolePublisher})

	for i := range 2 {
		if err := l.Take(ctx, 1); err != nil {
			t.Fatalf("take %d within the burst: %v", i, err)
		}
	}
	var rl *api.RateLimitedError
	if err := l.Take(ctx, 1); !errors.As(err, &rl) || rl.RetryAfter <= 0 || rl.RetryAfter > time.Second {
		t.Fatalf("third take: %v, want a RateLimitedError with 0 < RetryAfter ≤ 1s", err)
	}
	if err := l.Take(other, 2); err != nil {
		t.Errorf("another key shares the bucket: %v", err)
	}
	clk.advance(time.Second)
	if err := l.Take(ctx, 1); err != nil {
		t.Errorf("after a second: %v", err)
	}
	// More than the burst waits for a full bucket rather than never passing.
	clk.advance(10 * time.Second)
	if err := l.Take(ctx, 50); err != nil {
		t.Errorf("a batch above the burst on a full bucket: %v", err)
	}
	if err := l.Take(ctx, 1); !errors.As(err, &rl) {
		t.Errorf("the batch did not empty the bucket: %v", err)
	}

	// A key's own limit wins; no default limit means none.
	free := NewRateLimiter(0, 0, clk.now)
	for range 1000 {
		if err := free.Take(ctx, 10); err != nil {
			t.Fatalf("no limit configured: %v", err)
		}
	}
	own := api.WithCaller(context.Background(), &api.Caller{KeyID: uuid.New(), PublishRate: 0.1, PublishBurst: 1})
	if err := free.Take(own, 1); err != nil {
		t.Fatal(err)
	}
	if err := free.Take(own, 1); !errors.As(err, &rl) || rl.RetryAfter < 9*time.Second {
		t.Errorf("key limit 0.1/s: %v, want a retry after ~10 s", err)
	}
}

// memStore is an auth.Store in memory.
type memStore struct {
	mu   sync.Mutex
	keys map[uuid.UUID]Key
	hits int
}

func (m *memStore) CreateKey(_ context.Context, k Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[k.ID] = k
	return nil
}

func (m *memStore) KeyByHash(_ context.Context, hash string) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hits++
	for _, k := range m.keys {
		if k.Hash == hash {
			return k, nil
		}
	}
	return Key{}, ErrNotFound
}

func (m *memStore) Key(_ context.Context, id uuid.UUID) (Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.keys[id]; ok {
		return k, nil
	}
	return Key{}, ErrNotFound
}

func (m *memStore) Keys(context.Context, ListQuery) ([]Key, error) { return nil, nil }

func (m *memStore) RevokeKey(_ context.Context, id uuid.UUID, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.keys[id]
	k.RevokedAt = &at
	m.keys[id] = k
	return nil
}

func (m *memStore) ActiveKeys(context.Context, string, time.Time) (int, error) {
	return len(m.keys), nil
}

type noRooms struct{}

func (noRooms) RoomID(context.Context, string) (uuid.UUID, error) { return uuid.Nil, ErrNotFound }

func TestAuthenticateCachesAndExpires(t *testing.T) {
	t.Parallel()
	clk := newClock()
	st := &memStore{keys: map[uuid.UUID]Key{}}
	other := NewService(st, noRooms{}, clk.now) // another process, same database
	svc := NewService(st, noRooms{}, clk.now)
	k, token, err := svc.Create(context.Background(), Spec{Name: "ops", Role: api.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if k.Hash == token || k.Hash != HashToken(token) || len(k.Prefix) >= len(token) {
		t.Fatal("the stored key holds the token")
	}
	for range 3 {
		if _, err := other.Authenticate(context.Background(), "Bearer "+token); err != nil {
			t.Fatal(err)
		}
	}
	if st.hits != 1 {
		t.Errorf("%d store lookups for 3 requests within CacheTTL, want 1", st.hits)
	}
	if _, err := svc.Revoke(context.Background(), k.ID.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authenticate(context.Background(), "Bearer "+token); !errors.Is(err, api.ErrUnauthorized) {
		t.Errorf("revoking process still accepts the key: %v", err)
	}
	// The other process trusts its cache for at most CacheTTL.
	clk.advance(CacheTTL + time.Millisecond)
	if _, err := other.Authenticate(context.Background(), "Bearer "+token); !errors.Is(err, api.ErrUnauthorized) {
		t.Errorf("another process accepts a revoked key after CacheTTL: %v", err)
	}

	expiry := clk.now().Add(time.Minute)
	_, t2, err := svc.Create(context.Background(), Spec{Name: "short", Role: api.RoleAdmin, ExpiresAt: &expiry})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authenticate(context.Background(), "Bearer "+t2); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Minute)
	if _, err := svc.Authenticate(context.Background(), "Bearer "+t2); !errors.Is(err, api.ErrUnauthorized) {
		t.Errorf("expired key accepted: %v", err)
	}
}

func TestImportBootstrapKey(t *testing.T) {
	t.Parallel()
	st := &memStore{keys: map[uuid.UUID]Key{}}
	svc := NewService(st, noRooms{}, newClock().now)
	spec := Spec{Name: "boot", Role: api.RoleAdmin}
	if _, err := svc.Import(context.Background(), "short", spec); err == nil {
		t.Error("a short bootstrap key was accepted")
	}
	tok := "mapi_0123456789abcdef0123456789abcdef"
	for i, want := range []bool{true, false} {
		created, err := svc.Import(context.Background(), tok, spec)
		if err != nil || created != want {
			t.Errorf("import %d: created %v, err %v; want %v", i, created, err, want)
		}
	}
	if _, err := svc.Authenticate(context.Background(), "Bearer "+tok); err != nil {
		t.Error(err)
	}
}

// TestAuthenticateID: a console session's key id authenticates like its
// token, cached alike, and a revoked or expired key ends it.
func TestAuthenticateID(t *testing.T) {
	t.Parallel()
	clk := newClock()
	st := &memStore{keys: map[uuid.UUID]Key{}}
	svc := NewService(st, noRooms{}, clk.now)
	expiry := clk.now().Add(time.Hour)
	k, _, err := svc.Create(context.Background(), Spec{Name: "ops", Role: api.RoleAdmin, ExpiresAt: &expiry})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		got, err := svc.AuthenticateID(context.Background(), k.ID)
		if err != nil || got.ID != k.ID {
			t.Fatalf("AuthenticateID = %v, %v", got.ID, err)
		}
	}
	if st.hits != 0 {
		t.Errorf("an id lookup read keys by hash")
	}
	if _, err := svc.AuthenticateID(context.Background(), uuid.New()); !errors.Is(err, api.ErrUnauthorized) {
		t.Errorf("unknown id: %v, want unauthorized", err)
	}
	clk.advance(time.Hour)
	if _, err := svc.AuthenticateID(context.Background(), k.ID); !errors.Is(err, api.ErrUnauthorized) {
		t.Errorf("expired key: %v, want unauthorized", err)
	}

	k2, _, err := svc.Create(context.Background(), Spec{Name: "ops2", Role: api.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AuthenticateID(context.Background(), k2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Revoke(context.Background(), k2.ID.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AuthenticateID(context.Background(), k2.ID); !errors.Is(err, api.ErrUnauthorized) {
		t.Errorf("revoked key still authenticates its sessions on the revoking process: %v", err)
	}
}
