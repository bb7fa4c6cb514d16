package broker_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
)

// Failover between the hosts of a multi-host URL against the real broker of
// BROKER_TEST_URL (Artemis or ActiveMQ Classic).

// withHosts returns raw with its host replaced by hosts, in that order, and
// the query options opts set.
func withHosts(t *testing.T, raw string, hosts []string, opts map[string]string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("BROKER_TEST_URL %s: %v", broker.Redact(raw), err)
	}
	u.Host = strings.Join(hosts, ",")
	q := u.Query()
	for k, v := range opts {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func brokerHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("BROKER_TEST_URL %s: %v", broker.Redact(raw), err)
	}
	return u.Host
}

// TestStompFailoverFirstHostClosedRealBroker: the first host of the list
// refuses connections, the second is the real broker: Open, a send, a
// subscription and its delivery take well under one maximum backoff (10 s).
func TestStompFailoverFirstHostClosedRealBroker(t *testing.T) {
	raw := brokerTestURL(t)
	live := brokerHost(t, raw)
	raw = withHosts(t, raw, []string{closedPort(t), live}, map[string]string{"maxReconnectDelay": "10s"})
	var logs syncBuffer
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := broker.Open(ctx, raw, slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatalf("Open(%s): %v", broker.Redact(raw), err)
	}
	defer b.Close()
	dest := broker.Destination{Address: "brokertest.failover", Queue: "first-closed-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	defer func() { _ = b.DeleteQueue(context.WithoutCancel(ctx), dest) }()
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer sub.Close()
	if err := b.Send(ctx, broker.Message{Destination: dest, Body: []byte("via the second host"), Attempt: 1}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	d := receiveWithin(t, sub, 10*time.Second)
	if err := d.Ack(ctx); err != nil {
		t.Errorf("Ack: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Open, subscribe, send and delivery took %s past a refusing first host; want well under the 10s backoff cap", took)
	}
	if !strings.Contains(logs.String(), "host="+live) {
		t.Errorf("the log does not name the host %s:\n%s", live, logs.String())
	}
}

func receiveWithin(t *testing.T, sub broker.Subscription, within time.Duration) *broker.Delivery {
	t.Helper()
	select {
	case d, ok := <-sub.C():
		if !ok {
			t.Fatal("subscription channel closed")
		}
		return d
	case <-time.After(within):
		t.Fatalf("no delivery within %s", within)
		return nil
	}
}

// TestStompFailoverMidStreamRealBroker: the client reaches the real broker
// through two hosts, relays that stop and start as a primary and its backup
// would. The first dies with deliveries unacked and a subscription open;
// every connection moves to the second, the subscription resumes there and
// every message sent, before or after, arrives (the unacked one again).
func TestStompFailoverMidStreamRealBroker(t *testing.T) {
	raw := brokerTestURL(t)
	target := brokerHost(t, raw)
	primary, backup := newSwitchRelay(t, target), newSwitchRelay(t, target)
	backup.stop()
	raw = withHosts(t, raw, []string{primary.addr, backup.addr}, map[string]string{"maxReconnectDelay": "500ms", "heartbeat": "2s"})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b, err := broker.Open(ctx, raw, testLogger(t))
	if err != nil {
		t.Fatalf("Open(%s): %v", broker.Redact(raw), err)
	}
	defer b.Close()
	dest := broker.Destination{Address: "brokertest.failover", Queue: "mid-stream-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	defer func() { _ = b.DeleteQueue(context.WithoutCancel(ctx), dest) }()
	if err := b.EnsureQueue(ctx, dest); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	send := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := b.Send(ctx, broker.Message{Destination: dest, Body: []byte(strconv.Itoa(i)), Attempt: 1}); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	const before, after = 10, 10
	send(0, before)
	got := map[string]bool{}
	for range 3 {
		d := receiveWithin(t, sub, 10*time.Second)
		got[string(d.Body)] = true
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	unacked := receiveWithin(t, sub, 10*time.Second)

	primary.stop()
	backup.start(t)
	send(before, before+after)
	apitest.EventuallyWithin(t, 30*time.Second, "every message delivered after the failover", func() bool {
		select {
		case d := <-sub.C():
			got[string(d.Body)] = true
			_ = d.Ack(ctx)
		case <-time.After(100 * time.Millisecond):
		}
		return len(got) == before+after
	})
	if !got[string(unacked.Body)] {
		t.Errorf("the delivery left unacked on the dead host (%s) did not come again", unacked.Body)
	}
	if primary.accepted() == 0 || backup.accepted() == 0 {
		t.Errorf("connections accepted: %d by the first host, %d by the second", primary.accepted(), backup.accepted())
	}
}

// switchRelay relays TCP connections to a broker and can stop (close its
// listener and drop every connection, as a broker killed) and start again
// on the same address.
type switchRelay struct {
	target, addr string

	mu    sync.Mutex
	ln    net.Listener
	open  []net.Conn
	count int
}

func newSwitchRelay(t *testing.T, target string) *switchRelay {
	t.Helper()
	r := &switchRelay{target: target, addr: "127.0.0.1:0"}
	r.start(t)
	t.Cleanup(r.stop)
	return r
}

func (r *switchRelay) start(t *testing.T) {
	t.Helper()
	var ln net.Listener
	apitest.Eventually(t, "relay listening on "+r.addr, func() bool {
		var err error
		ln, err = net.Listen("tcp", r.addr)
		return err == nil
	})
	r.mu.Lock()
	r.ln, r.addr = ln, ln.Addr().String()
	r.mu.Unlock()
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", r.target)
			if err != nil {
				_ = client.Close()
				continue
			}
			r.mu.Lock()
			if r.ln != ln {
				r.mu.Unlock()
				_ = client.Close()
				_ = server.Close()
				return
			}
			r.open = append(r.open, client, server)
			r.count++
			r.mu.Unlock()
			go func() {
				_, _ = io.Copy(server, client)
				_ = server.Close()
			}()
			go func() {
				_, _ = io.Copy(client, server)
				_ = client.Close()
			}()
		}
	}()
}

func (r *switchRelay) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		_ = r.ln.Close()
		r.ln = nil
	}
	for _, c := range r.open {
		_ = c.Close()
	}
	r.open = nil
}

func (r *switchRelay) accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}
