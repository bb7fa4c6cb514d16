package publish_test

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
)

// TestPublishRouting publishes every event type × version to a room whose
// subscriptions cover PUSH and PULL, version filters, and every status, and
// checks which subscriptions each event reached.
func TestPublishRouting(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		roomID := a.seed(t) // order.created v1, v2
		want(t, a.do("POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.paid"}), http.StatusCreated)
		want(t, a.do("POST", "/v1/rooms/orders/event-types/order.paid/versions", `{"schema":{}}`), http.StatusCreated)

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
			r := a.do("POST", "/v1/rooms/orders/subscriptions", body)
			want(t, r, http.StatusCreated)
			id := r.JSON(t)["id"].(string)
			names[id] = s.name
			want(t, a.do("PATCH", "/v1/rooms/orders/subscriptions/"+id, map[string]any{"status": s.status}), http.StatusOK)
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
				r := a.do("POST", "/v1/rooms/orders/messages", body)
				want(t, r, http.StatusAccepted)
				res := r.JSON(t)
				if int(res["destinations"].(float64)) != len(tc.want) {
					t.Errorf("destinations %v, want %d", res["destinations"], len(tc.want))
				}
				r = a.do("GET", "/v1/rooms/orders/messages/"+res["eventId"].(string), nil)
				want(t, r, http.StatusOK)
				var got []string
				for _, d := range r.JSON(t)["deliveries"].([]any) {
					d := d.(map[string]any)
					name := names[d["subscriptionId"].(string)]
					got = append(got, name)
					dest := d["destination"].(string)
					if strings.HasPrefix(name, "pull") && dest != "room-"+roomID+"::subscription-"+d["subscriptionId"].(string) {
						t.Errorf("%s went to %s", name, dest)
					}
					if strings.HasPrefix(name, "push") && dest != "messaging.push::messaging.push" {
						t.Errorf("%s went to %s, want the push queue", name, dest)
					}
					att := d["attempts"].([]any)[0].(map[string]any)
					if att["attempt"] != 1.0 || att["status"] != "pending" || att["scheduledDelay"] != 0.0 {
						t.Errorf("first attempt: %v", att)
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
	a := newTestAPI(t, "sqlite")
	a.seed(t)
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
			r := a.do("POST", "/v1/rooms/orders/messages", tc.body)
			want(t, r, tc.status)
			if tc.field == "" {
				return
			}
			for _, e := range r.JSON(t)["errors"].([]any) {
				e := e.(map[string]any)
				if e["field"] == tc.field && (tc.pointer == "" || e["pointer"] == tc.pointer) {
					return
				}
			}
			t.Errorf("no error with field %q pointer %q: %s", tc.field, tc.pointer, r.Body)
		})
	}
	t.Run("unknown room", func(t *testing.T) {
		want(t, a.do("POST", "/v1/rooms/nope/messages", `{"eventType":"order.created","payload":{}}`), http.StatusNotFound)
	})
	t.Run("terminated room", func(t *testing.T) {
		want(t, a.do("POST", "/v1/rooms", `{"identifier":"closed","managerIdentifier":"m"}`), http.StatusCreated)
		want(t, a.do("POST", "/v1/rooms/closed/event-types", `{"identifier":"e"}`), http.StatusCreated)
		want(t, a.do("POST", "/v1/rooms/closed/event-types/e/versions", `{"schema":true}`), http.StatusCreated)
		want(t, a.do("PATCH", "/v1/rooms/closed", `{"status":"TERMINATED"}`), http.StatusOK)
		want(t, a.do("POST", "/v1/rooms/closed/messages", `{"eventType":"e","payload":1}`), http.StatusConflict)
	})
	t.Run("batch names the bad message", func(t *testing.T) {
		r := a.do("POST", "/v1/rooms/orders/messages:batch", `{"messages":[{"eventType":"order.created","payload":{"orderId":"a"}},{"eventType":"order.created","payload":{"orderId":1}}]}`)
		want(t, r, http.StatusUnprocessableEntity)
		if !strings.Contains(string(r.Body), `"field":"messages[1].payload","pointer":"/messages/1/payload/orderId"`) {
			t.Errorf("batch error: %s", r.Body)
		}
		// Nothing of a rejected batch is stored.
		r = a.do("GET", "/v1/rooms/orders/messages", nil)
		if n := len(r.JSON(t)["items"].([]any)); n != 0 {
			t.Errorf("%d events stored from a rejected batch", n)
		}
	})
	t.Run("batch size", func(t *testing.T) {
		want(t, a.do("POST", "/v1/rooms/orders/messages:batch", `{"messages":[]}`), http.StatusUnprocessableEntity)
	})
}

func TestPublishIdempotency(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		a.seed(t)
		want(t, a.do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"order.created"}]}`), http.StatusCreated)
		body := `{"eventType":"order.created","payload":{"orderId":"o-7"}}`
		first := a.doHeaders("POST", "/v1/rooms/orders/messages", body, map[string]string{"Idempotency-Key": "k-1", "X-Correlation-ID": "corr-1"})
		want(t, first, http.StatusAccepted)
		again := a.doHeaders("POST", "/v1/rooms/orders/messages", body, map[string]string{"Idempotency-Key": "k-1", "X-Correlation-ID": "corr-1"})
		want(t, again, http.StatusAccepted)
		if first.JSON(t)["eventId"] != again.JSON(t)["eventId"] || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry answered differently: %s vs %s", first.Body, again.Body)
		}
		if first.JSON(t)["correlationId"] != "corr-1" {
			t.Errorf("X-Correlation-ID not used: %s", first.Body)
		}
		r := a.do("GET", "/v1/rooms/orders/messages?correlationId=corr-1", nil)
		want(t, r, http.StatusOK)
		items := r.JSON(t)["items"].([]any)
		if len(items) != 1 {
			t.Fatalf("%d events for one idempotent publish", len(items))
		}
		if n := len(items[0].(map[string]any)["deliveries"].([]any)); n != 1 {
			t.Errorf("%d sends logged, want 1", n)
		}
		// The same key with another body is refused.
		other := a.doHeaders("POST", "/v1/rooms/orders/messages", `{"eventType":"order.created","payload":{"orderId":"o-8"}}`, map[string]string{"Idempotency-Key": "k-1"})
		want(t, other, http.StatusConflict)
		// A batch replays whole.
		batch := `{"messages":[{"eventType":"order.created","payload":{"orderId":"a"}},{"eventType":"order.created","payload":{"orderId":"b"}}]}`
		b1 := a.doHeaders("POST", "/v1/rooms/orders/messages:batch", batch, map[string]string{"Idempotency-Key": "k-2"})
		want(t, b1, http.StatusAccepted)
		b2 := a.doHeaders("POST", "/v1/rooms/orders/messages:batch", batch, map[string]string{"Idempotency-Key": "k-2"})
		want(t, b2, http.StatusAccepted)
		if string(b1.Body) != string(b2.Body) {
			t.Errorf("batch replay differs:\n%s\n%s", b1.Body, b2.Body)
		}
	})
}
