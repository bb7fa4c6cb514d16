package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// startService runs the real binary's run() on a free port with the given
// environment (authentication off unless env sets AUTH_DISABLED) and returns
// its base URL; it stops with the test.
func startService(t *testing.T, env map[string]string) string {
	t.Helper()
	base, _ := startServiceLogs(t, env)
	return base
}

// startServiceLogs is startService that also returns the service's output.
func startServiceLogs(t *testing.T, env map[string]string) (string, *syncBuffer) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	full := map[string]string{
		"HTTP_ADDR":    addr,
		"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "readme.db"),
		"BROKER_URL":   "embedded",
		"LOG_LEVEL":    "error",
		// Test receivers listen on loopback, which the SSRF guard refuses
		// unless allowed.
		"PUSH_ALLOWED_CIDRS": loopbackCIDRs,
		// Tests that check authentication set AUTH_DISABLED themselves.
		"AUTH_DISABLED": "true",
		// Services of other tests (or processes) on a shared real broker
		// must not consume this one's push copies.
		"PUSH_QUEUE": uniquePushQueue(t),
	}
	for k, v := range env {
		full[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return full[k] }, logs) }()
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			t.Logf("service logs:\n%s", logs.String())
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("service stopped with %v; logs:\n%s", err, logs.String())
			}
		case <-time.After(20 * time.Second):
			t.Error("service did not stop within 20 s of its context ending")
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, logs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("service not ready: %v; logs:\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startReceiver builds and runs cmd/webhook-receiver on a free port with
// args and returns its host:port.
func startReceiver(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "webhook-receiver")
	if out, err := exec.Command("go", "build", "-o", bin, "../webhook-receiver").CombinedOutput(); err != nil {
		t.Fatalf("build receiver: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, append([]string{"-addr", addr}, args...)...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Logf("receiver output:\n%s", out.String())
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatal("receiver did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readmeBlock returns the ```sh block that follows marker in README.md.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), marker)
	if !ok {
		t.Fatalf("README.md has no %q", marker)
	}
	_, after, ok = strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatal("no ```sh block after the marker")
	}
	block, _, ok := strings.Cut(after, "```")
	if !ok {
		t.Fatal("unterminated block")
	}
	return block
}

// TestReadmeQuickstart runs the README's curl commands as written against a
// service started the way `make run` starts it; every request must succeed.
func TestReadmeQuickstart(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	// As `make run` does: authentication on, a first admin key printed.
	base, logs := startServiceLogs(t, map[string]string{"AUTH_DISABLED": ""})
	m := regexp.MustCompile(`export API_KEY=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("the service printed no admin key:\n%s", logs.String())
	}
	apiKey := m[1]
	receiver := startReceiver(t, "-fail", "2")
	block := readmeBlock(t, "TestReadmeQuickstart")
	block = strings.ReplaceAll(block, "localhost:8080", strings.TrimPrefix(base, "http://"))
	block = strings.ReplaceAll(block, "localhost:9000", receiver)
	script := "set -euo pipefail\ncurl() { command curl --fail-with-body \"$@\"; echo; }\n" + block
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "API_KEY="+apiKey)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("README commands failed: %v\n%s", err, out.String())
	}
	last := out.String()[strings.LastIndex(out.String(), `{"items"`):]
	for _, wantText := range []string{`"status":"delivered","statusCode":200`} {
		if !strings.Contains(last, wantText) {
			t.Errorf("the timeline lacks %s:\n%s", wantText, last)
		}
	}
	if n := strings.Count(last, `"status":"failed","statusCode":500`); n != 2 {
		t.Errorf("the timeline shows %d failed attempts, want 2:\n%s", n, last)
	}
	for _, wantText := range []string{`"identifier":"orders"`, `"destination":"room-`, `"pushUrl":"http://` + receiver + `/hooks/orders"`, `"destinations":2`} {
		if !strings.Contains(out.String(), wantText) {
			t.Errorf("output lacks %s:\n%s", wantText, out.String())
		}
	}

	// The API guide's example of a bad request gives the problem it shows.
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/rooms", strings.NewReader(`{"identifier": "bad id", "deliveryDelay": 0}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, f := range []string{"identifier", "managerIdentifier", "deliveryDelay"} {
		if !strings.Contains(string(body), fmt.Sprintf(`"field":%q`, f)) {
			t.Errorf("problem lacks field %s: %s", f, body)
		}
	}
}
