package push_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/store/storetest"
)

// activeMQTolerance is how much later than planned a retry may reach the
// receiver through ActiveMQ Classic's scheduler (AMQ_SCHEDULED_DELAY).
// Measured on this machine (ActiveMQ 5.17, KahaDB scheduler store, -race):
// the scheduler releases due messages in rounds about 500 ms apart, so a
// scheduled message arrives 0 to ~510 ms late whatever its delay (24 direct
// sends with delays from 50 ms to 1.5 s: +45 to +502 ms; 8 runs of this
// test: +183 to +510 ms), never early. The embedded broker: +1 to +5 ms.
const activeMQTolerance = 600 * time.Millisecond

// TestPushRetryDelaysActiveMQ: through ActiveMQ Classic's scheduler the
// retries come deliveryDelay × multiplier^k after the failed attempt, never
// earlier and at most activeMQTolerance later.
func TestPushRetryDelaysActiveMQ(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	h := apptest.SequenceHook(t, 500, 500, 500, 200)
	c := apptest.StartService(t, map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           apptest.UniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	})
	// Delays of whole seconds against the scheduler's ~500 ms rounds.
	sub := c.SetupPushRoom("amq-backoff", `"deliveryDelay":250,"deliveryDelayMultiplier":2,"deliveryAttempts":4`, h.URL())
	ev := c.Publish("amq-backoff", `{"eventType":"tick","payload":{}}`)

	reqs := h.WaitFor(4, 20*time.Second)
	planned := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} // 250 × 2^k
	for k, p := range planned {
		checkRetryGap(t, fmt.Sprintf("gap after attempt %d", k+1), reqs[k+1].At.Sub(reqs[k].At), p, activeMQTolerance)
	}
	ds := sub.WaitStatuses(ev.EventID, 10*time.Second, "failed", "failed", "failed", "delivered")
	for i, want := range []int64{0, 500, 1000, 2000} {
		if ds[i].ScheduledDelay != want {
			t.Errorf("attempt %d scheduled after %d ms, want %d", i+1, ds[i].ScheduledDelay, want)
		}
	}
}

// TestPushSurvivesKill: a dispatcher SIGKILLed while a delivery is in flight
// loses nothing; the broker redelivers the unacked message to the next
// process, which delivers it.
func TestPushSurvivesKill(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	bin := apptest.BuildService(t)
	env := map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           apptest.UniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	}
	inFlight := make(chan struct{})
	release := make(chan struct{})
	h := apptest.NewHook(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			close(inFlight)
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
		}
		w.WriteHeader(http.StatusOK)
	})
	t.Cleanup(func() { close(release) }) // before the hook's server closes

	first := apptest.StartProcess(t, bin, "serve", env)
	c := first.Client(t)
	sub := c.SetupPushRoom("amq-kill", "", h.URL())
	ev := c.Publish("amq-kill", `{"eventType":"tick","payload":{"n":1}}`)
	select {
	case <-inFlight:
	case <-time.After(20 * time.Second):
		t.Fatal("the first delivery never reached the hook")
	}
	first.Kill(t)
	killed := time.Now()

	// The broker sees the connection close at once and redelivers the
	// unacked message to the next consumer.
	second := apptest.StartProcess(t, bin, "serve", env)
	reqs := h.WaitFor(2, 15*time.Second)
	t.Logf("redelivered %v after the kill", reqs[1].At.Sub(killed).Round(time.Millisecond))
	for i, r := range reqs {
		if r.Header.Get("Webhook-Id") != ev.EventID || r.Header.Get("X-Attempt") != "1" {
			t.Errorf("request %d: webhook-id %s, attempt %s; want %s, 1 (the same copy, redelivered)",
				i+1, r.Header.Get("Webhook-Id"), r.Header.Get("X-Attempt"), ev.EventID)
		}
	}
	sub.C = second.Client(t)
	sub.WaitStatuses(ev.EventID, 10*time.Second, "delivered")
	if n := h.Count(); n != 2 {
		t.Errorf("the hook received %d requests, want 2 (the killed one and the redelivery)", n)
	}
}

