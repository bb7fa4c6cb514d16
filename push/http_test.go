package push_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
)

// The tests of this file cover the push management API (secret rotation, dead
// letters, the delivery log) through the harness, so that every answer is
// checked against openapi.yaml. Helpers are prefixed pa (push API).

// paFields lists the fields a problem response names.
func paFields(t *testing.T, r response) []string {
	t.Helper()
	var out []string
	errs, _ := r.JSON(t)["errors"].([]any)
	for _, e := range errs {
		out = append(out, e.(map[string]any)["field"].(string))
	}
	return out
}

// paWantField fails unless r is a 422 naming field.
func paWantField(t *testing.T, r response, field string) {
	t.Helper()
	want(t, r, http.StatusUnprocessableEntity)
	if f := paFields(t, r); !slices.Contains(f, field) {
		t.Fatalf("422 names %v, want %q; body: %s", f, field, r.Body)
	}
}

// paSubscribe creates a subscription of room orders to order.created.
func paSubscribe(t *testing.T, a *testAPI, typ string) map[string]any {
	t.Helper()
	body := map[string]any{"type": typ, "eventTypes": []any{map[string]any{"eventType": "order.created"}}}
	if typ == "PUSH" {
		body["pushUrl"] = "https://receiver.example/hook"
	}
	r := a.do("POST", "/v1/rooms/orders/subscriptions", body)
	want(t, r, http.StatusCreated)
	return r.JSON(t)
}

// paSecret checks s is a Standard Webhooks secret of 32 random bytes.
func paSecret(t *testing.T, s any) string {
	t.Helper()
	str, _ := s.(string)
	key, ok := strings.CutPrefix(str, "whsec_")
	if !ok {
		t.Fatalf("signingSecret %v does not start with whsec_", s)
	}
	if b, err := base64.StdEncoding.DecodeString(key); err != nil || len(b) != 32 {
		t.Fatalf("signingSecret %q: not the base64 of 32 bytes (%v)", str, err)
	}
	return str
}

func paNow() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// paDeadLetters stores n dead letters of subscription subID as the dispatcher
// would, and returns them in id (creation) order. They cycle through the
// three reasons; the expired ones have no status code and no attributes.
func paDeadLetters(t *testing.T, a *testAPI, roomID, subID string, n int) []delivery.DeadLetter {
	t.Helper()
	r := a.do("GET", "/v1/rooms/orders/event-types/order.created", nil)
	want(t, r, http.StatusOK)
	etID := uuid.MustParse(r.JSON(t)["id"].(string))
	room, sub := uuid.MustParse(roomID), uuid.MustParse(subID)
	out := make([]delivery.DeadLetter, n)
	for i := range n {
		now := paNow()
		dl := delivery.DeadLetter{
			ID: uuid.Must(uuid.NewV7()), RoomID: room, SubscriptionID: sub,
			Event: message.Event{
				ID: uuid.Must(uuid.NewV7()), RoomID: room, CorrelationID: fmt.Sprintf("corr-%d", i),
				EventTypeID: etID, EventType: "order.created", Version: 1 + i%2,
				Payload:     json.RawMessage(fmt.Sprintf(`{"orderId":"o-%d"}`, i)),
				Attributes:  map[string]string{"region": "eu", "n": fmt.Sprint(i)},
				PublishedAt: now.Add(-time.Minute),
			},
			CreatedAt: now,
		}
		switch i % 3 {
		case 0:
			dl.Reason, dl.Attempts, dl.LastStatusCode, dl.LastError = delivery.ReasonExhausted, 3, 503, "HTTP 503"
		case 1:
			dl.Reason, dl.Attempts, dl.LastStatusCode, dl.LastError = delivery.ReasonPermanent, 1, 410, "HTTP 410"
		case 2:
			dl.Reason, dl.Attempts, dl.LastError = delivery.ReasonExpired, 2, "expired before delivery"
			dl.Event.Attributes = nil
		}
		if err := a.db.Push().Settle(context.Background(), delivery.Settlement{DeadLetter: &dl}); err != nil {
			t.Fatal(err)
		}
		out[i] = dl
	}
	return out
}

