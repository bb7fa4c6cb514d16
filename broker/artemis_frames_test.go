package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/roomhub/messaging-api/broker"
)

// No Artemis can run on these machines, so the artemis dialect is held to the
// frames the Artemis manual specifies: a fake STOMP server records them.

func openFake(t *testing.T, fs *fakeStomp, query string) broker.Broker {
	t.Helper()
	return openFakeWith(t, fs, query, broker.Open)
}

// openFakeWith is openFake with open in place of broker.Open.
func openFakeWith(t *testing.T, fs *fakeStomp, query string, open func(context.Context, string, *slog.Logger) (broker.Broker, error)) broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	raw := "stomp://roomhub:s3cret@" + fs.addr + "?" + query
	b, err := open(ctx, raw, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkHeaders compares the headers of f with want; an empty want value means
// "present, any value", and absent lists headers that must not be there.
func checkHeaders(t *testing.T, what string, f *frame.Frame, want map[string]string, absent ...string) {
	t.Helper()
	for k, v := range want {
		got, ok := f.Header.Contains(k)
		switch {
		case !ok:
			t.Errorf("%s: header %s missing (frame %v)", what, k, f.Header)
		case v != "" && got != v:
			t.Errorf("%s: header %s = %q, want %q", what, k, got, v)
		}
	}
	for _, k := range absent {
		if v, ok := f.Header.Contains(k); ok {
			t.Errorf("%s: header %s = %q present, want absent", what, k, v)
		}
	}
}

func isCommand(cmd string) func(recorded) bool {
	return func(r recorded) bool { return r.frame.Command == cmd }
}

func TestArtemisFrames(t *testing.T) {
	fs := newFakeStomp(t)
	b := openFake(t, fs, "dialect=artemis")
	dest := broker.Destination{Address: "room-1", Queue: "subscription-2"}
	ctx := testCtx(t)

	connect, _ := fs.waitFrame(0, 5*time.Second, isCommand(frame.CONNECT))
	checkHeaders(t, "CONNECT", connect.frame, map[string]string{
		"login":          "roomhub",
		"passcode":       "s3cret",
		"accept-version": "1.1,1.2",
		"heart-beat":     "10000,10000",
	})

	t.Run("EnsureQueue", func(t *testing.T) {
		fs.mu.Lock()
		fs.mgmt = func(*frame.Frame) (bool, string) { return true, `{"name":"subscription-2"}` }
		fs.mu.Unlock()
		from := len(fs.recorded())
		if err := b.EnsureQueue(ctx, dest); err != nil {
			t.Fatalf("EnsureQueue: %v", err)
		}
		send, _ := fs.waitFrame(from, 5*time.Second, isManagementRequest)
		checkHeaders(t, "management SEND", send.frame, map[string]string{
			"_AMQ_ResourceName":  "broker",
			"_AMQ_OperationName": "createQueue",
			"reply-to":           "",
			"correlation-id":     "",
			"receipt":            "",
		}, "content-length")
		// The reply queue is subscribed on the same connection, before the request.
		replyTo := send.frame.Header.Get("reply-to")
		var subscribed bool
		for _, r := range fs.recorded() {
			if r.conn == send.conn && r.frame.Command == frame.SUBSCRIBE && r.frame.Header.Get("destination") == replyTo {
				subscribed = true
				checkHeaders(t, "reply SUBSCRIBE", r.frame, map[string]string{"subscription-type": "ANYCAST"}, "receipt")
			}
		}
		if !subscribed {
			t.Errorf("reply-to %q was not subscribed on the management connection", replyTo)
		}
		// createQueue(String queueConfiguration, boolean ignoreIfExists)
		var params []json.RawMessage
		if err := json.Unmarshal(send.frame.Body, &params); err != nil || len(params) != 2 {
			t.Fatalf("body %s: want a JSON array of 2 parameters (%v)", send.frame.Body, err)
		}
		var qcJSON string
		if err := json.Unmarshal(params[0], &qcJSON); err != nil {
			t.Fatalf("first parameter %s is not a JSON string: %v", params[0], err)
		}
		var qc map[string]any
		if err := json.Unmarshal([]byte(qcJSON), &qc); err != nil {
			t.Fatalf("queue configuration %s: %v", qcJSON, err)
		}
		for k, want := range map[string]any{
			"name": "subscription-2", "address": "room-1", "routing-type": "ANYCAST",
			"durable": true, "auto-delete": false, "auto-create-address": true,
		} {
			if qc[k] != want {
				t.Errorf("queue configuration %s = %v, want %v", k, qc[k], want)
			}
		}
		if string(params[1]) != "true" {
			t.Errorf("ignoreIfExists = %s, want true", params[1])
		}
	})

	t.Run("DeleteQueue", func(t *testing.T) {
		from := len(fs.recorded())
		if err := b.DeleteQueue(ctx, dest); err != nil {
			t.Fatalf("DeleteQueue: %v", err)
		}
		send, _ := fs.waitFrame(from, 5*time.Second, isManagementRequest)
		checkHeaders(t, "management SEND", send.frame, map[string]string{
			"_AMQ_ResourceName":  "broker",
			"_AMQ_OperationName": "destroyQueue",
		}, "content-length")
		// destroyQueue(String name, boolean removeConsumers, boolean autoDeleteAddress)
		if got, want := string(send.frame.Body), `["subscription-2",true,true]`; got != want {
			t.Errorf("body = %s, want %s", got, want)
		}
	})

	t.Run("Subscribe", func(t *testing.T) {
		for _, tc := range []struct {
			prefetch int
			window   string
		}{
			{prefetch: 1, window: "0"},
			{prefetch: 4, window: "4096"}, // 4 × 1 KiB
			{prefetch: 0, window: "8192"}, // default prefetch 8
		} {
			from := len(fs.recorded())
			sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: tc.prefetch})
			if err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			r, _ := fs.waitFrame(from, 5*time.Second, isCommand(frame.SUBSCRIBE))
			checkHeaders(t, "SUBSCRIBE", r.frame, map[string]string{
				"destination":          "room-1::subscription-2",
				"ack":                  "client-individual",
				"subscription-type":    "ANYCAST",
				"consumer-window-size": tc.window,
				"id":                   "",
			}, "receipt", "activemq.prefetchSize")
			_ = sub.Close()
		}
	})

	t.Run("Send", func(t *testing.T) {
		expires := time.UnixMilli(1_900_000_000_123)
		for _, tc := range []struct {
			name   string
			msg    broker.Message
			want   map[string]string
			absent []string
		}{
			{
				name: "ScheduledAndExpiring",
				msg: broker.Message{
					Destination: dest, Body: []byte(`{"a":1}`), ContentType: "application/json",
					CorrelationID: "corr-1", Attempt: 2, Delay: 1500 * time.Millisecond, Expires: expires,
					Headers: map[string]string{"x-event-id": "ev-1"},
				},
				want: map[string]string{
					"destination":         "room-1::subscription-2",
					"destination-type":    "ANYCAST",
					"persistent":          "true",
					"AMQ_SCHEDULED_DELAY": "1500",
					"expires":             "1900000000123", // absolute: Artemis does not move it
					"x-expires":           "1900000000123",
					"correlation-id":      "corr-1",
					"x-attempt":           "2",
					"content-type":        "application/json",
					"content-length":      "7",
					"x-event-id":          "ev-1",
					"receipt":             "",
				},
			},
			{
				name: "Immediate",
				msg:  broker.Message{Destination: dest, Body: []byte("x"), Attempt: 1},
				want: map[string]string{
					"destination": "room-1::subscription-2", "destination-type": "ANYCAST",
					"persistent": "true", "x-attempt": "1", "receipt": "",
				},
				absent: []string{"AMQ_SCHEDULED_DELAY", "expires", "x-expires", "correlation-id", "content-type"},
			},
			{
				name: "SubMillisecondDelayRoundsUp",
				msg:  broker.Message{Destination: dest, Body: []byte("x"), Attempt: 1, Delay: 1500*time.Millisecond + time.Microsecond},
				want: map[string]string{"AMQ_SCHEDULED_DELAY": "1501"},
			},
		} {
			t.Run(tc.name, func(t *testing.T) {
				from := len(fs.recorded())
				if err := b.Send(ctx, tc.msg); err != nil {
					t.Fatalf("Send: %v", err)
				}
				// The first send to a destination is preceded by a createQueue
				// on the management address (see artemis.beforeSend).
				r, _ := fs.waitFrame(from, 5*time.Second, func(r recorded) bool {
					return r.frame.Command == frame.SEND && r.frame.Header.Get("destination") != "activemq.management"
				})
				checkHeaders(t, "SEND", r.frame, tc.want, tc.absent...)
				if string(r.frame.Body) != string(tc.msg.Body) {
					t.Errorf("body = %q, want %q", r.frame.Body, tc.msg.Body)
				}
			})
		}
	})

	t.Run("NoReceiptOnAnySubscribe", func(t *testing.T) {
		for _, r := range fs.recorded() {
			if r.frame.Command == frame.SUBSCRIBE {
				checkHeaders(t, "SUBSCRIBE", r.frame, nil, "receipt")
			}
		}
	})
}

