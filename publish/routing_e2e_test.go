package publish_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/store/storetest"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestRoutingOnBroker runs the service on the real broker and PostgreSQL,
// with API keys, in a room whose subscriptions need approval: an event
// reaches the PULL and PUSH subscriptions whose attribute filter matches
// and none of those whose filter does not, nor a subscriber's PENDING ones;
// once approved, those receive the next event (and never the earlier one).
func TestRoutingOnBroker(t *testing.T) {
	t.Parallel()
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	admin := "mapi_test_" + hex.EncodeToString(b)
	c := apptest.StartService(t, map[string]string{
		"BROKER_URL": apptest.RealBroker(t), "DATABASE_URL": storetest.PostgresSchemaURL(t),
		"OUTBOX_POLL_INTERVAL": "200ms", "AUTH_DISABLED": "false", "AUTH_BOOTSTRAP_ADMIN_KEY": admin,
	}).As(admin)
	room := apptest.UniqueRoom("routing")

	// The admin's subscriptions start ACTIVE, each with a filter.
	euPull := c.SetupPull(room, `"subscriptionApproval":"MANUAL"`, `"attributeFilter":{"region":["eu"]}`)
	usPull := c.AddPullSub(room, `"attributeFilter":{"region":["us"]}`)
	euHook, _ := apptest.StatusHook(t, http.StatusOK)
	usHook, _ := apptest.StatusHook(t, http.StatusOK)
	pushSub := func(c apptest.Client, url, filter string) subscriptions.Response {
		t.Helper()
		var s subscriptions.Response
		c.CallJSON("POST", "/v1/rooms/"+room+"/subscriptions",
			`{"type":"PUSH","pushUrl":"`+url+`","eventTypes":[{"eventType":"tick"}],"attributeFilter":`+filter+`}`, http.StatusCreated, &s)
		return s
	}
	euPush := pushSub(c, euHook.URL(), `{"region":[{"prefix":"e"}],"priority":[{"numeric":[">=",5]}]}`)
	pushSub(c, usHook.URL(), `{"region":[{"anything-but":["eu"]}]}`)

	// A subscriber's start PENDING.
	var key struct {
		Key string `json:"key"`
	}
	c.CallJSON("POST", "/v1/api-keys", `{"name":"s","role":"subscriber","subject":"sub-a","rooms":[{"roomId":"`+room+`"}]}`, http.StatusCreated, &key)
	sc := c.As(key.Key)
	pendingPull := sc.AddPullSub(room, "")
	pendingHook, _ := apptest.StatusHook(t, http.StatusOK)
	pendingPush := pushSub(sc, pendingHook.URL(), `null`)
	for _, id := range []string{pendingPull.ID, pendingPush.ID} {
		var s subscriptions.Response
		sc.CallJSON("GET", "/v1/rooms/"+room+"/subscriptions/"+id, "", http.StatusOK, &s)
		if s.Status != subscriptions.StatusPending {
			t.Fatalf("subscriber's subscription %s is %s, want PENDING", id, s.Status)
		}
	}

	const event = `{"eventType":"tick","payload":{"n":1},"attributes":{"region":"eu","priority":"7"}}`
	first := c.Publish(room, event)
	if first.Destinations != 2 {
		t.Errorf("first event went to %d subscriptions, want 2 (the eu ones)", first.Destinations)
	}
	if got := euPull.PullN(1, 15*time.Second); got[0].EventID != first.EventID {
		t.Errorf("eu PULL got %s, want %s", got[0].EventID, first.EventID)
	}
	if got := euHook.WaitFor(1, 15*time.Second); got[0].Header.Get("Webhook-Id") != first.EventID {
		t.Errorf("eu PUSH got %s, want %s", got[0].Header.Get("Webhook-Id"), first.EventID)
	}
	// Routing happens once, at publish: what the event's log does not list
	// never gets it.
	if got := routedTo(c, room, first.EventID); !slices.Equal(got, sorted(euPull.ID, euPush.ID)) {
		t.Errorf("first event routed to %v, want the eu PULL and PUSH subscriptions only", got)
	}
	usPull.PullNone(0)
	if status, body := sc.Send("POST", pendingPull.Path()+"/pull", `{"maxMessages":1}`); status != http.StatusConflict || !strings.Contains(string(body), "PENDING") {
		t.Errorf("pull of a PENDING subscription: %d %s, want 409 saying PENDING", status, body)
	}

	for _, id := range []string{pendingPull.ID, pendingPush.ID} {
		var s subscriptions.Response
		c.CallJSON("POST", "/v1/rooms/"+room+"/subscriptions/"+id+":approve", "", http.StatusOK, &s)
		if s.Status != subscriptions.StatusActive || s.DecidedAt == nil {
			t.Fatalf("approved: %+v", s)
		}
	}
	second := c.Publish(room, event)
	if second.Destinations != 4 {
		t.Errorf("second event went to %d subscriptions, want 4", second.Destinations)
	}
	if got := pendingPull.PullN(1, 15*time.Second); got[0].EventID != second.EventID {
		t.Errorf("approved PULL got %s, want the second event %s", got[0].EventID, second.EventID)
	}
	if got := pendingHook.WaitFor(1, 15*time.Second); got[0].Header.Get("Webhook-Id") != second.EventID {
		t.Errorf("approved PUSH got %s, want the second event %s", got[0].Header.Get("Webhook-Id"), second.EventID)
	}
	if got := routedTo(c, room, second.EventID); !slices.Equal(got, sorted(euPull.ID, euPush.ID, pendingPull.ID, pendingPush.ID)) {
		t.Errorf("second event routed to %v", got)
	}
	euPull.PullN(1, 15*time.Second)
	usPull.PullNone(0)
	pendingPull.PullNone(0)
	if n := usHook.Count(); n != 0 {
		t.Errorf("the us PUSH subscription received %d requests", n)
	}
}

// routedTo is the subscriptions the event's log lists, sorted.
func routedTo(c apptest.Client, room, eventID string) []string {
	c.T.Helper()
	var ev publish.EventResponse
	c.CallJSON("GET", "/v1/rooms/"+room+"/messages/"+eventID, "", http.StatusOK, &ev)
	var ids []string
	for _, d := range ev.Deliveries {
		ids = append(ids, d.SubscriptionID)
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...string) []string {
	slices.Sort(ids)
	return ids
}
