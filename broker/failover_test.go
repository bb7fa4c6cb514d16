package broker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
)

// Failover between the hosts of a multi-host BROKER_URL, checked against
// fake STOMP servers: the first refusing, or dying mid-stream.

// openHosts opens a broker on the hosts addrs, in that order, logging at
// INFO to logs (and to the test output).
func openHosts(t *testing.T, addrs []string, query string, logs io.Writer) broker.Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	raw := "stomp://roomhub:s3cret@" + strings.Join(addrs, ",") + "?" + query
	h := slog.NewTextHandler(io.MultiWriter(t.Output(), logs), &slog.HandlerOptions{Level: slog.LevelInfo})
	b, err := broker.Open(ctx, raw, slog.New(h))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// closedPort returns a loopback address nothing listens on: connections to
// it are refused, as by an Artemis backup that is not live.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func isSendOf(body string) func(recorded) bool {
	return func(r recorded) bool { return r.frame.Command == frame.SEND && string(r.frame.Body) == body }
}

func isSubscribeTo(dest string) func(recorded) bool {
	return func(r recorded) bool {
		return r.frame.Command == frame.SUBSCRIBE && r.frame.Header.Get(frame.Destination) == dest
	}
}

func sendsOf(fs *fakeStomp, body string) int {
	n := 0
	for _, r := range fs.recorded() {
		if isSendOf(body)(r) {
			n++
		}
	}
	return n
}