// paCheckDeadLetter compares a dead letter of the API with the one stored.
func paCheckDeadLetter(t *testing.T, got map[string]any, dl delivery.DeadLetter) {
	t.Helper()
	payload, _ := json.Marshal(got["payload"])
	wantAttrs := dl.Event.Attributes
	if wantAttrs == nil {
		wantAttrs = map[string]string{}
	}
	gotAttrs := map[string]string{}
	for k, v := range got["attributes"].(map[string]any) {
		gotAttrs[k] = v.(string)
	}
	var code any
	if dl.LastStatusCode != 0 {
		code = float64(dl.LastStatusCode)
	}
	switch {
	case got["id"] != dl.ID.String(), got["subscriptionId"] != dl.SubscriptionID.String(),
		got["eventId"] != dl.Event.ID.String(), got["correlationId"] != dl.Event.CorrelationID,
		got["eventType"] != "order.created", got["eventTypeVersion"] != float64(dl.Event.Version),
		string(payload) != string(dl.Event.Payload), fmt.Sprint(gotAttrs) != fmt.Sprint(wantAttrs),
		got["attempts"] != float64(dl.Attempts), got["reason"] != dl.Reason,
		got["lastStatusCode"] != code, got["lastError"] != dl.LastError:
		t.Errorf("dead letter %s answered as %v", dl.ID, got)
	}
	for _, k := range []string{"publishedAt", "deadLetteredAt"} {
		if _, err := time.Parse(time.RFC3339Nano, got[k].(string)); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

// paReplayOne replays the existing dead letter path names.
func paReplayOne(t *testing.T, a *testAPI, path string) response {
	t.Helper()
	return a.do("POST", path, nil)
}

// paMessages returns the room's message log by event id.
func paMessages(t *testing.T, a *testAPI) map[string]map[string]any {
	t.Helper()
	r := a.do("GET", "/v1/rooms/orders/messages?limit=200", nil)
	want(t, r, http.StatusOK)
	out := map[string]map[string]any{}
	for _, it := range r.JSON(t)["items"].([]any) {
		m := it.(map[string]any)
		out[m["eventId"].(string)] = m
	}
	return out
}

// paCheckReplayed checks a replay answer lists dls, in order, and that each
// new event is in the message log: the dead letter's payload, correlation id
// and attributes, sent to the subscription only, from attempt 1.
func paCheckReplayed(t *testing.T, a *testAPI, r response, subID string, dls ...delivery.DeadLetter) {
	t.Helper()
	want(t, r, http.StatusAccepted)
	replayed := r.JSON(t)["replayed"].([]any)
	if len(replayed) != len(dls) {
		t.Fatalf("replayed %d, want %d: %s", len(replayed), len(dls), r.Body)
	}
	log := paMessages(t, a)
	for i, dl := range dls {
		rp := replayed[i].(map[string]any)
		if rp["deadLetterId"] != dl.ID.String() || rp["correlationId"] != dl.Event.CorrelationID {
			t.Errorf("replayed[%d] = %v, want dead letter %s", i, rp, dl.ID)
		}
		evID := rp["eventId"].(string)
		if evID == dl.Event.ID.String() {
			t.Errorf("replayed[%d] kept the event id %s; a replay is a new event", i, evID)
		}
		ev, ok := log[evID]
		if !ok {
			t.Errorf("replayed event %s is not in the message log", evID)
			continue
		}
		payload, _ := json.Marshal(ev["payload"])
		if ev["correlationId"] != dl.Event.CorrelationID || string(payload) != string(dl.Event.Payload) ||
			ev["eventTypeVersion"] != float64(dl.Event.Version) || ev["destinations"] != 1.0 || ev["expiresAt"] == nil {
			t.Errorf("replayed event %s: %v", evID, ev)
		}
		if attrs := ev["attributes"].(map[string]any); len(attrs) != len(dl.Event.Attributes) {
			t.Errorf("replayed event %s has attributes %v, want %v", evID, attrs, dl.Event.Attributes)
		}
		deliveries := ev["deliveries"].([]any)
		if len(deliveries) != 1 {
			t.Fatalf("replayed event %s has %d deliveries, want 1: %v", evID, len(deliveries), ev)
		}
		d := deliveries[0].(map[string]any)
		at := d["attempts"].([]any)[0].(map[string]any)
		if d["subscriptionId"] != subID || d["destination"] != "messaging.push::messaging.push" ||
			at["attempt"] != 1.0 || at["status"] != "pending" {
			t.Errorf("replayed event %s delivery: %v", evID, d)
		}
		r := a.do("GET", "/v1/rooms/orders/subscriptions/"+subID+"/dead-letters/"+dl.ID.String(), nil)
		want(t, r, http.StatusNotFound)
	}
}

func TestPushAPICreateRefusesTerminated(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		paWantField(t, a.do("POST", "/v1/rooms", map[string]any{"identifier": "r1", "managerIdentifier": "m", "status": "TERMINATED"}), "status")
		r := a.do("POST", "/v1/rooms", map[string]any{"identifier": "r1", "managerIdentifier": "m", "status": "ACTIVE"})
		want(t, r, http.StatusCreated)

		a.seed(t)
		et := []any{map[string]any{"eventType": "order.created"}}
		paWantField(t, a.do("POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PULL", "eventTypes": et, "status": "TERMINATED"}), "status")
		paWantField(t, a.do("POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PUSH", "pushUrl": "https://x.example/", "eventTypes": et, "status": "TERMINATED"}), "status")
		r = a.do("POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PUSH", "pushUrl": "https://x.example/", "eventTypes": et, "status": "PAUSED"})
		want(t, r, http.StatusCreated)
		if m := r.JSON(t); m["status"] != "PAUSED" {
			t.Errorf("created %v, want PAUSED", m["status"])
		}
		r = a.do("GET", "/v1/rooms/orders/subscriptions?status=TERMINATED", nil)
		want(t, r, http.StatusOK)
		if n := len(r.JSON(t)["items"].([]any)); n != 0 {
			t.Errorf("%d TERMINATED subscriptions were created", n)
		}

		// The version-creation 201 names the new version.
		path := "/v1/rooms/orders/event-types/order.created/versions"
		r = a.do("POST", path, `{"schema":`+orderSchema+`}`)
		want(t, r, http.StatusCreated)
		if loc := r.Header.Get("Location"); loc != path+"/3" {
			t.Errorf("Location %q, want %q", loc, path+"/3")
		}
		want(t, a.do("GET", r.Header.Get("Location"), nil), http.StatusOK)
	})
}

