package push

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// BenchmarkDeliver is the dispatcher's hot path for one message of an
// ACTIVE subscription with a quick endpoint: the cached lookup, the
// circuit's verdict and count, the rate check, the signed POST and the
// decision (its storage excluded). The POST is answered in memory (a
// loopback server's noise on a shared machine is a hundred times the
// difference measured).
// The cases differ only in what the dispatcher was given: no circuit store,
// a closed circuit, a closed circuit and a pace store with no limit on the
// subscription. Compare their ns/op: the difference is what a closed circuit
// and no rate limit cost per delivery.
func BenchmarkDeliver(b *testing.B) {
	for _, tc := range []struct {
		name           string
		circuits, pace bool
	}{
		{"no breaker", false, false},
		{"closed circuit", true, false},
		{"closed circuit, no rate limit", true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sub, d := hotPathMessage()
			dir := fixedTarget{room: rooms.NewRoomDefaults(), sub: sub}
			deps := Deps{Directory: dir, Log: nopLog{}, Client: &http.Client{Transport: answer204{}}, Now: time.Now,
				Logger: slog.New(slog.DiscardHandler)}
			if tc.circuits {
				deps.Circuits = &memCircuits{m: map[uuid.UUID]subscriptions.Circuit{}}
			}
			if tc.pace {
				deps.Pace = newMemPace()
			}
			p := New(DefaultConfig(broker.Destination{Address: "push", Queue: "push"}), deps)
			j := &job{key: sub.ID, d: d}
			ctx := context.Background()
			for b.Loop() {
				dec, err := p.deliver(ctx, j)
				if err != nil || dec.outcome != "delivered" {
					b.Fatalf("%+v, %v", dec.outcome, err)
				}
			}
		})
	}
}

// hotPathMessage is the subscription (ACTIVE, signed, with a quick
// endpoint) and the first copy of an event to it that the hot-path
// benchmarks deliver.
func hotPathMessage() (subscriptions.Subscription, *broker.Delivery) {
	sub := subscriptions.Subscription{ID: uuid.New(), Type: subscriptions.TypePush, PushURL: "http://hook.test/", Status: subscriptions.StatusActive,
		SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Au2Tf8FIQ8="}
	ev := message.Event{ID: uuid.New(), RoomID: uuid.New(), EventType: "tick", Version: 1, Payload: []byte(`{"n":1}`), PublishedAt: time.Now()}
	s := message.Send{ID: uuid.New(), EventID: ev.ID, RoomID: ev.RoomID, CorrelationID: "c", SubscriptionID: sub.ID,
		Destination: "push::push", Attempt: 1, CreatedAt: time.Now()}
	return sub, &broker.Delivery{Message: message.Encode(s, ev, time.Now()), ID: "m"}
}

// BenchmarkClosedCircuit is the circuit's own work per delivery while it is
// closed (the verdict and the count of the outcome), from every worker at
// once on one subscription: the contention of its lock included.
func BenchmarkClosedCircuit(b *testing.B) {
	bs := newBreakers(&memCircuits{m: map[uuid.UUID]subscriptions.Circuit{}}, time.Second, time.Now, slog.New(slog.DiscardHandler), nopObserver{})
	id, settings, c := uuid.New(), rooms.DefaultBreaker, subscriptions.Circuit{State: subscriptions.CircuitClosed}
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			br := bs.get(id, c)
			if v := bs.admit(ctx, id, br, settings, time.Second, 4*time.Second); v.hold {
				b.Fatal("held")
			}
			bs.record(ctx, id, br, settings, failure{code: 200})
		}
	})
}

type fixedTarget struct {
	room rooms.Room
	sub  subscriptions.Subscription
}

func (f fixedTarget) PushTarget(context.Context, uuid.UUID, uuid.UUID) (rooms.Room, subscriptions.Subscription, error) {
	return f.room, f.sub, nil
}

// nopLog stores nothing.
type nopLog struct{}

func (nopLog) Settle(context.Context, delivery.Settlement) error                { return nil }
func (nopLog) MarkSent(context.Context, []uuid.UUID, time.Time) error           { return nil }
func (nopLog) Release(context.Context, []uuid.UUID) error                       { return nil }
func (nopLog) ReleaseParked(context.Context, uuid.UUID, time.Time) (int, error) { return 0, nil }

// answer204 answers every request 204 at once, without a network.
type answer204 struct{}

func (answer204) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusNoContent, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}