func TestArtemisManagementReplies(t *testing.T) {
	dest := broker.Destination{Address: "room-1", Queue: "subscription-2"}
	for _, tc := range []struct {
		name      string
		op        func(context.Context, broker.Broker) error
		succeeded bool
		result    string
		wantErr   string
	}{
		{"CreateSucceeds", ensure(dest), true, "{}", ""},
		{"CreateAlreadyExists", ensure(dest), false, "AMQ229019: Queue subscription-2 already exists on address room-1", ""},
		{"CreateFails", ensure(dest), false, "AMQ229032: User roomhub does not have permission", "AMQ229032"},
		{"DestroySucceeds", destroy(dest), true, "", ""},
		{"DestroyMissingQueue", destroy(dest), false, "AMQ229017: Queue subscription-2 does not exist", ""},
		{"DestroyFails", destroy(dest), false, "AMQ229999: broken", "AMQ229999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := newFakeStomp(t)
			fs.mgmt = func(*frame.Frame) (bool, string) { return tc.succeeded, tc.result }
			b := openFake(t, fs, "dialect=artemis")
			err := tc.op(testCtx(t), b)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("got %v, want success", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("got %v, want an error mentioning %s", err, tc.wantErr)
			}
		})
	}
}

func ensure(d broker.Destination) func(context.Context, broker.Broker) error {
	return func(ctx context.Context, b broker.Broker) error { return b.EnsureQueue(ctx, d) }
}

