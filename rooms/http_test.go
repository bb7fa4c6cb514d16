package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

const orderSchema = `{"type":"object","required":["orderId"],"properties":{"orderId":{"type":"string"}}}`

// seed creates room "orders" with event type order.created, versions 1 and 2,
// and returns the room id.
func (a *testAPI) seed(t *testing.T) string {
	t.Helper()
	r := a.do("POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "team-a", "messageExpiration": 60000})
	want(t, r, http.StatusCreated)
	id := r.JSON(t)["id"].(string)
	want(t, a.do("POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.created"}), http.StatusCreated)
	want(t, a.do("POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":1,"schema":`+orderSchema+`}`), http.StatusCreated)
	want(t, a.do("POST", "/v1/rooms/orders/event-types/order.created/versions", `{"schema":`+orderSchema+`}`), http.StatusCreated)
	return id
}

func TestRoomLifecycle(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		r := a.do("POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "team-a"})
		want(t, r, http.StatusCreated)
		room := r.JSON(t)
		id := room["id"].(string)
		if room["address"] != "room-"+id {
			t.Errorf("address %v, want room-%s", room["address"], id)
		}
		if room["messageExpiration"] != nil || room["deliveryDelay"] != 1000.0 || room["deliveryDelayMultiplier"] != 2.0 || room["deliveryAttempts"] != 3.0 || room["status"] != "ACTIVE" {
			t.Errorf("defaults: %s", r.Body)
		}
		if got := r.Header.Get("Location"); got != "/v1/rooms/"+id {
			t.Errorf("Location %q", got)
		}

		// By id and by identifier.
		for _, ref := range []string{id, "orders"} {
			r = a.do("GET", "/v1/rooms/"+ref, nil)
			want(t, r, http.StatusOK)
			if r.JSON(t)["id"] != id {
				t.Errorf("GET %s: %s", ref, r.Body)
			}
		}

		r = a.do("PATCH", "/v1/rooms/"+id, map[string]any{"messageExpiration": 5000, "deliveryAttempts": 7, "deliveryDelayMultiplier": 1.5})
		want(t, r, http.StatusOK)
		if m := r.JSON(t); m["messageExpiration"] != 5000.0 || m["deliveryAttempts"] != 7.0 || m["deliveryDelayMultiplier"] != 1.5 || m["identifier"] != "orders" {
			t.Errorf("after PATCH: %s", r.Body)
		}
		r = a.do("PATCH", "/v1/rooms/orders", `{"messageExpiration":null}`)
		want(t, r, http.StatusOK)
		if m := r.JSON(t); m["messageExpiration"] != nil || m["deliveryAttempts"] != 7.0 {
			t.Errorf("after PATCH null: %s", r.Body)
		}

		want(t, a.do("POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "x"}), http.StatusConflict)
		want(t, a.do("DELETE", "/v1/rooms/"+id, nil), http.StatusNoContent)
		want(t, a.do("GET", "/v1/rooms/"+id, nil), http.StatusNotFound)
		want(t, a.do("DELETE", "/v1/rooms/"+id, nil), http.StatusNotFound)
	})
}

func TestRoomPagination(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		var created []string
		for i := range 7 {
			r := a.do("POST", "/v1/rooms", map[string]any{"identifier": fmt.Sprintf("room-%d", i), "managerIdentifier": "m"})
			want(t, r, http.StatusCreated)
			created = append(created, r.JSON(t)["id"].(string))
		}
		var seen []string
		path := "/v1/rooms?limit=3"
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			r := a.do("GET", path, nil)
			want(t, r, http.StatusOK)
			m := r.JSON(t)
			for _, it := range m["items"].([]any) {
				seen = append(seen, it.(map[string]any)["id"].(string))
			}
			next, _ := m["nextCursor"].(string)
			if next == "" {
				break
			}
			path = "/v1/rooms?limit=3&cursor=" + next
		}
		if strings.Join(seen, ",") != strings.Join(created, ",") {
			t.Errorf("pages gave %v, want creation order %v", seen, created)
		}
	})
}

func TestEventTypesAndVersions(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		a.seed(t)
		r := a.do("GET", "/v1/rooms/orders/event-types/order.created/versions", nil)
		want(t, r, http.StatusOK)
		items := r.JSON(t)["items"].([]any)
		if len(items) != 2 || items[1].(map[string]any)["version"] != 2.0 {
			t.Fatalf("versions: %s", r.Body)
		}
		r = a.do("GET", "/v1/rooms/orders/event-types/order.created/versions/1", nil)
		want(t, r, http.StatusOK)
		if s := r.JSON(t)["schema"].(map[string]any); s["type"] != "object" {
			t.Errorf("schema not returned: %s", r.Body)
		}
		want(t, a.do("POST", "/v1/rooms/orders/event-types/order.created/versions", `{"version":1,"schema":{}}`), http.StatusConflict)
		want(t, a.do("POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.created"}), http.StatusConflict)
		want(t, a.do("GET", "/v1/rooms/orders/event-types/order.created/versions/9", nil), http.StatusNotFound)
		want(t, a.do("GET", "/v1/rooms/orders/event-types/nope/versions", nil), http.StatusNotFound)
		want(t, a.do("GET", "/v1/rooms/nope/event-types", nil), http.StatusNotFound)

		r = a.do("GET", "/v1/rooms/orders/event-types", nil)
		want(t, r, http.StatusOK)
		if n := len(r.JSON(t)["items"].([]any)); n != 1 {
			t.Errorf("%d event types", n)
		}

		// A version a subscription names cannot go until the subscription does.
		r = a.do("POST", "/v1/rooms/orders/subscriptions", map[string]any{
			"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created", "versions": []int{2}}},
		})
		want(t, r, http.StatusCreated)
		subID := r.JSON(t)["id"].(string)
		want(t, a.do("DELETE", "/v1/rooms/orders/event-types/order.created/versions/2", nil), http.StatusConflict)
		want(t, a.do("DELETE", "/v1/rooms/orders/event-types/order.created", nil), http.StatusConflict)
		want(t, a.do("DELETE", "/v1/rooms/orders/event-types/order.created/versions/1", nil), http.StatusNoContent)
		want(t, a.do("DELETE", "/v1/rooms/orders/subscriptions/"+subID, nil), http.StatusNoContent)
		want(t, a.do("DELETE", "/v1/rooms/orders/event-types/order.created/versions/2", nil), http.StatusNoContent)
		want(t, a.do("DELETE", "/v1/rooms/orders/event-types/order.created", nil), http.StatusNoContent)
		want(t, a.do("GET", "/v1/rooms/orders/event-types/order.created", nil), http.StatusNotFound)
	})
}

func TestSubscriptions(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		roomID := a.seed(t)
		r := a.do("POST", "/v1/rooms/orders/subscriptions", map[string]any{
			"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}, "deliveryAttempts": 5,
		})
		want(t, r, http.StatusCreated)
		pull := r.JSON(t)
		pullID := pull["id"].(string)
		wantDest := "room-" + roomID + "::subscription-" + pullID
		if pull["destination"] != wantDest || pull["pushUrl"] != nil || pull["deliveryAttempts"] != 5.0 || pull["deliveryDelay"] != nil {
			t.Errorf("PULL subscription: %s", r.Body)
		}
		if len(a.queues.created) != 1 || a.queues.created[0].FQQN() != wantDest {
			t.Errorf("queues created: %v", a.queues.created)
		}

		r = a.do("POST", "/v1/rooms/"+roomID+"/subscriptions", map[string]any{
			"type": "PUSH", "pushUrl": "https://example.com/hook",
			"eventTypes": []any{map[string]any{"eventType": "order.created", "versions": []int{1, 2}}},
		})
		want(t, r, http.StatusCreated)
		push := r.JSON(t)
		pushID := push["id"].(string)
		if push["destination"] != nil || push["pushUrl"] != "https://example.com/hook" {
			t.Errorf("PUSH subscription: %s", r.Body)
		}

		r = a.do("GET", "/v1/rooms/orders/subscriptions?type=PUSH", nil)
		want(t, r, http.StatusOK)
		if items := r.JSON(t)["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != pushID {
			t.Errorf("type filter: %s", r.Body)
		}

		r = a.do("PATCH", "/v1/rooms/orders/subscriptions/"+pushID, map[string]any{
			"status": "PAUSED", "deliveryDelay": 250, "eventTypes": []any{map[string]any{"eventType": "order.created", "versions": []int{2}}},
		})
		want(t, r, http.StatusOK)
		m := r.JSON(t)
		if m["status"] != "PAUSED" || m["deliveryDelay"] != 250.0 || fmt.Sprint(m["eventTypes"]) != "[map[eventType:order.created versions:[2]]]" {
			t.Errorf("after PATCH: %s", r.Body)
		}
		r = a.do("GET", "/v1/rooms/orders/subscriptions?status=PAUSED", nil)
		want(t, r, http.StatusOK)
		if items := r.JSON(t)["items"].([]any); len(items) != 1 {
			t.Errorf("status filter: %s", r.Body)
		}
		r = a.do("PATCH", "/v1/rooms/orders/subscriptions/"+pushID, `{"deliveryDelay":null}`)
		want(t, r, http.StatusOK)
		if r.JSON(t)["deliveryDelay"] != nil {
			t.Errorf("override not cleared: %s", r.Body)
		}
		want(t, a.do("PATCH", "/v1/rooms/orders/subscriptions/"+pushID, map[string]any{"status": "TERMINATED"}), http.StatusOK)
		want(t, a.do("PATCH", "/v1/rooms/orders/subscriptions/"+pushID, map[string]any{"status": "ACTIVE"}), http.StatusConflict)

		// A room with subscriptions is deleted only with force.
		want(t, a.do("DELETE", "/v1/rooms/orders", nil), http.StatusConflict)
		want(t, a.do("DELETE", "/v1/rooms/orders?force=true", nil), http.StatusNoContent)
		if len(a.queues.deleted) != 1 || a.queues.deleted[0].Queue != "subscription-"+pullID {
			t.Errorf("queues deleted with the room: %v, want the PULL subscription's", a.queues.deleted)
		}
		want(t, a.do("GET", "/v1/rooms/"+roomID+"/subscriptions/"+pullID, nil), http.StatusNotFound)
	})
}

func TestPullQueueNeedsBroker(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, "sqlite")
	a.seed(t)
	a.queues.down = true
	r := a.do("POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}})
	want(t, r, http.StatusServiceUnavailable)
	r = a.do("GET", "/v1/rooms/orders/subscriptions", nil)
	if n := len(r.JSON(t)["items"].([]any)); n != 0 {
		t.Errorf("a subscription was stored without its queue")
	}
	want(t, a.do("GET", "/readyz", nil), http.StatusServiceUnavailable)
	a.queues.down = false
	want(t, a.do("GET", "/readyz", nil), http.StatusOK)
	want(t, a.do("GET", "/healthz", nil), http.StatusOK)
}
