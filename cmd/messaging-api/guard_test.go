package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
)

// wantPushURLProblem checks r is a 422 problem naming pushUrl with a message
// containing msg.
func wantPushURLProblem(t *testing.T, r apptest.Response, msg string) {
	t.Helper()
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	errs, _ := r.JSON(t)["errors"].([]any)
	for _, e := range errs {
		if f := e.(map[string]any); f["field"] == "pushUrl" && strings.Contains(f["message"].(string), msg) {
			return
		}
	}
	t.Errorf("no error names pushUrl with %q: %s", msg, r.Body)
}

// TestPushTargetRefusedAtCreation: a push URL whose host is a literal
// address the SSRF guard refuses is a 422 naming pushUrl, at creation and
// at update. The harness allows loopback, as the service's tests do.
func TestPushTargetRefusedAtCreation(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, "sqlite")
	a.Seed(t)
	const et = `"eventTypes":[{"eventType":"order.created"}]`
	create := func(url string) apptest.Response {
		return a.Do("POST", "/v1/rooms/orders/subscriptions", `{"type":"PUSH","pushUrl":"`+url+`",`+et+`}`)
	}
	for _, tc := range []struct{ url, msg string }{
		{"http://10.0.0.1/hook", "refused: 10.0.0.1 is a private address (SSRF guard)"},
		{"http://192.168.1.20:8080/hook", "private address"},
		{"http://169.254.169.254/latest/meta-data/", "cloud metadata address"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "cloud metadata address"},
		{"http://100.64.0.1/hook", "CGNAT address"},
		{"http://0.0.0.0:8080/hook", "unspecified address"},
		{"http://224.0.0.1/hook", "multicast address"},
		{"http://[fe80::1]/hook", "link-local address"},
		{"http://[fc00::1]/hook", "unique-local address"},
		{"http://[::ffff:192.168.1.1]/hook", "embeds 192.168.1.1 (IPv4-mapped), a private address"},
		{"http://[64:ff9b::a9fe:a9fe]/hook", "embeds 169.254.169.254 (NAT64), a cloud metadata address"},
		{"http://[2002:a00:1::1]/hook", "embeds 10.0.0.1 (6to4), a private address"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			wantPushURLProblem(t, create(tc.url), tc.msg)
		})
	}
	t.Run("allowed", func(t *testing.T) {
		for _, url := range []string{"https://hooks.example.com/x", "http://8.8.8.8/hook", "http://127.0.0.1:9000/hook", "http://localhost:9000/hook", "http://[::1]:9000/hook"} {
			apptest.Want(t, create(url), http.StatusCreated)
		}
	})
	t.Run("update", func(t *testing.T) {
		r := create("https://hooks.example.com/x")
		apptest.Want(t, r, http.StatusCreated)
		path := "/v1/rooms/orders/subscriptions/" + r.JSON(t)["id"].(string)
		wantPushURLProblem(t, a.Do("PATCH", path, `{"pushUrl":"http://172.16.5.4/hook"}`), "private address")
		apptest.Want(t, a.Do("PATCH", path, `{"pushUrl":"https://hooks.example.org/y"}`), http.StatusOK)
	})
}

// TestPushTargetSettings runs the service as configured from the
// environment: without an allowlist loopback is refused; PUSH_HTTPS_ONLY
// refuses http.
func TestPushTargetSettings(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T, env map[string]string) apptest.Client {
		env["AUTH_DISABLED"] = "true"
		c := apptest.StartService(t, env)
		c.Call("POST", "/v1/rooms", `{"identifier":"r","managerIdentifier":"m"}`, 201)
		c.Call("POST", "/v1/rooms/r/event-types", `{"identifier":"tick"}`, 201)
		return c
	}
	create := func(c apptest.Client, url string, status int) string {
		t.Helper()
		got, body := c.Send("POST", "/v1/rooms/r/subscriptions", `{"type":"PUSH","pushUrl":"`+url+`","eventTypes":[{"eventType":"tick"}]}`)
		if got != status {
			t.Errorf("create a subscription to %s: %d, want %d: %s", url, got, status, body)
		}
		return string(body)
	}
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		c := setup(t, map[string]string{"PUSH_ALLOWED_CIDRS": ""})
		for _, url := range []string{"http://localhost:9000/hook", "http://127.0.0.1:9000/hook", "http://[::1]:9000/hook"} {
			if body := create(c, url, http.StatusUnprocessableEntity); !strings.Contains(body, `"field":"pushUrl"`) || !strings.Contains(body, "loopback address (SSRF guard)") {
				t.Errorf("%s: %s, want the loopback refusal of pushUrl", url, body)
			}
		}
		create(c, "http://hooks.example.com/x", http.StatusCreated)
	})
	t.Run("https only", func(t *testing.T) {
		t.Parallel()
		c := setup(t, map[string]string{"PUSH_HTTPS_ONLY": "true"})
		if body := create(c, "http://hooks.example.com/x", http.StatusUnprocessableEntity); !strings.Contains(body, `"field":"pushUrl"`) || !strings.Contains(body, "https-only") {
			t.Errorf("http URL in https-only mode: %s, want a pushUrl error saying https-only", body)
		}
		create(c, "https://hooks.example.com/x", http.StatusCreated)
	})
}

