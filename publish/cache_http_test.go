package publish_test

import (
	"net/http"
	"testing"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/publish"
)

// TestPublishSeesChangesAtOnce: the publish cache never hides from a publish
// a change made before it through the same process.
func TestPublishSeesChangesAtOnce(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		msg := map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "1"}}
		destinations := func() int {
			t.Helper()
			r := a.Do("POST", "/v1/rooms/orders/messages", msg)
			apptest.Want(t, r, http.StatusAccepted)
			return apptest.Decode[publish.PublishResponse](t, r).Destinations
		}
		if n := destinations(); n != 0 {
			t.Fatalf("%v destinations before any subscription", n)
		}
		sub := map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}}
		r := a.Do("POST", "/v1/rooms/orders/subscriptions", sub)
		apptest.Want(t, r, http.StatusCreated)
		id := r.JSON(t)["id"].(string)
		if n := destinations(); n != 1 {
			t.Errorf("%v destinations right after a subscription was made, want 1", n)
		}
		apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+id, map[string]any{"status": "PAUSED"}), http.StatusOK)
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions", sub), http.StatusCreated)
		if n := destinations(); n != 1 {
			t.Errorf("%v destinations after pausing one of two, want 1", n)
		}
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/event-types/order.created/versions", `{"schema":{"type":"object","required":["sku"]}}`), http.StatusCreated)
		if r := a.Do("POST", "/v1/rooms/orders/messages", msg); r.Status != http.StatusUnprocessableEntity {
			t.Errorf("publish after a new latest version: %d, want 422 from its schema", r.Status)
		}
		apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders", map[string]any{"status": "TERMINATED"}), http.StatusOK)
		if r := a.Do("POST", "/v1/rooms/orders/messages", msg); r.Status != http.StatusConflict {
			t.Errorf("publish to a room just terminated: %d, want 409", r.Status)
		}
	})
}
