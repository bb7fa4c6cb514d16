package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/roomhub/messaging-api/push"
)

// result is what one run of roomctl did.
type result struct {
	out, err string
	code     int
}

// roomctl runs roomctl in-process with args, stdin and the environment env.
func roomctl(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	return roomctlTo(t, env, stdin, nil, args...)
}

// roomctlTo is roomctl writing its standard output to out (nil: a buffer,
// returned in result.out).
func roomctlTo(t *testing.T, env map[string]string, stdin string, out io.Writer, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if out == nil {
		out = &stdout
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	code := execute(ctx, args, streams{in: strings.NewReader(stdin), out: out, err: &stderr}, func(k string) string { return env[k] })
	return result{out: stdout.String(), err: stderr.String(), code: code}
}

// want fails the test unless r exited with code.
func (r result) want(t *testing.T, code int, args ...string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("roomctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, r.out, r.err)
	}
	return r
}

// commands walks the command tree: every command's path (without
// "roomctl").
func commands(c *cobra.Command, path []string, visit func(path []string, c *cobra.Command)) {
	visit(path, c)
	for _, sub := range c.Commands() {
		commands(sub, append(slices.Clone(path), sub.Name()), visit)
	}
}

// TestHelpOnEveryCommand: -h, --help and help COMMAND work on every
// command of the tree (completion and help included), on stdout, exit 0.
func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	root := (&cli{}).rootCommand()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	n := 0
	commands(root, nil, func(path []string, c *cobra.Command) {
		n++
		for _, args := range [][]string{append(slices.Clone(path), "-h"), append(slices.Clone(path), "--help"), append([]string{"help"}, path...)} {
			r := roomctl(t, nil, "", args...).want(t, exitOK, args...)
			about, _, _ := strings.Cut(cmp.Or(c.Long, c.Short), "\n")
			if !strings.Contains(r.out, "Usage:") || !strings.Contains(r.out, about) || r.err != "" {
				t.Errorf("roomctl %s: no usage or %q:\n%s\nstderr: %s", strings.Join(args, " "), about, r.out, r.err)
			}
		}
	})
	if n < 40 {
		t.Errorf("walked %d commands; the tree has more", n)
	}
	// Global flags show their kinds.
	r := roomctl(t, nil, "", "rooms", "list", "-h")
	for _, want := range []string{"--timeout duration", "-o, --output table|json", "--limit int", "--url string"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("rooms list -h lacks %q:\n%s", want, r.out)
		}
	}
	r = roomctl(t, nil, "", "dead-letters", "list", "-h")
	for _, want := range []string{"--since time", "--reason attempts_exhausted|permanent_failure|expired|broker_refused"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("dead-letters list -h lacks %q:\n%s", want, r.out)
		}
	}
}

// TestCompletion: cobra's completion scripts generate for each shell, and
// the hidden completion command completes flags' words.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, marker := range map[string]string{"bash": "__start_roomctl", "zsh": "#compdef roomctl", "fish": "complete -c roomctl", "powershell": "Register-ArgumentCompleter"} {
		r := roomctl(t, nil, "", "completion", shell).want(t, exitOK, "completion", shell)
		if !strings.Contains(r.out, marker) {
			t.Errorf("completion %s lacks %q", shell, marker)
		}
	}
	r := roomctl(t, nil, "", "__complete", "rooms", "list", "--output", "").want(t, exitOK)
	if !strings.Contains(r.out, "json\n") || !strings.Contains(r.out, "table\n") {
		t.Errorf("--output completes to %q", r.out)
	}
	r = roomctl(t, nil, "", "__complete", "subscriptions", "")
	for _, want := range []string{"pause", "resume", "rotate-secret", "approve", "reject", "circuit-reset"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("subscriptions completes without %s: %q", want, r.out)
		}
	}
}

