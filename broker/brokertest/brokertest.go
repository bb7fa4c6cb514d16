// Package brokertest is the contract every broker.Broker implementation must
// meet, written once and run against each of them: the embedded broker in
// broker/embedded_test.go and a real STOMP broker in
// broker/stomp_integration_test.go.
//
// Every test uses queues of its own with fresh names on the address prefix
// "brokertest.", so tests run in parallel and a rerun against a broker holding
// leftovers of an earlier run is not disturbed by them.
package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
)

// Harness describes the broker under test.
type Harness struct {
	// New returns a new client of the broker under test: for a STOMP broker a new
	// set of connections, for the embedded broker a new client of one shared
	// instance. The suite closes it.
	New func(t *testing.T) broker.Broker
	// Restart stops and starts the broker process and returns once it accepts
	// connections again; nil when the broker cannot be restarted (embedded).
	Restart func(t *testing.T)
	// Durable is true when stored messages survive Restart.
	Durable bool
	// ScheduleTolerance is how much later than asked a scheduled message may
	// arrive; zero means one second.
	ScheduleTolerance time.Duration
	// RedeliveredUnreliable is true when a redelivery may come with
	// Redelivered false: Artemis derives the flag from its delivery count,
	// which it decrements again for deliveries of a consumer closed cleanly.
	RedeliveredUnreliable bool
}

// Run runs the contract. Tests that restart the broker run after all the others,
// one at a time; the others run in parallel.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("brokertest: Harness.New is nil")
	}
	s := &suite{h: h, tolerance: h.ScheduleTolerance}
	if s.tolerance <= 0 {
		s.tolerance = time.Second
	}
	t.Run("Contract", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			test func(*testing.T)
		}{
			{"RoundTrip", s.roundTrip},
			{"RejectsInvalidMessages", s.rejectsInvalid},
			{"ScheduledDelay", s.scheduledDelay},
			{"Expiry", s.expiry},
			{"RedeliveryAfterClose", s.redeliveryAfterClose},
			{"RepublishedScheduledMessageIsDelayedAgain", s.republishScheduled},
			{"ConcurrentSendersAndConsumers", s.concurrent},
			{"PrefetchBoundsUnackedMessages", s.prefetchBounds},
			{"ConsumersShareBacklog", s.shareBacklog},
			{"Close", s.close},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.test(t)
			})
		}
	})
	t.Run("Restart", func(t *testing.T) {
		if h.Restart == nil {
			t.Skip("the harness cannot restart this broker")
		}
		t.Run("PersistsMessages", func(t *testing.T) {
			if !h.Durable {
				t.Skip("the broker is not durable")
			}
			s.persistsAcrossRestart(t)
		})
		t.Run("LiveSubscriptionAndSendSurviveRestart", s.reconnectsAfterRestart)
	})
}

type suite struct {
	h         Harness
	tolerance time.Duration
}

// clockSlack absorbs brokers that schedule in whole milliseconds from their own
// clock reading, which may be up to a millisecond behind ours.
const clockSlack = 2 * time.Millisecond

func (s *suite) newBroker(t *testing.T) broker.Broker {
	t.Helper()
	b := s.h.New(t)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// ctx bounds every broker call of a test.
func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newDestination returns a queue no other test or earlier run uses.
func newDestination(t *testing.T) broker.Destination {
	id := uuid.NewString()[:8]
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	return broker.Destination{Address: "brokertest." + id, Queue: name + "-" + id}
}

func subscribe(t *testing.T, b broker.Broker, d broker.Destination, prefetch int) broker.Subscription {
	t.Helper()
	sub, err := b.Subscribe(ctx(t), d, broker.SubscribeOptions{Prefetch: prefetch})
	if err != nil {
		t.Fatalf("Subscribe(%s): %v", d, err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func send(t *testing.T, b broker.Broker, msg broker.Message) {
	t.Helper()
	if err := b.Send(ctx(t), msg); err != nil {
		t.Fatalf("Send(%s, %q): %v", msg.Destination, msg.Body, err)
	}
}

func receive(t *testing.T, sub broker.Subscription, timeout time.Duration) *broker.Delivery {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case d, ok := <-sub.C():
		if !ok {
			t.Fatal("subscription channel closed")
		}
		return d
	case <-timer.C:
		t.Fatalf("no delivery within %s", timeout)
		return nil
	}
}

// expectNothingBefore sends a marker to d and fails unless it is the next
// delivery of sub: the broker queues it behind everything sent or put back
// before it, so anything that was still to come arrives first, and nothing
// has to be waited for to show that nothing came.
func expectNothingBefore(t *testing.T, b broker.Broker, sub broker.Subscription, d broker.Destination) {
	t.Helper()
	marker := "marker-" + uuid.NewString()
	send(t, b, broker.Message{Destination: d, Body: []byte(marker), Attempt: 1})
	got := receive(t, sub, 10*time.Second)
	ack(t, got)
	if string(got.Body) != marker {
		t.Fatalf("unexpected delivery %q (headers %v) before the marker", got.Body, got.Headers)
	}
}

func ack(t *testing.T, d *broker.Delivery) {
	t.Helper()
	if err := d.Ack(ctx(t)); err != nil {
		t.Fatalf("Ack(%q): %v", d.Body, err)
	}
}

// checkMessage compares what was sent with what came back; Delay is a send
// instruction and is never part of a delivery.
func checkMessage(t *testing.T, got, want broker.Message) {
	t.Helper()
	if got.Destination != want.Destination {
		t.Errorf("Destination = %v, want %v", got.Destination, want.Destination)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("Body = %q, want %q", got.Body, want.Body)
	}
	if !maps.Equal(got.Headers, want.Headers) {
		t.Errorf("Headers = %q, want %q", got.Headers, want.Headers)
	}
	if got.ContentType != want.ContentType {
		t.Errorf("ContentType = %q, want %q", got.ContentType, want.ContentType)
	}
	if got.CorrelationID != want.CorrelationID {
		t.Errorf("CorrelationID = %q, want %q", got.CorrelationID, want.CorrelationID)
	}
	if got.Attempt != want.Attempt {
		t.Errorf("Attempt = %d, want %d", got.Attempt, want.Attempt)
	}
	if !got.Expires.Equal(want.Expires) {
		t.Errorf("Expires = %v, want %v", got.Expires, want.Expires)
	}
	if got.Delay != 0 {
		t.Errorf("Delay = %s on a delivery, want 0", got.Delay)
	}
}

func (s *suite) roundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  broker.Message
	}{
		{
			name: "AllFields",
			msg: broker.Message{
				Headers: map[string]string{
					"x-event-id":        uuid.NewString(),
					"x-subscription-id": "subscription-42",
					"X-Mixed-Case":      "Value",
					"x-escapes":         "colon: back\\slash\nnew line\r",
					"x-utf8":            "héllo ✓",
					"x-empty":           "",
				},
				Body:          []byte("{\"n\":1}\x00\n\xff binary\x00"),
				ContentType:   "application/octet-stream",
				CorrelationID: uuid.NewString(),
				Attempt:       3,
				Expires:       time.Now().Add(time.Hour).Truncate(time.Millisecond),
			},
		},
		{
			name: "Minimal",
			msg:  broker.Message{Body: []byte("x"), Attempt: 1},
		},
		{
			name: "EmptyBody",
			msg:  broker.Message{ContentType: "text/plain", CorrelationID: "c", Attempt: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := s.newBroker(t)
			d := newDestination(t)
			if err := b.EnsureQueue(ctx(t), d); err != nil {
				t.Fatalf("EnsureQueue: %v", err)
			}
			if err := b.EnsureQueue(ctx(t), d); err != nil {
				t.Fatalf("EnsureQueue again: %v", err)
			}
			sub := subscribe(t, b, d, 1)
			want := tc.msg
			want.Destination = d
			send(t, b, want)

			got := receive(t, sub, 10*time.Second)
			if want.Body == nil {
				want.Body = []byte{}
			}
			if got.Body == nil {
				got.Body = []byte{}
			}
			checkMessage(t, got.Message, want)
			if got.ID == "" {
				t.Error("ID is empty")
			}
			if got.Redelivered {
				t.Error("Redelivered on a first delivery")
			}
			ack(t, got)
			if err := got.Ack(ctx(t)); err == nil {
				t.Error("second Ack of one delivery succeeded")
			}
			expectNothingBefore(t, b, sub, d)
		})
	}
}

func (s *suite) rejectsInvalid(t *testing.T) {
	b := s.newBroker(t)
	d := newDestination(t)
	for _, tc := range []struct {
		name string
		msg  broker.Message
	}{
		{"EmptyAddress", broker.Message{Destination: broker.Destination{Queue: "q"}}},
		{"EmptyQueue", broker.Message{Destination: broker.Destination{Address: "a"}}},
		{"FQQNInQueue", broker.Message{Destination: broker.Destination{Address: "a", Queue: "b::c"}}},
		{"WildcardInAddress", broker.Message{Destination: broker.Destination{Address: "a.>", Queue: "q"}}},
		{"NegativeDelay", broker.Message{Destination: d, Delay: -time.Second}},
		{"NegativeAttempt", broker.Message{Destination: d, Attempt: -1}},
		{"ScheduledJobIDHeader", broker.Message{Destination: d, Headers: map[string]string{"scheduledJobId": "ID:x"}}},
		{"MessageIDHeader", broker.Message{Destination: d, Headers: map[string]string{"message-id": "m"}}},
		{"ScheduledDelayHeader", broker.Message{Destination: d, Headers: map[string]string{broker.HeaderScheduledDelay: "10"}}},
		{"ArtemisInternalHeader", broker.Message{Destination: d, Headers: map[string]string{"_AMQ_SCHED_DELIVERY": "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := b.Send(ctx(t), tc.msg)
			if err == nil {
				t.Fatalf("Send(%+v) succeeded, want an error", tc.msg)
			}
			// A caller must be able to tell a message that can never be sent
			// from a broker that is down (the relay gives up on the first).
			if !errors.Is(err, broker.ErrRefused) {
				t.Errorf("Send(%+v) = %v, want an error matching broker.ErrRefused", tc.msg, err)
			}
		})
	}
}

func (s *suite) scheduledDelay(t *testing.T) {
	for _, delay := range []time.Duration{250 * time.Millisecond, 1200 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			t.Parallel()
			b := s.newBroker(t)
			d := newDestination(t)
			sub := subscribe(t, b, d, 10)

			start := time.Now()
			send(t, b, broker.Message{Destination: d, Body: []byte("later"), Attempt: 1, Delay: delay})
			send(t, b, broker.Message{Destination: d, Body: []byte("now"), Attempt: 1})

			first := receive(t, sub, 10*time.Second)
			if string(first.Body) != "now" {
				t.Fatalf("first delivery %q, want the unscheduled message: the delay was ignored", first.Body)
			}
			ack(t, first)
			second := receive(t, sub, delay+s.tolerance+5*time.Second)
			observed := time.Since(start)
			ack(t, second)
			if string(second.Body) != "later" {
				t.Fatalf("second delivery %q, want %q", second.Body, "later")
			}
			t.Logf("delay %s: delivered after %s (%s late)", delay, observed.Round(time.Millisecond), (observed - delay).Round(time.Millisecond))
			if observed < delay-clockSlack {
				t.Errorf("delivered after %s, before the %s delay", observed, delay)
			}
			if observed > delay+s.tolerance {
				t.Errorf("delivered after %s, more than %s after the %s delay", observed, s.tolerance, delay)
			}
		})
	}
}