func destroy(d broker.Destination) func(context.Context, broker.Broker) error {
	return func(ctx context.Context, b broker.Broker) error { return b.DeleteQueue(ctx, d) }
}

// TestStompReconnect: the fake server drops the connection; the client redials,
// resubscribes with the same headers and keeps feeding the same channel, and a
// delivery from the dead connection can no longer be acked.
func TestStompReconnect(t *testing.T) {
	fs := newFakeStomp(t)
	b := openFake(t, fs, "dialect=artemis&maxReconnectDelay=200ms")
	dest := broker.Destination{Address: "room-1", Queue: "subscription-2"}
	ctx := testCtx(t)
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: 2})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	first, _ := fs.waitFrame(0, 5*time.Second, isCommand(frame.SUBSCRIBE))
	fs.deliver("room-1::subscription-2", []string{"x-attempt", "1", "x-event-id", "ev-1"}, []byte("one"))
	d1 := receiveFake(t, sub)

	fs.dropConnections()
	second, _ := fs.waitFrame(0, 10*time.Second, func(r recorded) bool {
		return r.frame.Command == frame.SUBSCRIBE && r.conn != first.conn &&
			r.frame.Header.Get("destination") == "room-1::subscription-2"
	})
	for _, h := range []string{"ack", "subscription-type", "consumer-window-size"} {
		if got, want := second.frame.Header.Get(h), first.frame.Header.Get(h); got != want {
			t.Errorf("resubscribed with %s = %q, first SUBSCRIBE had %q", h, got, want)
		}
	}
	if err := d1.Ack(ctx); !errors.Is(err, broker.ErrStaleDelivery) {
		t.Errorf("Ack of a delivery from the dropped connection: %v, want ErrStaleDelivery", err)
	}

	fs.deliver("room-1::subscription-2", []string{"x-attempt", "2"}, []byte("two"))
	d2 := receiveFake(t, sub)
	if string(d2.Body) != "two" || d2.Attempt != 2 {
		t.Fatalf("after reconnect got %q attempt %d", d2.Body, d2.Attempt)
	}
	from := len(fs.recorded())
	if err := d2.Ack(ctx); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	ack, _ := fs.waitFrame(from, 5*time.Second, isCommand(frame.ACK))
	if ack.conn != second.conn {
		t.Errorf("ACK went to connection %d, the subscription lives on %d", ack.conn, second.conn)
	}
	checkHeaders(t, "ACK", ack.frame, map[string]string{"id": "ack-fake-2"})
}

func receiveFake(t *testing.T, sub broker.Subscription) *broker.Delivery {
	t.Helper()
	select {
	case d, ok := <-sub.C():
		if !ok {
			t.Fatal("subscription channel closed")
		}
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10s")
		return nil
	}
}

func goroutines() []string {
	buf := make([]byte, 1<<20)
	return strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
}

// logGoroutinesOnFailure logs every goroutine's stack at the end of a
// failed test, to tell what a wait for goroutines to end waited for.
func logGoroutinesOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("goroutines:\n%s", strings.Join(goroutines(), "\n\n"))
		}
	})
}

// isManagementRequest matches a management SEND that asks for a reply: not
// the creation of the reply queue that precedes it, nor its destruction.
func isManagementRequest(r recorded) bool {
	return r.frame.Command == frame.SEND && r.frame.Header.Get("destination") == "activemq.management" &&
		r.frame.Header.Get("reply-to") != ""
}
