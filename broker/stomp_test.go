package broker_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
)

// Behaviour of the STOMP implementation that does not depend on the dialect,
// checked against the fake server of fakestomp_test.go.

func TestActiveMQFrames(t *testing.T) {
	fs := newFakeStomp(t)
	b := openFake(t, fs, "dialect=activemq&prefetch=3")
	dest := broker.Destination{Address: "room-1", Queue: "subscription-2"}
	ctx := testCtx(t)

	if err := b.EnsureQueue(ctx, dest); err != nil {
		t.Fatalf("EnsureQueue: %v", err)
	}
	if _, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{}); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	sub, _ := fs.waitFrame(0, 5*time.Second, isCommand(frame.SUBSCRIBE))
	checkHeaders(t, "SUBSCRIBE", sub.frame, map[string]string{
		"destination":           "/queue/room-1::subscription-2",
		"ack":                   "client-individual",
		"activemq.prefetchSize": "3",
	}, "receipt", "subscription-type", "consumer-window-size")

	// Classic re-bases the expiry of a scheduled message on its firing time, so
	// the expires sent is earlier by the delay; x-expires keeps the real one.
	expires := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	from := len(fs.recorded())
	if err := b.Send(ctx, broker.Message{Destination: dest, Body: []byte("x"), Attempt: 1,
		Delay: 2 * time.Second, Expires: expires}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	send, _ := fs.waitFrame(from, 5*time.Second, isCommand(frame.SEND))
	checkHeaders(t, "SEND", send.frame, map[string]string{
		"destination":         "/queue/room-1::subscription-2",
		"persistent":          "true",
		"AMQ_SCHEDULED_DELAY": "2000",
		"expires":             itoa(expires.UnixMilli() - 2000),
		"x-expires":           itoa(expires.UnixMilli()),
	}, "destination-type")

	// One that would expire before it is due is not sent at all, and the
	// caller is told so.
	from = len(fs.recorded())
	if err := b.Send(ctx, broker.Message{Destination: dest, Body: []byte("doomed"), Attempt: 1,
		Delay: 2 * time.Second, Expires: time.Now().Add(time.Second)}); !errors.Is(err, broker.ErrExpired) {
		t.Fatalf("Send of a message expiring before it is due: %v, want ErrExpired", err)
	}
	if err := b.Send(ctx, broker.Message{Destination: dest, Body: []byte("marker"), Attempt: 1}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	next, _ := fs.waitFrame(from, 5*time.Second, isCommand(frame.SEND))
	if string(next.frame.Body) != "marker" {
		t.Errorf("sent %q, a message that expires before its delay ends", next.frame.Body)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestStompSendDuringOutage: Send waits while the broker is away and succeeds once
// it is back; with a shorter context it fails with the context's error.
func TestStompSendDuringOutage(t *testing.T) {
	fs := newFakeStomp(t)
	b := openFake(t, fs, "dialect=artemis&maxReconnectDelay=200ms")
	dest := broker.Destination{Address: "room-1", Queue: "subscription-2"}
	msg := broker.Message{Destination: dest, Body: []byte("x"), Attempt: 1}

	fs.pause()
	apitest.Eventually(t, "Connected() = false", func() bool { return !b.Connected() })

	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := b.Send(short, msg); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, broker.ErrRefused) {
		t.Errorf("Send during an outage with a short context: %v, want DeadlineExceeded (and no refusal)", err)
	}

	ctx := newStartedCtx(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- b.Send(ctx, msg) }()
	<-ctx.started
	from := len(fs.recorded())
	fs.resume()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Send issued during the outage: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Send did not return after the broker came back")
	}
	// It returned once the broker had the message: not earlier, during the
	// outage, without it.
	fs.waitFrame(from, time.Second, func(r recorded) bool {
		return r.frame.Command == frame.SEND && r.frame.Header.Get(frame.Destination) == "room-1::subscription-2"
	})
	apitest.Eventually(t, "Connected() = true", b.Connected)
}

// startedCtx tells when a call first asks for its Done channel: it has
// started, and waits or can wait on it.
type startedCtx struct {
	context.Context
	once    sync.Once
	started chan struct{}
}

func newStartedCtx(ctx context.Context) *startedCtx {
	return &startedCtx{Context: ctx, started: make(chan struct{})}
}

func (c *startedCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.started) })
	return c.Context.Done()
}

