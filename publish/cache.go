package publish

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// Cache answers a publish's lookups (the room, its event types, versions and
// ACTIVE subscriptions) from memory for up to TTL, so a publish costs one
// write transaction instead of four reads and a write. A change made through
// this process empties it at once (Invalidate); one made through another
// process reaches publishes here within TTL. Only successful lookups are
// kept, so a room or subscription created elsewhere is found at once.
type Cache struct {
	catalog Catalog
	subs    Subscribers
	ttl     time.Duration
	now     func() time.Time

	mu      sync.Mutex
	gen     uint64
	entries map[string]cacheEntry
}

type cacheEntry struct {
	v  any
	at time.Time
}

// maxCacheEntries bounds the memory of a cache that sees many rooms.
const maxCacheEntries = 10000

var (
	_ Catalog     = (*Cache)(nil)
	_ Subscribers = (*Cache)(nil)
)

// NewCache caches catalog and subs for ttl (ttl 0: no caching).
func NewCache(catalog Catalog, subs Subscribers, ttl time.Duration, now func() time.Time) *Cache {
	return &Cache{catalog: catalog, subs: subs, ttl: ttl, now: now, entries: map[string]cacheEntry{}}
}

// Invalidate forgets everything: call it after any change to rooms, event
// types, versions or subscriptions.
func (c *Cache) Invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.entries)
}

func cached[T any](c *Cache, key string, load func() (T, error)) (T, error) {
	if c.ttl <= 0 {
		return load()
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[key]
	gen := c.gen
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.ttl {
		return e.v.(T), nil
	}
	v, err := load()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A lookup that raced an Invalidate may have read the old state.
	if c.gen == gen {
		if len(c.entries) >= maxCacheEntries {
			clear(c.entries)
		}
		c.entries[key] = cacheEntry{v: v, at: now}
	}
	return v, nil
}

// Room implements Catalog.
func (c *Cache) Room(ctx context.Context, ref string) (rooms.Room, error) {
	return cached(c, "room "+ref, func() (rooms.Room, error) { return c.catalog.Room(ctx, ref) })
}

// EventTypeOf implements Catalog.
func (c *Cache) EventTypeOf(ctx context.Context, roomID uuid.UUID, identifier string) (rooms.EventType, error) {
	return cached(c, "type "+roomID.String()+" "+identifier, func() (rooms.EventType, error) {
		return c.catalog.EventTypeOf(ctx, roomID, identifier)
	})
}

// VersionOf implements Catalog.
func (c *Cache) VersionOf(ctx context.Context, eventTypeID uuid.UUID, version int) (rooms.Version, error) {
	return cached(c, fmt.Sprintf("version %s %d", eventTypeID, version), func() (rooms.Version, error) {
		return c.catalog.VersionOf(ctx, eventTypeID, version)
	})
}

// VersionsOf implements Catalog.
func (c *Cache) VersionsOf(ctx context.Context, eventTypeID uuid.UUID) ([]rooms.Version, error) {
	return cached(c, "versions "+eventTypeID.String(), func() ([]rooms.Version, error) {
		return c.catalog.VersionsOf(ctx, eventTypeID)
	})
}

// Subscriptions implements Subscribers; only whole lists are cached.
func (c *Cache) Subscriptions(ctx context.Context, q subscriptions.Query) ([]subscriptions.Subscription, error) {
	if q.Limit != 0 || q.After != uuid.Nil || q.OwnerSet {
		return c.subs.Subscriptions(ctx, q)
	}
	key := fmt.Sprintf("subs %s %s %s", q.RoomID, q.Type, q.Status)
	return cached(c, key, func() ([]subscriptions.Subscription, error) { return c.subs.Subscriptions(ctx, q) })
}
