package client_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/oapi-codegen/nullable"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/client"
	"github.com/roomhub/messaging-api/push"
)

// adminKey is the service's bootstrap admin key in this test.
const adminKey = "quickstart-admin-key-0123456789abcdef"

// TestQuickstart walks the README's quick start through the generated
// client, against the whole service with authentication on: a room, an event
// type and its version, a PULL and a PUSH subscription, a publish, the pull
// and ack of its PULL copy, the PUSH copy delivered after two failures, and
// the event's timeline. Every answer is checked against openapi.yaml too.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	svc := apptest.StartService(t, map[string]string{"AUTH_DISABLED": "false", "AUTH_BOOTSTRAP_ADMIN_KEY": adminKey})
	c := svc.As(adminKey).API()
	ctx := t.Context()

	t.Run("no key", func(t *testing.T) {
		anonymous := apptest.Client{T: t, Base: svc.Base}.API()
		r, err := anonymous.ListRoomsWithResponse(ctx, nil)
		var p *client.Problem
		if err != nil || !errors.As(client.Check(r), &p) || p.Code != client.ProblemCodeUnauthorized || r.ApplicationproblemJSON401 == nil {
			t.Fatalf("without a key: %v, %d %s", err, r.StatusCode(), r.Body)
		}
	})

	manager := "team-orders"
	room, err := c.CreateRoomWithResponse(ctx, client.RoomCreate{
		Identifier:              "orders",
		ManagerIdentifier:       &manager,
		MessageExpiration:       nullable.NewNullableWithValue[int64](3600000),
		DeliveryDelay:           ptr[int64](100),
		DeliveryDelayMultiplier: ptr(2.0),
		DeliveryAttempts:        ptr[int32](5),
	})
	if got := apptest.Must(t, room, err, room.JSON201); got.Identifier != "orders" || got.MessageExpiration.MustGet() != 3600000 || got.RetryPolicy.IsSpecified() && !got.RetryPolicy.IsNull() {
		t.Fatalf("room %+v", got)
	}

	t.Run("again", func(t *testing.T) {
		// A setup script can tell "already there" from a failure by its code.
		r, err := c.CreateRoomWithResponse(ctx, client.RoomCreate{Identifier: "orders", ManagerIdentifier: &manager})
		var p *client.Problem
		if err != nil || !errors.As(client.Check(r), &p) || p.Code != client.ProblemCodeAlreadyExists || p.Type != "/problems/already_exists" {
			t.Fatalf("the room again: %v, %d %s", err, r.StatusCode(), r.Body)
		}
	})

	description := "A customer placed an order"
	et, err := c.CreateEventTypeWithResponse(ctx, "orders", client.EventTypeCreate{Identifier: "order.created", Description: &description})
	apptest.Must(t, et, err, et.JSON201)
	one := 1
	v, err := c.CreateVersionWithResponse(ctx, "orders", "order.created", client.VersionCreate{Version: &one, Schema: json.RawMessage(`{
		"type": "object",
		"required": ["orderId", "total"],
		"properties": {"orderId": {"type": "string"}, "total": {"type": "number", "minimum": 0}}
	}`)})
	apptest.Must(t, v, err, v.JSON201)

	pullSub, err := c.CreateSubscriptionWithResponse(ctx, "orders", client.SubscriptionCreate{
		Type:       client.SubscriptionTypePULL,
		EventTypes: client.EventTypeFilters{{EventType: "order.created"}},
	})
	pulled := apptest.Must(t, pullSub, err, pullSub.JSON201)
	if dest, err := pulled.Destination.Get(); err != nil || dest == "" || pulled.SigningSecret != nil {
		t.Fatalf("PULL subscription: destination %q (%v), signingSecret %v", dest, err, pulled.SigningSecret)
	}

	hook := apptest.SequenceHook(t, http.StatusInternalServerError, http.StatusInternalServerError, http.StatusNoContent)
	pushSub, err := c.CreateSubscriptionWithResponse(ctx, "orders", client.SubscriptionCreate{
		Type:       client.SubscriptionTypePUSH,
		PushUrl:    nullable.NewNullableWithValue(hook.URL()),
		EventTypes: client.EventTypeFilters{{EventType: "order.created", Versions: &[]int{1}}},
	})
	pushed := apptest.Must(t, pushSub, err, pushSub.JSON201)
	if pushed.SigningSecret == nil {
		t.Fatal("the PUSH subscription's answer has no signingSecret")
	}

	correlation := "checkout-42"
	pub, err := c.PublishMessageWithResponse(ctx, "orders", &client.PublishMessageParams{XCorrelationID: &correlation}, client.MessageInput{
		EventType: "order.created",
		Payload:   json.RawMessage(`{"orderId":"A-1001","total":25.5}`),
	})
	event := apptest.Must(t, pub, err, pub.JSON202)
	if event.Destinations != 2 || event.CorrelationId != correlation || event.EventTypeVersion != 1 {
		t.Fatalf("published %+v, want 2 destinations, correlation %s, version 1", event, correlation)
	}

	t.Run("bad payload", func(t *testing.T) {
		r, err := c.PublishMessageWithResponse(ctx, "orders", nil, client.MessageInput{
			EventType: "order.created", Payload: json.RawMessage(`{"orderId": "A-1002"}`),
		})
		var p *client.Problem
		if err != nil || !errors.As(client.Check(r), &p) || p.Code != client.ProblemCodeValidationFailed || r.ApplicationproblemJSON422 == nil || p.Errors == nil ||
			!slices.ContainsFunc(*p.Errors, func(f client.FieldError) bool { return f.Field == "payload" }) {
			t.Fatalf("a payload without total: %v, %d %s", err, r.StatusCode(), r.Body)
		}
	})

	// The PULL copy: pulled, then acked.
	msgs, err := c.PullWithResponse(ctx, "orders", pulled.Id, client.PullRequest{WaitMs: ptr[int64](5000)})
	got := apptest.Must(t, msgs, err, msgs.JSON200).Messages
	if len(got) != 1 || got[0].EventId != event.EventId || string(got[0].Payload) != `{"orderId":"A-1001","total":25.5}` {
		t.Fatalf("pulled %+v, want event %s as published", got, event.EventId)
	}
	ack, err := c.AckWithResponse(ctx, "orders", pulled.Id, client.AckRequest{AckIds: client.AckIds{got[0].AckId.String()}})
	if res := apptest.Must(t, ack, err, ack.JSON200).Results; len(res) != 1 || res[0].Status != client.AckStatusAcked {
		t.Fatalf("ack: %+v", res)
	}

	// The PUSH copy: two failures, then delivered, each request signed.
	apitest.Eventually(t, "the third push request", func() bool { return len(hook.Requests()) >= 3 })
	for _, r := range hook.Requests() {
		ts, err := strconv.ParseInt(r.Header.Get("Webhook-Timestamp"), 10, 64)
		if err != nil || r.Header.Get("Webhook-Id") != event.EventId.String() ||
			r.Header.Get("Webhook-Signature") != push.Sign([]string{*pushed.SigningSecret}, event.EventId.String(), time.Unix(ts, 0), r.Body) {
			t.Fatalf("push request %v is not signed with the subscription's secret", r.Header)
		}
	}

	// The timeline: every attempt of both deliveries.
	var timeline client.Message
	apitest.Eventually(t, "the timeline shows both copies delivered", func() bool {
		r, err := c.ListMessagesWithResponse(ctx, "orders", &client.ListMessagesParams{CorrelationId: &correlation})
		list := apptest.Must(t, r, err, r.JSON200)
		if len(list.Items) != 1 {
			return false
		}
		timeline = list.Items[0]
		for _, d := range timeline.Deliveries {
			if last := d.Attempts[len(d.Attempts)-1]; last.Status != client.SendStatusDelivered {
				return false
			}
		}
		return len(timeline.Deliveries) == 2
	})
	for _, d := range timeline.Deliveries {
		want := 1
		if d.SubscriptionId == pushed.Id {
			want = 3
		}
		if len(d.Attempts) != want {
			t.Errorf("subscription %s: %d attempts, want %d: %+v", d.SubscriptionId, len(d.Attempts), want, d.Attempts)
		}
	}
}

func ptr[T any](v T) *T { return &v }