func TestPushAPISecretRotation(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		roomID := a.seed(t)
		ctx := context.Background()
		created := paSubscribe(t, a, "PUSH")
		id := created["id"].(string)
		first := paSecret(t, created["signingSecret"])
		pull := paSubscribe(t, a, "PULL")
		if _, ok := pull["signingSecret"]; ok {
			t.Errorf("a PULL subscription was given a signing secret: %v", pull)
		}
		stored, err := a.db.Subscriptions().Subscription(ctx, uuid.MustParse(roomID), uuid.MustParse(id))
		if err != nil || stored.SigningSecret != first {
			t.Fatalf("stored secret %q (%v), want the one answered", stored.SigningSecret, err)
		}

		// The secret is shown only when it is made.
		base := "/v1/rooms/orders/subscriptions/" + id
		r := a.do("GET", base, nil)
		want(t, r, http.StatusOK)
		if _, ok := r.JSON(t)["signingSecret"]; ok {
			t.Errorf("GET shows the signing secret: %s", r.Body)
		}
		r = a.do("GET", "/v1/rooms/orders/subscriptions", nil)
		want(t, r, http.StatusOK)
		if strings.Contains(string(r.Body), "signingSecret") {
			t.Errorf("the list shows signing secrets: %s", r.Body)
		}
		r = a.do("PATCH", base, map[string]any{"deliveryAttempts": 4})
		want(t, r, http.StatusOK)
		if _, ok := r.JSON(t)["signingSecret"]; ok {
			t.Errorf("PATCH shows the signing secret: %s", r.Body)
		}

		// Rotation without a body: the default grace period of 24 h.
		r = a.do("POST", base+"/secret:rotate", nil)
		want(t, r, http.StatusOK)
		m := r.JSON(t)
		second := paSecret(t, m["signingSecret"])
		if second == first || m["id"] != id || m["type"] != "PUSH" || m["deliveryAttempts"] != 4.0 {
			t.Errorf("rotation answered %v", m)
		}
		stored, err = a.db.Subscriptions().Subscription(ctx, uuid.MustParse(roomID), uuid.MustParse(id))
		if err != nil {
			t.Fatal(err)
		}
		if got := stored.Secrets(time.Now()); len(got) != 2 || got[0] != second || got[1] != first {
			t.Errorf("secrets signing after the rotation: %q, want the new then the old", got)
		}
		if got := stored.Secrets(time.Now().Add(25 * time.Hour)); len(got) != 1 || got[0] != second {
			t.Errorf("secrets signing after the grace period: %q, want only the new", got)
		}

		// gracePeriod 0 ends the previous secret at once.
		r = a.do("POST", base+"/secret:rotate", map[string]any{"gracePeriod": 0})
		want(t, r, http.StatusOK)
		third := paSecret(t, r.JSON(t)["signingSecret"])
		if third == second || third == first {
			t.Errorf("rotation reused a secret")
		}
		stored, _ = a.db.Subscriptions().Subscription(ctx, uuid.MustParse(roomID), uuid.MustParse(id))
		if got := stored.Secrets(time.Now()); len(got) != 1 || got[0] != third {
			t.Errorf("secrets after a rotation without grace: %q", got)
		}
		r = a.do("POST", base+"/secret:rotate", map[string]any{"gracePeriod": 7 * 24 * 3600 * 1000})
		want(t, r, http.StatusOK)
		if paSecret(t, r.JSON(t)["signingSecret"]) == third {
			t.Errorf("rotation kept the secret")
		}
		r = a.do("GET", base, nil)
		want(t, r, http.StatusOK)
		if _, ok := r.JSON(t)["signingSecret"]; ok {
			t.Errorf("GET shows the signing secret after a rotation: %s", r.Body)
		}

		// Bad bodies.
		paWantField(t, a.do("POST", base+"/secret:rotate", map[string]any{"gracePeriod": -1}), "gracePeriod")
		paWantField(t, a.do("POST", base+"/secret:rotate", map[string]any{"gracePeriod": 7*24*3600*1000 + 1}), "gracePeriod")
		paWantField(t, a.do("POST", base+"/secret:rotate", `{"gracePeriod":"1h"}`), "gracePeriod")
		paWantField(t, a.do("POST", base+"/secret:rotate", `{"gracePeriod":1.5}`), "gracePeriod")
		paWantField(t, a.do("POST", base+"/secret:rotate", `{"grace":1000}`), "grace")
		want(t, a.do("POST", base+"/secret:rotate", `{"gracePeriod":`), http.StatusBadRequest)

		// Only an existing, live PUSH subscription has a secret to rotate.
		want(t, a.do("POST", "/v1/rooms/orders/subscriptions/"+pull["id"].(string)+"/secret:rotate", nil), http.StatusConflict)
		want(t, a.do("POST", "/v1/rooms/orders/subscriptions/"+uuid.NewString()+"/secret:rotate", nil), http.StatusNotFound)
		want(t, a.do("POST", "/v1/rooms/orders/subscriptions/nope/secret:rotate", nil), http.StatusNotFound)
		want(t, a.do("POST", "/v1/rooms/nope/subscriptions/"+id+"/secret:rotate", nil), http.StatusNotFound)
		want(t, a.do("PATCH", base, map[string]any{"status": "TERMINATED"}), http.StatusOK)
		want(t, a.do("POST", base+"/secret:rotate", nil), http.StatusConflict)
	})
}

