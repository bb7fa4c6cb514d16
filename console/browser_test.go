package console_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/auth"
)

var readmeImages = flag.Bool("readme-images", false, "also write the README's two screenshots to docs/images/")

// chromiumPath is the headless browser of the browser tests: $CHROMIUM, or
// Debian's chromium. Without one the test is skipped, except in CI
// (CI=true), where it fails: .ci/run installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no browser")
	}
	candidates := []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Chromium is required in CI (apt-get install -y chromium, or set CHROMIUM)")
	}
	t.Skip("no Chromium (apt-get install -y chromium, or set CHROMIUM): the browser test skips")
	return ""
}

// chrome is a headless Chromium on one tab, driving the console at base.
type chrome struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string

	mu       sync.Mutex
	messages []chromedp.ConsoleMessage
}

func newChrome(t *testing.T, exe, base string) *chrome {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	c := &chrome{t: t, ctx: ctx, base: base}
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no timeout
		t.Fatalf("start Chromium: %v", err)
	}
	// Every message of the pages: a blocked inline script or style, or an
	// uncaught exception, fails the test at its end.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.messages = append(c.messages, m)
			c.mu.Unlock()
		}
	}()
	c.shots = os.Getenv("CONSOLE_SCREENSHOTS")
	if c.shots == "" {
		dir, err := os.MkdirTemp("", "console-screenshots-")
		if err != nil {
			t.Fatal(err)
		}
		c.shots = dir
	}
	if err := os.MkdirAll(c.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots of the console go to %s", c.shots)
	return c
}

// step runs actions with a timeout of their own.
func (c *chrome) step(what string, actions ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page (promises awaited).
func eval[T any](c *chrome, expr string) T {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		c.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// check fails unless the page answered status with the console's security
// headers and holds nothing its Content-Security-Policy forbids.
func (c *chrome) check(resp *network.Response, status int) {
	c.t.Helper()
	if resp.Status != int64(status) {
		c.t.Fatalf("%s: status %d, want %d: %s", resp.URL, resp.Status, status, c.html())
	}
	h := http.Header{}
	for k, v := range resp.Headers {
		h.Set(k, fmt.Sprint(v))
	}
	path := strings.TrimPrefix(resp.URL, c.base)
	checkStrict(c.t, path, page{Status: int(resp.Status), Header: h, Body: c.html()})
}

func (c *chrome) html() string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		c.t.Fatalf("read the page: %v", err)
	}
	return s
}

// open navigates to path and checks the page.
func (c *chrome) open(path string, status int) *network.Response {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(c.base+path))
	if err != nil {
		c.t.Fatalf("open %s: %v", path, err)
	}
	c.check(resp, status)
	return resp
}

// submit clicks the button sel, waits for the page it leads to, and checks it.
func (c *chrome) submit(sel string, status int) *network.Response {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	if err != nil {
		c.t.Fatalf("click %s: %v", sel, err)
	}
	c.check(resp, status)
	return resp
}

// set sets the value of the form field sel.
func (c *chrome) set(sel, value string) {
	c.t.Helper()
	c.step("set "+sel, chromedp.SetValue(chromedp.CSS(sel), value))
}

func (c *chrome) text(sel string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		c.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// has reports whether the page has an element matching sel.
func (c *chrome) has(sel string) bool {
	c.t.Helper()
	return eval[bool](c, fmt.Sprintf("document.querySelector(%q) !== null", sel))
}

// shot writes a full-page screenshot of the page as name.png.
func (c *chrome) shot(name string) []byte {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		c.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(c.shots, name+".png"), png, 0o644); err != nil {
		c.t.Fatal(err)
	}
	return png
}

// path is the path of the page the tab shows.
func (c *chrome) path() string {
	c.t.Helper()
	return strings.TrimPrefix(eval[string](c, "location.href"), c.base)
}