// TestUsageErrors: a wrong command line exits 2 and says what is wrong,
// before any request.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	env := map[string]string{envURL: "http://127.0.0.1:1", envKey: "mapi_x"}
	const sub = "0190b5a9-0000-7000-8000-000000000002"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"frobnicate"}, env, `unknown command "frobnicate" for "roomctl"`},
		{[]string{"rooms", "frobnicate"}, env, `unknown command "frobnicate" for "roomctl rooms"`},
		{[]string{"rooms", "list", "--frob"}, env, "unknown flag: --frob"},
		{[]string{"rooms", "list", "--limit", "ten"}, env, `invalid argument "ten" for "--limit"`},
		{[]string{"rooms", "list", "--timeout", "soon"}, env, `invalid argument "soon" for "--timeout"`},
		{[]string{"rooms", "list", "-o", "xml"}, env, "must be one of table, json"},
		{[]string{"rooms", "get"}, env, "roomctl rooms get takes ROOM, got 0 argument(s)"},
		{[]string{"rooms", "get", "a", "b"}, env, "takes ROOM, got 2"},
		{[]string{"rooms", "create", "r", "--delivery-attempts", "3.5"}, env, `invalid argument "3.5" for "--delivery-attempts"`},
		{[]string{"rooms", "update", "r", "--reset", "nothing"}, env, `--reset: no field "nothing"`},
		{[]string{"subscriptions", "get", "r", "not-an-id"}, env, `SUBSCRIPTION must be an id (a UUID), not "not-an-id"`},
		{[]string{"subscriptions", "create", "r"}, env, "name the event types to receive with --event-type"},
		{[]string{"subscriptions", "create", "r", "--event-type", "t:x"}, env, "versions must be numbers"},
		{[]string{"subscriptions", "reject", "r", sub}, env, `required flag(s) "reason" not set`},
		{[]string{"subscriptions", "list", "r", "--status", "SLEEPING"}, env, "must be one of ACTIVE, PAUSED, PENDING, REJECTED, TERMINATED"},
		{[]string{"event-types", "versions", "create", "r", "t"}, env, "give the schema with --schema or --schema-file"},
		{[]string{"event-types", "versions", "create", "r", "t", "--schema", "{"}, env, "--schema is not JSON"},
		{[]string{"event-types", "versions", "get", "r", "t", "one"}, env, `VERSION must be a version number (1, 2, ...), not "one"`},
		{[]string{"publish", "r"}, env, "give the event type with --type"},
		{[]string{"publish", "r", "--type", "t"}, env, "give the payload with --data or --data-file"},
		{[]string{"publish", "r", "--type", "t", "--data", "{", "--data-file", "x"}, env, "if any flags in the group [data data-file] are set none of the others can be"},
		{[]string{"publish", "r", "--jsonl", "-", "--batch-size", "101"}, env, "--batch-size must be from 1 to 100"},
		{[]string{"publish", "r", "--type", "t", "--data", "{}", "--attribute", "novalue"}, env, `--attribute "novalue" is not NAME=VALUE`},
		{[]string{"publish", "r", "--type", "t", "--data-file", "/nonexistent/x.json"}, env, "read /nonexistent/x.json"},
		{[]string{"messages"}, env, "takes ROOM [CORRELATION-ID], got 0"},
		{[]string{"messages", "r", "--event-id", "x"}, env, "--event-id must be an event id"},
		{[]string{"dead-letters", "replay", "r", sub}, env, "name the dead letters to replay"},
		{[]string{"dead-letters", "replay", "r", sub, sub, "--all"}, env, "not both"},
		{[]string{"dead-letters", "list", "r", sub, "--since", "yesterday"}, env, `invalid argument "yesterday" for "--since"`},
		{[]string{"listen", "r", sub, "--wait", "1m"}, env, "--wait must be from 0 to 30s"},
		{[]string{"listen", "r", sub, "--max-messages", "0"}, env, "--max-messages must be from 1 to 100"},
		{[]string{"verify", "--id", "x"}, env, "give the subscription's signing secret"},
		{[]string{"rooms", "list"}, map[string]string{envKey: "mapi_x"}, "no service URL: set MESSAGING_API_URL or pass --url"},
		{[]string{"rooms", "list", "--url", "localhost:8080"}, map[string]string{envKey: "mapi_x"}, `the service URL "localhost:8080" is not an http:// or https:// URL`},
		{[]string{"rooms", "list"}, map[string]string{envURL: "http://127.0.0.1:1"}, "no API key: set MESSAGING_API_KEY or pass --api-key"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			r := roomctl(t, tc.env, "", tc.args...)
			if r.code != exitUsage || !strings.Contains(r.err, tc.want) || r.out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 saying %q", r.code, r.out, r.err, tc.want)
			}
			if !strings.Contains(r.err, "--help' for usage") {
				t.Errorf("stderr %q does not point to --help", r.err)
			}
		})
	}
}

