package pull_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/pull"
	"github.com/roomhub/messaging-api/store/storetest"
)

// activeMQTolerance is how much later than planned a nacked message may
// be answered through ActiveMQ Classic's scheduler (AMQ_SCHEDULED_DELAY),
// which releases due messages in rounds of up to about half a second. Never
// early.
const activeMQTolerance = 700 * time.Millisecond

// brokerEnv is the environment of a service on the real broker and the
// PostgreSQL schema dbURL, with a push queue of its own: services of other
// tests consuming one shared push queue would take (and, finding no such
// subscription in their database, drop) each other's messages.
func brokerEnv(t *testing.T, brokerURL, dbURL string) map[string]string {
	t.Helper()
	return map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         dbURL,
		"PUSH_QUEUE":           apptest.UniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "200ms",
	}
}

// TestPullActiveMQ: against ActiveMQ Classic and PostgreSQL, pulled and
// acked messages never come back, and a nacked one comes back after
// deliveryDelay × multiplier^k (400 ms, then 800 ms), never earlier.
func TestPullActiveMQ(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	c := apptest.StartService(t, brokerEnv(t, brokerURL, storetest.PostgresSchemaURL(t)))
	sub := setup(c, apptest.UniqueRoom("amq-pull"), `"deliveryDelay":200,"deliveryDelayMultiplier":2,"deliveryAttempts":4`, `"ackDeadline":1000`)

	pubs := map[string]apptest.Tick{}
	for n := range 3 {
		p := c.PublishTick(sub.Room, n)
		pubs[p.EventID] = p
	}
	got := sub.PullN(3, 10*time.Second)
	ids := make([]string, len(got))
	for i, m := range got {
		p, ok := pubs[m.EventID]
		if !ok || m.Attempt != 1 || m.CorrelationID != p.CorrelationID || string(m.Payload) != p.Payload {
			t.Fatalf("pulled %+v, want one of %v at attempt 1", m, pubs)
		}
		delete(pubs, m.EventID)
		ids[i] = m.AckID
	}
	wantResults(t, "ack", sub.Ack(ids...), ids, "acked", "acked", "acked")
	sub.PullNone(1500) // past the 1 s ack deadline and a reaper round

	p := c.PublishTick(sub.Room, 9)
	m, _ := sub.pullOne(10 * time.Second)
	for k, planned := range []time.Duration{400 * time.Millisecond, 800 * time.Millisecond} {
		if m.Attempt != k+1 || m.EventID != p.EventID {
			t.Fatalf("pulled %+v, want attempt %d of %s", m, k+1, p.EventID)
		}
		nackedAt := time.Now()
		wantResults(t, "nack", sub.nack(m.AckID), []string{m.AckID}, "nacked")
		var at time.Time
		m, at = sub.pullOne(10 * time.Second)
		gap(t, fmt.Sprintf("ActiveMQ redelivery after nack of attempt %d", k+1), at.Sub(nackedAt), planned, activeMQTolerance)
	}
	if m.Attempt != 3 {
		t.Fatalf("third pull: attempt %d", m.Attempt)
	}
	wantResults(t, "ack", sub.Ack(m.AckID), []string{m.AckID}, "acked")
	sub.waitLog(p.EventID, logRow{status: "failed", err: "nacked"}, logRow{status: "failed", err: "nacked", delay: 400}, logRow{status: "delivered", delay: 800})
	sub.PullNone(1500)
}