func TestPushAPIDeadLetters(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		roomID := a.seed(t)
		subID := paSubscribe(t, a, "PUSH")["id"].(string)
		pullID := paSubscribe(t, a, "PULL")["id"].(string)
		base := "/v1/rooms/orders/subscriptions/" + subID + "/dead-letters"

		r := a.do("GET", base, nil)
		want(t, r, http.StatusOK)
		if items := r.JSON(t)["items"].([]any); len(items) != 0 {
			t.Fatalf("dead letters before any: %s", r.Body)
		}
		dls := paDeadLetters(t, a, roomID, subID, 7)

		// Pages of 3, oldest first: 3, 3, 1.
		var listed []string
		cursor := ""
		for page := 0; ; page++ {
			path := base + "?limit=3"
			if cursor != "" {
				path += "&cursor=" + url.QueryEscape(cursor)
			}
			r := a.do("GET", path, nil)
			want(t, r, http.StatusOK)
			m := r.JSON(t)
			items := m["items"].([]any)
			for _, it := range items {
				it := it.(map[string]any)
				i := len(listed)
				listed = append(listed, it["id"].(string))
				if i < len(dls) {
					paCheckDeadLetter(t, it, dls[i])
				}
			}
			next, _ := m["nextCursor"].(string)
			if next == "" {
				if len(items) == 3 {
					t.Errorf("a full page without nextCursor")
				}
				break
			}
			if page > 5 {
				t.Fatalf("pagination does not end")
			}
			cursor = next
		}
		if len(listed) != len(dls) {
			t.Fatalf("listed %d dead letters, want %d: %v", len(listed), len(dls), listed)
		}
		for i, dl := range dls {
			if listed[i] != dl.ID.String() {
				t.Errorf("item %d is %s, want %s (oldest first)", i, listed[i], dl.ID)
			}
		}
		paWantField(t, a.do("GET", base+"?limit=0", nil), "limit")
		paWantField(t, a.do("GET", base+"?limit=501", nil), "limit")
		paWantField(t, a.do("GET", base+"?cursor=!!", nil), "cursor")
		paWantField(t, a.do("GET", base+"?cursor="+base64.RawURLEncoding.EncodeToString([]byte("not-an-id")), nil), "cursor")

		// Get one; dead letters belong to their subscription.
		for _, i := range []int{0, 2} { // with a status code, and an expired one without
			r = a.do("GET", base+"/"+dls[i].ID.String(), nil)
			want(t, r, http.StatusOK)
			paCheckDeadLetter(t, r.JSON(t), dls[i])
		}
		want(t, a.do("GET", base+"/"+uuid.NewString(), nil), http.StatusNotFound)
		want(t, a.do("GET", base+"/nope", nil), http.StatusNotFound)
		pullBase := "/v1/rooms/orders/subscriptions/" + pullID + "/dead-letters"
		want(t, a.do("GET", pullBase+"/"+dls[0].ID.String(), nil), http.StatusNotFound)
		r = a.do("GET", pullBase, nil)
		want(t, r, http.StatusOK)
		if items := r.JSON(t)["items"].([]any); len(items) != 0 {
			t.Errorf("the PULL subscription lists another's dead letters: %s", r.Body)
		}
		want(t, a.do("GET", "/v1/rooms/orders/subscriptions/"+uuid.NewString()+"/dead-letters", nil), http.StatusNotFound)
		want(t, a.do("GET", "/v1/rooms/nope/subscriptions/"+subID+"/dead-letters", nil), http.StatusNotFound)
		want(t, a.do("GET", "/v1/rooms/nope/subscriptions/"+subID+"/dead-letters/"+dls[0].ID.String(), nil), http.StatusNotFound)

		// Replay one: 202, it is gone, and a new event is in the message log.
		t.Run("replay one", func(t *testing.T) {
			want(t, a.do("POST", base+"/"+uuid.NewString()+":replay", nil), http.StatusNotFound)
			want(t, a.do("POST", pullBase+"/"+dls[0].ID.String()+":replay", nil), http.StatusNotFound)
			r := paReplayOne(t, a, base+"/"+dls[0].ID.String()+":replay")
			paCheckReplayed(t, a, r, subID, dls[0])
			want(t, a.do("POST", base+"/"+dls[0].ID.String()+":replay", nil), http.StatusNotFound)
		})

		// Bulk replay of ids, in the order given.
		r = a.do("POST", base+":replay", map[string]any{"ids": []string{dls[2].ID.String(), dls[1].ID.String()}})
		paCheckReplayed(t, a, r, subID, dls[2], dls[1])

		// Bad ids: 422 naming each, and nothing replayed.
		r = a.do("POST", base+":replay", map[string]any{"ids": []string{"nope"}})
		paWantField(t, r, "ids[0]")
		r = a.do("POST", base+":replay", map[string]any{"ids": []string{dls[3].ID.String(), uuid.NewString(), dls[1].ID.String(), "x"}})
		want(t, r, http.StatusUnprocessableEntity)
		if f := paFields(t, r); fmt.Sprint(f) != "[ids[1] ids[2] ids[3]]" {
			t.Errorf("422 names %v, want ids[1] ids[2] ids[3]", f)
		}
		r = a.do("POST", "/v1/rooms/orders/subscriptions/"+pullID+"/dead-letters:replay", map[string]any{"ids": []string{dls[3].ID.String()}})
		paWantField(t, r, "ids[0]") // not a dead letter of that subscription
		want(t, a.do("GET", base+"/"+dls[3].ID.String(), nil), http.StatusOK)
		ids := make([]string, 501)
		for i := range ids {
			ids[i] = uuid.NewString()
		}
		paWantField(t, a.do("POST", base+":replay", map[string]any{"ids": ids}), "ids")
		paWantField(t, a.do("POST", base+":replay", `{"ids":"all"}`), "ids")
		paWantField(t, a.do("POST", base+":replay", `{"id":["x"]}`), "id")
		want(t, a.do("POST", base+":replay", `{"ids":[`), http.StatusBadRequest)
		want(t, a.do("POST", "/v1/rooms/orders/subscriptions/"+uuid.NewString()+"/dead-letters:replay", nil), http.StatusNotFound)

		// Delete: 204, then 404.
		want(t, a.do("DELETE", base+"/"+dls[3].ID.String(), nil), http.StatusNoContent)
		want(t, a.do("DELETE", base+"/"+dls[3].ID.String(), nil), http.StatusNotFound)
		want(t, a.do("GET", base+"/"+dls[3].ID.String(), nil), http.StatusNotFound)
		want(t, a.do("DELETE", base+"/nope", nil), http.StatusNotFound)
		want(t, a.do("DELETE", pullBase+"/"+dls[4].ID.String(), nil), http.StatusNotFound)

		// Without a body (and with an empty list), the oldest are replayed.
		var rest []delivery.DeadLetter
		r = a.do("GET", base, nil)
		want(t, r, http.StatusOK)
		for _, it := range r.JSON(t)["items"].([]any) {
			id := it.(map[string]any)["id"].(string)
			for _, dl := range dls {
				if dl.ID.String() == id {
					rest = append(rest, dl)
				}
			}
		}
		if len(rest) < 3 { // 4, 5, 6 (and 0 when the single replay did not work)
			t.Fatalf("left before the bulk replay: %d", len(rest))
		}
		r = a.do("POST", base+":replay", nil)
		paCheckReplayed(t, a, r, subID, rest...)
		r = a.do("GET", base, nil)
		want(t, r, http.StatusOK)
		if items := r.JSON(t)["items"].([]any); len(items) != 0 {
			t.Errorf("dead letters left after replaying all: %s", r.Body)
		}
		r = a.do("POST", base+":replay", nil)
		want(t, r, http.StatusAccepted)
		if n := len(r.JSON(t)["replayed"].([]any)); n != 0 {
			t.Errorf("replayed %d with none left", n)
		}
		more := paDeadLetters(t, a, roomID, subID, 2)
		r = a.do("POST", base+":replay", map[string]any{"ids": []string{}})
		paCheckReplayed(t, a, r, subID, more...)
		more = paDeadLetters(t, a, roomID, subID, 1)
		r = a.do("POST", base+":replay", `{}`)
		paCheckReplayed(t, a, r, subID, more...)

		// A TERMINATED subscription's dead letters cannot be replayed; they can
		// still be read and deleted.
		dead := paDeadLetters(t, a, roomID, subID, 2)
		want(t, a.do("PATCH", "/v1/rooms/orders/subscriptions/"+subID, map[string]any{"status": "TERMINATED"}), http.StatusOK)
		t.Run("replay one of a TERMINATED subscription", func(t *testing.T) {
			want(t, paReplayOne(t, a, base+"/"+dead[0].ID.String()+":replay"), http.StatusConflict)
		})
		want(t, a.do("POST", base+":replay", map[string]any{"ids": []string{dead[0].ID.String()}}), http.StatusConflict)
		want(t, a.do("POST", base+":replay", nil), http.StatusConflict)
		r = a.do("GET", base, nil)
		want(t, r, http.StatusOK)
		if n := len(r.JSON(t)["items"].([]any)); n != 2 {
			t.Errorf("%d dead letters after refused replays, want 2", n)
		}
		want(t, a.do("GET", base+"/"+dead[0].ID.String(), nil), http.StatusOK)
		want(t, a.do("DELETE", base+"/"+dead[1].ID.String(), nil), http.StatusNoContent)
	})
}

