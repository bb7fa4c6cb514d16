package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestUnstorableValues: what PostgreSQL cannot hold (a NUL character or
// invalid UTF-8 in text, an integer past its column) comes back as a
// validation error, not an unknown one (a 500). The features refuse these
// values first; this is the backstop. SQLite takes them.
func TestUnstorableValues(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rs := storetest.Open(t, d).Rooms()
			now := time.Now().UTC()
			newRoom := func(identifier, manager string) rooms.Room {
				r := rooms.NewRoomDefaults()
				r.ID, r.Identifier, r.ManagerIdentifier, r.CreatedAt, r.UpdatedAt = uuid.Must(uuid.NewV7()), identifier, manager, now, now
				return r
			}
			room := newRoom("r", "m")
			if err := rs.CreateRoom(ctx, room); err != nil {
				t.Fatal(err)
			}
			et := rooms.EventType{ID: uuid.Must(uuid.NewV7()), RoomID: room.ID, Identifier: "e", CreatedAt: now}
			if err := rs.CreateEventType(ctx, et); err != nil {
				t.Fatal(err)
			}
			checks := []struct {
				name string
				err  error
				// found: SQLite answers a lookup of a value no row has.
				sqliteNotFound bool
			}{
				{"NUL in a stored text", rs.CreateRoom(ctx, newRoom("r2", "a\x00b")), false},
				{"invalid UTF-8 in a stored text", rs.CreateRoom(ctx, newRoom("r3", "a\xffb")), false},
				{"NUL in a looked-up text", second(rs.EventType(ctx, room.ID, "a\x00b")), true},
				{"an integer past its column", second(rs.Version(ctx, et.ID, 1<<31)), true},
			}
			for _, c := range checks {
				var ve *api.ValidationError
				switch {
				case d == store.SQLite && c.sqliteNotFound:
					if !api.IsNotFound(c.err) {
						t.Errorf("%s: %v, want not found", c.name, c.err)
					}
				case d == store.SQLite:
					if c.err != nil {
						t.Errorf("%s: %v", c.name, c.err)
					}
				case !errors.As(c.err, &ve) || errors.Is(c.err, api.ErrUnavailable):
					t.Errorf("%s: %v (%T), want a validation error", c.name, c.err, c.err)
				}
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }
