package push_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// uniquePushQueue is a push queue of the test's own: every service on the
// shared broker consuming one queue would take (and, finding no such
// subscription in its own database, drop) the others' messages.
func uniquePushQueue(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "push-" + hex.EncodeToString(b)
}

// TestPushRetryDelaysActiveMQ: through ActiveMQ Classic's scheduler the
// retries come deliveryDelay × multiplier^k after the failed attempt, never
// earlier and at most activeMQTolerance later.
func TestPushRetryDelaysActiveMQ(t *testing.T) {
	brokerURL := realBroker(t)
	h := sequencePushHook(t, 500, 500, 500, 200)
	base := startService(t, map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           uniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	})
	c := client{t: t, base: base}
	// Delays of whole seconds against the scheduler's ~500 ms rounds.
	sub := setupPushRoom(c, "amq-backoff", `"deliveryDelay":250,"deliveryDelayMultiplier":2,"deliveryAttempts":4`, h.URL())
	ev := pushPublish(c, "amq-backoff", `{"eventType":"tick","payload":{}}`)

	reqs := h.waitFor(4, 20*time.Second)
	planned := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} // 250 × 2^k
	for k, p := range planned {
		checkRetryGap(t, fmt.Sprintf("gap after attempt %d", k+1), reqs[k+1].At.Sub(reqs[k].At), p, activeMQTolerance)
	}
	ds := sub.waitStatuses(ev.EventID, 10*time.Second, "failed", "failed", "failed", "delivered")
	for i, want := range []int64{0, 500, 1000, 2000} {
		if ds[i].ScheduledDelay != want {
			t.Errorf("attempt %d scheduled after %d ms, want %d", i+1, ds[i].ScheduledDelay, want)
		}
	}
}

// process is the service binary running as a child process.
type process struct {
	cmd  *exec.Cmd
	base string
	logs *syncBuffer
}

