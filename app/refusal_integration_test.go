package app_test

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/store/storetest"
)

// refusingProxy forwards STOMP connections to a broker frame by frame, and
// answers a SEND to a destination containing refuse itself, with an ERROR
// frame and a closed connection, as a broker refusing it does (Artemis with
// queue auto-creation off and the queue missing answers AMQ229017). ActiveMQ
// Classic refuses nothing the service sends, so this is how a test gets a
// refusal from a real broker connection.
type refusingProxy struct {
	t       *testing.T
	target  string
	addr    string
	refuse  atomic.Pointer[string] // "" or nil: refuse nothing
	refused atomic.Int64
}

func newRefusingProxy(t *testing.T, target string) *refusingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &refusingProxy{t: t, target: target, addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			wg.Go(func() { p.serve(client, server) })
		}
	})
	return p
}

// serve relays one connection until either side closes it.
func (p *refusingProxy) serve(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	var wmu sync.Mutex // whole frames to the client, from either goroutine
	toClient := frame.NewWriter(client)
	write := func(f *frame.Frame) error {
		wmu.Lock()
		defer wmu.Unlock()
		return toClient.Write(f)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer client.Close()
		r := frame.NewReader(server)
		for {
			f, err := r.Read()
			if err != nil || write(f) != nil {
				return
			}
		}
	}()
	r, toServer := frame.NewReader(client), frame.NewWriter(server)
	for {
		f, err := r.Read()
		if err != nil {
			break
		}
		if f != nil && f.Command == frame.SEND {
			if s := p.refuse.Load(); s != nil && *s != "" && strings.Contains(f.Header.Get(frame.Destination), *s) {
				p.refused.Add(1)
				e := frame.New(frame.ERROR, frame.Message, "AMQ229017: Queue "+f.Header.Get(frame.Destination)+" does not exist",
					frame.ReceiptId, f.Header.Get(frame.Receipt), frame.ContentType, "text/plain")
				e.Body = []byte("refused by the test's proxy")
				_ = write(e)
				break // a broker closes the connection after an ERROR frame
			}
		}
		if toServer.Write(f) != nil {
			break
		}
	}
	_ = server.Close()
	<-done
}

// via returns brokerURL pointed at the proxy.
func (p *refusingProxy) via(brokerURL string) string {
	return strings.Replace(brokerURL, hostOf(p.t, brokerURL), p.addr, 1)
}

// TestBrokerRefusalsBecomeDeadLetters: copies the broker refuses (here a
// PULL subscription's queue, as Artemis refuses one that is missing with
// auto-creation off) are tried again with a growing pause while every other
// copy goes through and /readyz stays ready; after OUTBOX_MAX_REFUSALS
// refusals each becomes a dead letter with reason broker_refused, replayable
// once the broker takes it again. Nothing accepted is lost.
func TestBrokerRefusalsBecomeDeadLetters(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	proxy := newRefusingProxy(t, hostOf(t, brokerURL))
	c := apptest.StartService(t, map[string]string{
		"BROKER_URL":          proxy.via(brokerURL),
		"DATABASE_URL":        storetest.PostgresSchemaURL(t),
		"OUTBOX_MAX_REFUSALS": "3", // refused at once, 1 s and 2 s later
	})
	room := apptest.UniqueRoom("refusals")
	refused := c.SetupPull(room, "", "")
	fine := c.AddPullSub(room, "")
	queue := "subscription-" + refused.ID
	proxy.refuse.Store(&queue)

	const n = 4
	events := map[string]bool{}
	start := time.Now()
	for i := range n {
		events[c.PublishTick(room, i).EventID] = true
	}
	// The other subscription gets every event meanwhile.
	for _, m := range fine.PullN(n, 20*time.Second) {
		if !events[m.EventID] {
			t.Errorf("pulled an event not published here: %s", m.EventID)
		}
		fine.Ack(m.AckID)
	}
	var dls []delivery.DeadLetterResponse
	polls, notReady := 0, 0
	apitest.EventuallyWithin(t, 30*time.Second, "the refused copies dead-lettered", func() bool {
		// The relay stays healthy. (The broker check may blink: the broker
		// closes a connection after refusing on it, and it is redialed.)
		if _, body := c.Send("GET", "/readyz", ""); !strings.Contains(string(body), `"outbox":"ok"`) {
			t.Errorf("/readyz: %s while the broker refuses copies: want the outbox ok (the broker is reachable)", body)
		}
		if status, _ := c.Send("GET", "/readyz", ""); status != 200 {
			notReady++
		}
		polls++
		dls = refused.DeadLetters()
		return len(dls) >= n
	})
	took := time.Since(start)
	// Each refusal costs a sender its connection, redialed at once and
	// counted as connected meanwhile: the service stays ready (with redials
	// backing off as after an outage, it ended unready; counted as down
	// while redialing, 1–3 polls in 600 failed).
	t.Logf("/readyz: %d of %d polls not ready; %d sends refused; dead letters after %s", notReady, polls, proxy.refused.Load(), took)
	if notReady*20 > polls {
		t.Errorf("/readyz answered 503 to %d of %d polls while the broker refused copies", notReady, polls)
	}
	apitest.EventuallyWithin(t, 2*time.Second, "/readyz ready after the refusals", func() bool {
		status, _ := c.Send("GET", "/readyz", "")
		return status == 200
	})
	if len(dls) != n {
		t.Errorf("%d dead letters, want %d", len(dls), n)
	}
	for _, dl := range dls {
		if !events[dl.EventID] || dl.Reason != "broker_refused" || !strings.Contains(dl.LastError, "AMQ229017") || !strings.Contains(dl.LastError, "3 times") {
			t.Errorf("dead letter %+v: want one of the events, reason broker_refused, the broker's answer and the count", dl)
		}
	}
	// Three refusals each, 1 s and 2 s apart.
	if got := proxy.refused.Load(); got < 3*n {
		t.Errorf("the proxy refused %d sends, want at least %d (3 per copy)", got, 3*n)
	}
	if took < 3*time.Second {
		t.Errorf("dead-lettered after %s: the tries were not 1 s and 2 s apart", took)
	}
	for id := range events {
		log := refused.Deliveries(id)
		if len(log) != 1 || log[0].Status != "dead_lettered" || !strings.Contains(log[0].Error, "AMQ229017") {
			t.Errorf("log of %s: %+v, want one dead_lettered copy with the broker's answer", id, log)
		}
	}

	// Once the broker takes them, the dead letters replay (as new events
	// with the same payloads) and arrive.
	proxy.refuse.Store(nil)
	c.CallJSON("POST", refused.Path()+"/dead-letters:replay", "", 202, nil)
	got := map[string]bool{}
	for _, m := range refused.PullN(n, 20*time.Second) {
		got[string(m.Payload)] = true
		refused.Ack(m.AckID)
	}
	if len(got) != n {
		t.Errorf("after the replay pulled %d distinct payloads (%v), want %d", len(got), got, n)
	}
}