func (s *suite) expiry(t *testing.T) {
	b := s.newBroker(t)
	d := newDestination(t)
	now := time.Now()
	// Sent before anyone consumes: a broker must drop them when they expire in
	// the queue, in the scheduler or on the way to a consumer.
	send(t, b, broker.Message{Destination: d, Body: []byte("expired on arrival"), Attempt: 1,
		Expires: now.Add(-time.Second)})
	// A broker may accept this and drop it, or refuse it with ErrExpired; it
	// must never deliver it.
	if err := b.Send(ctx(t), broker.Message{Destination: d, Body: []byte("expires while scheduled"), Attempt: 1,
		Delay: 600 * time.Millisecond, Expires: now.Add(200 * time.Millisecond)}); err != nil && !errors.Is(err, broker.ErrExpired) {
		t.Fatalf("Send of a message expiring while scheduled: %v", err)
	}
	send(t, b, broker.Message{Destination: d, Body: []byte("expires in the queue"), Attempt: 1,
		Expires: now.Add(300 * time.Millisecond)})
	send(t, b, broker.Message{Destination: d, Body: []byte("marker"), Attempt: 1,
		Delay: time.Second})
	// The broker's own clock expires the message in the queue, and no
	// clock of the test can move it: wait until it is past its expiry.
	time.Sleep(time.Until(now.Add(500 * time.Millisecond)))

	sub := subscribe(t, b, d, 10)
	got := receive(t, sub, time.Second+s.tolerance+5*time.Second)
	if string(got.Body) != "marker" {
		t.Fatalf("delivered %q, an expired message", got.Body)
	}
	ack(t, got)
	// The scheduled messages came due before the delayed marker did.
	expectNothingBefore(t, b, sub, d)
}