// TestPushRefusedTargetIsDeadLettered: a subscription whose URL the guard
// refuses at delivery (here: created while loopback was allowed, delivered
// after the rule was replaced without the allowlist and the service
// restarted) gets no request; the message is a dead letter at the first
// attempt, the delivery log saying why.
func TestPushRefusedTargetIsDeadLettered(t *testing.T) {
	t.Parallel()
	hook := apptest.NewHook(t, func(int, http.ResponseWriter, *http.Request) {})
	db := "sqlite:" + filepath.Join(t.TempDir(), "guard.db")
	var sub apptest.PushSub
	t.Run("create while loopback is allowed", func(t *testing.T) {
		c := apptest.StartService(t, map[string]string{"DATABASE_URL": db, "AUTH_DISABLED": "true"})
		sub = c.SetupPushRoom("guarded", `"deliveryDelay":20,"deliveryAttempts":5`, hook.URL())
	})
	if t.Failed() {
		return
	}

	env := map[string]string{"DATABASE_URL": db, "AUTH_DISABLED": "true", "PUSH_ALLOWED_CIDRS": "", "OUTBOX_POLL_INTERVAL": "100ms"}
	if err := runPushRule(t.Context(), nil, func(k string) string { return env[k] }, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	c := apptest.StartService(t, env)
	sub.C = c
	ev := c.Publish("guarded", `{"eventType":"tick","payload":{"n":1},"correlationId":"guard-1"}`)
	dl := sub.WaitDeadLetters(1, 10*time.Second)[0]
	const reason = "refused: 127.0.0.1 is a loopback address (SSRF guard)"
	if dl.EventID != ev.EventID || dl.Reason != "permanent_failure" || dl.Attempts != 1 || dl.LastError != reason || dl.LastStatusCode != nil {
		t.Errorf("dead letter %+v; want event %s, permanent_failure after 1 attempt, no status, last error %q", dl, ev.EventID, reason)
	}
	log := sub.WaitStatuses(ev.EventID, 5*time.Second, "dead_lettered")
	if last := log[len(log)-1]; last.Error != reason {
		t.Errorf("delivery log error %q, want %q", last.Error, reason)
	}
	// The one attempt was refused before any request: dead-lettered, the
	// message is done, so nothing may reach the hook later either.
	if n := hook.Count(); n != 0 {
		t.Errorf("the hook received %d requests", n)
	}
}

func TestPushTargetConfig(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cfg, err := app.LoadConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.PushTarget.Allow) != 0 || cfg.PushTarget.HTTPSOnly {
		t.Errorf("default push target guard %+v, want no allowlist and http allowed", cfg.PushTarget)
	}
	cfg, err = app.LoadConfig([]string{"-push-https-only", "true"}, env(map[string]string{"PUSH_ALLOWED_CIDRS": " 10.1.0.0/16, ::1 "}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(cfg.PushTarget.Allow); got != "[10.1.0.0/16 ::1/128]" || !cfg.PushTarget.HTTPSOnly {
		t.Errorf("push target guard %v https-only %v, want [10.1.0.0/16 ::1/128] and true", got, cfg.PushTarget.HTTPSOnly)
	}
	for _, bad := range []map[string]string{{"PUSH_ALLOWED_CIDRS": "10.0.0.0/33"}, {"PUSH_ALLOWED_CIDRS": "localhost"}, {"PUSH_HTTPS_ONLY": "sometimes"}} {
		if _, err := app.LoadConfig(nil, env(bad), io.Discard); err == nil {
			t.Errorf("%v was accepted", bad)
		}
	}
}
