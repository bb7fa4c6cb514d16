package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// replayStore records what a replay stores; the rest is never called.
type replayStore struct {
	delivery.Store
	ids    []uuid.UUID
	events []message.Event
	sends  []message.Send
}

func (s *replayStore) Replay(_ context.Context, ids []uuid.UUID, events []message.Event, sends []message.Send) error {
	s.ids, s.events, s.sends = ids, events, sends
	return nil
}

type counter struct{ n int }

func (c *counter) Notify() { c.n++ }

type replays map[string]int

func (r replays) Replayed(typ string, n int) { r[typ] += n }

// TestReplay: dead letters come back as new events (same payload,
// correlation id and attributes; a fresh id, request and expiry; no
// idempotency key) with one pending copy each, from attempt 1, to the push
// queue or the PULL subscription's queue; the relay is woken and the
// replay counted. A terminated subscription or room replays nothing.
func TestReplay(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pushQueue := broker.Destination{Address: "push", Queue: "dispatch"}
	room := rooms.NewRoomDefaults()
	room.ID, room.MessageExpiration = uuid.New(), 60_000
	dl := delivery.DeadLetter{
		ID: uuid.New(), RoomID: room.ID, Attempts: 3, Reason: delivery.ReasonExhausted,
		Event: message.Event{ID: uuid.New(), RoomID: room.ID, CorrelationID: "c-1", Payload: json.RawMessage(`{"a":1}`),
			Attributes: map[string]string{"k": "v"}, IdempotencyKey: "key", RequestHash: "h", PublishedAt: now.Add(-time.Hour),
			ExpiresAt: now.Add(-time.Minute)},
	}
	for _, tc := range []struct {
		typ  subscriptions.Type
		dest func(subscriptions.Subscription) string
	}{
		{subscriptions.TypePush, func(subscriptions.Subscription) string { return pushQueue.FQQN() }},
		{subscriptions.TypePull, func(s subscriptions.Subscription) string { return s.Queue().FQQN() }},
	} {
		t.Run(string(tc.typ), func(t *testing.T) {
			t.Parallel()
			st, relay, obs := &replayStore{}, &counter{}, replays{}
			svc := delivery.NewService(delivery.Deps{Store: st, Relay: relay, PushQueue: pushQueue, Now: func() time.Time { return now }, Observer: obs})
			sub := subscriptions.Subscription{ID: uuid.New(), RoomID: room.ID, Type: tc.typ, Status: subscriptions.StatusActive}
			evs, err := svc.Replay(context.Background(), room, sub, []delivery.DeadLetter{dl})
			if err != nil {
				t.Fatal(err)
			}
			ev := evs[0]
			if len(st.ids) != 1 || st.ids[0] != dl.ID || len(st.events) != 1 || st.events[0].ID != ev.ID {
				t.Fatalf("stored %v and %v, want the dead letter gone and its new event", st.ids, st.events)
			}
			if ev.ID == dl.Event.ID || ev.CorrelationID != "c-1" || string(ev.Payload) != `{"a":1}` || ev.Attributes["k"] != "v" ||
				ev.IdempotencyKey != "" || ev.RequestHash != "" || !ev.PublishedAt.Equal(now) || !ev.ExpiresAt.Equal(now.Add(time.Minute)) ||
				ev.Destinations != 1 {
				t.Errorf("replayed event %+v: want a new event with the dead letter's content, published now", ev)
			}
			s := st.sends[0]
			if s.EventID != ev.ID || s.SubscriptionID != sub.ID || s.Attempt != 1 || s.Status != message.StatusPending ||
				s.Destination != tc.dest(sub) || s.SubscriptionType != string(tc.typ) || !s.CreatedAt.Equal(now) {
				t.Errorf("replayed copy %+v: want attempt 1, pending, to %s", s, tc.dest(sub))
			}
			if relay.n != 1 || len(obs) != 1 {
				t.Errorf("relay woken %d times, replays observed %v; want once each", relay.n, obs)
			}
		})
	}

	t.Run("terminated", func(t *testing.T) {
		t.Parallel()
		st := &replayStore{}
		svc := delivery.NewService(delivery.Deps{Store: st, Relay: &counter{}, PushQueue: pushQueue, Now: func() time.Time { return now }})
		sub := subscriptions.Subscription{ID: uuid.New(), RoomID: room.ID, Type: subscriptions.TypePush, Status: subscriptions.StatusTerminated}
		if _, err := svc.Replay(context.Background(), room, sub, []delivery.DeadLetter{dl}); !errors.Is(err, subscriptions.ErrTerminated) {
			t.Errorf("replay to a terminated subscription: %v, want ErrTerminated", err)
		}
		gone := room
		gone.Status = rooms.StatusTerminated
		sub.Status = subscriptions.StatusActive
		if _, err := svc.Replay(context.Background(), gone, sub, []delivery.DeadLetter{dl}); !errors.Is(err, rooms.ErrTerminated) {
			t.Errorf("replay in a terminated room: %v, want ErrTerminated", err)
		}
		if st.ids != nil {
			t.Errorf("stored a replay of %v", st.ids)
		}
	})
}