// TestPushTwoDispatchers: two dispatcher processes on one push queue share
// its messages; none is lost, and duplicates (possible by design: at least
// once) stay rare.
func TestPushTwoDispatchers(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	bin := apptest.BuildService(t)
	env := map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           apptest.UniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	}
	h := apptest.NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		time.Sleep(2 * time.Millisecond) // a little work, so both consumers get some
		w.WriteHeader(http.StatusOK)
	})
	first := apptest.StartProcess(t, bin, "serve", env)
	second := apptest.StartProcess(t, bin, "dispatcher", env)

	c := first.Client(t)
	sub := c.SetupPushRoom("amq-two", "", h.URL())
	want := map[string]bool{}
	for batch := range 2 {
		var msgs []string
		for i := range 100 {
			msgs = append(msgs, fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d}}`, batch*100+i))
		}
		var out struct {
			Items []publish.PublishResponse `json:"items"`
		}
		c.CallJSON("POST", "/v1/rooms/amq-two/messages:batch", `{"messages":[`+strings.Join(msgs, ",")+`]}`, 202, &out)
		for _, it := range out.Items {
			want[it.EventID] = true
		}
	}
	if len(want) != 200 {
		t.Fatalf("published %d distinct events, want 200", len(want))
	}

	got := map[string]int{}
	count := func() int {
		clear(got)
		for _, r := range h.Requests() {
			got[r.Header.Get("Webhook-Id")]++
		}
		n := 0
		for id := range want {
			if got[id] > 0 {
				n++
			}
		}
		return n
	}
	start := time.Now()
	apitest.EventuallyWithin(t, 60*time.Second, "200 distinct deliveries", func() bool { return count() == 200 })
	t.Logf("200 events delivered in %v", time.Since(start).Round(time.Millisecond))

	// A duplicate is the same copy delivered again: it settles the same row.
	var counts map[string]int
	settled := false
	defer func() {
		if !settled { // EventuallyWithin failed the test: say what the log held
			t.Logf("the delivery log shows %v, want 200 delivered", counts)
		}
	}()
	apitest.EventuallyWithin(t, 10*time.Second, "200 delivered rows in the delivery log", func() bool {
		counts = map[string]int{}
		for _, d := range sub.Deliveries("") {
			counts[d.Status]++
		}
		return counts["delivered"] == 200
	})
	settled = true
	if len(counts) != 1 {
		t.Errorf("the delivery log shows %v, want 200 delivered", counts)
	}

	// Which process sent each request: the hook's client ports are the
	// processes' sockets, kept open by their connection pools.
	if byPID, err := requestsByProcess(h.Requests(), first.Pid(), second.Pid()); err != nil {
		t.Logf("cannot tell the processes apart: %v", err)
	} else {
		t.Logf("requests by process: serve %d, dispatcher %d, unknown %d",
			byPID[first.Pid()], byPID[second.Pid()], byPID[0])
		if byPID[first.Pid()] == 0 || byPID[second.Pid()] == 0 {
			t.Error("one of the two dispatchers delivered nothing")
		}
	}

	// Killed, the processes send nothing more: the hook now holds every
	// request they made, late duplicates (a redelivery) included.
	first.Kill(t)
	second.Kill(t)
	count()
	duplicates := 0
	for id, n := range got {
		if !want[id] {
			t.Errorf("delivered event %s that was never published", id)
		}
		if n > 1 {
			duplicates += n - 1
			t.Logf("event %s delivered %d times", id, n)
		}
	}
	t.Logf("%d requests for 200 events: %d duplicates", h.Count(), duplicates)
	if duplicates > 5 {
		t.Errorf("%d duplicate deliveries, want at most 5", duplicates)
	}
}

// requestsByProcess counts reqs by the process (one of pids, 0 if none)
// that owns the client socket each came from, from Linux's /proc.
func requestsByProcess(reqs []apptest.PushRequest, pids ...int) (map[int]int, error) {
	inodeOfPort := map[string]string{} // local port (hex) -> socket inode
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(table)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(raw), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			if _, port, ok := strings.Cut(f[1], ":"); ok {
				inodeOfPort[port] = f[9]
			}
		}
	}
	pidOfInode := map[string]int{}
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
				pidOfInode[strings.TrimSuffix(inode, "]")] = pid
			}
		}
	}
	out := map[int]int{}
	for _, r := range reqs {
		_, port, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		out[pidOfInode[inodeOfPort[fmt.Sprintf("%04X", n)]]]++
	}
	return out, nil
}
