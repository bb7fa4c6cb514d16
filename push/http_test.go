package push_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/store"
)

// The tests of this file cover the push management API (secret rotation, dead
// letters, the delivery log) through apptest, so that every answer is
// checked against openapi.yaml.

// subscribe creates a subscription of room orders to order.created.
func subscribe(t *testing.T, a *apptest.API, typ string) map[string]any {
	t.Helper()
	body := map[string]any{"type": typ, "eventTypes": []any{map[string]any{"eventType": "order.created"}}}
	if typ == "PUSH" {
		body["pushUrl"] = "https://receiver.example/hook"
	}
	r := a.Do("POST", "/v1/rooms/orders/subscriptions", body)
	apptest.Want(t, r, http.StatusCreated)
	return r.JSON(t)
}

// checkSecret checks s is a Standard Webhooks secret of 32 random bytes.
func checkSecret(t *testing.T, s any) string {
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

// storedNow is the time now as both databases store it.
func storedNow() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// storeDeadLetters stores n dead letters of subscription subID as the
// dispatcher would, and returns them in id (creation) order. They cycle
// through the three reasons; the expired ones have no status code and no
// attributes.
func storeDeadLetters(t *testing.T, a *apptest.API, roomID, subID string, n int) []delivery.DeadLetter {
	t.Helper()
	r := a.Do("GET", "/v1/rooms/orders/event-types/order.created", nil)
	apptest.Want(t, r, http.StatusOK)
	etID := uuid.MustParse(r.JSON(t)["id"].(string))
	room, sub := uuid.MustParse(roomID), uuid.MustParse(subID)
	out := make([]delivery.DeadLetter, n)
	for i := range n {
		now := storedNow()
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
		if err := a.DB.Push().Settle(context.Background(), delivery.Settlement{DeadLetter: &dl}); err != nil {
			t.Fatal(err)
		}
		out[i] = dl
	}
	return out
}

// deadLetters reads a list of dead letters.
func deadLetters(t *testing.T, r apptest.Response) api.List[delivery.DeadLetterResponse] {
	t.Helper()
	apptest.Want(t, r, http.StatusOK)
	return apptest.Decode[api.List[delivery.DeadLetterResponse]](t, r)
}

// checkDeadLetter compares a dead letter of the API with the one stored.
func checkDeadLetter(t *testing.T, got delivery.DeadLetterResponse, dl delivery.DeadLetter) {
	t.Helper()
	wantAttrs := dl.Event.Attributes
	if wantAttrs == nil {
		wantAttrs = map[string]string{}
	}
	wantCode := code(got.LastStatusCode) == dl.LastStatusCode && (got.LastStatusCode == nil) == (dl.LastStatusCode == 0)
	switch {
	case got.ID != dl.ID.String(), got.SubscriptionID != dl.SubscriptionID.String(),
		got.EventID != dl.Event.ID.String(), got.CorrelationID != dl.Event.CorrelationID,
		got.EventType != "order.created", got.EventTypeVersion != dl.Event.Version,
		string(got.Payload) != string(dl.Event.Payload),
		got.Attributes == nil, !maps.Equal(got.Attributes, wantAttrs),
		got.Attempts != dl.Attempts, got.Reason != dl.Reason, !wantCode, got.LastError != dl.LastError,
		!got.PublishedAt.Equal(dl.Event.PublishedAt), !got.DeadLetteredAt.Equal(dl.CreatedAt):
		t.Errorf("dead letter %s answered as %+v", dl.ID, got)
	}
}

// messageLog returns the room's message log by event id.
func messageLog(t *testing.T, a *apptest.API) map[string]publish.EventResponse {
	t.Helper()
	r := a.Do("GET", "/v1/rooms/orders/messages?limit=200", nil)
	apptest.Want(t, r, http.StatusOK)
	out := map[string]publish.EventResponse{}
	for _, ev := range apptest.Decode[api.List[publish.EventResponse]](t, r).Items {
		out[ev.EventID] = ev
	}
	return out
}

// checkReplayed checks a replay answer lists dls, in order, and that each
// new event is in the message log: the dead letter's payload, correlation id

// TestPushAPIDeadLetterFilters: the list and the bulk replay take the dead
// letters of one reason, event type or time range, and refuse a bad filter
// naming it.
func TestPushAPIDeadLetterFilters(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		roomID := a.Seed(t)
		subID := subscribe(t, a, "PUSH")["id"].(string)
		base := "/v1/rooms/orders/subscriptions/" + subID + "/dead-letters"
		dls := storeDeadLetters(t, a, roomID, subID, 7) // reasons: exhausted, permanent, expired, ...
		ids := func(path string) []string {
			t.Helper()
			var out []string
			for _, it := range deadLetters(t, a.Do("GET", path, nil)).Items {
				out = append(out, it.ID)
			}
			return out
		}
		idsOf := func(is ...int) []string {
			var out []string
			for _, i := range is {
				out = append(out, dls[i].ID.String())
			}
			return out
		}
		at := func(tm time.Time) string { return url.QueryEscape(tm.Format(time.RFC3339Nano)) }

		if got, want := ids(base+"?reason=permanent_failure"), idsOf(1, 4); !slices.Equal(got, want) {
			t.Errorf("reason=permanent_failure: %v, want %v", got, want)
		}
		if got := ids(base + "?eventType=order.created&limit=500"); len(got) != 7 {
			t.Errorf("eventType=order.created: %d, want 7", len(got))
		}
		if got := ids(base + "?eventType=nope"); len(got) != 0 {
			t.Errorf("eventType=nope: %v, want none", got)
		}
		if got := ids(base + "?since=" + at(dls[0].CreatedAt)); len(got) != 7 {
			t.Errorf("since the first: %d, want 7", len(got))
		}
		if got := ids(base + "?until=" + at(dls[0].CreatedAt)); len(got) != 0 {
			t.Errorf("until the first: %v, want none", got)
		}
		if got, want := ids(base+"?reason=expired&since="+at(dls[0].CreatedAt)+"&until="+at(dls[6].CreatedAt.Add(time.Second))), idsOf(2, 5); !slices.Equal(got, want) {
			t.Errorf("expired in range: %v, want %v", got, want)
		}
		for query, field := range map[string]string{
			"?reason=bogus": "reason", "?since=yesterday": "since", "?eventType=" + strings.Repeat("x", 201): "eventType",
			"?since=" + at(dls[1].CreatedAt) + "&until=" + at(dls[1].CreatedAt): "until",
		} {
			apptest.WantField(t, a.Do("GET", base+query, nil), field)
		}

		// The bulk replay takes the same filter, and not with ids.
		apptest.WantField(t, a.Do("POST", base+":replay", map[string]any{"ids": idsOf(0), "reason": "expired"}), "ids")
		apptest.WantField(t, a.Do("POST", base+":replay", map[string]any{"reason": "nope"}), "reason")
		apptest.WantField(t, a.Do("POST", base+":replay", map[string]any{"since": "yesterday"}), "since")
		r := a.Do("POST", base+":replay", map[string]any{"reason": "expired"})
		apptest.Want(t, r, http.StatusAccepted)
		checkReplayed(t, a, r, subID, dls[2], dls[5])
		if got, want := ids(base), idsOf(0, 1, 3, 4, 6); !slices.Equal(got, want) {
			t.Errorf("after replaying the expired ones: %v, want %v", got, want)
		}
	})
}

