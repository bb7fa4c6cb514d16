package rooms_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"testing"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/rooms"
)

func TestRoomLifecycle(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		r := a.Do("POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "team-a"})
		apptest.Want(t, r, http.StatusCreated)
		room := apptest.Decode[rooms.RoomResponse](t, r)
		id := room.ID
		if room.Address != "room-"+id {
			t.Errorf("address %v, want room-%s", room.Address, id)
		}
		if room.MessageExpiration != nil || room.DeliveryDelay != 1000 || room.DeliveryDelayMultiplier != 2 || room.DeliveryAttempts != 3 || room.Status != rooms.StatusActive {
			t.Errorf("defaults: %s", r.Body)
		}
		if got := r.Header.Get("Location"); got != "/v1/rooms/"+id {
			t.Errorf("Location %q", got)
		}

		// By id and by identifier.
		for _, ref := range []string{id, "orders"} {
			r = a.Do("GET", "/v1/rooms/"+ref, nil)
			apptest.Want(t, r, http.StatusOK)
			if apptest.Decode[rooms.RoomResponse](t, r).ID != id {
				t.Errorf("GET %s: %s", ref, r.Body)
			}
		}

		r = a.Do("PATCH", "/v1/rooms/"+id, map[string]any{"messageExpiration": 5000, "deliveryAttempts": 7, "deliveryDelayMultiplier": 1.5})
		apptest.Want(t, r, http.StatusOK)
		if m := apptest.Decode[rooms.RoomResponse](t, r); m.MessageExpiration == nil || *m.MessageExpiration != 5000 || m.DeliveryAttempts != 7 || m.DeliveryDelayMultiplier != 1.5 || m.Identifier != "orders" {
			t.Errorf("after PATCH: %s", r.Body)
		}
		r = a.Do("PATCH", "/v1/rooms/orders", `{"messageExpiration":null}`)
		apptest.Want(t, r, http.StatusOK)
		if m := apptest.Decode[rooms.RoomResponse](t, r); m.MessageExpiration != nil || m.DeliveryAttempts != 7 {
			t.Errorf("after PATCH null: %s", r.Body)
		}

		apptest.Want(t, a.Do("POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "x"}), http.StatusConflict)
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/"+id, nil), http.StatusNoContent)
		apptest.Want(t, a.Do("GET", "/v1/rooms/"+id, nil), http.StatusNotFound)
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/"+id, nil), http.StatusNotFound)
	})
}

func TestRoomPagination(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		var created []string
		for i := range 7 {
			r := a.Do("POST", "/v1/rooms", map[string]any{"identifier": fmt.Sprintf("room-%d", i), "managerIdentifier": "m"})
			apptest.Want(t, r, http.StatusCreated)
			created = append(created, apptest.Decode[rooms.RoomResponse](t, r).ID)
		}
		var seen []string
		path := "/v1/rooms?limit=3"
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			r := a.Do("GET", path, nil)
			apptest.Want(t, r, http.StatusOK)
			page := apptest.Decode[api.List[rooms.RoomResponse]](t, r)
			for _, it := range page.Items {
				seen = append(seen, it.ID)
			}
			if page.NextCursor == "" {
				break
			}
			path = "/v1/rooms?limit=3&cursor=" + page.NextCursor
		}
		if !slices.Equal(seen, created) {
			t.Errorf("pages gave %v, want creation order %v", seen, created)
		}
	})
}

func TestEventTypesAndVersions(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		r := a.Do("GET", "/v1/rooms/orders/event-types/order.created/versions", nil)
		apptest.Want(t, r, http.StatusOK)
		versions := apptest.Decode[api.List[rooms.VersionResponse]](t, r).Items
		if len(versions) != 2 || versions[1].Version != 2 {
			t.Fatalf("versions: %s", r.Body)
		}
		r = a.Do("GET", "/v1/rooms/orders/event-types/order.created/versions/1", nil)
		apptest.Want(t, r, http.StatusOK)
		if v := apptest.Decode[rooms.VersionResponse](t, r); v.EventType != "order.created" || v.Version != 1 || !sameJSON(t, v.Schema, apptest.OrderSchema) {
			t.Errorf("version 1: %s, want its schema %s", r.Body, apptest.OrderSchema)
		}
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":1,"schema":{}}`), http.StatusConflict)
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.created"}), http.StatusConflict)
		apptest.Want(t, a.Do("GET", "/v1/rooms/orders/event-types/order.created/versions/9", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("GET", "/v1/rooms/orders/event-types/nope/versions", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("GET", "/v1/rooms/nope/event-types", nil), http.StatusNotFound)

		r = a.Do("GET", "/v1/rooms/orders/event-types", nil)
		apptest.Want(t, r, http.StatusOK)
		if ets := apptest.Decode[api.List[rooms.EventTypeResponse]](t, r).Items; len(ets) != 1 || ets[0].Identifier != "order.created" {
			t.Errorf("event types: %s", r.Body)
		}

		// A version a subscription names cannot go until the subscription does.
		r = a.Do("POST", "/v1/rooms/orders/subscriptions", map[string]any{
			"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created", "versions": []int{2}}},
		})
		apptest.Want(t, r, http.StatusCreated)
		subID := r.JSON(t)["id"].(string)
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/orders/event-types/order.created/versions/2", nil), http.StatusConflict)
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/orders/event-types/order.created", nil), http.StatusConflict)
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/orders/event-types/order.created/versions/1", nil), http.StatusNoContent)
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/orders/subscriptions/"+subID, nil), http.StatusNoContent)
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/orders/event-types/order.created/versions/2", nil), http.StatusNoContent)
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/orders/event-types/order.created", nil), http.StatusNoContent)
		apptest.Want(t, a.Do("GET", "/v1/rooms/orders/event-types/order.created", nil), http.StatusNotFound)
	})
}

// sameJSON says whether got and want are the same JSON value.
func sameJSON(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}