// TestUnreachable: a service that does not answer is exit 3.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	r := roomctl(t, map[string]string{envURL: "http://127.0.0.1:1", envKey: "mapi_x"}, "", "rooms", "list")
	if r.code != exitUnreachable || !strings.Contains(r.err, "the service did not answer") || !strings.Contains(r.err, "connection refused") {
		t.Errorf("exit %d, stderr %q; want 3 and the reason", r.code, r.err)
	}
}

// TestTimeFlag: --since and --until take RFC 3339 times or durations back
// from now.
func TestTimeFlag(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 3, 6, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-01-02T22:00:00Z":      time.Date(2026, 1, 2, 22, 0, 0, 0, time.UTC),
		"2026-01-02T23:00:00+01:00": time.Date(2026, 1, 2, 22, 0, 0, 0, time.UTC),
		"90m":                       now.Add(-90 * time.Minute),
		"8h ago":                    now.Add(-8 * time.Hour),
	} {
		f := timeFlag{now: func() time.Time { return now }}
		if err := f.Set(in); err != nil || !f.t.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", in, f.t, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-5m", "2026-01-02"} {
		f := timeFlag{now: func() time.Time { return now }}
		if err := f.Set(bad); err == nil {
			t.Errorf("%q was taken as %v", bad, f.t)
		}
	}
}

// TestDurations: milliseconds show as they would be written.
func TestDurations(t *testing.T) {
	t.Parallel()
	for v, want := range map[int64]string{3630000: "1h0m30s", 30000: "30s", 600000: "10m", 3600000: "1h", 5400000: "1h30m", 500: "500ms", 1500: "1.5s", 0: "0s"} {
		if got := ms(v); got != want {
			t.Errorf("ms(%d) = %q, want %q", v, got, want)
		}
	}
}