// TestStompReceiptTimeout: a broker that never confirms a SEND gets its
// connection closed after receiptTimeout; the send is retried on a new one.
func TestStompReceiptTimeout(t *testing.T) {
	fs := newFakeStomp(t)
	swallowed := 0
	isManagement := func(f *frame.Frame) bool { return f.Header.Get("destination") == "activemq.management" }
	fs.onSend = func(fc *fakeConn, f *frame.Frame) bool {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		if swallowed == 0 && !isManagement(f) {
			swallowed++
			return true // no RECEIPT
		}
		return false
	}
	b := openFake(t, fs, "dialect=artemis&senders=1&receiptTimeout=300ms&maxReconnectDelay=200ms")
	start := time.Now()
	err := b.Send(testCtx(t), broker.Message{Destination: broker.Destination{Address: "a", Queue: "q"}, Body: []byte("x"), Attempt: 1})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	var sends []int
	for _, r := range fs.recorded() {
		if r.frame.Command == frame.SEND && !isManagement(r.frame) {
			sends = append(sends, r.conn)
		}
	}
	if len(sends) != 2 || sends[0] == sends[1] {
		t.Errorf("SEND frames on connections %v, want one on each of two connections", sends)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("Send returned after %s, before the receipt timeout", d)
	}
}

// refuseSends makes fs answer each SEND to a destination refuse matches as
// a broker refusing it does: an ERROR frame with message (its header) and
// body, then a closed connection.
func refuseSends(fs *fakeStomp, message, body string, refuse func(dest string) bool) {
	fs.onSend = func(fc *fakeConn, f *frame.Frame) bool {
		if !refuse(f.Header.Get(frame.Destination)) {
			return false
		}
		e := frame.New(frame.ERROR, frame.Message, message, frame.ReceiptId, f.Header.Get(frame.Receipt))
		e.Body = []byte(body)
		fs.write(fc, e)
		_ = fc.nc.Close()
		return true
	}
}

// notManagement refuses the service's messages, not its management calls.
func notManagement(dest string) bool { return dest != "activemq.management" }

