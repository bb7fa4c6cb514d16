package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
	"github.com/roomhub/messaging-api/subscriptions"
)

// roomFixture is a room with one event type in a fresh database.
func roomFixture(t *testing.T, d store.Dialect) (*store.DB, rooms.Room, rooms.EventType) {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t, d)
	now := time.Now().UTC().Truncate(time.Microsecond)
	room := rooms.NewRoomDefaults()
	room.ID, room.Identifier, room.ManagerIdentifier, room.CreatedAt, room.UpdatedAt = uuid.Must(uuid.NewV7()), "r", "m", now, now
	room.SubscriptionApproval = rooms.ApprovalManual
	et := rooms.EventType{ID: uuid.Must(uuid.NewV7()), RoomID: room.ID, Identifier: "e", CreatedAt: now}
	if err := db.Rooms().CreateRoom(ctx, room); err != nil {
		t.Fatal(err)
	}
	if err := db.Rooms().CreateEventType(ctx, et); err != nil {
		t.Fatal(err)
	}
	return db, room, et
}

func newSubscription(room rooms.Room, et rooms.EventType, status subscriptions.Status) subscriptions.Subscription {
	now := time.Now().UTC().Truncate(time.Microsecond)
	return subscriptions.Subscription{
		ID: uuid.Must(uuid.NewV7()), RoomID: room.ID, Type: subscriptions.TypePull, Status: status,
		EventTypes:  []subscriptions.Filter{{EventTypeID: et.ID, EventType: et.Identifier, Versions: []int{}}},
		AckDeadline: subscriptions.DefaultAckDeadline, CreatedAt: now, UpdatedAt: now,
	}
}

// TestSubscriptionDecision: a decision is stored once, only on a PENDING
// subscription; a change racing it cannot undo it; REJECTED ones do not
// count against the room's cap; the room keeps its approval mode.
func TestSubscriptionDecision(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, room, et := roomFixture(t, d)
			subs := db.Subscriptions()
			if got, err := db.Rooms().Room(ctx, room.ID); err != nil || got.SubscriptionApproval != rooms.ApprovalManual {
				t.Fatalf("room read back: %+v, %v", got, err)
			}

			s := newSubscription(room, et, subscriptions.StatusPending)
			if err := subs.CreateSubscription(ctx, s); err != nil {
				t.Fatal(err)
			}
			stale := s // read before the decision
			decided := s
			decided.Status, decided.DecidedBy, decided.DecidedAt = subscriptions.StatusActive, "team-a", time.Now().UTC().Truncate(time.Microsecond)
			if err := subs.Decide(ctx, decided); err != nil {
				t.Fatal(err)
			}
			if err := subs.Decide(ctx, decided); !errors.Is(err, subscriptions.ErrDecided) {
				t.Errorf("second decision: %v, want ErrDecided", err)
			}
			stale.AckDeadline = time.Minute
			if err := subs.UpdateSubscription(ctx, stale); !errors.Is(err, subscriptions.ErrDecided) {
				t.Errorf("a change of the PENDING subscription read before its approval: %v, want ErrDecided", err)
			}
			got, err := subs.Subscription(ctx, room.ID, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != subscriptions.StatusActive || got.DecidedBy != "team-a" || !got.DecidedAt.Equal(decided.DecidedAt) || got.AckDeadline != s.AckDeadline {
				t.Errorf("read back: %+v", got)
			}
			// Other changes leave the decision alone.
			got.AckDeadline = time.Minute
			if err := subs.UpdateSubscription(ctx, got); err != nil {
				t.Fatal(err)
			}
			if again, _ := subs.Subscription(ctx, room.ID, s.ID); again.DecidedBy != "team-a" || again.AckDeadline != time.Minute {
				t.Errorf("after an update: %+v", again)
			}

			missing := newSubscription(room, et, subscriptions.StatusRejected)
			if err := subs.Decide(ctx, missing); !errors.Is(err, subscriptions.ErrNotFound) {
				t.Errorf("decision on a missing subscription: %v, want ErrNotFound", err)
			}
			rejected := newSubscription(room, et, subscriptions.StatusPending)
			if err := subs.CreateSubscription(ctx, rejected); err != nil {
				t.Fatal(err)
			}
			rejected.Status, rejected.RejectionReason, rejected.DecidedAt = subscriptions.StatusRejected, "no", time.Now().UTC()
			if err := subs.Decide(ctx, rejected); err != nil {
				t.Fatal(err)
			}
			if n, err := subs.CountSubscriptions(ctx, room.ID); err != nil || n != 1 {
				t.Errorf("count %d (%v), want 1: a REJECTED subscription does not count", n, err)
			}
		})
	}
}

// TestAttributeFilterStored: a filter is stored as its canonical JSON
// (JSONB on PostgreSQL, which answers it in its own spelling) and loads
// compiled, the same on both databases; a removed one is NULL.
func TestAttributeFilterStored(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, room, et := roomFixture(t, d)
			subs := db.Subscriptions()
			var probs api.Problems
			filter := subscriptions.ParseAttributeFilter(json.RawMessage(
				`{"tier":[{"anything-but":["free"]}],"priority":[{"numeric":[">",0,"<=",5.5]}],"region":["eu","us"],"name":["ü \"q\" <&>"]}`), &probs)
			if err := probs.Err(); err != nil {
				t.Fatal(err)
			}
			s := newSubscription(room, et, subscriptions.StatusActive)
			s.AttributeFilter = filter
			if err := subs.CreateSubscription(ctx, s); err != nil {
				t.Fatal(err)
			}
			list, err := subs.Subscriptions(ctx, subscriptions.Query{RoomID: room.ID, Status: subscriptions.StatusActive})
			if err != nil || len(list) != 1 {
				t.Fatalf("%d subscriptions, %v", len(list), err)
			}
			got := list[0].AttributeFilter
			if got.Text() != filter.Text() {
				t.Errorf("filter read back as %s, want %s", got.Text(), filter.Text())
			}
			if !got.Matches(map[string]string{"tier": "gold", "priority": "5.5", "region": "eu", "name": `ü "q" <&>`}) ||
				got.Matches(map[string]string{"tier": "free", "priority": "5.5", "region": "eu", "name": `ü "q" <&>`}) {
				t.Error("the filter read back does not select as the one stored")
			}
			s.AttributeFilter = nil
			if err := subs.UpdateSubscription(ctx, s); err != nil {
				t.Fatal(err)
			}
			if again, _ := subs.Subscription(ctx, room.ID, s.ID); again.AttributeFilter != nil {
				t.Errorf("removed filter read back as %s", again.AttributeFilter.Text())
			}
		})
	}
}
