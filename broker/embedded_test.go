package broker_test

import (
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/broker/brokertest"
)

func newEmbedded(t *testing.T) *broker.Embedded {
	t.Helper()
	e := broker.NewEmbedded(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func TestEmbeddedContract(t *testing.T) {
	e := newEmbedded(t)
	brokertest.Run(t, brokertest.Harness{
		New: func(*testing.T) broker.Broker { return e.Connect() },
		// Go timers: measured 0-2ms late under -race with the suite in parallel.
		ScheduleTolerance: 100 * time.Millisecond,
	})
}

var dest = broker.Destination{Address: "room-1", Queue: "subscription-2"}

func sendN(t *testing.T, b broker.Broker, bodies ...string) {
	t.Helper()
	for _, body := range bodies {
		if err := b.Send(t.Context(), broker.Message{Destination: dest, Body: []byte(body), Attempt: 1}); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
}

func next(t *testing.T, sub broker.Subscription, timeout time.Duration) (*broker.Delivery, bool) {
	t.Helper()
	select {
	case d, ok := <-sub.C():
		return d, ok
	case <-time.After(timeout):
		return nil, false
	}
}

func TestEmbeddedPrefetchBoundsUnacked(t *testing.T) {
	for _, prefetch := range []int{1, 3} {
		t.Run(strconv.Itoa(prefetch), func(t *testing.T) {
			e := newEmbedded(t)
			sub, err := e.Subscribe(t.Context(), dest, broker.SubscribeOptions{Prefetch: prefetch})
			if err != nil {
				t.Fatal(err)
			}
			sendN(t, e, "1", "2", "3", "4", "5")
			var held []*broker.Delivery
			for range prefetch {
				d, ok := next(t, sub, time.Second)
				if !ok {
					t.Fatalf("got %d deliveries, want %d before any ack", len(held), prefetch)
				}
				held = append(held, d)
			}
			if d, ok := next(t, sub, 100*time.Millisecond); ok {
				t.Fatalf("delivery %q beyond the prefetch of %d", d.Body, prefetch)
			}
			if err := held[0].Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
			if _, ok := next(t, sub, time.Second); !ok {
				t.Fatal("an ack did not free a slot in the prefetch window")
			}
		})
	}
}

func TestEmbeddedCompetingConsumers(t *testing.T) {
	e := newEmbedded(t)
	var subs []broker.Subscription
	for range 2 {
		sub, err := e.Subscribe(t.Context(), dest, broker.SubscribeOptions{Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	sendN(t, e, "a", "b")
	for i, sub := range subs {
		d, ok := next(t, sub, time.Second)
		if !ok {
			t.Fatalf("consumer %d got nothing: messages are not shared", i)
		}
		if err := d.Ack(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEmbeddedAckAfterClose(t *testing.T) {
	e := newEmbedded(t)
	sub, err := e.Subscribe(t.Context(), dest, broker.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sendN(t, e, "x")
	d, ok := next(t, sub, time.Second)
	if !ok {
		t.Fatal("no delivery")
	}
	_ = sub.Close()
	if err := d.Ack(t.Context()); !errors.Is(err, broker.ErrStaleDelivery) || !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Ack after Close: %v, want ErrStaleDelivery and ErrClosed", err)
	}
}

func TestEmbeddedExpiresWhileWaitingForTheReader(t *testing.T) {
	e := newEmbedded(t)
	sub, err := e.Subscribe(t.Context(), dest, broker.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Send(t.Context(), broker.Message{Destination: dest, Body: []byte("short-lived"), Attempt: 1,
		Expires: time.Now().Add(100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if !sub.Full() {
		t.Fatal("the message was not handed to the subscription")
	}
	// The reader is late: the message expires in the subscription's window.
	apitest.Eventually(t, "the unread message to expire and leave the window", func() bool { return !sub.Full() })
	sendN(t, e, "fresh")
	d, ok := next(t, sub, time.Second)
	if !ok || string(d.Body) != "fresh" {
		t.Fatalf("got %v, want only the unexpired message", d)
	}
}

func TestEmbeddedDeleteQueue(t *testing.T) {
	e := newEmbedded(t)
	sub, err := e.Subscribe(t.Context(), dest, broker.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sendN(t, e, "old")
	if err := e.Send(t.Context(), broker.Message{Destination: dest, Body: []byte("scheduled"), Attempt: 1,
		Delay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteQueue(t.Context(), dest); err != nil {
		t.Fatal(err)
	}
	for range sub.C() { // closed, like Artemis' destroyQueue removing consumers
	}
	if err := e.DeleteQueue(t.Context(), dest); err != nil {
		t.Errorf("deleting a missing queue: %v", err)
	}
	fresh, err := e.Subscribe(t.Context(), dest, broker.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := next(t, fresh, 200*time.Millisecond); ok {
		t.Errorf("message %q survived DeleteQueue", d.Body)
	}
}

func TestEmbeddedCloseClosesClients(t *testing.T) {
	e := broker.NewEmbedded(nil)
	client := e.Connect()
	sub, err := client.Subscribe(t.Context(), dest, broker.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-sub.C(); ok {
		t.Error("subscription of a client still open after the broker's Close")
	}
	if client.Connected() || e.Connected() {
		t.Error("Connected() after Close")
	}
	if err := client.Send(t.Context(), broker.Message{Destination: dest}); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Send through a client after Close: %v", err)
	}
	if err := e.Connect().Send(t.Context(), broker.Message{Destination: dest}); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Send through a client connected after Close: %v", err)
	}
}