// TestStompManagementRefused: a login without the manage permission is a
// setting: Prepare says so (ErrMisconfigured), and a first send, which creates
// its queue first, waits as during an outage instead of refusing the message.
func TestStompManagementRefused(t *testing.T) {
	fs := newFakeStomp(t)
	refuseSends(fs, "AMQ229032: User roomhub does not have permission='MANAGE'", "", func(d string) bool { return !notManagement(d) })
	b := openFake(t, fs, "dialect=artemis&maxReconnectDelay=200ms")
	if _, err := b.Prepare(testCtx(t), []string{"room-1"}); !errors.Is(err, broker.ErrMisconfigured) || !strings.Contains(err.Error(), "manage permission") {
		t.Errorf("Prepare: %v, want ErrMisconfigured naming the manage permission", err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
	defer cancel()
	err := b.Send(ctx, broker.Message{Destination: broker.Destination{Address: "a", Queue: "q"}, Body: []byte("x"), Attempt: 1})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, broker.ErrRefused) {
		t.Errorf("Send: %v, want it to wait for its context, not a refusal", err)
	}
}

// TestStompRefusal: an ERROR frame answering a SEND is returned at once, not
// retried until the context ends.
func TestStompRefusal(t *testing.T) {
	fs := newFakeStomp(t)
	refuseSends(fs, "AMQ229032: not allowed", "details", notManagement)
	b := openFake(t, fs, "dialect=artemis")
	start := time.Now()
	err := b.Send(testCtx(t), broker.Message{Destination: broker.Destination{Address: "a", Queue: "q"}, Body: []byte("x"), Attempt: 1})
	if err == nil || !strings.Contains(err.Error(), "AMQ229032") {
		t.Fatalf("Send: %v, want the broker's refusal", err)
	}
	if !errors.Is(err, broker.ErrRefused) || errors.Is(err, broker.ErrFull) {
		t.Errorf("Send: %v: want it to match broker.ErrRefused and not broker.ErrFull", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusal took %s: it was retried", d)
	}
}

// TestStompRefusalAddressFull: a refusal because the address is full (it
// passes once consumers catch up) matches broker.ErrFull too, whether the
// broker says so in the ERROR frame's message header or only in its body
// (as Artemis does, under a generic header).
func TestStompRefusalAddressFull(t *testing.T) {
	for _, tc := range []struct{ dialect, header, body string }{
		// Artemis, address-full-policy FAIL: the cause is in the body.
		{"artemis", "AMQ339011: Error sending message CoreMessage[messageID=0]", `ActiveMQAddressFullException[errorType=ADDRESS_FULL message=AMQ229102: Address "room-1" is full. Message encode size = 321B]`},
		// ActiveMQ Classic, sendFailIfNoSpace.
		{"activemq", "Usage Manager Memory Limit reached. Stopping producer (ID:x) to prevent flooding queue://q. See http://activemq.apache.org/producer-flow-control.html for more info",
			"javax.jms.ResourceAllocationException: Usage Manager Memory Limit reached.\n\tat org.apache.activemq.broker.region.Queue.send(Queue.java:731)"},
	} {
		fs := newFakeStomp(t)
		refuseSends(fs, tc.header, tc.body, func(dest string) bool { return dest != "activemq.management" })
		b := openFake(t, fs, "dialect="+tc.dialect)
		err := b.Send(testCtx(t), broker.Message{Destination: broker.Destination{Address: "a", Queue: "q"}, Body: []byte("x"), Attempt: 1})
		if !errors.Is(err, broker.ErrRefused) || !errors.Is(err, broker.ErrFull) {
			t.Errorf("refused with %q: %v, want it to match broker.ErrRefused and broker.ErrFull", tc.header, err)
		}
	}
}

// TestStompRefusalsRedialAtOnce: a broker closes the connection after an
// ERROR frame; a refusal is not an outage, so the sender redials at once
// instead of backing off further with each refusal (which left every sender
// down for seconds, the service unready, after a handful of refusals).
func TestStompRefusalsRedialAtOnce(t *testing.T) {
	fs := newFakeStomp(t)
	refuseSends(fs, "AMQ229017: Queue q does not exist", "details", func(dest string) bool { return dest == "bad::q" })
	clock := apitest.NewClock(time.Now())
	b := openFakeWith(t, fs, "dialect=artemis&senders=1", func(ctx context.Context, raw string, log *slog.Logger) (broker.Broker, error) {
		return broker.OpenWithClock(ctx, raw, log, clock.Now)
	})
	bad := broker.Message{Destination: broker.Destination{Address: "bad", Queue: "q"}, Body: []byte("x"), Attempt: 1}
	start := time.Now()
	for i := range 8 {
		if err := b.Send(testCtx(t), bad); !errors.Is(err, broker.ErrRefused) {
			t.Fatalf("send %d: %v, want a refusal", i+1, err)
		}
	}
	if err := b.Send(testCtx(t), broker.Message{Destination: broker.Destination{Address: "good", Queue: "q"}, Body: []byte("x"), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	// Backing off as after 8 connections that died young took 15 s.
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("8 refusals and a send took %s: the sender backed off after refusals", d)
	}
	// A send right after a refusal waits for the new connection: written on
	// the dying one, it was never answered (a 500 ms stall, and a go-stomp
	// goroutine waiting for its receipt for good).
	good := broker.Message{Destination: broker.Destination{Address: "good", Queue: "q"}, Body: []byte("x"), Attempt: 1}
	clock.Advance(time.Second) // a new second of immediate redials (see below)
	var slowest time.Duration
	for range 30 {
		clock.Advance(100 * time.Millisecond) // 10 refusals a second, the most redialed at once
		if err := b.Send(testCtx(t), bad); !errors.Is(err, broker.ErrRefused) {
			t.Fatalf("send: %v, want a refusal", err)
		}
		sent := time.Now()
		if err := b.Send(testCtx(t), good); err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(sent))
	}
	if slowest > 400*time.Millisecond {
		t.Errorf("a send right after a refusal took %s: it went to the dying connection", slowest)
	}
	if !b.Connected() {
		t.Error("Connected() = false right after refusals: the broker has just answered")
	}
	// Past 10 a second, the redials back off as after failures (50–100 ms,
	// then doubling): a storm of refusals is not a storm of connects.
	clock.Advance(time.Second)
	start = time.Now()
	for i := range 15 {
		if err := b.Send(testCtx(t), bad); !errors.Is(err, broker.ErrRefused) {
			t.Fatalf("send %d: %v, want a refusal", i+1, err)
		}
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("15 refusals in %s: the redials after the 10th did not back off", d)
	}
}

func TestOpenRefusedLogin(t *testing.T) {
	fs := newFakeStomp(t)
	fs.onConnect = func(*frame.Frame) *frame.Frame {
		e := frame.New(frame.ERROR, frame.Message, "Security Error occurred: User name [roomhub] or password is invalid.")
		e.Body = []byte("AMQ229031")
		return e
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, "stomp://roomhub:s3cret@"+fs.addr, slog.New(slog.DiscardHandler))
	if err == nil {
		_ = b.Close()
		t.Fatal("Open succeeded with a refused login")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q leaks the password", err)
	}
}

// TestStompCloseLeavesNoGoroutines opens, uses and closes a broker, with its
// connections up or while they redial, and checks that Close waited for every
// goroutine of the package and that go-stomp's end soon after.
func TestStompCloseLeavesNoGoroutines(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop bool
	}{
		{"Connected", false},
		{"Redialing", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeStomp(t)
			before := runtime.NumGoroutine()
			b := openFake(t, fs, "dialect=artemis&maxReconnectDelay=200ms")
			ctx := testCtx(t)
			dest := broker.Destination{Address: "room-1", Queue: "subscription-2"}
			sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fs.waitFrame(0, 5*time.Second, isCommand(frame.SUBSCRIBE))
			fs.deliver("room-1::subscription-2", nil, []byte("unread")) // left in the subscription
			if err := b.Send(ctx, broker.Message{Destination: dest, Body: []byte("x"), Attempt: 1}); err != nil {
				t.Fatal(err)
			}
			if err := b.EnsureQueue(ctx, dest); err != nil {
				t.Fatal(err)
			}
			if tc.drop {
				fs.pause() // the connections drop and cannot come back
				apitest.Eventually(t, "Connected() = false", func() bool { return !b.Connected() })
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			logGoroutinesOnFailure(t)
			// go-stomp's readers, blocked in watchedConn.Read on sockets Close has
			// closed, end by themselves; anything else of the package must be gone.
			// A goroutine Close waited for may still be returning from its last
			// frame (seen in CI: runnable at the closing brace, after wg.Done), so
			// the check allows the scheduler a moment, not the goroutine.
			apitest.Eventually(t, "every goroutine of the broker to end after Close", func() bool {
				for _, g := range goroutines() {
					if strings.Contains(g, "messaging-api/broker.") && !strings.Contains(g, "watchedConn") {
						return false
					}
				}
				return true
			})
			for range sub.C() { // the unread message may still come, then the channel closes
			}
			fs.stop()
			apitest.Eventually(t, "goroutines back to the count before Open", func() bool {
				return runtime.NumGoroutine() <= before
			})
		})
	}
}

// TestStompSlowReader: a subscription nobody reads must not stall its connection:
// go-stomp stops reading the socket (heart-beats and receipts included) while
// its 16-message channel is full, so the subscription drains it at once.
func TestStompSlowReader(t *testing.T) {
	fs := newFakeStomp(t)
	// Classic counts its prefetch in messages: Full says when the
	// subscription has taken all 100 off go-stomp's channel.
	b := openFake(t, fs, "dialect=activemq")
	ctx := testCtx(t)
	dest := broker.Destination{Address: "room-1", Queue: "subscription-2"}
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: 100})
	if err != nil {
		t.Fatal(err)
	}
	fs.waitFrame(0, 5*time.Second, isCommand(frame.SUBSCRIBE))
	for i := range 100 { // far more than go-stomp buffers
		fs.deliver("/queue/room-1::subscription-2", []string{"x-n", strconv.Itoa(i)}, []byte("m"))
	}
	apitest.Eventually(t, "all 100 messages taken in unread", sub.Full)
	d := receiveFake(t, sub)
	from := len(fs.recorded())
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	fs.waitFrame(from, 5*time.Second, isCommand(frame.ACK)) // written: the connection is not stalled
	for i := 1; i < 100; i++ {
		d := receiveFake(t, sub)
		if got := d.Headers["x-n"]; got != strconv.Itoa(i) {
			t.Fatalf("delivery %d has x-n %s: order lost", i, got)
		}
	}
}

