package auth

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
)

// countingRooms finds every room, counting the lookups.
type countingRooms struct{ lookups atomic.Int64 }

func (c *countingRooms) RoomID(context.Context, string) (uuid.UUID, error) {
	c.lookups.Add(1)
	return uuid.New(), nil
}

// TestGrantLimits: a key's lists are bounded, and refused before a room is
// looked up per entry.
func TestGrantLimits(t *testing.T) {
	t.Parallel()
	grants := func(n, eventTypes int) []GrantSpec {
		gs := make([]GrantSpec, n)
		for i := range gs {
			gs[i] = GrantSpec{Room: "r", EventTypes: slices.Repeat([]string{"e"}, eventTypes)}
		}
		return gs
	}
	cases := []struct {
		name    string
		spec    Spec
		field   string
		message string
		lookups int64
	}{
		{"too many rooms", Spec{Name: "k", Role: api.RolePublisher, Rooms: grants(100_000, 0)}, "rooms", "at most 1000", 0},
		{"rooms on an admin key", Spec{Name: "k", Role: api.RoleAdmin, Rooms: grants(100_000, 0)}, "rooms", "only publisher", 0},
		{"too many event types", Spec{Name: "k", Role: api.RolePublisher, Rooms: grants(1, maxGrantEventTypes+1)}, "rooms[0].eventTypes", "at most 100", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rooms := &countingRooms{}
			svc := NewService(&memStore{keys: map[uuid.UUID]Key{}}, rooms, newClock().now)
			_, _, err := svc.Create(context.Background(), tc.spec)
			var ve *api.ValidationError
			if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != tc.field || !strings.Contains(ve.Fields[0].Message, tc.message) {
				t.Fatalf("error %v, want one problem with %s", err, tc.field)
			}
			if n := rooms.lookups.Load(); n != tc.lookups {
				t.Errorf("%d room lookups, want %d", n, tc.lookups)
			}
		})
	}
	svc := NewService(&memStore{keys: map[uuid.UUID]Key{}}, &countingRooms{}, newClock().now)
	if _, _, err := svc.Create(context.Background(), Spec{Name: "k", Role: api.RolePublisher, Rooms: grants(maxGrants, maxGrantEventTypes)}); err != nil {
		t.Errorf("a key at the limits: %v", err)
	}
}