// TestVerify: verify takes a request whole, as headers and body files, or
// as flags; accepts a request signed with one of the secrets and refuses a
// tampered, stale or unsigned one.
func TestVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const (
		current  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		previous = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
		other    = "whsec_c2VjcmV0LW9mLWFub3RoZXItc3Vic2NyaXB0aW9u"
		id       = "0190b5aa-0000-7000-8000-000000000003"
		body     = `{"orderId":"A-1","total":25.5}`
	)
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	sig := push.Sign([]string{current, previous}, id, now, []byte(body))
	headers := "HTTP/1.1 200 OK\r\nwebhook-id: " + id + "\r\nwebhook-timestamp: " + ts + "\r\nwebhook-signature: " + sig + "\r\nContent-Type: application/json\r\n"
	request := write("request.http", "POST /hooks/orders HTTP/1.1\r\nHost: hooks.example.com\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n"+
		strings.TrimPrefix(headers, "HTTP/1.1 200 OK\r\n")+"\r\n"+body)
	bare := write("bare.http", strings.TrimPrefix(headers, "HTTP/1.1 200 OK\r\n")+"\r\n"+body)
	headersFile := write("headers.txt", headers)
	bodyFile := write("body.json", body)
	tampered := write("tampered.json", strings.Replace(body, "25.5", "2.55", 1))
	secrets := write("secrets.txt", "# the subscription's secrets\n"+other+"\n"+previous+"\n")
	staleSig := push.Sign([]string{current}, id, now.Add(-time.Hour), []byte(body))
	staleTS := strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)

	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"request file", "", []string{"--secret", current, "--request-file", request}, exitOK, "valid: webhook-id " + id + ", webhook-timestamp " + ts + ", signed with secret 1 of 1"},
		{"request without its request line", "", []string{"--secret", current, "--request-file", bare}, exitOK, "valid"},
		{"request on stdin", strings.TrimPrefix(headers, "HTTP/1.1 200 OK\r\n") + "\r\n" + body, []string{"--secret", current, "--request-file", "-"}, exitOK, "valid"},
		{"headers and body files, the previous secret", "", []string{"--secret-file", secrets, "--headers-file", headersFile, "--body-file", bodyFile}, exitOK, "signed with secret 2 of 2"},
		{"flags, body on stdin", body, []string{"--secret", current, "--id", id, "--timestamp", ts, "--signature", sig, "--body-file", "-"}, exitOK, "valid"},
		{"header flags", "", []string{"--secret", current, "-H", "Webhook-Id: " + id, "-H", "webhook-timestamp:" + ts, "-H", "Webhook-Signature: " + sig, "--body", body}, exitOK, "valid"},
		{"tampered body", "", []string{"--secret", current, "--headers-file", headersFile, "--body-file", tampered}, exitFailed, "invalid: no signature matches the secrets"},
		{"a trailing newline is part of the body", "", []string{"--secret", current, "--headers-file", headersFile, "--body", body + "\n"}, exitFailed, "no signature matches"},
		{"another id", "", []string{"--secret", current, "--headers-file", headersFile, "--id", id + "0", "--body-file", bodyFile}, exitFailed, "no signature matches"},
		{"another subscription's secret", "", []string{"--secret", other, "--request-file", request}, exitFailed, "no signature matches"},
		{"stale", "", []string{"--secret", current, "--id", id, "--timestamp", staleTS, "--signature", staleSig, "--body", body}, exitFailed, "invalid: webhook-timestamp outside the tolerance: it is 1h0m"},
		{"stale, time not checked", "", []string{"--secret", current, "--id", id, "--timestamp", staleTS, "--signature", staleSig, "--body", body, "--tolerance", "0"}, exitOK, "valid"},
		{"unsigned", "", []string{"--secret", current, "--id", id, "--timestamp", ts, "--signature", "v2,xyz", "--body", body}, exitFailed, "invalid: no v1 signature in webhook-signature"},
		{"not a secret", "", []string{"--secret", "whsec_***", "--request-file", request}, exitUsage, "secret 1: not a signing secret"},
		{"no signature header", "", []string{"--secret", current, "--id", id, "--timestamp", ts, "--body", body}, exitUsage, "the request has no webhook-signature (--signature)"},
		{"no body", "", []string{"--secret", current, "--headers-file", headersFile}, exitUsage, "give the body with --body or --body-file"},
		{"two files on stdin", "", []string{"--secret-file", "-", "--headers-file", "-", "--body", body}, exitUsage, "standard input can give only one of the files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := roomctl(t, nil, tc.stdin, append([]string{"verify"}, tc.args...)...)
			if r.code != tc.code || !strings.Contains(r.out+r.err, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", r.code, r.out, r.err, tc.code, tc.want)
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		r := roomctl(t, nil, "", "verify", "-o", "json", "--secret", other, "--secret", previous, "--request-file", request).want(t, exitOK)
		if r.out != `{"secret":2,"valid":true,"webhookId":"`+id+`","webhookTimestamp":"`+ts+`"}`+"\n" {
			t.Errorf("stdout %q", r.out)
		}
		r = roomctl(t, nil, "", "verify", "-o", "json", "--secret", other, "--request-file", request).want(t, exitFailed)
		if !strings.Contains(r.out, `"valid":false`) || !strings.Contains(r.out, `"error":"no signature matches the secrets"`) {
			t.Errorf("stdout %q", r.out)
		}
	})
}

// failingWriter fails every write after the first n.
type failingWriter struct {
	n   int
	buf bytes.Buffer
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("broken pipe")
	}
	w.n--
	return w.buf.Write(p)
}