// and attributes, sent to the subscription only, from attempt 1.
func checkReplayed(t *testing.T, a *apptest.API, r apptest.Response, subID string, dls ...delivery.DeadLetter) {
	t.Helper()
	apptest.Want(t, r, http.StatusAccepted)
	replayed := apptest.Decode[delivery.ReplayResponse](t, r).Replayed
	if len(replayed) != len(dls) {
		t.Fatalf("replayed %d, want %d: %s", len(replayed), len(dls), r.Body)
	}
	log := messageLog(t, a)
	for i, dl := range dls {
		rp := replayed[i]
		if rp.DeadLetterID != dl.ID.String() || rp.CorrelationID != dl.Event.CorrelationID {
			t.Errorf("replayed[%d] = %+v, want dead letter %s", i, rp, dl.ID)
		}
		if rp.EventID == dl.Event.ID.String() {
			t.Errorf("replayed[%d] kept the event id %s; a replay is a new event", i, rp.EventID)
		}
		ev, ok := log[rp.EventID]
		if !ok {
			t.Errorf("replayed event %s is not in the message log", rp.EventID)
			continue
		}
		if ev.CorrelationID != dl.Event.CorrelationID || string(ev.Payload) != string(dl.Event.Payload) ||
			ev.EventTypeVersion != dl.Event.Version || ev.Destinations != 1 || ev.ExpiresAt == nil {
			t.Errorf("replayed event %s: %+v", rp.EventID, ev)
		}
		if len(ev.Attributes) != len(dl.Event.Attributes) || (len(dl.Event.Attributes) > 0 && !maps.Equal(ev.Attributes, dl.Event.Attributes)) {
			t.Errorf("replayed event %s has attributes %v, want %v", rp.EventID, ev.Attributes, dl.Event.Attributes)
		}
		if len(ev.Deliveries) != 1 {
			t.Fatalf("replayed event %s has %d deliveries, want 1: %+v", rp.EventID, len(ev.Deliveries), ev)
		}
		d := ev.Deliveries[0]
		if d.SubscriptionID != subID || d.Destination != "messaging.push::messaging.push" ||
			len(d.Attempts) == 0 || d.Attempts[0].Attempt != 1 || d.Attempts[0].Status != message.StatusPending {
			t.Errorf("replayed event %s delivery: %+v", rp.EventID, d)
		}
		r := a.Do("GET", "/v1/rooms/orders/subscriptions/"+subID+"/dead-letters/"+dl.ID.String(), nil)
		apptest.Want(t, r, http.StatusNotFound)
	}
}

