package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/store/storetest"
)

// tcpProxy forwards loopback connections to a broker and can cut them all,
// which the service sees as a broker outage, without touching the broker
// other tests use.
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// down refuses new connections and cuts the open ones.
func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// up listens again on the same address.
func (p *tcpProxy) up() {
	var ln net.Listener
	apitest.EventuallyWithin(p.t, 5*time.Second, "the proxy listening again on "+p.addr, func() bool {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err == nil
	})
	p.serve(ln)
}

// via returns brokerURL with its host replaced by the proxy's address.
func (p *tcpProxy) via(brokerURL string) string {
	u, err := url.Parse(brokerURL)
	if err != nil {
		p.t.Fatal(err)
	}
	u.Host = p.addr
	return u.String()
}

func hostOf(t *testing.T, brokerURL string) string {
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// setupPullRoom creates a room with one event type and a PULL subscription
// and returns the subscription's queue.
func setupPullRoom(c apptest.Client, room string) broker.Destination {
	c.Call("POST", "/v1/rooms", `{"identifier":"`+room+`","managerIdentifier":"m"}`, 201)
	c.Call("POST", "/v1/rooms/"+room+"/event-types", `{"identifier":"tick"}`, 201)
	c.Call("POST", "/v1/rooms/"+room+"/event-types/tick/versions", `{"schema":{"type":"object"}}`, 201)
	sub := c.Call("POST", "/v1/rooms/"+room+"/subscriptions", `{"type":"PULL","eventTypes":[{"eventType":"tick"}]}`, 201)
	addr, queue, _ := strings.Cut(sub["destination"].(string), "::")
	return broker.Destination{Address: addr, Queue: queue}
}

// drain receives from dest until every id in want has arrived or the time is up,
// and returns the ids it received, with how many times each.
func drain(t *testing.T, brokerURL string, dest broker.Destination, want map[string]bool, within time.Duration) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	b, err := broker.Open(ctx, brokerURL, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := map[string]int{}
	missing := len(want)
	for missing > 0 {
		select {
		case d, ok := <-sub.C():
			if !ok {
				t.Fatal("subscription closed")
			}
			id := d.Headers[message.HeaderEventID]
			if got[id] == 0 && want[id] {
				missing--
			}
			got[id]++
			if err := d.Ack(ctx); err != nil {
				t.Logf("ack: %v", err)
			}
		case <-ctx.Done():
			return got
		}
	}
	return got
}

// relayed is how many outbox rows the service's relay has handled with
// result (outbox_relayed_total).
func relayed(t *testing.T, c apptest.Client, result string) float64 {
	return apptest.Sum(apptest.Scrape(t, c.Base), "messaging_outbox_relayed_total", "result", result)
}

func publishN(c apptest.Client, room string, n int) map[string]bool {
	ids := map[string]bool{}
	for i := range n {
		r := c.Call("POST", "/v1/rooms/"+room+"/messages", fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d}}`, i), 202)
		ids[r["eventId"].(string)] = true
	}
	return ids
}

// TestPublishDuringBrokerOutage: publishes accepted while the broker is
// unreachable are delivered once it is back.
func TestPublishDuringBrokerOutage(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	proxy := newTCPProxy(t, hostOf(t, brokerURL))
	c := apptest.StartService(t, map[string]string{
		"BROKER_URL":           proxy.via(brokerURL),
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"OUTBOX_POLL_INTERVAL": "200ms",
	})
	room := fmt.Sprintf("outage-%d", time.Now().UnixNano())
	dest := setupPullRoom(c, room)

	proxy.down()
	// Publishing starts once the service knows the broker is gone; the
	// relay's sends then wait for it, retrying the connection, and none can
	// be settled before it is back.
	apitest.Eventually(t, "the service to see the broker down", func() bool {
		status, body := c.Send("GET", "/readyz", "")
		return status == http.StatusServiceUnavailable && strings.Contains(string(body), `"broker":"disconnected"`)
	})
	ids := publishN(c, room, 20)
	list := c.Call("GET", "/v1/rooms/"+room+"/messages?limit=50", "", 200)
	for _, it := range list["items"].([]any) {
		att := it.(map[string]any)["deliveries"].([]any)[0].(map[string]any)["attempts"].([]any)[0].(map[string]any)
		if att["status"] != "pending" {
			t.Fatalf("a send is %v while the broker is down", att["status"])
		}
	}
	proxy.up()

	got := drain(t, brokerURL, dest, ids, 60*time.Second)
	for id := range ids {
		if got[id] == 0 {
			t.Errorf("event %s accepted during the outage was never delivered", id)
		}
	}
}

// TestPublishSurvivesKill: a process SIGKILLed after answering 202 but before
// relaying loses nothing; the next process relays what it left.
func TestPublishSurvivesKill(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	bin := apptest.BuildService(t)
	proxy := newTCPProxy(t, hostOf(t, brokerURL))
	env := map[string]string{
		"DATABASE_URL": storetest.PostgresSchemaURL(t), "BROKER_URL": proxy.via(brokerURL), "OUTBOX_POLL_INTERVAL": "200ms",
	}
	start := func() *apptest.Process { return apptest.StartProcess(t, bin, "serve", env) }

	first := start()
	c := apptest.Client{T: t, Base: first.Base}
	room := fmt.Sprintf("kill-%d", time.Now().UnixNano())
	dest := setupPullRoom(c, room)
	proxy.down() // nothing the first process accepts can reach the broker
	ids := publishN(c, room, 25)
	first.Kill(t) // SIGKILL: no shutdown code runs
	proxy.up()

	start() // a new process on the same database relays the orphaned sends
	got := drain(t, brokerURL, dest, ids, 60*time.Second)
	for id := range ids {
		if got[id] == 0 {
			t.Errorf("event %s accepted before the kill was never delivered", id)
		}
	}
}

// TestDatabaseDownAnswers503: while PostgreSQL is unreachable a publish is
// refused with 503 (nothing accepted that could be lost), and /readyz says
// why; once it is back, publishing works again.
func TestDatabaseDownAnswers503(t *testing.T) {
	pgURL, err := url.Parse(storetest.PostgresSchemaURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, pgURL.Host)
	pgURL.Host = proxy.addr
	c := apptest.StartService(t, map[string]string{"DATABASE_URL": pgURL.String()})
	base := c.Base
	c.Call("POST", "/v1/rooms", `{"identifier":"db-down","managerIdentifier":"m"}`, 201)
	c.Call("POST", "/v1/rooms/db-down/event-types", `{"identifier":"tick"}`, 201)
	c.Call("POST", "/v1/rooms/db-down/event-types/tick/versions", `{"schema":true}`, 201)

	proxy.down()
	r := c.Call("POST", "/v1/rooms/db-down/messages", `{"eventType":"tick","payload":1}`, 503)
	if r["status"] != 503.0 {
		t.Errorf("not a problem document: %v", r)
	}
	ready := c.Call("GET", "/readyz", "", 503)
	if ready["checks"].(map[string]any)["database"] != "unreachable" {
		t.Errorf("readyz: %v", ready)
	}
	proxy.up()
	apitest.Eventually(t, "publishing to work again once the database is back", func() bool {
		resp, err := http.Post(base+"/v1/rooms/db-down/messages", "application/json", strings.NewReader(`{"eventType":"tick","payload":1}`))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusAccepted
	})
}

// TestExpiredDuringBrokerOutageDeadLetters: copies that expire in the outbox
// (the broker unreachable past the room's messageExpiration) are not lost
// silently: once the broker is back they reach their consumers, which make
// each a dead letter (reason expired), for PUSH and PULL alike; nothing
// expired is delivered.
func TestExpiredDuringBrokerOutageDeadLetters(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	proxy := newTCPProxy(t, hostOf(t, brokerURL))
	c := apptest.StartService(t, map[string]string{
		"BROKER_URL":           proxy.via(brokerURL),
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"OUTBOX_POLL_INTERVAL": "200ms",
	})
	hook, _ := apptest.StatusHook(t, 200)
	room := apptest.UniqueRoom("expired-outage")
	pushed := c.SetupPushRoom(room, `"messageExpiration":1000`, hook.URL())
	pulled := c.AddPullSub(room, "")

	proxy.down()
	const n = 5
	events := map[string]bool{}
	var last publish.PublishResponse
	for i := range n {
		last = c.Publish(room, fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d}}`, i))
		events[last.EventID] = true
	}
	// The relay's first sends wait out their timeout (10 s, retrying the
	// connection) and fail; the rows, released, are claimed again expired:
	// the path a long outage takes.
	apitest.EventuallyWithin(t, outbox.DefaultConfig.SendTimeout+20*time.Second, fmt.Sprintf("the relay to fail all %d copies", 2*n), func() bool {
		return relayed(t, c, "failed") >= 2*n
	})
	proxy.up()

	dls := pushed.WaitDeadLetters(n, 60*time.Second)
	for _, dl := range dls {
		if !events[dl.EventID] || dl.Reason != "expired" || dl.Attempts != 1 {
			t.Errorf("push dead letter %+v: want one of the published events, reason expired, attempt 1", dl)
		}
	}
	for id := range events {
		if ds := pushed.WaitStatuses(id, 5*time.Second, "expired"); ds[0].Error != "expired before delivery" {
			t.Errorf("push log of %s: error %q, want expired before delivery", id, ds[0].Error)
		}
	}
	if got := hook.Count(); got != 0 {
		t.Errorf("the endpoint got %d requests of expired messages", got)
	}

	// A pull returns none of them and dead-letters each.
	pulledSub := apptest.PullSub{Sub: apptest.Sub{C: c, Room: room, ID: pulled.ID}}
	var pdls []delivery.DeadLetterResponse
	apitest.EventuallyWithin(t, 30*time.Second, fmt.Sprintf("%d pull dead letters", n), func() bool {
		pulledSub.PullNone(200)
		pdls = pulledSub.DeadLetters()
		return len(pdls) >= n
	})
	for _, dl := range pdls {
		if !events[dl.EventID] || dl.Reason != "expired" {
			t.Errorf("pull dead letter %+v: want one of the published events, reason expired", dl)
		}
	}
	if len(pdls) != n {
		t.Errorf("%d pull dead letters, want %d", len(pdls), n)
	}
}