func TestPushAPIDeliveries(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, a *testAPI) {
		a.seed(t)
		subID := paSubscribe(t, a, "PUSH")["id"].(string)
		pullID := paSubscribe(t, a, "PULL")["id"].(string)
		base := "/v1/rooms/orders/subscriptions/" + subID + "/deliveries"

		r := a.do("GET", base, nil)
		want(t, r, http.StatusOK)
		if items := r.JSON(t)["items"].([]any); len(items) != 0 {
			t.Fatalf("deliveries before any publish: %s", r.Body)
		}

		r = a.doHeaders("POST", "/v1/rooms/orders/messages", map[string]any{
			"eventType": "order.created", "payload": map[string]any{"orderId": "o-1"}, "attributes": map[string]any{"region": "eu"},
		}, map[string]string{"X-Correlation-ID": "checkout-1"})
		want(t, r, http.StatusAccepted)
		eventID := r.JSON(t)["eventId"].(string)

		r = a.do("GET", base, nil)
		want(t, r, http.StatusOK)
		items := r.JSON(t)["items"].([]any)
		if len(items) != 1 {
			t.Fatalf("%d deliveries after one publish, want 1: %s", len(items), r.Body)
		}
		d := items[0].(map[string]any)
		if d["eventId"] != eventID || d["correlationId"] != "checkout-1" || d["attempt"] != 1.0 || d["status"] != "pending" ||
			d["scheduledDelay"] != 0.0 || d["sentAt"] != nil || d["statusCode"] != nil || d["latency"] != nil ||
			d["error"] != "" || d["responseBody"] != "" || d["completedAt"] != nil || d["nextAttemptAt"] != nil {
			t.Errorf("the pending send: %v", d)
		}
		r = a.do("GET", "/v1/rooms/orders/subscriptions/"+pullID+"/deliveries", nil)
		want(t, r, http.StatusOK)
		if items := r.JSON(t)["items"].([]any); len(items) != 1 || items[0].(map[string]any)["eventId"] != eventID {
			t.Errorf("PULL deliveries: %s", r.Body)
		}

		// What the dispatcher records: attempt 1 failed (503), attempt 2
		// scheduled 2 s later, then deferred because the subscription was paused.
		ctx := context.Background()
		now := paNow()
		send1 := uuid.MustParse(d["id"].(string))
		ev := uuid.MustParse(eventID)
		r = a.do("GET", "/v1/rooms/orders", nil)
		room := uuid.MustParse(r.JSON(t)["id"].(string))
		resend := func(attempt int, delay time.Duration) message.Send {
			return message.Send{
				ID: uuid.Must(uuid.NewV7()), EventID: ev, RoomID: room, CorrelationID: "checkout-1",
				SubscriptionID: uuid.MustParse(subID), SubscriptionType: "PUSH", Destination: "messaging.push::messaging.push",
				Attempt: attempt, ScheduledDelay: delay, CreatedAt: now, Status: message.StatusPending,
			}
		}
		send2 := resend(2, 2*time.Second)
		err := a.db.Push().Settle(ctx, delivery.Settlement{
			SendID: send1, Resend: &send2, Owner: "test", Until: now.Add(time.Minute),
			Attempt: delivery.Attempt{Status: message.StatusFailed, StatusCode: 503, Latency: 120 * time.Millisecond,
				Body: "busy", Error: "HTTP 503", At: now, NextAttemptAt: now.Add(2 * time.Second)},
		})
		if err != nil {
			t.Fatal(err)
		}
		send3 := resend(2, 10*time.Second)
		err = a.db.Push().Settle(ctx, delivery.Settlement{
			SendID: send2.ID, Resend: &send3, Owner: "test", Until: now.Add(time.Minute),
			Attempt: delivery.Attempt{Status: delivery.StatusDeferred, Error: "held: the subscription is PAUSED", At: now, NextAttemptAt: now.Add(10 * time.Second)},
		})
		if err != nil {
			t.Fatal(err)
		}

		// Newest first, two to a page.
		r = a.do("GET", base+"?limit=2", nil)
		want(t, r, http.StatusOK)
		m := r.JSON(t)
		items = m["items"].([]any)
		if len(items) != 2 || m["nextCursor"] == nil {
			t.Fatalf("first page: %s", r.Body)
		}
		d3, d2 := items[0].(map[string]any), items[1].(map[string]any)
		if d3["id"] != send3.ID.String() || d3["attempt"] != 2.0 || d3["status"] != "pending" || d3["scheduledDelay"] != 10000.0 {
			t.Errorf("newest delivery: %v", d3)
		}
		if d2["id"] != send2.ID.String() || d2["status"] != "deferred" || d2["latency"] != nil || d2["statusCode"] != nil ||
			d2["nextAttemptAt"] == nil || d2["completedAt"] == nil || d2["error"] != "held: the subscription is PAUSED" {
			t.Errorf("deferred delivery: %v", d2)
		}
		r = a.do("GET", base+"?limit=2&cursor="+url.QueryEscape(m["nextCursor"].(string)), nil)
		want(t, r, http.StatusOK)
		m = r.JSON(t)
		items = m["items"].([]any)
		if len(items) != 1 || m["nextCursor"] != nil {
			t.Fatalf("second page: %s", r.Body)
		}
		d1 := items[0].(map[string]any)
		if d1["id"] != send1.String() || d1["status"] != "failed" || d1["statusCode"] != 503.0 || d1["latency"] != 120.0 ||
			d1["responseBody"] != "busy" || d1["error"] != "HTTP 503" || d1["nextAttemptAt"] == nil || d1["completedAt"] == nil {
			t.Errorf("failed delivery: %v", d1)
		}
		// The message log shows the same attempts (deferred included).
		want(t, a.do("GET", "/v1/rooms/orders/messages/"+eventID, nil), http.StatusOK)

		paWantField(t, a.do("GET", base+"?limit=0", nil), "limit")
		paWantField(t, a.do("GET", base+"?limit=501", nil), "limit")
		paWantField(t, a.do("GET", base+"?cursor=!!", nil), "cursor")
		paWantField(t, a.do("GET", base+"?cursor="+base64.RawURLEncoding.EncodeToString([]byte("x")), nil), "cursor")
		want(t, a.do("GET", "/v1/rooms/orders/subscriptions/"+uuid.NewString()+"/deliveries", nil), http.StatusNotFound)
		want(t, a.do("GET", "/v1/rooms/orders/subscriptions/nope/deliveries", nil), http.StatusNotFound)
		want(t, a.do("GET", "/v1/rooms/nope/subscriptions/"+subID+"/deliveries", nil), http.StatusNotFound)
	})
}

