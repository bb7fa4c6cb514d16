package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestExistingVersionsIsOneQuery: a subscription filter's versions are
// checked in one statement, however many it lists.
func TestExistingVersionsIsOneQuery(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			rs := db.Rooms()
			now := time.Now().UTC()
			room := rooms.NewRoomDefaults()
			room.ID, room.Identifier, room.ManagerIdentifier, room.CreatedAt, room.UpdatedAt = uuid.Must(uuid.NewV7()), "r", "m", now, now
			et := rooms.EventType{ID: uuid.Must(uuid.NewV7()), RoomID: room.ID, Identifier: "e", CreatedAt: now}
			other := rooms.EventType{ID: uuid.Must(uuid.NewV7()), RoomID: room.ID, Identifier: "other", CreatedAt: now}
			if err := rs.CreateRoom(ctx, room); err != nil {
				t.Fatal(err)
			}
			for _, e := range []rooms.EventType{et, other} {
				if err := rs.CreateEventType(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			for _, v := range []rooms.Version{{EventTypeID: et.ID, Version: 2}, {EventTypeID: et.ID, Version: 3}, {EventTypeID: et.ID, Version: 5}, {EventTypeID: other.ID, Version: 7}} {
				v.Schema, v.CreatedAt = []byte(`{}`), now
				if err := rs.CreateVersion(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			many := make([]int, 1000)
			for i := range many {
				many[i] = 1000 - i
			}
			cases := []struct {
				name     string
				versions []int
				want     []int
				queries  int64
			}{
				{"some exist", []int{5, 9, 2, 0, -1, 7, 2}, []int{2, 5}, 1},
				{"none exist", []int{1, 4}, nil, 1},
				{"a thousand", many, []int{2, 3, 5}, 1},
				{"none listed", nil, nil, 0},
			}
			queries := db.CountQueries(t)
			for _, tc := range cases {
				before := queries.Load()
				got, err := rs.ExistingVersions(ctx, et.ID, tc.versions)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
				}
				if n := queries.Load() - before; n != tc.queries {
					t.Errorf("%s: %d queries, want %d", tc.name, n, tc.queries)
				}
			}
		})
	}
}
