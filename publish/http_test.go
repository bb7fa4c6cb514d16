package publish_test

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/store"
)

// TestPublishRouting publishes every event type × version to a room whose
// subscriptions cover PUSH and PULL, version filters, and every status, and
// checks which subscriptions each event reached.
func TestPublishRouting(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		roomID := a.Seed(t) // order.created v1, v2
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.paid"}), http.StatusCreated)
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/event-types/order.paid/versions", `{"schema":{}}`), http.StatusCreated)

		type sub struct {
			name, typ, status string
			filter            []any
		}
		subs := []sub{
			{"pull-all-created", "PULL", "ACTIVE", []any{map[string]any{"eventType": "order.created"}}},
			{"push-created-v2", "PUSH", "ACTIVE", []any{map[string]any{"eventType": "order.created", "versions": []int{2}}}},
			{"push-both", "PUSH", "ACTIVE", []any{map[string]any{"eventType": "order.created", "versions": []int{1}}, map[string]any{"eventType": "order.paid"}}},
			{"pull-paused", "PULL", "PAUSED", []any{map[string]any{"eventType": "order.created"}}},
			{"push-terminated", "PUSH", "TERMINATED", []any{map[string]any{"eventType": "order.created"}}},
		}
		names := map[string]string{}
		for _, s := range subs {
			body := map[string]any{"type": s.typ, "eventTypes": s.filter}
			if s.typ == "PUSH" {
				body["pushUrl"] = "http://127.0.0.1:9/" + s.name
			}
			r := a.Do("POST", "/v1/rooms/orders/subscriptions", body)
			apptest.Want(t, r, http.StatusCreated)
			id := r.JSON(t)["id"].(string)
			names[id] = s.name
			apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+id, map[string]any{"status": s.status}), http.StatusOK)
		}

		cases := []struct {
			eventType string
			version   int // 0: latest
			want      []string
		}{
			{"order.created", 1, []string{"pull-all-created", "push-both"}},
			{"order.created", 2, []string{"pull-all-created", "push-created-v2"}},
			{"order.created", 0, []string{"pull-all-created", "push-created-v2"}}, // latest is 2
			{"order.paid", 1, []string{"push-both"}},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/v%d", tc.eventType, tc.version), func(t *testing.T) {
				body := map[string]any{"eventType": tc.eventType, "payload": map[string]any{"orderId": "o-1"}}
				if tc.version > 0 {
					body["eventTypeVersion"] = tc.version
				}
				r := a.Do("POST", "/v1/rooms/orders/messages", body)
				apptest.Want(t, r, http.StatusAccepted)
				res := apptest.Decode[publish.PublishResponse](t, r)
				if res.Destinations != len(tc.want) {
					t.Errorf("destinations %d, want %d", res.Destinations, len(tc.want))
				}
				r = a.Do("GET", "/v1/rooms/orders/messages/"+res.EventID, nil)
				apptest.Want(t, r, http.StatusOK)
				var got []string
				for _, d := range apptest.Decode[publish.EventResponse](t, r).Deliveries {
					name := names[d.SubscriptionID]
					got = append(got, name)
					if strings.HasPrefix(name, "pull") && d.Destination != "room-"+roomID+"::subscription-"+d.SubscriptionID {
						t.Errorf("%s went to %s", name, d.Destination)
					}
					if strings.HasPrefix(name, "push") && d.Destination != "messaging.push::messaging.push" {
						t.Errorf("%s went to %s, want the push queue", name, d.Destination)
					}
					if len(d.Attempts) != 1 {
						t.Errorf("%s: attempts %+v, want the first only", name, d.Attempts)
						continue
					}
					if att := d.Attempts[0]; att.Attempt != 1 || att.Status != message.StatusPending || att.ScheduledDelay != 0 {
						t.Errorf("first attempt: %+v", att)
					}
				}
				sort.Strings(got)
				if strings.Join(got, ",") != strings.Join(tc.want, ",") {
					t.Errorf("reached %v, want %v", got, tc.want)
				}
			})
		}
	})
}