func TestPushAPICreateRefusesTerminated(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		apptest.WantField(t, a.Do("POST", "/v1/rooms", map[string]any{"identifier": "r1", "managerIdentifier": "m", "status": "TERMINATED"}), "status")
		r := a.Do("POST", "/v1/rooms", map[string]any{"identifier": "r1", "managerIdentifier": "m", "status": "ACTIVE"})
		apptest.Want(t, r, http.StatusCreated)

		a.Seed(t)
		et := []any{map[string]any{"eventType": "order.created"}}
		apptest.WantField(t, a.Do("POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PULL", "eventTypes": et, "status": "TERMINATED"}), "status")
		apptest.WantField(t, a.Do("POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PUSH", "pushUrl": "https://x.example/", "eventTypes": et, "status": "TERMINATED"}), "status")
		r = a.Do("POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PUSH", "pushUrl": "https://x.example/", "eventTypes": et, "status": "PAUSED"})
		apptest.Want(t, r, http.StatusCreated)
		if m := r.JSON(t); m["status"] != "PAUSED" {
			t.Errorf("created %v, want PAUSED", m["status"])
		}
		r = a.Do("GET", "/v1/rooms/orders/subscriptions?status=TERMINATED", nil)
		apptest.Want(t, r, http.StatusOK)
		if n := len(r.JSON(t)["items"].([]any)); n != 0 {
			t.Errorf("%d TERMINATED subscriptions were created", n)
		}

		// The version-creation 201 names the new version.
		path := "/v1/rooms/orders/event-types/order.created/versions"
		r = a.Do("POST", path, `{"schema":`+apptest.OrderSchema+`}`)
		apptest.Want(t, r, http.StatusCreated)
		if loc := r.Header.Get("Location"); loc != path+"/3" {
			t.Errorf("Location %q, want %q", loc, path+"/3")
		}
		apptest.Want(t, a.Do("GET", r.Header.Get("Location"), nil), http.StatusOK)
	})
}