// TestPushAPIEdgeCases covers inputs found to misbehave in review.
func TestPushAPIEdgeCases(t *testing.T) {
	t.Parallel()
	a := newTestAPI(t, "sqlite")
	roomID := a.seed(t)
	sub := paSubscribe(t, a, "PUSH")
	subID := sub["id"].(string)
	base := "/v1/rooms/orders/subscriptions/" + subID

	// A grace period that overflows a time.Duration is out of range, not tiny.
	r := a.do("POST", base+"/secret:rotate", `{"gracePeriod":18446744073710}`)
	want(t, r, http.StatusUnprocessableEntity)
	paWantField(t, r, "gracePeriod")

	dls := paDeadLetters(t, a, roomID, subID, 2)
	id := dls[0].ID.String()
	r = a.do("POST", base+"/dead-letters:replay", `{"ids":["`+id+`","`+id+`"]}`)
	want(t, r, http.StatusUnprocessableEntity)
	paWantField(t, r, "ids[1]")

	// POST to a dead letter without :replay is not a route.
	want(t, a.do("POST", base+"/dead-letters/"+id, nil), http.StatusMethodNotAllowed)

	// Replaying into a TERMINATED room is refused like publishing to it.
	want(t, a.do("PATCH", "/v1/rooms/orders", `{"status":"TERMINATED"}`), http.StatusOK)
	want(t, a.do("POST", base+"/dead-letters/"+id+":replay", nil), http.StatusConflict)

	// Deleting the subscription deletes its dead letters.
	want(t, a.do("PATCH", "/v1/rooms/orders", `{"status":"ACTIVE"}`), http.StatusOK)
	want(t, a.do("DELETE", base, nil), http.StatusNoContent)
	left, err := a.db.Push().DeadLetters(context.Background(), dls[0].SubscriptionID, 10, uuid.Nil)
	if err != nil || len(left) != 0 {
		t.Errorf("dead letters left after deleting the subscription: %d, %v", len(left), err)
	}
}