func TestPublishValidation(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, store.SQLite)
	a.Seed(t)
	cases := []struct {
		name, body string
		status     int
		field      string
		pointer    string
	}{
		{"schema: missing property", `{"eventType":"order.created","payload":{}}`, 422, "payload", "/payload"},
		{"schema: wrong type", `{"eventType":"order.created","payload":{"orderId":5}}`, 422, "payload", "/payload/orderId"},
		{"payload missing", `{"eventType":"order.created"}`, 422, "payload", ""},
		{"event type missing", `{"payload":{}}`, 422, "eventType", ""},
		{"version zero", `{"eventType":"order.created","eventTypeVersion":0,"payload":{}}`, 422, "eventTypeVersion", ""},
		{"version string", `{"eventType":"order.created","eventTypeVersion":"1","payload":{}}`, 422, "eventTypeVersion", ""},
		{"correlation id control chars", `{"eventType":"order.created","payload":{"orderId":"x"},"correlationId":"a\nb"}`, 422, "correlationId", ""},
		{"attribute name", `{"eventType":"order.created","payload":{"orderId":"x"},"attributes":{"bad name":"v"}}`, 422, "attributes.bad name", ""},
		{"attribute value type", `{"eventType":"order.created","payload":{"orderId":"x"},"attributes":{"k":5}}`, 422, "attributes", ""},
		{"unknown field", `{"eventType":"order.created","payload":{"orderId":"x"},"priority":1}`, 422, "priority", ""},
		{"unknown event type", `{"eventType":"order.shipped","payload":{}}`, 404, "", ""},
		{"unknown version", `{"eventType":"order.created","eventTypeVersion":9,"payload":{}}`, 404, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := a.Do("POST", "/v1/rooms/orders/messages", tc.body)
			apptest.Want(t, r, tc.status)
			if tc.field == "" {
				return
			}
			for _, e := range apptest.Decode[api.Problem](t, r).Errors {
				if e.Field == tc.field && (tc.pointer == "" || e.Pointer == tc.pointer) {
					return
				}
			}
			t.Errorf("no error with field %q pointer %q: %s", tc.field, tc.pointer, r.Body)
		})
	}
	t.Run("unknown room", func(t *testing.T) {
		apptest.Want(t, a.Do("POST", "/v1/rooms/nope/messages", `{"eventType":"order.created","payload":{}}`), http.StatusNotFound)
	})
	t.Run("terminated room", func(t *testing.T) {
		apptest.Want(t, a.Do("POST", "/v1/rooms", `{"identifier":"closed","managerIdentifier":"m"}`), http.StatusCreated)
		apptest.Want(t, a.Do("POST", "/v1/rooms/closed/event-types", `{"identifier":"e"}`), http.StatusCreated)
		apptest.Want(t, a.Do("POST", "/v1/rooms/closed/event-types/e/versions", `{"schema":true}`), http.StatusCreated)
		apptest.Want(t, a.Do("PATCH", "/v1/rooms/closed", `{"status":"TERMINATED"}`), http.StatusOK)
		apptest.Want(t, a.Do("POST", "/v1/rooms/closed/messages", `{"eventType":"e","payload":1}`), http.StatusConflict)
	})
	t.Run("batch names the bad message", func(t *testing.T) {
		r := a.Do("POST", "/v1/rooms/orders/messages:batch", `{"messages":[{"eventType":"order.created","payload":{"orderId":"a"}},{"eventType":"order.created","payload":{"orderId":1}}]}`)
		apptest.Want(t, r, http.StatusUnprocessableEntity)
		if !strings.Contains(string(r.Body), `"field":"messages[1].payload","pointer":"/messages/1/payload/orderId"`) {
			t.Errorf("batch error: %s", r.Body)
		}
		// Nothing of a rejected batch is stored.
		r = a.Do("GET", "/v1/rooms/orders/messages", nil)
		apptest.Want(t, r, http.StatusOK)
		if n := len(apptest.Decode[api.List[publish.EventResponse]](t, r).Items); n != 0 {
			t.Errorf("%d events stored from a rejected batch", n)
		}
	})
	t.Run("batch size", func(t *testing.T) {
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/messages:batch", `{"messages":[]}`), http.StatusUnprocessableEntity)
	})
}

func TestPublishIdempotency(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"}]}`), http.StatusCreated)
		body := `{"eventType":"order.created","payload":{"orderId":"o-7"}}`
		first := a.DoHeaders("POST", "/v1/rooms/orders/messages", body, map[string]string{"Idempotency-Key": "k-1", "X-Correlation-ID": "corr-1"})
		apptest.Want(t, first, http.StatusAccepted)
		again := a.DoHeaders("POST", "/v1/rooms/orders/messages", body, map[string]string{"Idempotency-Key": "k-1", "X-Correlation-ID": "corr-1"})
		apptest.Want(t, again, http.StatusAccepted)
		f, g := apptest.Decode[publish.PublishResponse](t, first), apptest.Decode[publish.PublishResponse](t, again)
		if f.EventID != g.EventID || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry answered differently: %s vs %s", first.Body, again.Body)
		}
		if f.CorrelationID != "corr-1" {
			t.Errorf("X-Correlation-ID not used: %s", first.Body)
		}
		r := a.Do("GET", "/v1/rooms/orders/messages?correlationId=corr-1", nil)
		apptest.Want(t, r, http.StatusOK)
		items := apptest.Decode[api.List[publish.EventResponse]](t, r).Items
		if len(items) != 1 {
			t.Fatalf("%d events for one idempotent publish", len(items))
		}
		if n := len(items[0].Deliveries); n != 1 {
			t.Errorf("%d sends logged, want 1", n)
		}
		// The same key with another body is refused.
		other := a.DoHeaders("POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","payload":{"orderId":"o-8"}}`, map[string]string{"Idempotency-Key": "k-1"})
		apptest.Want(t, other, http.StatusConflict)
		// A batch replays whole.
		batch := `{"messages":[{"eventType":"order.created","payload":{"orderId":"a"}},{"eventType":"order.created","payload":{"orderId":"b"}}]}`
		b1 := a.DoHeaders("POST", "/v1/rooms/orders/messages:batch", batch, map[string]string{"Idempotency-Key": "k-2"})
		apptest.Want(t, b1, http.StatusAccepted)
		b2 := a.DoHeaders("POST", "/v1/rooms/orders/messages:batch", batch, map[string]string{"Idempotency-Key": "k-2"})
		apptest.Want(t, b2, http.StatusAccepted)
		if string(b1.Body) != string(b2.Body) {
			t.Errorf("batch replay differs:\n%s\n%s", b1.Body, b2.Body)
		}
	})
}
