package subscriptions_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
	"github.com/roomhub/messaging-api/subscriptions"
)

// approvalFixture is an API with keys, room "orders" (managed by team-a,
// subscriptionApproval MANUAL, event type order.created v1) and a key of
// each role reaching it: admin, manager, another room's manager, a
// publisher and two subscribers.
type approvalFixture struct {
	*apptest.API
	admin, manager, stranger, publisher, sub, sub2 string
}

func newApprovalFixture(t *testing.T, d store.Dialect) *approvalFixture {
	t.Helper()
	a, admin := apptest.NewWithKeys(t, d)
	f := &approvalFixture{API: a, admin: admin}
	r := a.As(admin, "POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "team-a", "subscriptionApproval": "MANUAL"})
	apptest.Want(t, r, http.StatusCreated)
	if room := apptest.Decode[rooms.RoomResponse](t, r); room.SubscriptionApproval != rooms.ApprovalManual {
		t.Fatalf("room created with subscriptionApproval %q, want MANUAL", room.SubscriptionApproval)
	}
	apptest.Want(t, a.As(admin, "POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.created"}), http.StatusCreated)
	apptest.Want(t, a.As(admin, "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"schema":`+apptest.OrderSchema+`}`), http.StatusCreated)
	grant := []any{map[string]any{"roomId": "orders"}}
	f.manager = a.Key(t, admin, map[string]any{"name": "m", "role": "manager", "subject": "team-a"})
	f.stranger = a.Key(t, admin, map[string]any{"name": "m2", "role": "manager", "subject": "team-b"})
	f.publisher = a.Key(t, admin, map[string]any{"name": "p", "role": "publisher", "rooms": grant})
	f.sub = a.Key(t, admin, map[string]any{"name": "s", "role": "subscriber", "subject": "sub-a", "rooms": grant})
	f.sub2 = a.Key(t, admin, map[string]any{"name": "s2", "role": "subscriber", "subject": "sub-b", "rooms": grant})
	return f
}

// create makes a subscription with key and returns its answer.
func (f *approvalFixture) create(t *testing.T, key string, body map[string]any) subscriptions.Response {
	t.Helper()
	if body["eventTypes"] == nil {
		body["eventTypes"] = []any{map[string]any{"eventType": "order.created"}}
	}
	r := f.As(key, "POST", "/v1/rooms/orders/subscriptions", body)
	apptest.Want(t, r, http.StatusCreated)
	return apptest.Decode[subscriptions.Response](t, r)
}

func (f *approvalFixture) path(id string) string { return "/v1/rooms/orders/subscriptions/" + id }

// publish publishes one order.created and answers how many subscriptions it went to.
func (f *approvalFixture) publish(t *testing.T) int {
	t.Helper()
	r := f.As(f.publisher, "POST", "/v1/rooms/orders/messages", map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "1"}})
	apptest.Want(t, r, http.StatusAccepted)
	return apptest.Decode[publish.PublishResponse](t, r).Destinations
}

// wantConflict fails unless r is a 409 whose detail says each of says.
func wantConflict(t *testing.T, r apptest.Response, says ...string) {
	t.Helper()
	apptest.Want(t, r, http.StatusConflict)
	detail, _ := r.JSON(t)["detail"].(string)
	for _, s := range says {
		if !strings.Contains(detail, s) {
			t.Errorf("409 detail %q does not say %q", detail, s)
		}
	}
}