// buildService builds the service binary into a temporary directory.
func buildService(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "messaging-api")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startProcess runs bin with subcommand and env on a free port, waits until
// it is ready, and kills it when the test ends; its logs are shown if the
// test fails.
func startProcess(t *testing.T, bin, subcommand string, env map[string]string) *process {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	p := &process{cmd: exec.Command(bin, subcommand), base: "http://" + addr, logs: &syncBuffer{}}
	p.cmd.Env = append(os.Environ(), "HTTP_ADDR="+addr, "LOG_LEVEL=warn", "PUSH_ALLOWED_CIDRS="+loopbackCIDRs, "AUTH_DISABLED=true")
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("%s %s (pid %d) logs:\n%s", filepath.Base(bin), subcommand, p.cmd.Process.Pid, p.logs.String())
		}
	})
	pushEventually(t, 30*time.Second, subcommand+" process ready", func() bool {
		resp, err := http.Get(p.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// kill sends SIGKILL: no shutdown code runs, nothing is acked or stored.
func (p *process) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// TestPushSurvivesKill: a dispatcher SIGKILLed while a delivery is in flight
// loses nothing; the broker redelivers the unacked message to the next
// process, which delivers it.
func TestPushSurvivesKill(t *testing.T) {
	brokerURL := realBroker(t)
	bin := buildService(t)
	env := map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           uniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	}
	inFlight := make(chan struct{})
	release := make(chan struct{})
	h := newPushHook(t, func(n int, w http.ResponseWriter, _ *http.Request) {
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

	first := startProcess(t, bin, "serve", env)
	c := client{t: t, base: first.base}
	sub := setupPushRoom(c, "amq-kill", "", h.URL())
	ev := pushPublish(c, "amq-kill", `{"eventType":"tick","payload":{"n":1}}`)
	select {
	case <-inFlight:
	case <-time.After(20 * time.Second):
		t.Fatal("the first delivery never reached the hook")
	}
	first.kill(t)
	killed := time.Now()

	// The broker sees the connection close at once and redelivers the
	// unacked message to the next consumer.
	second := startProcess(t, bin, "serve", env)
	reqs := h.waitFor(2, 15*time.Second)
	t.Logf("redelivered %v after the kill", reqs[1].At.Sub(killed).Round(time.Millisecond))
	for i, r := range reqs {
		if r.Header.Get("Webhook-Id") != ev.EventID || r.Header.Get("X-Attempt") != "1" {
			t.Errorf("request %d: webhook-id %s, attempt %s; want %s, 1 (the same copy, redelivered)",
				i+1, r.Header.Get("Webhook-Id"), r.Header.Get("X-Attempt"), ev.EventID)
		}
	}
	sub.c = client{t: t, base: second.base}
	sub.waitStatuses(ev.EventID, 10*time.Second, "delivered")
	if n := h.count(); n != 2 {
		t.Errorf("the hook received %d requests, want 2 (the killed one and the redelivery)", n)
	}
}

// TestPushTwoDispatchers: two dispatcher processes on one push queue share
// its messages; none is lost, and duplicates (possible by design: at least
// once) stay rare.
func TestPushTwoDispatchers(t *testing.T) {
	brokerURL := realBroker(t)
	bin := buildService(t)
	env := map[string]string{
		"BROKER_URL":           brokerURL,
		"DATABASE_URL":         storetest.PostgresSchemaURL(t),
		"PUSH_QUEUE":           uniquePushQueue(t),
		"OUTBOX_POLL_INTERVAL": "100ms",
	}
	h := newPushHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		time.Sleep(2 * time.Millisecond) // a little work, so both consumers get some
		w.WriteHeader(http.StatusOK)
	})
	first := startProcess(t, bin, "serve", env)
	second := startProcess(t, bin, "dispatcher", env)

	c := client{t: t, base: first.base}
	sub := setupPushRoom(c, "amq-two", "", h.URL())
	want := map[string]bool{}
	for batch := range 2 {
		var msgs []string
		for i := range 100 {
			msgs = append(msgs, fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d}}`, batch*100+i))
		}
		var out struct {
			Items []pushPublished `json:"items"`
		}
		c.callJSON("POST", "/v1/rooms/amq-two/messages:batch", `{"messages":[`+strings.Join(msgs, ",")+`]}`, 202, &out)
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
		for _, r := range h.requests() {
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
	pushEventually(t, 60*time.Second, "200 distinct deliveries", func() bool { return count() == 200 })
	t.Logf("200 events delivered in %v", time.Since(start).Round(time.Millisecond))
	// A late duplicate would come from a redelivery: give it a moment to
	// show before counting.
	time.Sleep(time.Second)
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
	t.Logf("%d requests for 200 events: %d duplicates", h.count(), duplicates)
	if duplicates > 5 {
		t.Errorf("%d duplicate deliveries, want at most 5", duplicates)
	}
	// Which process sent each request: the hook's client ports are the
	// processes' sockets, kept open by their connection pools.
	if byPID, err := requestsByProcess(h.requests(), first.cmd.Process.Pid, second.cmd.Process.Pid); err != nil {
		t.Logf("cannot tell the processes apart: %v", err)
	} else {
		t.Logf("requests by process: serve %d, dispatcher %d, unknown %d",
			byPID[first.cmd.Process.Pid], byPID[second.cmd.Process.Pid], byPID[0])
		if byPID[first.cmd.Process.Pid] == 0 || byPID[second.cmd.Process.Pid] == 0 {
			t.Error("one of the two dispatchers delivered nothing")
		}
	}

	counts := map[string]int{}
	for _, d := range sub.deliveries("") {
		counts[d.Status]++
	}
	// A duplicate is the same copy delivered again: it settles the same row.
	if counts["delivered"] != 200 || len(counts) != 1 {
		t.Errorf("the delivery log shows %v, want 200 delivered", counts)
	}
}

// requestsByProcess counts reqs by the process (one of pids, 0 if none)
// that owns the client socket each came from, from Linux's /proc.
func requestsByProcess(reqs []pushRequest, pids ...int) (map[int]int, error) {
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
