package console_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/store"
)

// Patterns a page of the console must not have: the Content-Security-Policy
// would block them (and a page that needs them is broken).
var (
	inlineScript = regexp.MustCompile(`(?i)<script(?:\s+[^>]*)?>`)
	scriptSrc    = regexp.MustCompile(`(?i)\ssrc=`)
	styleAttr    = regexp.MustCompile(`(?i)<[^>]+\sstyle=`)
	styleElement = regexp.MustCompile(`(?i)<style[\s>]`)
	eventAttr    = regexp.MustCompile(`(?i)<[^>]+\son[a-z]+=`)
	jsURL        = regexp.MustCompile(`(?i)(href|action|src)="\s*javascript:`)
	consoleLink  = regexp.MustCompile(`href="(/console/[^"#]*)"`)
	inputTag     = regexp.MustCompile(`<(input|select|textarea)\s[^>]*>`)
	idAttr       = regexp.MustCompile(`\sid="([^"]+)"`)
)

// strictProblems lists what in a page breaks the console's rules: inline
// script or style, event handler attributes, javascript: URLs, a form field
// without a label.
func strictProblems(body string) []string {
	var out []string
	for _, tag := range inlineScript.FindAllString(body, -1) {
		if !scriptSrc.MatchString(tag) {
			out = append(out, "inline script: "+tag)
		}
	}
	for name, re := range map[string]*regexp.Regexp{"style attribute": styleAttr, "style element": styleElement,
		"event handler attribute": eventAttr, "javascript: URL": jsURL} {
		if m := re.FindString(body); m != "" {
			out = append(out, name+": "+m)
		}
	}
	for _, tag := range inputTag.FindAllString(body, -1) {
		if strings.Contains(tag, `type="hidden"`) || strings.Contains(tag, "aria-label=") {
			continue
		}
		id := idAttr.FindStringSubmatch(tag)
		if id == nil || !strings.Contains(body, `for="`+id[1]+`"`) {
			out = append(out, "a field without a label: "+tag)
		}
	}
	return out
}

// checkStrict fails unless p carries the console's security headers and
// has nothing the Content-Security-Policy forbids.
func checkStrict(t *testing.T, path string, p page) {
	t.Helper()
	csp := p.Header.Get("Content-Security-Policy")
	for _, directive := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
		if !strings.Contains(csp, directive) {
			t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, directive)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("%s: Content-Security-Policy allows inline code: %q", path, csp)
	}
	for h, v := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "Cache-Control": "no-store"} {
		if got := p.Header.Get(h); got != v {
			t.Errorf("%s: %s %q, want %q", path, h, got, v)
		}
	}
	for _, problem := range strictProblems(p.Body) {
		t.Errorf("%s: %s", path, problem)
	}
}

// TestEveryPageIsStrict follows every link of the console from the
// dashboard, as an admin, and checks each page it reaches.
func TestEveryPageIsStrict(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "team-a",
		"retryPolicy": map[string]any{"jitter": 0.2}}), http.StatusCreated)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.created"}), http.StatusCreated)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms/orders/event-types/order.created/versions", `{"schema":`+apptest.OrderSchema+`}`), http.StatusCreated)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PULL",
		"eventTypes": []any{map[string]any{"eventType": "order.created"}}}), http.StatusCreated)
	// A PUSH subscription with every setting the console shows, and a
	// subscriber's PENDING one in a room that approves by hand.
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PUSH",
		"pushUrl": "http://127.0.0.1:9/hook", "eventTypes": []any{map[string]any{"eventType": "order.created"}},
		"attributeFilter": map[string]any{"region": []any{"eu"}}, "maxDeliveryRate": 5,
		"pushAuth":       map[string]any{"type": "basic", "username": "u", "password": "p"},
		"circuitBreaker": map[string]any{"cooldown": 2000}}), http.StatusCreated)
	apptest.Want(t, h.as(h.Admin, "PATCH", "/v1/rooms/orders", map[string]any{"subscriptionApproval": "MANUAL"}), http.StatusOK)
	_, subToken, err := h.keysCreate(auth.Spec{Name: "sub", Role: api.RoleSubscriber, Subject: "team-s", Rooms: []auth.GrantSpec{{Room: "orders"}}})
	if err != nil {
		t.Fatal(err)
	}
	apptest.Want(t, h.as(subToken, "POST", "/v1/rooms/orders/subscriptions", map[string]any{"type": "PUSH",
		"pushUrl": "http://127.0.0.1:9/hook", "eventTypes": []any{map[string]any{"eventType": "order.created"}}}), http.StatusCreated)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms/orders/messages", map[string]any{"eventType": "order.created",
		"payload": map[string]any{"orderId": "<script>alert(1)</script>"}}), http.StatusAccepted)
	b := h.browser()
	checkStrict(t, "/console/login", b.get("/console/login"))
	b.signIn(h.Admin)

	seen := map[string]bool{}
	queue := []string{"/console/", "/console/messages?room=orders", "/console/rooms/orders/publish",
		"/console/rooms/orders?status=PENDING", "/console/no-such-page"}
	for len(queue) > 0 && len(seen) < 60 {
		path := queue[0]
		queue = queue[1:]
		if seen[path] {
			continue
		}
		seen[path] = true
		p := b.get(path)
		if path == "/console/no-such-page" {
			want(t, p, http.StatusNotFound)
		} else if p.Status != http.StatusOK {
			t.Errorf("GET %s: %d", path, p.Status)
			continue
		}
		checkStrict(t, path, p)
		for _, m := range consoleLink.FindAllStringSubmatch(p.Body, -1) {
			link := strings.ReplaceAll(m[1], "&amp;", "&")
			if !seen[link] && !strings.HasPrefix(link, "/console/static/") {
				queue = append(queue, link)
			}
		}
	}
	for _, must := range []string{"/console/rooms", "/console/api-keys", "/console/messages"} {
		if !seen[must] {
			t.Errorf("the crawl never reached %s", must)
		}
	}
	forms := map[string]int{}
	for path := range seen {
		for _, suffix := range []string{"/subscriptions/new", "/edit"} {
			if strings.HasSuffix(path, suffix) {
				forms[suffix]++
			}
		}
	}
	if forms["/subscriptions/new"] != 1 || forms["/edit"] != 3 {
		t.Errorf("the crawl reached the subscription forms %v, want the new one and the settings of all 3", forms)
	}
	if len(seen) < 10 {
		t.Errorf("the crawl reached only %d pages: %v", len(seen), seen)
	}
}
