package publish

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// countingCatalog counts lookups and answers from fields a test changes.
type countingCatalog struct {
	mu    sync.Mutex
	calls int
	room  rooms.Room
	subs  []subscriptions.Subscription
	err   error
}

func (c *countingCatalog) Room(context.Context, string) (rooms.Room, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return c.room, c.err
}

func (c *countingCatalog) EventTypeOf(context.Context, uuid.UUID, string) (rooms.EventType, error) {
	return rooms.EventType{}, nil
}

func (c *countingCatalog) VersionOf(context.Context, uuid.UUID, int) (rooms.Version, error) {
	return rooms.Version{}, nil
}

func (c *countingCatalog) VersionsOf(context.Context, uuid.UUID) ([]rooms.Version, error) {
	return nil, nil
}

func (c *countingCatalog) Subscriptions(context.Context, subscriptions.Query) ([]subscriptions.Subscription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return c.subs, c.err
}

func TestCache(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	src := &countingCatalog{room: rooms.Room{Identifier: "a"}}
	c := NewCache(src, src, time.Second, clock)
	ctx := context.Background()

	for range 3 {
		if r, err := c.Room(ctx, "x"); err != nil || r.Identifier != "a" {
			t.Fatalf("Room: %v %v", r, err)
		}
	}
	if src.calls != 1 {
		t.Errorf("%d lookups within the TTL, want 1", src.calls)
	}
	src.room.Identifier = "b"
	now = now.Add(time.Second)
	if r, _ := c.Room(ctx, "x"); r.Identifier != "b" || src.calls != 2 {
		t.Errorf("after the TTL: %q after %d lookups, want b after 2", r.Identifier, src.calls)
	}
	src.room.Identifier = "c"
	c.Invalidate()
	if r, _ := c.Room(ctx, "x"); r.Identifier != "c" {
		t.Errorf("after Invalidate: %q, want c", r.Identifier)
	}

	// Errors are not kept: what was missing is found as soon as it exists.
	src.err = errors.New("no such room")
	if _, err := c.Room(ctx, "y"); err == nil {
		t.Fatal("error lost")
	}
	src.err = nil
	if _, err := c.Room(ctx, "y"); err != nil {
		t.Errorf("an error was cached: %v", err)
	}

	// Pages and owner lists are never cached; whole lists are.
	id := uuid.New()
	before := src.calls
	c.Subscriptions(ctx, subscriptions.Query{RoomID: id, Status: subscriptions.StatusActive})
	c.Subscriptions(ctx, subscriptions.Query{RoomID: id, Status: subscriptions.StatusActive})
	c.Subscriptions(ctx, subscriptions.Query{RoomID: id, Limit: 10})
	c.Subscriptions(ctx, subscriptions.Query{RoomID: id, Limit: 10})
	if got := src.calls - before; got != 3 {
		t.Errorf("%d subscription lookups, want 3 (1 list + 2 pages)", got)
	}

	// TTL 0 caches nothing.
	off := NewCache(src, src, 0, clock)
	before = src.calls
	off.Room(ctx, "x")
	off.Room(ctx, "x")
	if src.calls-before != 2 {
		t.Errorf("TTL 0 cached")
	}
}