func (s *suite) redeliveryAfterClose(t *testing.T) {
	for _, tc := range []struct {
		name      string
		closeWhat string
	}{
		{"SubscriptionClosed", "subscription"},
		{"ConnectionClosed", "broker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			producer := s.newBroker(t)
			d := newDestination(t)
			headers := map[string]string{"x-event-id": uuid.NewString()}

			first := s.newBroker(t)
			sub := subscribe(t, first, d, 10)
			for _, body := range []string{"m1", "m2", "m3"} {
				send(t, producer, broker.Message{Destination: d, Body: []byte(body), Attempt: 2, Headers: headers})
			}
			var acked string
			for i := range 3 {
				got := receive(t, sub, 10*time.Second)
				if i == 0 {
					ack(t, got)
					acked = string(got.Body)
				}
			}
			switch tc.closeWhat {
			case "subscription":
				if err := sub.Close(); err != nil {
					t.Fatalf("Subscription.Close: %v", err)
				}
			default:
				if err := first.Close(); err != nil {
					t.Fatalf("Broker.Close: %v", err)
				}
			}

			second := subscribe(t, s.newBroker(t), d, 10)
			var redelivered []string
			for range 2 {
				got := receive(t, second, 15*time.Second)
				redelivered = append(redelivered, string(got.Body))
				if !got.Redelivered && !s.h.RedeliveredUnreliable {
					t.Errorf("%q: Redelivered = false on a redelivery", got.Body)
				}
				checkMessage(t, got.Message, broker.Message{Destination: d, Body: got.Body, Attempt: 2, Headers: headers})
				ack(t, got)
			}
			slices.Sort(redelivered)
			want := slices.DeleteFunc([]string{"m1", "m2", "m3"}, func(b string) bool { return b == acked })
			if !slices.Equal(redelivered, want) {
				t.Errorf("redelivered %q, want %q (%q was acked)", redelivered, want, acked)
			}
			expectNothingBefore(t, producer, second, d)
		})
	}
}