// TestPullTwoProcesses: two API processes on one database and broker share
// leases: a message pulled from one is acked (or nacked) through the other,
// and an acked one is never delivered again by either.
func TestPullTwoProcesses(t *testing.T) {
	t.Parallel()
	brokerURL := apptest.RealBroker(t)
	env := brokerEnv(t, brokerURL, storetest.PostgresSchemaURL(t))
	a := apptest.StartService(t, env)
	b := apptest.StartService(t, env)
	subA := setup(a, apptest.UniqueRoom("amq-two"), `"deliveryDelay":100,"deliveryDelayMultiplier":2,"deliveryAttempts":3`, `"ackDeadline":1000`)
	subB := subA.on(b)

	pubs := map[string]bool{}
	for n := range 4 {
		pubs[b.PublishTick(subA.Room, n).EventID] = true
	}
	got := subA.PullN(4, 10*time.Second)
	for _, m := range got {
		if !pubs[m.EventID] || m.Attempt != 1 {
			t.Fatalf("pulled %+v", m)
		}
	}
	acked := []string{got[0].AckID, got[1].AckID, got[2].AckID}
	wantResults(t, "ack through B of leases taken through A", subB.Ack(acked...), acked, "acked", "acked", "acked")
	wantResults(t, "ack again through A", subA.Ack(acked...), acked, "unknown", "unknown", "unknown")
	wantResults(t, "nack through B", subB.nack(got[3].AckID), []string{got[3].AckID}, "nacked")

	again, _ := subB.pullOne(10 * time.Second)
	if again.EventID != got[3].EventID || again.Attempt != 2 {
		t.Fatalf("after the nack through B: %+v, want attempt 2 of %s", again, got[3].EventID)
	}
	wantResults(t, "ack through A of a lease taken through B", subA.Ack(again.AckID), []string{again.AckID}, "acked")

	// Longer than the ack deadline and two reaper rounds of each process:
	// nothing acked comes back, through either.
	subA.PullNone(1500)
	subB.PullNone(1000)
	for _, m := range got[:3] {
		subA.waitLog(m.EventID, logRow{status: "delivered"})
	}
	subB.waitLog(got[3].EventID, logRow{status: "failed", err: "nacked"}, logRow{status: "delivered", delay: 200})
}

// TestPullSurvivesKill: a process SIGKILLed with leases outstanding loses
// none. The leases are in the database, so the next process takes acks of
// some of them, and its reaper redelivers the others after their deadline;
// every message is pulled again or acked, none twice once acked.
func TestPullSurvivesKill(t *testing.T) {
	t.Parallel()
	brokerURL := apptest.RealBroker(t)
	bin := apptest.BuildService(t)
	env := brokerEnv(t, brokerURL, storetest.PostgresSchemaURL(t))

	first := apptest.StartProcess(t, bin, "serve", env)
	c := first.Client(t)
	sub := setup(c, apptest.UniqueRoom("amq-kill-pull"), "", `"ackDeadline":2000`)
	pubs := map[string]bool{}
	for n := range 10 {
		pubs[c.PublishTick(sub.Room, n).EventID] = true
	}
	// Wait until all ten are in the queue, so that one pull leases them all.
	sub.waitQueued(10)
	leased := sub.PullN(10, 10*time.Second)
	earliest := leased[0].AckDeadline
	for _, m := range leased {
		if !pubs[m.EventID] || m.Attempt != 1 {
			t.Fatalf("pulled %+v", m)
		}
		if m.AckDeadline.Before(earliest) {
			earliest = m.AckDeadline
		}
	}
	first.Kill(t)
	killedAt := time.Now()

	second := apptest.StartProcess(t, bin, "serve", env)
	t.Logf("the second process was ready %v after the kill, %v before the earliest ack deadline",
		time.Since(killedAt).Round(time.Millisecond), time.Until(earliest).Round(time.Millisecond))
	sub = sub.on(second.Client(t))
	ackNow := []string{leased[0].AckID, leased[1].AckID, leased[2].AckID, leased[3].AckID}
	if time.Now().After(earliest) {
		t.Fatalf("the second process started after the leases' deadline (%v): too slow to test acks", earliest)
	}
	wantResults(t, "acks through the new process", sub.Ack(ackNow...), ackNow, "acked", "acked", "acked", "acked")

	// The other six come back, from attempt 2, once their deadline passed.
	want := map[string]time.Time{} // event id → its lease's deadline
	for _, m := range leased[4:] {
		want[m.EventID] = m.AckDeadline
	}
	back := sub.PullN(6, 10*time.Second)
	var backIDs []string
	for _, m := range back {
		old, ok := want[m.EventID]
		if !ok || m.Attempt != 2 {
			t.Fatalf("after the kill: pulled %s attempt %d, want one of the six unacked at attempt 2", m.EventID, m.Attempt)
		}
		// The new lease started (its deadline less the 2 s) after the old one ended.
		if pulled := m.AckDeadline.Add(-2 * time.Second); pulled.Before(old) {
			t.Errorf("%s pulled again at %v, before its lease's deadline %v", m.EventID, pulled, old)
		}
		delete(want, m.EventID)
		backIDs = append(backIDs, m.AckID)
	}
	if len(want) != 0 {
		t.Fatalf("never redelivered: %v", want)
	}
	sub.Ack(backIDs...)
	sub.PullNone(2500) // past another ack deadline: nothing else comes
	for _, m := range leased[:4] {
		sub.waitLog(m.EventID, logRow{status: "delivered"})
	}
	for _, m := range leased[4:] {
		sub.waitLog(m.EventID, logRow{status: "failed", err: "ack deadline exceeded"}, logRow{status: "delivered"})
	}
}