// TestApproval: in a MANUAL room a subscriber's subscription starts
// PENDING and receives nothing, can be neither activated nor pulled by its
// owner, and only the room's manager or an admin approves or rejects it;
// the answer says who decided, when and why.
func TestApproval(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			f := newApprovalFixture(t, d)

			// The manager's and an admin's subscriptions start as asked.
			if s := f.create(t, f.manager, map[string]any{"type": "PULL"}); s.Status != subscriptions.StatusActive || s.DecidedBy != nil || s.DecidedAt != nil {
				t.Errorf("manager's subscription: %+v", s)
			}
			if s := f.create(t, f.admin, map[string]any{"type": "PULL", "status": "PAUSED"}); s.Status != subscriptions.StatusPaused {
				t.Errorf("admin's subscription: %+v", s)
			}
			queues := len(f.Queues.Created())

			// A subscriber's starts PENDING, with no queue yet.
			pending := f.create(t, f.sub, map[string]any{"type": "PULL"})
			if pending.Status != subscriptions.StatusPending || pending.Owner == nil || *pending.Owner != "sub-a" ||
				pending.DecidedBy != nil || pending.DecidedAt != nil || pending.RejectionReason != nil || pending.Destination == nil {
				t.Fatalf("subscriber's subscription: %+v", pending)
			}
			if n := len(f.Queues.Created()); n != queues {
				t.Errorf("%d queues created for a PENDING subscription, want none", n-queues)
			}
			apptest.WantField(t, f.As(f.sub, "POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PULL", "status": "PAUSED",
				"eventTypes": []any{map[string]any{"eventType": "order.created"}}}), "status")

			// It receives nothing: one ACTIVE subscription takes the event.
			if n := f.publish(t); n != 1 {
				t.Errorf("event went to %d subscriptions, want 1 (PAUSED and PENDING take none)", n)
			}

			// Its owner may change it and see it, but not activate or pull it.
			wantConflict(t, f.As(f.sub, "PATCH", f.path(pending.ID), map[string]any{"status": "ACTIVE"}), "PENDING", ":approve")
			wantConflict(t, f.As(f.sub, "PATCH", f.path(pending.ID), map[string]any{"status": "PAUSED"}), "PENDING")
			wantConflict(t, f.As(f.manager, "PATCH", f.path(pending.ID), map[string]any{"status": "ACTIVE"}), "PENDING")
			apptest.WantField(t, f.As(f.sub, "PATCH", f.path(pending.ID), map[string]any{"status": "PENDING"}), "status")
			r := f.As(f.sub, "PATCH", f.path(pending.ID), map[string]any{"ackDeadline": 20000})
			apptest.Want(t, r, http.StatusOK)
			if s := apptest.Decode[subscriptions.Response](t, r); s.Status != subscriptions.StatusPending || s.AckDeadline != 20000 {
				t.Errorf("after PATCH: %+v", s)
			}
			wantConflict(t, f.As(f.sub, "POST", f.path(pending.ID)+"/pull", map[string]any{"maxMessages": 1}), "PENDING", "approve")

			// Lists filter by status.
			r = f.As(f.manager, "GET", "/v1/rooms/orders/subscriptions?status=PENDING", nil)
			apptest.Want(t, r, http.StatusOK)
			if items := apptest.Decode[api.List[subscriptions.Response]](t, r).Items; len(items) != 1 || items[0].ID != pending.ID {
				t.Errorf("PENDING list: %s", r.Body)
			}

			// Only the room's manager or an admin decides.
			for _, key := range []string{f.sub, f.stranger, f.publisher} {
				apptest.Want(t, f.As(key, "POST", f.path(pending.ID)+":approve", nil), http.StatusForbidden)
				apptest.Want(t, f.As(key, "POST", f.path(pending.ID)+":reject", map[string]any{"reason": "no"}), http.StatusForbidden)
			}
			apptest.Want(t, f.As(f.manager, "POST", f.path(uuid.NewString())+":approve", nil), http.StatusNotFound)
			// Another custom method is no resource; the subscription's own
			// path takes no POST.
			apptest.Want(t, f.As(f.manager, "POST", f.path(pending.ID)+":unknown", nil), http.StatusNotFound)
			r = f.As(f.manager, "POST", f.path(pending.ID), nil)
			apptest.Want(t, r, http.StatusMethodNotAllowed)
			if allow := r.Header.Get("Allow"); allow != "DELETE, GET, PATCH" {
				t.Errorf("POST on the subscription's own path: Allow %q", allow)
			}

			r = f.As(f.manager, "POST", f.path(pending.ID)+":approve", nil)
			apptest.Want(t, r, http.StatusOK)
			approved := apptest.Decode[subscriptions.Response](t, r)
			if approved.Status != subscriptions.StatusActive || approved.DecidedBy == nil || *approved.DecidedBy != "team-a" ||
				approved.DecidedAt == nil || approved.RejectionReason != nil {
				t.Fatalf("approved: %s", r.Body)
			}
			if created := f.Queues.Created(); len(created) != queues+1 || created[len(created)-1].FQQN() != *approved.Destination {
				t.Errorf("queues created at approval: %v, want %s", created[queues:], *approved.Destination)
			}
			r = f.As(f.sub, "GET", f.path(pending.ID), nil)
			apptest.Want(t, r, http.StatusOK)
			if got := apptest.Decode[subscriptions.Response](t, r); got.Status != subscriptions.StatusActive || !got.DecidedAt.Equal(*approved.DecidedAt) {
				t.Errorf("read back by its owner: %s", r.Body)
			}
			if n := f.publish(t); n != 2 {
				t.Errorf("event went to %d subscriptions, want 2 once approved", n)
			}
			wantConflict(t, f.As(f.manager, "POST", f.path(pending.ID)+":approve", nil), "ACTIVE", "approved by \"team-a\"", "only a PENDING")
			wantConflict(t, f.As(f.manager, "POST", f.path(pending.ID)+":reject", map[string]any{"reason": "late"}), "ACTIVE", "not PENDING")

			// A rejection needs a reason and is final.
			other := f.create(t, f.sub2, map[string]any{"type": "PUSH", "pushUrl": "https://example.com/hook"})
			apptest.WantField(t, f.As(f.manager, "POST", f.path(other.ID)+":reject", map[string]any{}), "reason")
			apptest.WantField(t, f.As(f.manager, "POST", f.path(other.ID)+":reject", map[string]any{"reason": "  "}), "reason")
			apptest.WantField(t, f.As(f.manager, "POST", f.path(other.ID)+":reject", map[string]any{"reason": strings.Repeat("x", 1001)}), "reason")
			apptest.Want(t, f.As(f.manager, "POST", f.path(other.ID)+":reject", map[string]any{"why": "x"}), http.StatusUnprocessableEntity)
			r = f.As(f.admin, "POST", f.path(other.ID)+":reject", map[string]any{"reason": " Only billing receives orders. "})
			apptest.Want(t, r, http.StatusOK)
			rejected := apptest.Decode[subscriptions.Response](t, r)
			if rejected.Status != subscriptions.StatusRejected || rejected.RejectionReason == nil || *rejected.RejectionReason != "Only billing receives orders." ||
				rejected.DecidedBy == nil || uuid.Validate(*rejected.DecidedBy) != nil || rejected.DecidedAt == nil {
				t.Fatalf("rejected by an admin key (no subject: its id decides): %s", r.Body)
			}
			r = f.As(f.sub2, "GET", f.path(other.ID), nil)
			apptest.Want(t, r, http.StatusOK)
			if got := apptest.Decode[subscriptions.Response](t, r); got.RejectionReason == nil || *got.RejectionReason != "Only billing receives orders." {
				t.Errorf("the owner does not read the reason: %s", r.Body)
			}
			wantConflict(t, f.As(f.sub2, "PATCH", f.path(other.ID), map[string]any{"status": "ACTIVE"}), "REJECTED", "final")
			wantConflict(t, f.As(f.sub2, "PATCH", f.path(other.ID), map[string]any{"deliveryAttempts": 2}), "REJECTED")
			wantConflict(t, f.As(f.sub2, "POST", f.path(other.ID)+"/secret:rotate", nil), "REJECTED")
			wantConflict(t, f.As(f.manager, "POST", f.path(other.ID)+":approve", nil), "REJECTED", "rejected by")
			r = f.As(f.manager, "GET", "/v1/rooms/orders/subscriptions?status=REJECTED", nil)
			apptest.Want(t, r, http.StatusOK)
			if items := apptest.Decode[api.List[subscriptions.Response]](t, r).Items; len(items) != 1 || items[0].ID != other.ID {
				t.Errorf("REJECTED list: %s", r.Body)
			}
			if n := f.publish(t); n != 2 {
				t.Errorf("event went to %d subscriptions, want 2 (REJECTED takes none)", n)
			}
			apptest.Want(t, f.As(f.sub2, "DELETE", f.path(other.ID), nil), http.StatusNoContent)
		})
	}
}

