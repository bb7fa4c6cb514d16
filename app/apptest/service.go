package apptest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app"
)

// RealBroker is the URL of the real broker of the run (BROKER_TEST_URL).
// Without one the test is skipped, except in CI, where it fails: there a
// missing broker is a broken run, not a reason to test less.
func RealBroker(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no real broker")
	}
	u := os.Getenv("BROKER_TEST_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("BROKER_TEST_URL is required in CI")
		}
		t.Skip("BROKER_TEST_URL not set: no real broker")
	}
	return u
}

// UniquePushQueue is a push queue name of the test's own: services of other
// tests (or processes) on a shared real broker must not consume its copies.
func UniquePushQueue(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "push-" + hex.EncodeToString(b)
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes: a service's log.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr is a loopback host:port nothing listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// StartService runs the whole service (app.Main, command serve) on a free
// port with env over these defaults: SQLite in a temporary directory, the
// embedded broker, loopback push targets allowed, push credentials sealed
// with PushAuthKey, authentication off, a push queue of its own. It returns a client of the service, which stops
// with the test. opts go to app.Main.
func StartService(t *testing.T, env map[string]string, opts ...app.Option) Client {
	t.Helper()
	c, _ := StartServiceLogs(t, env, opts...)
	return c
}

// StartServiceLogs is StartService that also returns the service's log.
func StartServiceLogs(t *testing.T, env map[string]string, opts ...app.Option) (Client, *SyncBuffer) {
	t.Helper()
	addr := freeAddr(t)
	full := map[string]string{
		"HTTP_ADDR":          addr,
		"DATABASE_URL":       "sqlite:" + filepath.Join(t.TempDir(), "service.db"),
		"BROKER_URL":         "embedded",
		"LOG_LEVEL":          "error",
		"PUSH_ALLOWED_CIDRS": LoopbackCIDRs,
		"PUSH_AUTH_KEY":      PushAuthKey,
		"AUTH_DISABLED":      "true",
		"PUSH_QUEUE":         UniquePushQueue(t),
	}
	for k, v := range env {
		full[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- app.Main(ctx, "serve", nil, func(k string) string { return full[k] }, logs, opts...) }()
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
	c := Client{T: t, Base: "http://" + addr}
	waitReady(t, c.Base, 15*time.Second, func() string {
		select {
		case err := <-done:
			t.Fatalf("service stopped before it was ready: %v; logs:\n%s", err, logs.String())
		default:
		}
		return logs.String()
	})
	return c, logs
}

// waitReady waits until base/readyz answers 200.
func waitReady(t *testing.T, base string, within time.Duration, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("service not ready within %v: %v; logs:\n%s", within, err, logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client is a small HTTP client of a service a test started.
type Client struct {
	T    *testing.T
	Base string
	// Token, when set, is the API key every request carries.
	Token string
}

// As is c sending the API key token.
func (c Client) As(token string) Client {
	c.Token = token
	return c
}

// Send sends a request (a JSON body unless empty) and returns the status
// and body.
func (c Client) Send(method, path, body string) (int, []byte) {
	c.T.Helper()
	h := map[string]string{}
	if body != "" {
		h["Content-Type"] = "application/json"
	}
	if c.Token != "" {
		h["Authorization"] = "Bearer " + c.Token
	}
	r := send(c.T, c.Base, method, path, []byte(body), h)
	if r.Status >= 400 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") && method != http.MethodHead {
		if err := apitest.CheckProblem(r.Status, r.Body); err != nil {
			c.T.Errorf("%s %s: %v", method, path, err)
		}
	}
	return r.Status, r.Body
}

// Call sends a request, fails unless the status is want, and decodes the
// answer into a map (nil when it is not a JSON object).
func (c Client) Call(method, path, body string, want int) map[string]any {
	c.T.Helper()
	status, raw := c.Send(method, path, body)
	if status != want {
		c.T.Fatalf("%s %s: %d, want %d: %s", method, path, status, want, raw)
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m
}

// CallJSON sends a request and decodes the JSON answer into out (when not
// nil), failing unless the status is want.
func (c Client) CallJSON(method, path, body string, want int, out any) {
	c.T.Helper()
	status, raw := c.Send(method, path, body)
	if status != want {
		c.T.Fatalf("%s %s: %d, want %d: %s", method, path, status, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.T.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
}

// Process is the service binary run by StartProcess.
type Process struct {
	Base string
	Logs *SyncBuffer
	cmd  *exec.Cmd
}

// BuildService builds the service binary into a temporary directory.
func BuildService(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "messaging-api")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/messaging-api")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// StartProcess runs bin with subcommand and env on a free port (loopback
// push targets allowed, push credentials sealed with PushAuthKey,
// authentication off), waits until it is ready, and
// kills it when the test ends; its logs are shown if the test fails.
func StartProcess(t *testing.T, bin, subcommand string, env map[string]string) *Process {
	t.Helper()
	addr := freeAddr(t)
	// Not CommandContext: the cleanup below kills it, and Kill may do so earlier.
	cmd := exec.Command(bin, subcommand) //nolint:noctx
	p := &Process{cmd: cmd, Base: "http://" + addr, Logs: &SyncBuffer{}}
	p.cmd.Env = append(os.Environ(), "HTTP_ADDR="+addr, "LOG_LEVEL=warn", "PUSH_ALLOWED_CIDRS="+LoopbackCIDRs,
		"PUSH_AUTH_KEY="+PushAuthKey, "AUTH_DISABLED=true")
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.Logs, p.Logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("%s %s (pid %d) logs:\n%s", filepath.Base(bin), subcommand, p.cmd.Process.Pid, p.Logs.String())
		}
	})
	apitest.EventuallyWithin(t, 30*time.Second, subcommand+" process ready", func() bool {
		resp, err := get(p.Base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// Client is a client of the process.
func (p *Process) Client(t *testing.T) Client { return Client{T: t, Base: p.Base} }

// Kill sends SIGKILL: no shutdown code runs, nothing is acked or stored.
func (p *Process) Kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// get is http.Get with a context, for the harness's own probes.
func get(url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}

// Pid is the process id of the running service binary: tests that run two
// tell their requests apart by it.
func (p *Process) Pid() int { return p.cmd.Process.Pid }