// TestStompFailoverSkipsRefusingHosts: hosts that refuse connections are
// tried in turn without a backoff each: a link moves to the live host
// within one backoff step however many refuse before it. Per-host backoff
// would take about 25 s to get past eight.
func TestStompFailoverSkipsRefusingHosts(t *testing.T) {
	first, live := newFakeStomp(t), newFakeStomp(t)
	addrs := []string{first.addr}
	for range 8 {
		addrs = append(addrs, closedPort(t))
	}
	addrs = append(addrs, live.addr)
	live.pause() // not live yet: a backup
	var logs syncBuffer
	b := openHosts(t, addrs, "dialect=artemis&senders=2", &logs)
	dest := broker.Destination{Address: "room-1", Queue: "subscription-2"}
	if err := b.Send(testCtx(t), broker.Message{Destination: dest, Body: []byte("before"), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	first.waitFrame(0, 5*time.Second, isSendOf("before"))

	first.pause()
	live.resume()
	start := time.Now()
	if err := b.Send(testCtx(t), broker.Message{Destination: dest, Body: []byte("after"), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	// The first connection lived less than maxReconnectDelay, so it redials
	// after one backoff step (50–100 ms); the round over ten hosts is quick.
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the send after the failover took %s: hosts were tried with a backoff each", d)
	}
	live.waitFrame(0, time.Second, isSendOf("after"))
	if !strings.Contains(logs.String(), "broker: connected to "+live.addr+" (failover from "+first.addr+")") {
		t.Errorf("no INFO line naming the failover; logged:\n%s", logs.String())
	}
}

// TestStompFailoverFirstHostDown: with the first host refusing from the
// start, Open connects to the second at once, without a failover line.
func TestStompFailoverFirstHostDown(t *testing.T) {
	live := newFakeStomp(t)
	var logs syncBuffer
	start := time.Now()
	b := openHosts(t, []string{closedPort(t), live.addr}, "dialect=activemq", &logs)
	apitest.Eventually(t, "Connected() with the second host live", b.Connected)
	if err := b.Send(testCtx(t), broker.Message{Destination: broker.Destination{Address: "a", Queue: "q"}, Body: []byte("x"), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Open and a send took %s", d)
	}
	out := logs.String()
	if !strings.Contains(out, "broker: connected") || !strings.Contains(out, "host="+live.addr) {
		t.Errorf("the connect line does not name the host %s; logged:\n%s", live.addr, out)
	}
	if strings.Contains(out, "failover") {
		t.Errorf("a failover logged at the first connect; logged:\n%s", out)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("the log holds the password:\n%s", out)
	}
}

// TestStompFailoverMidStream: the live host dies with sends awaiting their
// receipts and a subscription open; its backup becomes live. Every link moves
// to it: the subscription resubscribes and receives, the senders and the
// management calls work there. A send the dead host never confirmed is sent
// again and returns only once the new host confirmed it, or fails with its
// context, never succeeds without a receipt; sends confirmed before are not
// sent again. Then back again (fail-back).
func TestStompFailoverMidStream(t *testing.T) {
	primary, backup := newFakeStomp(t), newFakeStomp(t)
	// The primary takes these SENDs and never confirms them: it dies first.
	primary.onSend = func(_ *fakeConn, f *frame.Frame) bool {
		return strings.HasPrefix(string(f.Body), "unconfirmed")
	}
	backup.pause()
	var logs syncBuffer
	const senders = 3
	b := openHosts(t, []string{primary.addr, backup.addr}, "dialect=artemis&senders=3&maxReconnectDelay=200ms", &logs)
	ctx := testCtx(t)
	dest := broker.Destination{Address: "room-1", Queue: "subscription-2"}
	msg := func(body string) broker.Message {
		return broker.Message{Destination: dest, Body: []byte(body), Attempt: 1}
	}
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	primary.waitFrame(0, 5*time.Second, isSubscribeTo("room-1::subscription-2"))
	for _, body := range []string{"confirmed-1", "confirmed-2"} {
		if err := b.Send(ctx, msg(body)); err != nil {
			t.Fatal(err)
		}
	}

	// Two sends the primary takes without a receipt: one whose caller
	// gives up soon, one whose caller waits.
	shortCtx, cancelShort := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancelShort()
	var (
		wg                    sync.WaitGroup
		errShort, errPatient  error
		patientReturned       time.Time
		patientReturnedBefore = make(chan struct{})
	)
	wg.Go(func() { errShort = b.Send(shortCtx, msg("unconfirmed-short")) })
	wg.Go(func() {
		errPatient = b.Send(ctx, msg("unconfirmed-patient"))
		patientReturned = time.Now()
		close(patientReturnedBefore)
	})
	primary.waitFrame(0, 5*time.Second, isSendOf("unconfirmed-short"))
	primary.waitFrame(0, 5*time.Second, isSendOf("unconfirmed-patient"))

	primary.pause() // dies; its backup is not live yet
	select {
	case <-patientReturnedBefore:
		t.Fatalf("a send returned (%v) while no host was live to confirm it", errPatient)
	case <-time.After(2 * time.Second):
	}
	backupLive := time.Now()
	backup.resume()
	wg.Wait()
	if errShort == nil || !errors.Is(errShort, context.DeadlineExceeded) {
		t.Errorf("the unconfirmed send whose context ended during the outage: %v, want its deadline", errShort)
	}
	if errPatient != nil {
		t.Fatalf("the unconfirmed send whose caller waited: %v", errPatient)
	}
	if patientReturned.Before(backupLive) {
		t.Error("the unconfirmed send returned before the backup was live")
	}
	// The backup has it (it sent the receipt Send waited for), once; it
	// has neither the confirmed sends nor the one whose caller gave up.
	if n := sendsOf(backup, "unconfirmed-patient"); n != 1 {
		t.Errorf("the backup took the unconfirmed send %d times, want once", n)
	}
	for _, body := range []string{"confirmed-1", "confirmed-2", "unconfirmed-short"} {
		if n := sendsOf(backup, body); n != 0 {
			t.Errorf("%q sent to the backup %d times; want none", body, n)
		}
	}

	// Every sender is on the backup: as many concurrent sends as senders.
	var sends sync.WaitGroup
	for i := range senders {
		sends.Go(func() {
			if err := b.Send(ctx, msg("after-"+string(rune('a'+i)))); err != nil {
				t.Errorf("send after the failover: %v", err)
			}
		})
	}
	sends.Wait()
	// The management calls too.
	if err := b.EnsureQueue(ctx, broker.Destination{Address: "room-1", Queue: "made-on-the-backup"}); err != nil {
		t.Fatalf("EnsureQueue after the failover: %v", err)
	}
	backup.waitFrame(0, time.Second, func(r recorded) bool {
		return r.frame.Header.Get("_AMQ_OperationName") == "createQueue" && strings.Contains(string(r.frame.Body), "made-on-the-backup")
	})
	// The subscription resubscribed there and receives.
	backup.waitFrame(0, 5*time.Second, isSubscribeTo("room-1::subscription-2"))
	backup.deliver("room-1::subscription-2", nil, []byte("from the backup"))
	if d := receiveFake(t, sub); string(d.Body) != "from the backup" {
		t.Errorf("received %q", d.Body)
	} else if err := d.Ack(ctx); err != nil {
		t.Errorf("ack on the backup: %v", err)
	}
	if !strings.Contains(logs.String(), "broker: connected to "+backup.addr+" (failover from "+primary.addr+")") {
		t.Errorf("no INFO line naming the failover; logged:\n%s", logs.String())
	}
	// Each connection says where it is now.
	for _, conn := range []string{"sender-1", "sender-2", "sender-3", `"consumer room-1::subscription-2"`} {
		if line := "conn=" + conn + " host=" + backup.addr + " previous_host=" + primary.addr; !strings.Contains(logs.String(), line) {
			t.Errorf("no line with %s; logged:\n%s", line, logs.String())
		}
	}

	// Fail-back: the backup stops, the primary is live again.
	from := len(primary.recorded())
	backup.pause()
	primary.resume()
	if err := b.Send(ctx, msg("failed-back")); err != nil {
		t.Fatal(err)
	}
	primary.waitFrame(from, time.Second, isSendOf("failed-back"))
	primary.waitFrame(from, 5*time.Second, isSubscribeTo("room-1::subscription-2"))
	primary.deliver("room-1::subscription-2", nil, []byte("from the primary"))
	if d := receiveFake(t, sub); string(d.Body) != "from the primary" {
		t.Errorf("received %q", d.Body)
	}
	if !strings.Contains(logs.String(), "broker: connected to "+primary.addr+" (failover from "+backup.addr+")") {
		t.Errorf("no INFO line naming the fail-back; logged:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Errorf("the log holds the password:\n%s", logs.String())
	}
}

// TestOpenRefusedLoginOnSomeHost: a host that refuses the login is passed
// over for a live one; with none live, the refusal fails Open, as with one
// host, without the password.
func TestOpenRefusedLoginOnSomeHost(t *testing.T) {
	refusing, live := newFakeStomp(t), newFakeStomp(t)
	refusing.onConnect = func(*frame.Frame) *frame.Frame {
		e := frame.New(frame.ERROR, frame.Message, "Security Error occurred: User name [roomhub] or password is invalid.")
		e.Body = []byte("AMQ229031")
		return e
	}
	b := openHosts(t, []string{refusing.addr, live.addr}, "dialect=activemq", io.Discard)
	if err := b.Send(testCtx(t), broker.Message{Destination: broker.Destination{Address: "a", Queue: "q"}, Body: []byte("x"), Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	live.waitFrame(0, time.Second, isSendOf("x"))

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	b2, err := broker.Open(ctx, "stomp://roomhub:s3cret@"+closedPort(t)+","+refusing.addr+"?dialect=activemq", slog.New(slog.DiscardHandler))
	if err == nil {
		_ = b2.Close()
		t.Fatal("Open succeeded with the login refused and no host live")
	}
	if !strings.Contains(err.Error(), "password is invalid") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open: %v, want the refusal, without the password", err)
	}
}

// TestStompNoHostLive: while no host is live, Connected is false, a send
// waits for its context, and its error names every host.
func TestStompNoHostLive(t *testing.T) {
	a, c := closedPort(t), closedPort(t)
	var logs syncBuffer
	b := openHosts(t, []string{a, c}, "dialect=activemq&connectTimeout=500ms", &logs)
	if b.Connected() {
		t.Error("Connected() = true with no host live")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := b.Send(ctx, broker.Message{Destination: broker.Destination{Address: "a", Queue: "q"}, Attempt: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Send with no host live: %v, want its deadline", err)
	}
	out := logs.String()
	if !strings.Contains(out, "no host is live") || !strings.Contains(out, a) || !strings.Contains(out, c) {
		t.Errorf("the warning does not name both hosts; logged:\n%s", out)
	}
}