// TestStompFirstSendsShareOneQueueCreation: concurrent first sends to a new
// destination create its queue once, and none after EnsureQueue.
func TestStompFirstSendsShareOneQueueCreation(t *testing.T) {
	fs := newFakeStomp(t)
	b := openFake(t, fs, "dialect=artemis&senders=8")
	creations := func(queue string) int {
		n := 0
		for _, r := range fs.recorded() {
			if r.frame.Command == frame.SEND && r.frame.Header.Get("_AMQ_OperationName") == "createQueue" &&
				strings.Contains(string(r.frame.Body), `\"name\":\"`+queue+`\"`) {
				n++
			}
		}
		return n
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if err := b.Send(testCtx(t), broker.Message{Destination: broker.Destination{Address: "a", Queue: "q"}, Body: []byte("x"), Attempt: 1}); err != nil {
				t.Errorf("Send: %v", err)
			}
		})
	}
	wg.Wait()
	if n := creations("q"); n != 1 {
		t.Errorf("%d createQueue calls for 20 concurrent first sends, want 1", n)
	}
	d := broker.Destination{Address: "a", Queue: "ensured"}
	if err := b.EnsureQueue(testCtx(t), d); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(testCtx(t), broker.Message{Destination: d, Body: []byte("x"), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if n := creations("ensured"); n != 1 {
		t.Errorf("%d createQueue calls after EnsureQueue and a send, want 1", n)
	}
}