// republishScheduled covers the retry path: the copy of a delivered scheduled
// message must be delayed again. ActiveMQ Classic ignores the delay of a message
// that carries the scheduledJobId of the delivery it was copied from.
func (s *suite) republishScheduled(t *testing.T) {
	b := s.newBroker(t)
	d := newDestination(t)
	sub := subscribe(t, b, d, 10)
	orig := broker.Message{
		Destination:   d,
		Headers:       map[string]string{"x-event-id": uuid.NewString(), "x-subscription-id": "s-1"},
		Body:          []byte(`{"retry":true}`),
		ContentType:   "application/json",
		CorrelationID: uuid.NewString(),
		Attempt:       1,
		Delay:         200 * time.Millisecond,
	}
	send(t, b, orig)
	first := receive(t, sub, orig.Delay+s.tolerance+5*time.Second)

	const retryDelay = 1500 * time.Millisecond
	retry := first.Message
	retry.Attempt++
	retry.Delay = retryDelay
	start := time.Now()
	send(t, b, retry)
	ack(t, first)

	second := receive(t, sub, retryDelay+s.tolerance+5*time.Second)
	observed := time.Since(start)
	ack(t, second)
	t.Logf("republished with delay %s: delivered after %s", retryDelay, observed.Round(time.Millisecond))
	if observed < retryDelay-clockSlack {
		t.Errorf("republished copy delivered after %s, before its %s delay: broker headers were copied", observed, retryDelay)
	}
	if observed > retryDelay+s.tolerance {
		t.Errorf("republished copy delivered after %s, more than %s late", observed, s.tolerance)
	}
	want := orig
	want.Attempt = 2
	want.Delay = 0
	checkMessage(t, second.Message, want)
}

func (s *suite) concurrent(t *testing.T) {
	const (
		senders   = 8
		perSender = 200
		total     = senders * perSender
	)
	producer := s.newBroker(t)
	d := newDestination(t)

	var (
		mu        sync.Mutex
		counts    = make(map[string]int, total)
		perSub    [2]int
		markers   [2]int // markers each consumer took (see below)
		ackErrors []error
		all       = make(chan struct{})
	)
	var consumers sync.WaitGroup
	subs := make([]broker.Subscription, 2)
	for i := range subs {
		subs[i] = subscribe(t, s.newBroker(t), d, 10)
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for dlv := range subs[i].C() {
				err := dlv.Ack(t.Context())
				mu.Lock()
				if err != nil {
					ackErrors = append(ackErrors, err)
				}
				if dlv.Headers["x-marker"] != "" {
					markers[i]++
					mu.Unlock()
					continue
				}
				counts[dlv.Headers["x-key"]]++
				perSub[i]++
				if len(counts) == total {
					select {
					case <-all:
					default:
						close(all)
					}
				}
				mu.Unlock()
			}
		}()
	}

	start := time.Now()
	var producers sync.WaitGroup
	sendErrors := make(chan error, total)
	for p := range senders {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for n := range perSender {
				err := producer.Send(ctx(t), broker.Message{
					Destination: d,
					Headers:     map[string]string{"x-key": fmt.Sprintf("%d-%d", p, n)},
					Body:        []byte(fmt.Sprintf("message %d of sender %d", n, p)),
					Attempt:     1,
				})
				if err != nil {
					sendErrors <- err
				}
			}
		}()
	}
	producers.Wait()
	sent := time.Since(start)
	close(sendErrors)
	for err := range sendErrors {
		t.Errorf("Send: %v", err)
	}

	timer := time.NewTimer(90 * time.Second)
	defer timer.Stop()
	select {
	case <-all:
	case <-timer.C:
	}
	received := time.Since(start)
	// A duplicate may still be on its way to a consumer. Markers sent now,
	// one at a time, until each consumer has taken one, come after every
	// message the broker handed it: once they are through, anything still in
	// flight has been counted below.
	sentMarkers := 0
	apitest.EventuallyWithin(t, 30*time.Second, "a marker through each consumer", func() bool {
		mu.Lock()
		through, pending := markers[0] > 0 && markers[1] > 0, sentMarkers > markers[0]+markers[1]
		mu.Unlock()
		if !through && !pending {
			sentMarkers++
			send(t, producer, broker.Message{Destination: d, Headers: map[string]string{"x-marker": strconv.Itoa(sentMarkers)},
				Body: []byte("marker"), Attempt: 1})
		}
		return through
	})
	for _, sub := range subs {
		_ = sub.Close()
	}
	consumers.Wait()

	mu.Lock()
	defer mu.Unlock()
	duplicates := 0
	for _, n := range counts {
		duplicates += n - 1
	}
	t.Logf("%d messages: sent in %s, received in %s; per consumer %v; %d duplicates",
		total, sent.Round(time.Millisecond), received.Round(time.Millisecond), perSub, duplicates)
	if missing := total - len(counts); missing > 0 {
		t.Errorf("%d of %d messages never delivered", missing, total)
	}
	if duplicates > 0 {
		t.Errorf("%d duplicate deliveries without any failure", duplicates)
	}
	if len(ackErrors) > 0 {
		t.Errorf("%d Ack errors, first: %v", len(ackErrors), ackErrors[0])
	}
}