func TestPushAPISecretRotation(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		roomID := a.Seed(t)
		ctx := context.Background()
		created := subscribe(t, a, "PUSH")
		id := created["id"].(string)
		first := checkSecret(t, created["signingSecret"])
		pull := subscribe(t, a, "PULL")
		if _, ok := pull["signingSecret"]; ok {
			t.Errorf("a PULL subscription was given a signing secret: %v", pull)
		}
		stored, err := a.DB.Subscriptions().Subscription(ctx, uuid.MustParse(roomID), uuid.MustParse(id))
		if err != nil || stored.SigningSecret != first {
			t.Fatalf("stored secret %q (%v), want the one answered", stored.SigningSecret, err)
		}

		// The secret is shown only when it is made.
		base := "/v1/rooms/orders/subscriptions/" + id
		r := a.Do("GET", base, nil)
		apptest.Want(t, r, http.StatusOK)
		if _, ok := r.JSON(t)["signingSecret"]; ok {
			t.Errorf("GET shows the signing secret: %s", r.Body)
		}
		r = a.Do("GET", "/v1/rooms/orders/subscriptions", nil)
		apptest.Want(t, r, http.StatusOK)
		if strings.Contains(string(r.Body), "signingSecret") {
			t.Errorf("the list shows signing secrets: %s", r.Body)
		}
		r = a.Do("PATCH", base, map[string]any{"deliveryAttempts": 4})
		apptest.Want(t, r, http.StatusOK)
		if _, ok := r.JSON(t)["signingSecret"]; ok {
			t.Errorf("PATCH shows the signing secret: %s", r.Body)
		}

		// Rotation without a body: the default grace period of 24 h.
		r = a.Do("POST", base+"/secret:rotate", nil)
		apptest.Want(t, r, http.StatusOK)
		m := r.JSON(t)
		second := checkSecret(t, m["signingSecret"])
		if second == first || m["id"] != id || m["type"] != "PUSH" || m["deliveryAttempts"] != 4.0 {
			t.Errorf("rotation answered %v", m)
		}
		stored, err = a.DB.Subscriptions().Subscription(ctx, uuid.MustParse(roomID), uuid.MustParse(id))
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
		r = a.Do("POST", base+"/secret:rotate", map[string]any{"gracePeriod": 0})
		apptest.Want(t, r, http.StatusOK)
		third := checkSecret(t, r.JSON(t)["signingSecret"])
		if third == second || third == first {
			t.Errorf("rotation reused a secret")
		}
		stored, _ = a.DB.Subscriptions().Subscription(ctx, uuid.MustParse(roomID), uuid.MustParse(id))
		if got := stored.Secrets(time.Now()); len(got) != 1 || got[0] != third {
			t.Errorf("secrets after a rotation without grace: %q", got)
		}
		r = a.Do("POST", base+"/secret:rotate", map[string]any{"gracePeriod": 7 * 24 * 3600 * 1000})
		apptest.Want(t, r, http.StatusOK)
		if checkSecret(t, r.JSON(t)["signingSecret"]) == third {
			t.Errorf("rotation kept the secret")
		}
		r = a.Do("GET", base, nil)
		apptest.Want(t, r, http.StatusOK)
		if _, ok := r.JSON(t)["signingSecret"]; ok {
			t.Errorf("GET shows the signing secret after a rotation: %s", r.Body)
		}

		// Bad bodies.
		apptest.WantField(t, a.Do("POST", base+"/secret:rotate", map[string]any{"gracePeriod": -1}), "gracePeriod")
		apptest.WantField(t, a.Do("POST", base+"/secret:rotate", map[string]any{"gracePeriod": 7*24*3600*1000 + 1}), "gracePeriod")
		apptest.WantField(t, a.Do("POST", base+"/secret:rotate", `{"gracePeriod":"1h"}`), "gracePeriod")
		apptest.WantField(t, a.Do("POST", base+"/secret:rotate", `{"gracePeriod":1.5}`), "gracePeriod")
		apptest.WantField(t, a.Do("POST", base+"/secret:rotate", `{"grace":1000}`), "grace")
		apptest.Want(t, a.Do("POST", base+"/secret:rotate", `{"gracePeriod":`), http.StatusBadRequest)

		// Only an existing, live PUSH subscription has a secret to rotate.
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/"+pull["id"].(string)+"/secret:rotate", nil), http.StatusConflict)
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/"+uuid.NewString()+"/secret:rotate", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/nope/secret:rotate", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("POST", "/v1/rooms/nope/subscriptions/"+id+"/secret:rotate", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("PATCH", base, map[string]any{"status": "TERMINATED"}), http.StatusOK)
		apptest.Want(t, a.Do("POST", base+"/secret:rotate", nil), http.StatusConflict)
	})
}