// TestBrowser drives the console in headless Chromium through what an
// operator does: sign in, create a room, an event type and a version (one
// refused first), a PUSH subscription to a receiver that fails twice,
// publish from the console and watch the three attempts appear on the
// timeline, dead-letter a message and replay it, send a test event, make a
// publisher key, sign out; the publisher then sees no management form; a
// POST without the CSRF token is refused; no page breaks the
// Content-Security-Policy.
func TestBrowser(t *testing.T) {
	t.Parallel()
	exe := chromiumPath(t)
	admin := auth.TokenPrefix + "console-browser-test-admin-key-0123456789"
	svc := apptest.StartService(t, map[string]string{"AUTH_DISABLED": "false", "AUTH_BOOTSTRAP_ADMIN_KEY": admin})
	hook := apptest.SequenceHook(t, 500, 500, 200)
	var failing atomic.Bool
	failing.Store(true)
	dlHook := apptest.NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	c := newChrome(t, exe, svc.Base)

	// Sign in with the keyboard alone: Tab to the key's field, type, Enter.
	resp := c.open("/console/", http.StatusOK)
	if !strings.HasPrefix(strings.TrimPrefix(resp.URL, svc.Base), "/console/login") {
		t.Fatalf("without a session the console showed %s", resp.URL)
	}
	for i := 0; eval[string](c, "document.activeElement.id") != "f-apiKey"; i++ {
		if i == 10 {
			t.Fatal("Tab never reached the API key field")
		}
		c.step("tab", chromedp.KeyEvent("\t"))
	}
	c.step("type the key", chromedp.KeyEvent(admin))
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	resp, err := chromedp.RunResponse(ctx, chromedp.KeyEvent("\r"))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	c.check(resp, http.StatusOK)
	if c.path() != "/console/" {
		t.Fatalf("signed in, the console shows %s", c.path())
	}

	// A room: refused first, with the API's words beside the field.
	c.open("/console/rooms", http.StatusOK)
	c.set("#f-identifier", "orders")
	c.set("#f-managerIdentifier", "team-a")
	c.set("#f-deliveryDelay", "0")
	c.submit(`form[action="/console/rooms"] button[type=submit]`, http.StatusUnprocessableEntity)
	if msg := c.text("#e-deliveryDelay"); !strings.Contains(msg, "must be from 1 to 604800000 ms") {
		t.Errorf("deliveryDelay's error beside it: %q", msg)
	}
	if got := eval[string](c, "document.activeElement.id"); got != "problem" {
		t.Errorf("focus after a refused form is on %q, want the problem summary", got)
	}
	c.set("#f-deliveryDelay", "200")
	c.set("#f-deliveryDelayMultiplier", "2")
	c.set("#f-deliveryAttempts", "3")
	c.submit(`form[action="/console/rooms"] button[type=submit]`, http.StatusOK)
	room := c.path()[:strings.Index(c.path(), "?")]
	if !strings.Contains(c.text(".flash"), "created") {
		t.Errorf("no word of the new room")
	}

	// An event type, and a version whose schema is refused once.
	c.set("#f-identifier", "order.created")
	c.set("#f-description", "A customer placed an order")
	c.submit(`form[action$="/event-types"] button[type=submit]`, http.StatusOK)
	c.set("#f-schema", `{"type": "nope"}`)
	c.submit(`form[action$="/versions"] button[type=submit]`, http.StatusUnprocessableEntity)
	if msg := c.text("#e-schema"); msg == "" {
		t.Error("the refused schema has no error beside it")
	}
	c.set("#f-schema", apptest.OrderSchema)
	c.submit(`form[action$="/versions"] button[type=submit]`, http.StatusOK)
	if !strings.Contains(c.text("main pre"), "orderId") {
		t.Error("the version's schema is not shown")
	}
	c.shot("event-type")

	// A PUSH subscription to the receiver that fails twice.
	sub := c.subscribe(room, hook.URL(), "")
	c.open(room+"/subscriptions/"+sub, http.StatusOK)
	if !c.has("svg.chart rect.bar") {
		t.Error("the subscription's retry schedule is not drawn")
	}
	c.shot("subscription")

	// Publish from the console; watch the attempts appear on the timeline.
	c.open(room+"/publish", http.StatusOK)
	c.set("#f-eventType", "order.created")
	c.set("#f-correlationId", "checkout-42")
	c.set("#f-payload", `{"orderId": "A-1001", "total": 25.5}`)
	c.submit(`form[action$="/publish"] button[type=submit]`, http.StatusAccepted)
	event := c.text("#event-id")
	c.submit("#follow", http.StatusOK)
	var attempts []string
	apitest.EventuallyWithin(t, 30*time.Second, "three attempts on the timeline", func() bool {
		// The page reloads itself while attempts are to come; a read during
		// a reload fails and is tried again.
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		defer cancel()
		attempts, _ = chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll("#attempts tbody tr")).map(r => r.dataset.status + " " + r.children[4].textContent.trim())`))
		return slices.Equal(attempts, []string{"failed 500", "failed 500", "delivered 200"})
	})
	if c.path() != room+"/messages/"+event {
		t.Errorf("the timeline is at %s", c.path())
	}
	if n := eval[int](c, `document.querySelectorAll("svg.chart g.st-failed, svg.chart g.st-delivered").length`); n != 3 {
		t.Errorf("the waterfall draws %d attempts, want 3", n)
	}
	if !strings.Contains(c.text("main"), "Every delivery reached its final status") {
		t.Error("the finished timeline does not say so")
	}
	readme(t, "console-timeline", c.shot("timeline"))
	// The search finds it by correlation id.
	c.open("/console/messages?room="+strings.TrimPrefix(room, "/console/rooms/")+"&q=checkout-42", http.StatusOK)
	if !c.has(`a[href$="/messages/` + event + `"]`) {
		t.Error("the search by correlation id does not find the event")
	}

	// A dead letter: a subscription with one attempt to a failing receiver.
	dlSub := c.subscribe(room, dlHook.URL(), "1")
	c.open(room+"/publish", http.StatusOK)
	c.set("#f-eventType", "order.created")
	c.set("#f-correlationId", "dl-1")
	c.set("#f-payload", `{"orderId": "A-1002"}`)
	c.submit(`form[action$="/publish"] button[type=submit]`, http.StatusAccepted)
	deadLetters := room + "/subscriptions/" + dlSub + "/dead-letters"
	apitest.EventuallyWithin(t, 30*time.Second, "a dead letter", func() bool {
		c.open(deadLetters, http.StatusOK)
		return c.has(`input[name="ids"]`)
	})
	c.shot("dead-letters")
	c.submit(`#dead-letters td a`, http.StatusOK)
	if body := c.text("main"); !strings.Contains(body, "A-1002") || !strings.Contains(body, "HTTP 500") {
		t.Errorf("the dead letter does not show its payload and last error: %s", body)
	}
	c.shot("dead-letter")
	failing.Store(false)
	c.open(deadLetters, http.StatusOK)
	c.step("select the dead letter", chromedp.Click(chromedp.CSS(`input[name="ids"]`)))
	c.submit(`button[value="replay"]`, http.StatusOK)
	if !strings.Contains(c.text(".flash"), "replayed") || c.has(`input[name="ids"]`) {
		t.Error("the replayed dead letter is still listed, or the page does not say it was replayed")
	}
	dlHook.WaitFor(2, 30*time.Second)
	apitest.EventuallyWithin(t, 30*time.Second, "the replay delivered", func() bool {
		c.open(room+"/subscriptions/"+dlSub, http.StatusOK)
		return c.has(`td .st-delivered`)
	})

	// A test event from the subscription's page shows what came back; its
	// settings form shows a credential's fields once its type is chosen.
	c.open(room+"/subscriptions/"+dlSub, http.StatusOK)
	c.submit("#send-test", http.StatusOK)
	if got := c.text("#test-status"); got != "204" {
		t.Errorf("the test event's HTTP status shown: %q", got)
	}
	c.shot("test-event")
	c.open(room+"/subscriptions/"+dlSub+"/edit", http.StatusOK)
	tokenShown := `!document.getElementById("f-pushAuth-token").closest("[data-when]").hidden`
	if eval[bool](c, tokenShown) {
		t.Error("the bearer token's field shows before bearer is chosen")
	}
	c.step("choose bearer", chromedp.Click(chromedp.ID("auth-bearer")))
	if !eval[bool](c, tokenShown) {
		t.Error("choosing bearer does not show the token's field")
	}
	c.shot("subscription-settings")

	// The dashboard, after all this.
	c.open("/console/", http.StatusOK)
	if !c.has("#publish-rate") || !c.has("#outbox-backlog") || !c.has("#dead-letters") {
		t.Error("the admin's dashboard lacks its figures")
	}
	readme(t, "console-dashboard", c.shot("dashboard"))

	// Readable on a phone: nothing wider than the screen.
	c.step("phone", chromedp.EmulateViewport(390, 844))
	c.open(room+"/messages/"+event, http.StatusOK)
	if w := eval[int](c, "document.documentElement.scrollWidth - window.innerWidth"); w > 0 {
		t.Errorf("on a phone the timeline is %d px wider than the screen", w)
	}
	c.shot("timeline-phone")
	c.step("desktop", chromedp.EmulateViewport(1280, 900))

	// A publisher key, made in the console and shown once.
	c.open("/console/api-keys", http.StatusOK)
	c.set("#f-name", "checkout service")
	c.set("#f-role", "publisher")
	c.set("#f-rooms", "orders: order.created")
	c.submit(`form[action="/console/api-keys"] button[type=submit]`, http.StatusCreated)
	publisher := c.text("#new-key")
	if !strings.HasPrefix(publisher, auth.TokenPrefix) {
		t.Fatalf("new key %q", publisher)
	}
	c.shot("api-keys")

	// A POST without the session's CSRF token is refused, even from the
	// console's own page.
	for _, form := range []string{`{identifier: "sneaky", managerIdentifier: "x"}`,
		`{identifier: "sneaky", managerIdentifier: "x", csrf: "not-the-token"}`} {
		status := eval[int](c, `fetch("/console/rooms", {method: "POST", body: new URLSearchParams(`+form+`)}).then(r => r.status)`)
		if status != http.StatusForbidden {
			t.Errorf("a POST with %s: %d, want 403", form, status)
		}
	}
	c.open("/console/rooms", http.StatusOK)
	if strings.Contains(c.text("main"), "sneaky") {
		t.Error("a POST without the CSRF token created a room")
	}

	// Sign out; the publisher signs in and sees no management form.
	c.submit("#sign-out", http.StatusOK)
	if !strings.Contains(c.text("main"), "You signed out") {
		t.Error("signing out does not say so")
	}
	c.set("#f-apiKey", publisher)
	c.submit(`form[action="/console/login"] button[type=submit]`, http.StatusOK)
	if c.has(`a[href="/console/api-keys"]`) || c.has("#publish-rate") {
		t.Error("a publisher sees the API keys or the service's figures")
	}
	c.open(room, http.StatusOK)
	for _, sel := range []string{`form[action="` + room + `"]`, `form[action$="/terminate"]`, `form[action$="/event-types"]`,
		`a[href$="/subscriptions/new"]`, `a[href^="/console/messages"][href*="room="]`} {
		if c.has(sel) {
			t.Errorf("a publisher is shown %s", sel)
		}
	}
	if !c.has(`a[href$="/publish"]`) {
		t.Error("a publisher is not offered the publish form")
	}
	c.shot("publisher-room")
	c.open("/console/api-keys", http.StatusForbidden)
	c.open(room+"/publish", http.StatusOK)
	c.set("#f-eventType", "order.created")
	c.set("#f-payload", `{"orderId": "A-1003"}`)
	c.submit(`form[action$="/publish"] button[type=submit]`, http.StatusAccepted)
	if c.has("#follow") {
		t.Error("a publisher is offered the message log, which it may not read")
	}
	c.submit("#sign-out", http.StatusOK)

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.messages {
		if m.IsException() || strings.Contains(m.Text, "Content Security Policy") || strings.Contains(m.Text, "Content-Security-Policy") {
			t.Errorf("the page reported: %s (%s)", m, m.URL)
		}
	}
}

// subscribe creates a PUSH subscription of the room's order.created events to
// url in the console (deliveryAttempts overriding the room's when not ""),
// checks that its signing secret is shown once, and returns its id.
func (c *chrome) subscribe(room, url, attempts string) string {
	c.t.Helper()
	c.open(room+"/subscriptions/new", http.StatusOK)
	c.step("choose PUSH", chromedp.Click(chromedp.ID("type-push")))
	c.set("#f-pushUrl", url)
	c.set("#f-eventTypes-0-eventType", "order.created")
	if attempts != "" {
		c.set("#f-deliveryAttempts", attempts)
	}
	c.submit(`form[action$="/subscriptions"] button[type=submit]`, http.StatusCreated)
	if secret := c.text("#signing-secret"); !strings.HasPrefix(secret, "whsec_") {
		c.t.Fatalf("the signing secret shown is %q", secret)
	}
	return c.text("#subscription-id")
}

// readme writes a screenshot the README shows, with -readme-images.
func readme(t *testing.T, name string, png []byte) {
	t.Helper()
	if !*readmeImages {
		return
	}
	if err := os.WriteFile(filepath.Join(apptest.RepoRoot(), "docs", "images", name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
