package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
)

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
	var out apptest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Logf("receiver output:\n%s", out.String())
	})
	apitest.EventuallyWithin(t, 10*time.Second, "the receiver listening on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return addr
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
	c, logs := apptest.StartServiceLogs(t, map[string]string{"AUTH_DISABLED": ""})
	base := c.Base
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

	// The command-line client's examples, on what the block above made.
	roomctl := filepath.Join(t.TempDir(), "roomctl")
	if out, err := exec.Command("go", "build", "-o", roomctl, "../roomctl").CombinedOutput(); err != nil {
		t.Fatalf("build roomctl: %v\n%s", err, out)
	}
	block = strings.ReplaceAll(readmeBlock(t, "TestReadmeQuickstart runs the block below"), "localhost:8080", strings.TrimPrefix(base, "http://"))
	cmd = exec.Command("bash", "-c", "set -euo pipefail\n"+block)
	cmd.Env = append(os.Environ(), "API_KEY="+apiKey, "PATH="+filepath.Dir(roomctl)+":"+os.Getenv("PATH"))
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("README roomctl commands failed: %v\n%s", err, out.String())
	}
	for _, wantText := range []string{"PUSH  ACTIVE  order.created:1", "CORRELATION ID  checkout-43", "event ", "correlation checkout-43", "PUSH subscription "} {
		if !strings.Contains(regexp.MustCompile(` {2,}`).ReplaceAllString(out.String(), "  "), wantText) {
			t.Errorf("roomctl's output lacks %q:\n%s", wantText, out.String())
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