func TestPushAPIDeadLetters(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		roomID := a.Seed(t)
		subID := subscribe(t, a, "PUSH")["id"].(string)
		pullID := subscribe(t, a, "PULL")["id"].(string)
		base := "/v1/rooms/orders/subscriptions/" + subID + "/dead-letters"

		r := a.Do("GET", base, nil)
		if items := deadLetters(t, r).Items; len(items) != 0 {
			t.Fatalf("dead letters before any: %s", r.Body)
		}
		dls := storeDeadLetters(t, a, roomID, subID, 7)

		// Pages of 3, oldest first: 3, 3, 1.
		var listed []string
		cursor := ""
		for page := 0; ; page++ {
			path := base + "?limit=3"
			if cursor != "" {
				path += "&cursor=" + url.QueryEscape(cursor)
			}
			list := deadLetters(t, a.Do("GET", path, nil))
			for _, it := range list.Items {
				i := len(listed)
				listed = append(listed, it.ID)
				if i < len(dls) {
					checkDeadLetter(t, it, dls[i])
				}
			}
			next := list.NextCursor
			if next == "" {
				if len(list.Items) == 3 {
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
		apptest.WantField(t, a.Do("GET", base+"?limit=0", nil), "limit")
		apptest.WantField(t, a.Do("GET", base+"?limit=501", nil), "limit")
		apptest.WantField(t, a.Do("GET", base+"?cursor=!!", nil), "cursor")
		apptest.WantField(t, a.Do("GET", base+"?cursor="+base64.RawURLEncoding.EncodeToString([]byte("not-an-id")), nil), "cursor")

		// Get one; dead letters belong to their subscription.
		for _, i := range []int{0, 2} { // with a status code, and an expired one without
			r = a.Do("GET", base+"/"+dls[i].ID.String(), nil)
			apptest.Want(t, r, http.StatusOK)
			checkDeadLetter(t, apptest.Decode[delivery.DeadLetterResponse](t, r), dls[i])
		}
		apptest.Want(t, a.Do("GET", base+"/"+uuid.NewString(), nil), http.StatusNotFound)
		apptest.Want(t, a.Do("GET", base+"/nope", nil), http.StatusNotFound)
		pullBase := "/v1/rooms/orders/subscriptions/" + pullID + "/dead-letters"
		apptest.Want(t, a.Do("GET", pullBase+"/"+dls[0].ID.String(), nil), http.StatusNotFound)
		r = a.Do("GET", pullBase, nil)
		if items := deadLetters(t, r).Items; len(items) != 0 {
			t.Errorf("the PULL subscription lists another's dead letters: %s", r.Body)
		}
		apptest.Want(t, a.Do("GET", "/v1/rooms/orders/subscriptions/"+uuid.NewString()+"/dead-letters", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("GET", "/v1/rooms/nope/subscriptions/"+subID+"/dead-letters", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("GET", "/v1/rooms/nope/subscriptions/"+subID+"/dead-letters/"+dls[0].ID.String(), nil), http.StatusNotFound)

		// Replay one: 202, it is gone, and a new event is in the message log.
		t.Run("replay one", func(t *testing.T) {
			apptest.Want(t, a.Do("POST", base+"/"+uuid.NewString()+":replay", nil), http.StatusNotFound)
			apptest.Want(t, a.Do("POST", pullBase+"/"+dls[0].ID.String()+":replay", nil), http.StatusNotFound)
			r := a.Do("POST", base+"/"+dls[0].ID.String()+":replay", nil)
			checkReplayed(t, a, r, subID, dls[0])
			apptest.Want(t, a.Do("POST", base+"/"+dls[0].ID.String()+":replay", nil), http.StatusNotFound)
		})

		// Bulk replay of ids, in the order given.
		r = a.Do("POST", base+":replay", map[string]any{"ids": []string{dls[2].ID.String(), dls[1].ID.String()}})
		checkReplayed(t, a, r, subID, dls[2], dls[1])

		// Bad ids: 422 naming each, and nothing replayed.
		r = a.Do("POST", base+":replay", map[string]any{"ids": []string{"nope"}})
		apptest.WantField(t, r, "ids[0]")
		r = a.Do("POST", base+":replay", map[string]any{"ids": []string{dls[3].ID.String(), uuid.NewString(), dls[1].ID.String(), "x"}})
		apptest.Want(t, r, http.StatusUnprocessableEntity)
		if f := apptest.Fields(t, r); fmt.Sprint(f) != "[ids[1] ids[2] ids[3]]" {
			t.Errorf("422 names %v, want ids[1] ids[2] ids[3]", f)
		}
		r = a.Do("POST", "/v1/rooms/orders/subscriptions/"+pullID+"/dead-letters:replay", map[string]any{"ids": []string{dls[3].ID.String()}})
		apptest.WantField(t, r, "ids[0]") // not a dead letter of that subscription
		apptest.Want(t, a.Do("GET", base+"/"+dls[3].ID.String(), nil), http.StatusOK)
		ids := make([]string, 501)
		for i := range ids {
			ids[i] = uuid.NewString()
		}
		apptest.WantField(t, a.Do("POST", base+":replay", map[string]any{"ids": ids}), "ids")
		apptest.WantField(t, a.Do("POST", base+":replay", `{"ids":"all"}`), "ids")
		apptest.WantField(t, a.Do("POST", base+":replay", `{"id":["x"]}`), "id")
		apptest.Want(t, a.Do("POST", base+":replay", `{"ids":[`), http.StatusBadRequest)
		apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions/"+uuid.NewString()+"/dead-letters:replay", nil), http.StatusNotFound)

		// Delete: 204, then 404.
		apptest.Want(t, a.Do("DELETE", base+"/"+dls[3].ID.String(), nil), http.StatusNoContent)
		apptest.Want(t, a.Do("DELETE", base+"/"+dls[3].ID.String(), nil), http.StatusNotFound)
		apptest.Want(t, a.Do("GET", base+"/"+dls[3].ID.String(), nil), http.StatusNotFound)
		apptest.Want(t, a.Do("DELETE", base+"/nope", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("DELETE", pullBase+"/"+dls[4].ID.String(), nil), http.StatusNotFound)

		// Without a body (and with an empty list), the oldest are replayed.
		var rest []delivery.DeadLetter
		for _, it := range deadLetters(t, a.Do("GET", base, nil)).Items {
			for _, dl := range dls {
				if dl.ID.String() == it.ID {
					rest = append(rest, dl)
				}
			}
		}
		if len(rest) < 3 { // 4, 5, 6 (and 0 when the single replay did not work)
			t.Fatalf("left before the bulk replay: %d", len(rest))
		}
		r = a.Do("POST", base+":replay", nil)
		checkReplayed(t, a, r, subID, rest...)
		r = a.Do("GET", base, nil)
		if items := deadLetters(t, r).Items; len(items) != 0 {
			t.Errorf("dead letters left after replaying all: %s", r.Body)
		}
		r = a.Do("POST", base+":replay", nil)
		apptest.Want(t, r, http.StatusAccepted)
		if n := len(apptest.Decode[delivery.ReplayResponse](t, r).Replayed); n != 0 {
			t.Errorf("replayed %d with none left", n)
		}
		more := storeDeadLetters(t, a, roomID, subID, 2)
		r = a.Do("POST", base+":replay", map[string]any{"ids": []string{}})
		checkReplayed(t, a, r, subID, more...)
		more = storeDeadLetters(t, a, roomID, subID, 1)
		r = a.Do("POST", base+":replay", `{}`)
		checkReplayed(t, a, r, subID, more...)

		// A TERMINATED subscription's dead letters cannot be replayed; they can
		// still be read and deleted.
		dead := storeDeadLetters(t, a, roomID, subID, 2)
		apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders/subscriptions/"+subID, map[string]any{"status": "TERMINATED"}), http.StatusOK)
		t.Run("replay one of a TERMINATED subscription", func(t *testing.T) {
			apptest.Want(t, a.Do("POST", base+"/"+dead[0].ID.String()+":replay", nil), http.StatusConflict)
		})
		apptest.Want(t, a.Do("POST", base+":replay", map[string]any{"ids": []string{dead[0].ID.String()}}), http.StatusConflict)
		apptest.Want(t, a.Do("POST", base+":replay", nil), http.StatusConflict)
		if n := len(deadLetters(t, a.Do("GET", base, nil)).Items); n != 2 {
			t.Errorf("%d dead letters after refused replays, want 2", n)
		}
		apptest.Want(t, a.Do("GET", base+"/"+dead[0].ID.String(), nil), http.StatusOK)
		apptest.Want(t, a.Do("DELETE", base+"/"+dead[1].ID.String(), nil), http.StatusNoContent)
	})
}

func TestPushAPIDeliveries(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		a.Seed(t)
		subID := subscribe(t, a, "PUSH")["id"].(string)
		pullID := subscribe(t, a, "PULL")["id"].(string)
		base := "/v1/rooms/orders/subscriptions/" + subID + "/deliveries"

		// deliveries reads a page of a delivery log.
		deliveries := func(path string) (api.List[delivery.DeliveryResponse], apptest.Response) {
			t.Helper()
			r := a.Do("GET", path, nil)
			apptest.Want(t, r, http.StatusOK)
			return apptest.Decode[api.List[delivery.DeliveryResponse]](t, r), r
		}
		if list, r := deliveries(base); len(list.Items) != 0 {
			t.Fatalf("deliveries before any publish: %s", r.Body)
		}

		r := a.DoHeaders("POST", "/v1/rooms/orders/messages", map[string]any{
			"eventType": "order.created", "payload": map[string]any{"orderId": "o-1"}, "attributes": map[string]any{"region": "eu"},
		}, map[string]string{"X-Correlation-ID": "checkout-1"})
		apptest.Want(t, r, http.StatusAccepted)
		eventID := apptest.Decode[publish.PublishResponse](t, r).EventID

		list, r := deliveries(base)
		if len(list.Items) != 1 {
			t.Fatalf("%d deliveries after one publish, want 1: %s", len(list.Items), r.Body)
		}
		d := list.Items[0]
		if d.EventID != eventID || d.CorrelationID != "checkout-1" || d.Attempt != 1 || d.Status != "pending" ||
			d.ScheduledDelay != 0 || d.SentAt != nil || d.StatusCode != nil || d.Latency != nil ||
			d.Error != "" || d.ResponseBody != "" || d.CompletedAt != nil || d.NextAttemptAt != nil {
			t.Errorf("the pending send: %+v", d)
		}
		if list, r := deliveries("/v1/rooms/orders/subscriptions/" + pullID + "/deliveries"); len(list.Items) != 1 || list.Items[0].EventID != eventID {
			t.Errorf("PULL deliveries: %s", r.Body)
		}

		// What the dispatcher records: attempt 1 failed (503), attempt 2
		// scheduled 2 s later, then deferred because the subscription was paused.
		ctx := context.Background()
		now := storedNow()
		send1 := uuid.MustParse(d.ID)
		ev := uuid.MustParse(eventID)
		r = a.Do("GET", "/v1/rooms/orders", nil)
		room := uuid.MustParse(r.JSON(t)["id"].(string))
		resend := func(attempt int, delay time.Duration) message.Send {
			return message.Send{
				ID: uuid.Must(uuid.NewV7()), EventID: ev, RoomID: room, CorrelationID: "checkout-1",
				SubscriptionID: uuid.MustParse(subID), SubscriptionType: "PUSH", Destination: "messaging.push::messaging.push",
				Attempt: attempt, ScheduledDelay: delay, CreatedAt: now, Status: message.StatusPending,
			}
		}
		send2 := resend(2, 2*time.Second)
		err := a.DB.Push().Settle(ctx, delivery.Settlement{
			SendID: send1, Resend: &send2, Owner: "test", Until: now.Add(time.Minute),
			Attempt: delivery.Attempt{Status: message.StatusFailed, StatusCode: 503, Latency: 120 * time.Millisecond,
				Body: "busy", Error: "HTTP 503", At: now, NextAttemptAt: now.Add(2 * time.Second)},
		})
		if err != nil {
			t.Fatal(err)
		}
		send3 := resend(2, 10*time.Second)
		err = a.DB.Push().Settle(ctx, delivery.Settlement{
			SendID: send2.ID, Resend: &send3, Owner: "test", Until: now.Add(time.Minute),
			Attempt: delivery.Attempt{Status: delivery.StatusDeferred, Error: "held: the subscription is PAUSED", At: now, NextAttemptAt: now.Add(10 * time.Second)},
		})
		if err != nil {
			t.Fatal(err)
		}

		// Newest first, two to a page.
		list, r = deliveries(base + "?limit=2")
		if len(list.Items) != 2 || list.NextCursor == "" {
			t.Fatalf("first page: %s", r.Body)
		}
		d3, d2 := list.Items[0], list.Items[1]
		if d3.ID != send3.ID.String() || d3.Attempt != 2 || d3.Status != "pending" || d3.ScheduledDelay != 10000 {
			t.Errorf("newest delivery: %+v", d3)
		}
		if d2.ID != send2.ID.String() || d2.Status != "deferred" || d2.Latency != nil || d2.StatusCode != nil ||
			d2.NextAttemptAt == nil || d2.CompletedAt == nil || d2.Error != "held: the subscription is PAUSED" {
			t.Errorf("deferred delivery: %+v", d2)
		}
		list, r = deliveries(base + "?limit=2&cursor=" + url.QueryEscape(list.NextCursor))
		if len(list.Items) != 1 || list.NextCursor != "" {
			t.Fatalf("second page: %s", r.Body)
		}
		d1 := list.Items[0]
		if d1.ID != send1.String() || d1.Status != "failed" || code(d1.StatusCode) != 503 || d1.Latency == nil || *d1.Latency != 120 ||
			d1.ResponseBody != "busy" || d1.Error != "HTTP 503" || d1.NextAttemptAt == nil || d1.CompletedAt == nil {
			t.Errorf("failed delivery: %+v", d1)
		}
		// The request began its latency before the attempt completed; a
		// deferred copy made no request.
		if d1.RequestStartedAt == nil || d1.CompletedAt == nil || !d1.RequestStartedAt.Equal(d1.CompletedAt.Add(-120*time.Millisecond)) {
			t.Errorf("failed delivery: requestStartedAt %v, want completedAt %v less 120 ms", d1.RequestStartedAt, d1.CompletedAt)
		}
		if d2.RequestStartedAt != nil {
			t.Errorf("deferred delivery: requestStartedAt %v, want none (no request)", d2.RequestStartedAt)
		}
		// The message log shows the same attempts (deferred included).
		apptest.Want(t, a.Do("GET", "/v1/rooms/orders/messages/"+eventID, nil), http.StatusOK)

		apptest.WantField(t, a.Do("GET", base+"?limit=0", nil), "limit")
		apptest.WantField(t, a.Do("GET", base+"?limit=501", nil), "limit")
		apptest.WantField(t, a.Do("GET", base+"?cursor=!!", nil), "cursor")
		apptest.WantField(t, a.Do("GET", base+"?cursor="+base64.RawURLEncoding.EncodeToString([]byte("x")), nil), "cursor")
		apptest.Want(t, a.Do("GET", "/v1/rooms/orders/subscriptions/"+uuid.NewString()+"/deliveries", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("GET", "/v1/rooms/orders/subscriptions/nope/deliveries", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("GET", "/v1/rooms/nope/subscriptions/"+subID+"/deliveries", nil), http.StatusNotFound)
	})
}

// TestPushAPIEdgeCases covers inputs found to misbehave in review.
func TestPushAPIEdgeCases(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, store.SQLite)
	roomID := a.Seed(t)
	sub := subscribe(t, a, "PUSH")
	subID := sub["id"].(string)
	base := "/v1/rooms/orders/subscriptions/" + subID

	// A grace period that overflows a time.Duration is out of range, not tiny.
	r := a.Do("POST", base+"/secret:rotate", `{"gracePeriod":18446744073710}`)
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	apptest.WantField(t, r, "gracePeriod")

	dls := storeDeadLetters(t, a, roomID, subID, 2)
	id := dls[0].ID.String()
	r = a.Do("POST", base+"/dead-letters:replay", `{"ids":["`+id+`","`+id+`"]}`)
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	apptest.WantField(t, r, "ids[1]")

	// POST to a dead letter without :replay is not a route.
	apptest.Want(t, a.Do("POST", base+"/dead-letters/"+id, nil), http.StatusMethodNotAllowed)

	// Replaying into a TERMINATED room is refused like publishing to it.
	apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders", `{"status":"TERMINATED"}`), http.StatusOK)
	apptest.Want(t, a.Do("POST", base+"/dead-letters/"+id+":replay", nil), http.StatusConflict)

	// Deleting the subscription deletes its dead letters.
	apptest.Want(t, a.Do("PATCH", "/v1/rooms/orders", `{"status":"ACTIVE"}`), http.StatusOK)
	apptest.Want(t, a.Do("DELETE", base, nil), http.StatusNoContent)
	left, err := a.DB.Push().DeadLetters(context.Background(), dls[0].SubscriptionID, delivery.Filter{}, 10, uuid.Nil)
	if err != nil || len(left) != 0 {
		t.Errorf("dead letters left after deleting the subscription: %d, %v", len(left), err)
	}
}
