package publish_test

import (
	"net/http"
	"testing"
)

// TestPublishSeesChangesAtOnce: the publish cache never hides from a publish
// a change made before it through the same process.
func TestPublishSeesChangesAtOnce(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		a.seed(t)
		msg := map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "1"}}
		destinations := func() float64 {
			t.Helper()
			r := a.do("POST", "/v1/rooms/orders/messages", msg)
			want(t, r, http.StatusAccepted)
			return r.JSON(t)["destinations"].(float64)
		}
		if n := destinations(); n != 0 {
			t.Fatalf("%v destinations before any subscription", n)
		}
		sub := map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}}
		r := a.do("POST", "/v1/rooms/orders/subscriptions", sub)
		want(t, r, http.StatusCreated)
		id := r.JSON(t)["id"].(string)
		if n := destinations(); n != 1 {
			t.Errorf("%v destinations right after a subscription was made, want 1", n)
		}
		want(t, a.do("PATCH", "/v1/rooms/orders/subscriptions/"+id, map[string]any{"status": "PAUSED"}), http.StatusOK)
		want(t, a.do("POST", "/v1/rooms/orders/subscriptions", sub), http.StatusCreated)
		if n := destinations(); n != 1 {
			t.Errorf("%v destinations after pausing one of two, want 1", n)
		}
		want(t, a.do("POST", "/v1/rooms/orders/event-types/order.created/versions", `{"schema":{"type":"object","required":["sku"]}}`), http.StatusCreated)
		if r := a.do("POST", "/v1/rooms/orders/messages", msg); r.Status != http.StatusUnprocessableEntity {
			t.Errorf("publish after a new latest version: %d, want 422 from its schema", r.Status)
		}
		want(t, a.do("PATCH", "/v1/rooms/orders", map[string]any{"status": "TERMINATED"}), http.StatusOK)
		if r := a.do("POST", "/v1/rooms/orders/messages", msg); r.Status != http.StatusConflict {
			t.Errorf("publish to a room just terminated: %d, want 409", r.Status)
		}
	})
}