func (s *suite) close(t *testing.T) {
	b := s.newBroker(t)
	d := newDestination(t)
	sub, err := b.Subscribe(ctx(t), d, broker.SubscribeOptions{})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if !b.Connected() {
		t.Error("Connected() = false on an open broker")
	}
	if err := sub.Close(); err != nil {
		t.Errorf("Subscription.Close: %v", err)
	}
	if _, ok := <-sub.C(); ok {
		t.Error("subscription channel delivers after Close")
	}
	if err := sub.Close(); err != nil {
		t.Errorf("second Subscription.Close: %v", err)
	}
	sub2, err := b.Subscribe(ctx(t), d, broker.SubscribeOptions{})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, ok := <-sub2.C(); ok {
		t.Error("subscription channel delivers after the broker's Close")
	}
	if err := b.Send(ctx(t), broker.Message{Destination: d, Body: []byte("x")}); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if _, err := b.Subscribe(ctx(t), d, broker.SubscribeOptions{}); !errors.Is(err, broker.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if b.Connected() {
		t.Error("Connected() = true after Close")
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func (s *suite) persistsAcrossRestart(t *testing.T) {
	d := newDestination(t)
	before := s.newBroker(t)
	want := []string{"p1", "p2", "p3", "scheduled"}
	for _, body := range want[:3] {
		send(t, before, broker.Message{Destination: d, Body: []byte(body), Attempt: 1})
	}
	send(t, before, broker.Message{Destination: d, Body: []byte("scheduled"), Attempt: 1, Delay: 2 * time.Second})
	if err := before.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s.h.Restart(t)

	sub := subscribe(t, s.newBroker(t), d, 10)
	var got []string
	for range want {
		dlv := receive(t, sub, 30*time.Second)
		got = append(got, string(dlv.Body))
		ack(t, dlv)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("after restart got %q, want %q", got, want)
	}
}

// reconnectsAfterRestart: a Subscription opened before the restart keeps
// delivering after it, and a Send issued while the broker is down returns once
// the broker is back, with nothing lost.
func (s *suite) reconnectsAfterRestart(t *testing.T) {
	b := s.newBroker(t)
	d := newDestination(t)
	sub := subscribe(t, b, d, 10)
	send(t, b, broker.Message{Destination: d, Body: []byte("before"), Attempt: 1})
	ack(t, receive(t, sub, 10*time.Second))

	type result struct {
		err        error
		sawOutage  bool
		sendLasted time.Duration
	}
	done := make(chan result, 1)
	sendCtx := ctx(t)
	// The test goroutine runs Restart meanwhile, so this one polls for the
	// outage itself: apitest.Eventually must fail the test from the test
	// goroutine. A missed outage is reported below.
	go func() {
		var r result
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) && sendCtx.Err() == nil {
			if !b.Connected() {
				r.sawOutage = true
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		start := time.Now()
		r.err = b.Send(sendCtx, broker.Message{Destination: d, Body: []byte("during"), Attempt: 1})
		r.sendLasted = time.Since(start)
		done <- r
	}()

	s.h.Restart(t)

	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("Send issued during the outage never returned")
	}
	if !r.sawOutage {
		t.Error("Connected() never reported the outage")
	}
	if r.err != nil {
		t.Fatalf("Send issued during the outage: %v", r.err)
	}
	t.Logf("Send issued during the outage returned after %s", r.sendLasted.Round(time.Millisecond))
	send(t, b, broker.Message{Destination: d, Body: []byte("after"), Attempt: 1})

	var got []string
	for range 2 {
		dlv := receive(t, sub, time.Minute)
		got = append(got, string(dlv.Body))
		ack(t, dlv)
	}
	slices.Sort(got)
	if want := []string{"after", "during"}; !slices.Equal(got, want) {
		t.Errorf("live subscription got %q after the restart, want %q", got, want)
	}
	if !b.Connected() {
		t.Error("Connected() = false after the broker came back")
	}
}

// typical returns the i-th message of the size the service sends: its
// headers (ids, event type, trace context) and a JSON payload of size bytes
// (200 is typical).
func typical(d broker.Destination, i, size int) broker.Message {
	body := fmt.Sprintf(`{"orderId":"A-%d","total":25.5,"note":""}`, i)
	body = strings.Replace(body, `""`, `"`+strings.Repeat("x", max(size-len(body), 0))+`"`, 1)
	return broker.Message{
		Destination: d,
		Headers: map[string]string{
			"x-event-id": uuid.NewString(), "x-send-id": uuid.NewString(),
			"x-room-id": uuid.NewString(), "x-subscription-id": uuid.NewString(),
			"x-event-type": "order.created", "x-event-version": "1", "x-published-at": "1795649086350469",
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"x-key":       strconv.Itoa(i),
		},
		Body:          []byte(body),
		ContentType:   "application/json",
		CorrelationID: uuid.NewString(),
		Attempt:       1,
	}
}

// sendBacklog sends n messages of a payload of size bytes to d from a few
// senders at once.
func sendBacklog(t *testing.T, b broker.Broker, d broker.Destination, n, size int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if err := b.Send(ctx(t), typical(d, i, size)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Send: %v", err)
	}
}

// consumer counts what a subscription delivers, acking each delivery or
// none.
type consumer struct {
	n    atomic.Int64
	done chan struct{}
}

func consume(t *testing.T, sub broker.Subscription, ack bool) *consumer {
	c := &consumer{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for d := range sub.C() {
			if ack {
				if err := d.Ack(t.Context()); err != nil && t.Context().Err() == nil {
					t.Errorf("Ack: %v", err)
				}
			}
			c.n.Add(1)
		}
	}()
	t.Cleanup(func() { _ = sub.Close(); <-c.done })
	return c
}

// prefetchBounds: a consumer that acks nothing holds about prefetch
// messages of a backlog ten times that, says it is Full, and the broker hands
// the rest to another consumer. Artemis bounds its consumer window in bytes:
// one message more is allowed there, and fewer large ones.
func (s *suite) prefetchBounds(t *testing.T) {
	for _, tc := range []struct {
		prefetch, size int
	}{{1, 200}, {10, 200}, {25, 200}, {10, 8 << 10}} {
		t.Run(fmt.Sprintf("prefetch%d-payload%d", tc.prefetch, tc.size), func(t *testing.T) {
			t.Parallel()
			b := s.newBroker(t)
			d := newDestination(t)
			total := 10 * tc.prefetch
			sub := subscribe(t, b, d, tc.prefetch)
			if sub.Full() {
				t.Error("Full before any delivery")
			}
			holder := consume(t, sub, false)
			var drain *consumer
			t.Cleanup(func() {
				if t.Failed() && drain != nil {
					t.Logf("the holder has %d, the other consumer %d, of %d", holder.n.Load(), drain.n.Load(), total)
				}
			})
			sendBacklog(t, b, d, total, tc.size)
			apitest.EventuallyWithin(t, 10*time.Second, fmt.Sprintf("a consumer with prefetch %d to be Full", tc.prefetch), sub.Full)
			// The other consumer drains what the holder was not given; then the
			// holder's count is final.
			drain = consume(t, subscribe(t, s.newBroker(t), d, 100), true)
			apitest.EventuallyWithin(t, 30*time.Second, fmt.Sprintf("the two consumers to hold all %d messages", total),
				func() bool { return holder.n.Load()+drain.n.Load() == int64(total) })
			held := int(holder.n.Load())
			t.Logf("prefetch %d, %d-byte payloads: held %d of a backlog of %d unacked; the other consumer took %d",
				tc.prefetch, tc.size, held, total, total-held)
			if held > tc.prefetch+max(1, tc.prefetch/5) {
				t.Errorf("a consumer with prefetch %d held %d unacked messages, want %d (Artemis: %d)", tc.prefetch, held, tc.prefetch, tc.prefetch+1)
			}
			if tc.size <= 200 && held < tc.prefetch {
				t.Errorf("a consumer with prefetch %d held %d unacked messages of %d bytes, want %d", tc.prefetch, held, tc.size, tc.prefetch)
			}
			if !sub.Full() {
				t.Errorf("a consumer holding %d unacked messages is not Full", held)
			}
		})
	}
}

// shareBacklog: two consumers with the same prefetch that work at the same
// pace and ack as they go share a backlog about evenly.
func (s *suite) shareBacklog(t *testing.T) {
	const (
		prefetch = 10
		total    = 400
	)
	b := s.newBroker(t)
	d := newDestination(t)
	sendBacklog(t, b, d, total, 200)

	// Each consumer takes its first delivery, then waits until the other
	// has one too, so that neither drains the queue before the other has
	// subscribed.
	var (
		ready   sync.WaitGroup
		start   = make(chan struct{})
		counts  [2]atomic.Int64
		workers sync.WaitGroup
	)
	ready.Add(2)
	var subs []broker.Subscription
	for i := range counts {
		sub := subscribe(t, s.newBroker(t), d, prefetch)
		subs = append(subs, sub)
		workers.Go(func() {
			first := true
			for dl := range sub.C() {
				if first {
					ready.Done()
					<-start
					first = false
				}
				time.Sleep(time.Millisecond) // the same work for each message
				if err := dl.Ack(t.Context()); err != nil && t.Context().Err() == nil {
					t.Errorf("Ack: %v", err)
				}
				counts[i].Add(1)
			}
			if first {
				ready.Done()
			}
		})
	}
	// Cleanups run last first: the subscriptions are closed after this one
	// returns, so it closes them itself before it waits.
	t.Cleanup(func() {
		for _, sub := range subs {
			_ = sub.Close()
		}
		workers.Wait()
	})
	bothReady := make(chan struct{})
	go func() { ready.Wait(); close(bothReady) }()
	select {
	case <-bothReady:
	case <-time.After(10 * time.Second):
		close(start)
		t.Fatalf("one consumer got nothing in 10 s: the other holds the backlog of %d", total)
	}
	close(start)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumed %d and %d of %d", counts[0].Load(), counts[1].Load(), total)
		}
	})
	apitest.EventuallyWithin(t, 60*time.Second, fmt.Sprintf("the two consumers to take all %d messages", total),
		func() bool { return counts[0].Load()+counts[1].Load() == total })
	a, c := counts[0].Load(), counts[1].Load()
	t.Logf("two consumers with prefetch %d took %d and %d of %d (%.0f %%, %.0f %%)", prefetch, a, c, total,
		100*float64(a)/total, 100*float64(c)/total)
	for _, n := range []int64{a, c} {
		if n < total*4/10 || n > total*6/10 {
			t.Errorf("two consumers with prefetch %d took %d and %d of %d, want each 40 … 60 %%", prefetch, a, c, total)
			break
		}
	}
}