// TestApprovalModes: switching a room to AUTOMATIC approves nothing, a
// subscription's owner may withdraw it while PENDING, and an approval
// that cannot create the PULL queue leaves the subscription PENDING.
func TestApprovalModes(t *testing.T) {
	t.Parallel()
	f := newApprovalFixture(t, store.SQLite)
	pending := f.create(t, f.sub, map[string]any{"type": "PULL"})
	withdrawn := f.create(t, f.sub, map[string]any{"type": "PUSH", "pushUrl": "https://example.com/hook"})

	r := f.As(f.manager, "PATCH", "/v1/rooms/orders", map[string]any{"subscriptionApproval": "AUTOMATIC"})
	apptest.Want(t, r, http.StatusOK)
	if got := apptest.Decode[rooms.RoomResponse](t, r).SubscriptionApproval; got != rooms.ApprovalAutomatic {
		t.Fatalf("subscriptionApproval %q after PATCH", got)
	}
	r = f.As(f.sub, "GET", f.path(pending.ID), nil)
	apptest.Want(t, r, http.StatusOK)
	if s := apptest.Decode[subscriptions.Response](t, r); s.Status != subscriptions.StatusPending {
		t.Errorf("switching to AUTOMATIC changed a PENDING subscription to %s", s.Status)
	}
	if s := f.create(t, f.sub, map[string]any{"type": "PULL"}); s.Status != subscriptions.StatusActive {
		t.Errorf("a subscriber's subscription in an AUTOMATIC room starts %s", s.Status)
	}

	r = f.As(f.sub, "PATCH", f.path(withdrawn.ID), map[string]any{"status": "TERMINATED"})
	apptest.Want(t, r, http.StatusOK)
	if s := apptest.Decode[subscriptions.Response](t, r); s.Status != subscriptions.StatusTerminated || s.DecidedAt != nil {
		t.Errorf("withdrawn: %+v", s)
	}
	wantConflict(t, f.As(f.manager, "POST", f.path(withdrawn.ID)+":approve", nil), "TERMINATED", "not PENDING")

	f.Queues.SetDown(true)
	apptest.Want(t, f.As(f.manager, "POST", f.path(pending.ID)+":approve", nil), http.StatusServiceUnavailable)
	f.Queues.SetDown(false)
	r = f.As(f.manager, "GET", f.path(pending.ID), nil)
	apptest.Want(t, r, http.StatusOK)
	if s := apptest.Decode[subscriptions.Response](t, r); s.Status != subscriptions.StatusPending {
		t.Errorf("after an approval the broker refused: %s, want PENDING", s.Status)
	}
	apptest.Want(t, f.As(f.manager, "POST", f.path(pending.ID)+":approve", nil), http.StatusOK)

	for _, bad := range []any{"manual", nil, 1} {
		apptest.WantField(t, f.As(f.manager, "PATCH", "/v1/rooms/orders", map[string]any{"subscriptionApproval": bad}), "subscriptionApproval")
	}
	r = f.As(f.admin, "POST", "/v1/rooms", map[string]any{"identifier": "plain", "managerIdentifier": "team-a"})
	apptest.Want(t, r, http.StatusCreated)
	if got := apptest.Decode[rooms.RoomResponse](t, r).SubscriptionApproval; got != rooms.ApprovalAutomatic {
		t.Errorf("a new room's subscriptionApproval is %q, want AUTOMATIC", got)
	}
}