// publishSized publishes n "tick" events whose payloads are about size
// bytes and returns their event ids.
func publishSized(c apptest.Client, room string, n, size int) []string {
	c.T.Helper()
	ids := make([]string, n)
	for i := range ids {
		var p apptest.Tick
		c.CallJSON("POST", "/v1/rooms/"+room+"/messages",
			fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d,"pad":"%s"}}`, i, strings.Repeat("x", max(size-20, 0))), 202, &p)
		ids[i] = p.EventID
	}
	return ids
}

// waitQueued waits until n copies of the subscription wait in its queue:
// confirmed by the broker ("sent") and not yet pulled.
func (s sub) waitQueued(n int) {
	s.C.T.Helper()
	apitest.EventuallyWithin(s.C.T, 10*time.Second, fmt.Sprintf("%d copies in the queue", n), func() bool {
		sent := 0
		for _, d := range s.Deliveries("") {
			if d.Status == "sent" {
				sent++
			}
		}
		return sent == n
	})
}

// TestPullTakesWhatIsWaitingLive: through the service, a pull answers every message already in the
// queue, up to maxMessages, at once: 5 waiting give one answer of 5, 25 give
// 10, 10 and 5, with typical and with large payloads (which fill Artemis'
// consumer window, counted in bytes, before 10 messages do).
func TestPullTakesWhatIsWaitingLive(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, c apptest.Client) {
		for _, size := range []int{200, 8 << 10} {
			sub := setup(c, apptest.UniqueRoom("pull-waiting"), "", "")
			seen := map[string]bool{}
			for _, tc := range []struct {
				queued int
				want   []int
			}{{5, []int{5}}, {25, []int{10, 10, 5}}} {
				publishSized(c, sub.Room, tc.queued, size)
				sub.waitQueued(tc.queued)
				var got []int
				var took []time.Duration
				for range tc.want {
					start := time.Now()
					// A long poll answers as soon as the first message is there,
					// so the wait only guards against a slow broker.
					ms := sub.Pull(10, 5000)
					took = append(took, time.Since(start).Round(time.Millisecond))
					got = append(got, len(ms))
					ids := make([]string, len(ms))
					for i, m := range ms {
						if seen[m.EventID] {
							t.Errorf("%s pulled twice", m.EventID)
						}
						seen[m.EventID] = true
						ids[i] = m.AckID
					}
					if len(ids) > 0 {
						sub.Ack(ids...)
					}
				}
				t.Logf("%d waiting (%d-byte payloads): pulls of 10 answered %v in %v", tc.queued, size, got, took)
				if !slices.Equal(got, tc.want) {
					t.Errorf("%d waiting (%d-byte payloads): pulls of 10 answered %v, want %v "+
						"(ActiveMQ Classic needs transport.tcpNoDelay=true on its STOMP connector: docs/operations.md)",
						tc.queued, size, got, tc.want)
				}
				for _, d := range took {
					if d > time.Second {
						t.Errorf("a pull with messages waiting answered after %v, want at once (< 1 s)", d)
					}
				}
			}
		}
	}
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		run(t, service(t, nil))
	})
	t.Run("broker", func(t *testing.T) {
		t.Parallel()
		run(t, apptest.StartService(t, brokerEnv(t, apptest.RealBroker(t), storetest.PostgresSchemaURL(t))))
	})
}

// TestPullLeavesTheRestQueued: a pull of 10 from a queue of 100 takes about
// 10 off the queue, not the whole prefetch window Artemis would grant in
// bytes: while it waits to store its leases, another consumer gets the
// other 90 or so.
func TestPullLeavesTheRestQueued(t *testing.T) {
	t.Parallel()
	brokerURL, dbURL := apptest.RealBroker(t), storetest.PostgresSchemaURL(t)
	c := apptest.StartService(t, brokerEnv(t, brokerURL, dbURL))
	var created struct {
		Destination string `json:"destination"`
	}
	sub := setup(c, apptest.UniqueRoom("pull-rest"), "", "")
	c.CallJSON("GET", sub.Path(), "", 200, &created)
	const total, pulled = 100, 10
	publishSized(c, sub.Room, total, 200)
	sub.waitQueued(total)

	// Hold the pull between taking its messages and storing their leases.
	ctx := t.Context()
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "LOCK TABLE pull_leases IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	answer := make(chan []pull.Message, 1)
	go func() {
		// Not sub.Pull: t.Fatal must not run off the test's goroutine.
		var out pull.MessagesResponse
		resp, err := http.Post(c.Base+sub.Path()+"/pull", "application/json", strings.NewReader(fmt.Sprintf(`{"maxMessages":%d}`, pulled)))
		if err != nil {
			t.Errorf("pull: %v", err)
			answer <- nil
			return
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil {
			t.Errorf("pull: %d %s", resp.StatusCode, raw)
		}
		answer <- out.Messages
	}()
	apitest.EventuallyWithin(t, 10*time.Second, "pull waiting to store its leases", func() bool {
		var waiting int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'pull_leases'::regclass").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})

	address, queue, _ := strings.Cut(created.Destination, "::")
	b, err := broker.Open(ctx, brokerURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	other, err := b.Subscribe(ctx, broker.Destination{Address: address, Queue: queue}, broker.SubscribeOptions{Prefetch: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var taken []string
	take := func(until time.Time, enough int) {
		for len(taken) < enough {
			select {
			case d := <-other.C():
				taken = append(taken, d.Headers[message.HeaderEventID])
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			case <-time.After(time.Until(until)):
				return
			}
		}
	}
	take(time.Now().Add(10*time.Second), total-pulled-pulled/2)
	t.Logf("while a pull of %d held its messages, another consumer took %d of the other %d (the count stops at %d)",
		pulled, len(taken), total-pulled, total-pulled-pulled/2)
	if len(taken) < total-pulled-pulled/2 {
		t.Fatalf("while a pull of %d held its messages, another consumer took %d of %d, want about %d", pulled, len(taken), total, total-pulled)
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-answer
	if len(got) != pulled {
		t.Fatalf("the pull answered %d messages, want %d", len(got), pulled)
	}
	// What the pull was sent beyond its 10 goes back to the queue when it
	// closes its subscription.
	take(time.Now().Add(10*time.Second), total-pulled)
	all := map[string]bool{}
	for _, id := range taken {
		all[id] = true
	}
	for _, m := range got {
		all[m.EventID] = true
	}
	if len(taken) != total-pulled || len(all) != total {
		t.Errorf("the pull took %d and the other consumer %d, %d distinct, want %d and %d of %d", len(got), len(taken), len(all), pulled, total-pulled, total)
	}
}
