package subscriptions_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/subscriptions"
)

func TestSubscriptions(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		roomID := a.Seed(t)
		r := a.Do("POST", "/v1/rooms/orders/subscriptions", map[string]any{
			"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}, "deliveryAttempts": 5,
		})
		apptest.Want(t, r, http.StatusCreated)
		pull := apptest.Decode[subscriptions.Response](t, r)
		wantDest := "room-" + roomID + "::subscription-" + pull.ID
		if pull.Type != subscriptions.TypePull || pull.Destination == nil || *pull.Destination != wantDest || pull.PushURL != nil ||
			pull.DeliveryAttempts == nil || *pull.DeliveryAttempts != 5 || pull.DeliveryDelay != nil {
			t.Errorf("PULL subscription: %s", r.Body)
		}
		if created := a.Queues.Created(); len(created) != 1 || created[0].FQQN() != wantDest {
			t.Errorf("queues created: %v", created)
		}

		r = a.Do("POST", "/v1/rooms/"+roomID+"/subscriptions", map[string]any{
			"type": "PUSH", "pushUrl": "https://example.com/hook",
			"eventTypes": []any{map[string]any{"eventType": "order.created", "versions": []int{1, 2}}},
		})
		apptest.Want(t, r, http.StatusCreated)
		push := apptest.Decode[subscriptions.Response](t, r)
		if push.Destination != nil || push.PushURL == nil || *push.PushURL != "https://example.com/hook" {
			t.Errorf("PUSH subscription: %s", r.Body)
		}

		r = a.Do("GET", "/v1/rooms/orders/subscriptions?type=PUSH", nil)
		apptest.Want(t, r, http.StatusOK)
		if items := apptest.Decode[api.List[subscriptions.Response]](t, r).Items; len(items) != 1 || items[0].ID != push.ID {
			t.Errorf("type filter: %s", r.Body)
		}

		r = a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+push.ID, map[string]any{
			"status": "PAUSED", "deliveryDelay": 250, "eventTypes": []any{map[string]any{"eventType": "order.created", "versions": []int{2}}},
		})
		apptest.Want(t, r, http.StatusOK)
		m := apptest.Decode[subscriptions.Response](t, r)
		if m.Status != subscriptions.StatusPaused || m.DeliveryDelay == nil || *m.DeliveryDelay != 250 ||
			!slices.EqualFunc(m.EventTypes, []subscriptions.FilterInput{{EventType: "order.created", Versions: []int{2}}}, func(x, y subscriptions.FilterInput) bool {
				return x.EventType == y.EventType && slices.Equal(x.Versions, y.Versions)
			}) {
			t.Errorf("after PATCH: %s", r.Body)
		}
		r = a.Do("GET", "/v1/rooms/orders/subscriptions?status=PAUSED", nil)
		apptest.Want(t, r, http.StatusOK)
		if items := apptest.Decode[api.List[subscriptions.Response]](t, r).Items; len(items) != 1 || items[0].ID != push.ID {
			t.Errorf("status filter: %s", r.Body)
		}
		r = a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+push.ID, `{"deliveryDelay":null}`)
		apptest.Want(t, r, http.StatusOK)
		if apptest.Decode[subscriptions.Response](t, r).DeliveryDelay != nil {
			t.Errorf("override not cleared: %s", r.Body)
		}
		apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+push.ID, map[string]any{"status": "TERMINATED"}), http.StatusOK)
		apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+push.ID, map[string]any{"status": "ACTIVE"}), http.StatusConflict)

		// A room with subscriptions is deleted only with force.
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/orders", nil), http.StatusConflict)
		apptest.Want(t, a.Do("DELETE", "/v1/rooms/orders?force=true", nil), http.StatusNoContent)
		if deleted := a.Queues.Deleted(); len(deleted) != 1 || deleted[0].Queue != "subscription-"+pull.ID {
			t.Errorf("queues deleted with the room: %v, want the PULL subscription's", deleted)
		}
		apptest.Want(t, a.Do("GET", "/v1/rooms/"+roomID+"/subscriptions/"+pull.ID, nil), http.StatusNotFound)
	})
}

// TestPullQueueNeedsBroker: a PULL subscription is stored only with its
// queue, so it cannot be created while the broker is down.
func TestPullQueueNeedsBroker(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, "sqlite")
	a.Seed(t)
	a.Queues.SetDown(true)
	r := a.Do("POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}})
	apptest.Want(t, r, http.StatusServiceUnavailable)
	r = a.Do("GET", "/v1/rooms/orders/subscriptions", nil)
	apptest.Want(t, r, http.StatusOK)
	if n := len(apptest.Decode[api.List[subscriptions.Response]](t, r).Items); n != 0 {
		t.Errorf("a subscription was stored without its queue")
	}
	apptest.Want(t, a.Do("GET", "/readyz", nil), http.StatusServiceUnavailable)
	a.Queues.SetDown(false)
	apptest.Want(t, a.Do("GET", "/readyz", nil), http.StatusOK)
	apptest.Want(t, a.Do("GET", "/healthz", nil), http.StatusOK)
}
