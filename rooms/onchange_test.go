package rooms_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/rooms"
)

// TestOnChangeAfterCommit: a stored change is reported with its room; a
// refused one is not.
func TestOnChangeAfterCommit(t *testing.T) {
	t.Parallel()
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	existing := rooms.NewRoomDefaults()
	existing.ID, existing.Identifier, existing.ManagerIdentifier = uuid.Must(uuid.NewV7()), "orders", "team-a"
	store := &memRooms{existing: existing}
	store.reset()
	var changed []uuid.UUID
	svc := rooms.NewService(rooms.Deps{Store: store, Now: now, OnChange: func(id uuid.UUID) { changed = append(changed, id) }})
	ctx := context.Background()

	r, err := svc.CreateRoom(ctx, rooms.RoomPatch{Identifier: api.Nullable[string]{Set: true, Value: "invoices"},
		ManagerIdentifier: api.Nullable[string]{Set: true, Value: "team-b"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateRoom(ctx, rooms.RoomPatch{Identifier: api.Nullable[string]{Set: true, Value: "orders"},
		ManagerIdentifier: api.Nullable[string]{Set: true, Value: "team-b"}}); err == nil {
		t.Fatal("a second room named orders was made")
	}
	if _, err := svc.UpdateRoom(ctx, "orders", rooms.RoomPatch{DeliveryAttempts: api.Nullable[int]{Set: true, Value: 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.UpdateRoom(ctx, "orders", rooms.RoomPatch{DeliveryAttempts: api.Nullable[int]{Set: true, Value: -1}}); err == nil {
		t.Fatal("deliveryAttempts -1 accepted")
	}
	if want := []uuid.UUID{r.ID, existing.ID}; !slices.Equal(changed, want) {
		t.Errorf("OnChange heard %v, want %v", changed, want)
	}
}
