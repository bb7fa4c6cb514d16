package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/console"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestSignInAndOut: the console sends a browser without a session to sign
// in; a good key makes a session whose cookie is HttpOnly, SameSite=Strict
// and scoped to the console, stored only as a hash; a bad key is refused
// with the API's words beside the field; signing out ends the session.
func TestSignInAndOut(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, d, true)
			b := h.browser()
			p := b.get("/console/")
			want(t, p, http.StatusSeeOther)
			if p.Location != "/console/login" {
				t.Fatalf("without a session: to %q", p.Location)
			}
			p = b.get("/console/rooms?cursor=x")
			if p.Location != "/console/login?next=%2Fconsole%2Frooms%3Fcursor%3Dx" {
				t.Errorf("the page asked for is not kept for after sign-in: %q", p.Location)
			}

			p = b.get("/console/login")
			want(t, p, http.StatusOK)
			lc := cookieOf(t, p, "console_login")
			if !lc.HttpOnly || lc.SameSite != http.SameSiteStrictMode || lc.Path != "/console/login" {
				t.Errorf("login cookie %+v", lc)
			}
			p = b.post("/console/login", url.Values{"apiKey": {auth.TokenPrefix + strings.Repeat("x", 43)}})
			want(t, p, http.StatusUnauthorized)
			if !strings.Contains(p.Body, `id="e-apiKey"`) || !strings.Contains(p.Body, "missing, malformed, expired or revoked") {
				t.Errorf("a bad key's refusal is not beside the field: %s", p.Body)
			}

			p = b.post("/console/login", url.Values{"apiKey": {h.Admin}, "next": {"/console/rooms"}})
			want(t, p, http.StatusSeeOther)
			if p.Location != "/console/rooms" {
				t.Errorf("after sign-in: to %q, want the page asked for", p.Location)
			}
			sc := cookieOf(t, p, "console_session")
			if !sc.HttpOnly || sc.SameSite != http.SameSiteStrictMode || sc.Path != "/console/" || sc.Secure ||
				sc.MaxAge != int(lifetimes.MaxLifetime/time.Second) {
				t.Errorf("session cookie %+v", sc)
			}
			sum := sha256.Sum256([]byte(sc.Value))
			if _, err := h.DB.Console().Session(context.Background(), sc.Value); !errors.Is(err, console.ErrSessionNotFound) {
				t.Errorf("the session is stored under its id, not its hash: %v", err)
			}
			stored, err := h.DB.Console().Session(context.Background(), hex.EncodeToString(sum[:]))
			if err != nil || !stored.ExpiresAt.Equal(h.Clock.now().Add(lifetimes.MaxLifetime)) {
				t.Fatalf("stored session %+v, %v", stored, err)
			}
			want(t, b.get("/console/"), http.StatusOK)

			p = b.post("/console/logout", nil)
			want(t, p, http.StatusSeeOther)
			if p.Location != "/console/login?ended=signed-out" || cookieOf(t, p, "console_session").MaxAge >= 0 {
				t.Errorf("sign-out: to %q, cookie %+v", p.Location, cookieOf(t, p, "console_session"))
			}
			if _, err := h.DB.Console().Session(context.Background(), stored.IDHash); !errors.Is(err, console.ErrSessionNotFound) {
				t.Errorf("the session outlived sign-out: %v", err)
			}
			// The old cookie, replayed, gets nothing.
			replay := h.browser()
			replay.header.Set("Cookie", "console_session="+sc.Value)
			if p := replay.get("/console/"); p.Status != http.StatusSeeOther || !strings.HasPrefix(p.Location, "/console/login") {
				t.Errorf("a signed-out session's cookie: %d to %q", p.Status, p.Location)
			}
		})
	}
}

// TestSecureCookieOverTLS: behind a TLS proxy (X-Forwarded-Proto: https)
// the session cookie is Secure.
func TestSecureCookieOverTLS(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	b := h.browser()
	b.header.Set("X-Forwarded-Proto", "https")
	if c := cookieOf(t, b.get("/console/login"), "console_login"); !c.Secure {
		t.Errorf("login cookie over TLS: %+v", c)
	}
	p := b.post("/console/login", url.Values{"apiKey": {h.Admin}})
	want(t, p, http.StatusSeeOther)
	if c := cookieOf(t, p, "console_session"); !c.Secure {
		t.Errorf("session cookie over TLS: %+v", c)
	}
}

// TestSessionExpiry: a session ends after IdleTimeout without a request,
// and after MaxLifetime however busy; the row goes with it.
func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	b := h.browser()
	b.signIn(h.Admin)
	h.Clock.advance(lifetimes.IdleTimeout - time.Minute)
	want(t, b.get("/console/"), http.StatusOK) // touched: idle counts from now
	h.Clock.advance(lifetimes.IdleTimeout - time.Minute)
	want(t, b.get("/console/"), http.StatusOK)
	h.Clock.advance(lifetimes.IdleTimeout)
	p := b.get("/console/rooms")
	if p.Status != http.StatusSeeOther || !strings.HasPrefix(p.Location, "/console/login?ended=idle") {
		t.Fatalf("idle session: %d to %q", p.Status, p.Location)
	}
	if n := sessions(t, h); n != 0 {
		t.Errorf("%d sessions left after the idle one ended", n)
	}

	b.signIn(h.Admin)
	for elapsed := time.Duration(0); elapsed < lifetimes.MaxLifetime-20*time.Minute; elapsed += 20 * time.Minute {
		h.Clock.advance(20 * time.Minute)
		want(t, b.get("/console/"), http.StatusOK)
	}
	h.Clock.advance(20 * time.Minute)
	if p := b.get("/console/"); p.Status != http.StatusSeeOther || p.Location != "/console/login?ended=expired" {
		t.Fatalf("a session past its lifetime: %d to %q", p.Status, p.Location)
	}
	if p := b.get("/console/login?ended=expired"); !strings.Contains(p.Body, "maximum lifetime") {
		t.Errorf("the sign-in page does not say why: %s", p.Body)
	}
}

func sessions(t *testing.T, h *harness) int {
	t.Helper()
	n, err := h.DB.Console().PurgeSessions(context.Background(), console.PurgeQuery{Now: h.Clock.now().Add(100 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRevokedKeyEndsSession: once its key is revoked, a session's next
// request fails authentication and the session ends.
func TestRevokedKeyEndsSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	k, token, err := h.keysCreate(auth.Spec{Name: "ops", Role: api.RoleManager, Subject: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	b := h.browser()
	b.signIn(token)
	want(t, b.get("/console/rooms"), http.StatusOK)
	// Revoked by an admin through this process's console: at once.
	admin := h.browser()
	admin.signIn(h.Admin)
	admin.get("/console/api-keys")
	want(t, admin.post("/console/api-keys/"+k+"/revoke", nil), http.StatusSeeOther)
	p := b.get("/console/rooms")
	if p.Status != http.StatusSeeOther || !strings.HasPrefix(p.Location, "/console/login?ended=key") {
		t.Fatalf("session of a revoked key: %d to %q", p.Status, p.Location)
	}
	if n := sessions(t, h); n != 1 {
		t.Errorf("%d sessions left, want the admin's only", n)
	}
}

func (h *harness) keysCreate(spec auth.Spec) (id, token string, err error) {
	k, token, err := h.keys.Create(context.Background(), spec)
	return k.ID.String(), token, err
}

// TestCSRF: every POST needs the session's token and the console's origin;
// the sign-in form needs its double-submit cookie.
func TestCSRF(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	b := h.browser()
	b.signIn(h.Admin)
	b.get("/console/rooms")
	room := url.Values{"identifier": {"orders"}, "managerIdentifier": {"team-a"}}
	for name, tc := range map[string]struct {
		csrf   string
		header http.Header
	}{
		"no token":        {csrf: "-", header: http.Header{"Origin": {h.URL}}},
		"another token":   {csrf: "x" + b.csrf[1:], header: http.Header{"Origin": {h.URL}}},
		"another origin":  {csrf: b.csrf, header: http.Header{"Origin": {"https://evil.example"}}},
		"cross-site":      {csrf: b.csrf, header: http.Header{"Sec-Fetch-Site": {"cross-site"}}},
		"same-site other": {csrf: b.csrf, header: http.Header{"Sec-Fetch-Site": {"same-site"}}},
	} {
		form := url.Values{}
		for k, v := range room {
			form[k] = v
		}
		if tc.csrf != "-" {
			form.Set("csrf", tc.csrf)
		}
		p := b.do(http.MethodPost, "/console/rooms", form, tc.header)
		if p.Status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, p.Status)
		}
	}
	if r := h.as(h.Admin, "GET", "/v1/rooms", nil); strings.Contains(string(r.Body), "orders") {
		t.Fatal("a refused POST created the room")
	}
	want(t, b.post("/console/rooms", room), http.StatusSeeOther)

	// Another session's token does not do.
	other := h.browser()
	other.signIn(h.Admin)
	other.get("/console/rooms")
	if p := b.post("/console/rooms", url.Values{"identifier": {"x"}, "csrf": {other.csrf}}); p.Status != http.StatusForbidden {
		t.Errorf("another session's token: %d", p.Status)
	}
	// Sign-in: the form's token must match its cookie.
	fresh := h.browser()
	fresh.get("/console/login")
	if p := fresh.post("/console/login", url.Values{"apiKey": {h.Admin}, "csrf": {"x" + fresh.csrf[1:]}}); p.Status != http.StatusForbidden {
		t.Errorf("sign-in with another token: %d", p.Status)
	}
	cookieless := h.browser()
	if p := cookieless.post("/console/login", url.Values{"apiKey": {h.Admin}, "csrf": {fresh.csrf}}); p.Status != http.StatusForbidden {
		t.Errorf("sign-in without the login cookie: %d", p.Status)
	}
}

// TestRoleVisibility: the console shows a key the forms its role may use
// and no other, and what it may not do is refused by the API's own rules.
func TestRoleVisibility(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	room := h.as(h.Admin, "POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "team-a"}).JSON(t)["id"].(string)
	other := h.as(h.Admin, "POST", "/v1/rooms", map[string]any{"identifier": "other", "managerIdentifier": "team-b"}).JSON(t)["id"].(string)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.created"}), http.StatusCreated)
	_, pubToken, err := h.keysCreate(auth.Spec{Name: "pub", Role: api.RolePublisher, Rooms: []auth.GrantSpec{{Room: "orders"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, mgrToken, err := h.keysCreate(auth.Spec{Name: "mgr", Role: api.RoleManager, Subject: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	forms := map[string]string{
		"room settings":  `action="/console/rooms/` + room + `" `,
		"terminate":      `/terminate"`,
		"new event type": `action="/console/rooms/` + room + `/event-types"`,
		"subscriptions":  `/subscriptions/new"`,
		"publish":        `/publish"`,
	}
	check := func(who string, p page, shown ...string) {
		t.Helper()
		want(t, p, http.StatusOK)
		for name, marker := range forms {
			has := strings.Contains(p.Body, marker)
			if wanted := contains(shown, name); has != wanted {
				t.Errorf("%s: %s shown=%v, want %v", who, name, has, wanted)
			}
		}
	}

	pub := h.browser()
	pub.signIn(pubToken)
	check("publisher", pub.get("/console/rooms/"+room), "publish")
	if p := pub.get("/console/rooms"); strings.Contains(p.Body, `action="/console/rooms"`) || strings.Contains(p.Body, "other") {
		t.Errorf("a publisher sees the new room form or a room outside its grants: %s", p.Body)
	}
	if p := pub.get("/console/"); strings.Contains(p.Body, "/console/api-keys") || strings.Contains(p.Body, `id="publish-rate"`) {
		t.Error("a publisher sees the API keys or the service's figures")
	}
	want(t, pub.get("/console/api-keys"), http.StatusForbidden)
	want(t, pub.get("/console/rooms/"+other), http.StatusForbidden)
	// A form it was not shown is refused all the same.
	pub.get("/console/rooms/" + room)
	p := pub.post("/console/rooms/"+room, url.Values{"deliveryAttempts": {"9"}})
	want(t, p, http.StatusForbidden)
	if !strings.Contains(p.Body, "a publisher key may not PATCH") {
		t.Errorf("the refusal is not the API's: %s", p.Body)
	}

	mgr := h.browser()
	mgr.signIn(mgrToken)
	check("manager", mgr.get("/console/rooms/"+room), "room settings", "terminate", "new event type", "subscriptions")
	want(t, mgr.get("/console/rooms/"+other), http.StatusForbidden)
	if p := mgr.get("/console/rooms"); !strings.Contains(p.Body, `action="/console/rooms"`) {
		t.Error("a manager is not offered the new room form")
	}

	admin := h.browser()
	admin.signIn(h.Admin)
	check("admin", admin.get("/console/rooms/"+room), "room settings", "terminate", "new event type", "subscriptions", "publish")
	if p := admin.get("/console/"); !strings.Contains(p.Body, "/console/api-keys") || !strings.Contains(p.Body, `id="publish-rate"`) {
		t.Error("an admin does not see the API keys or the service's figures")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestFormErrorsBesideFields: the API's field errors are shown beside the
// fields they name, the form keeps what was typed, and the summary lists
// them all.
func TestFormErrorsBesideFields(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	b := h.browser()
	b.signIn(h.Admin)
	b.get("/console/rooms")
	p := b.post("/console/rooms", url.Values{"identifier": {"bad id"}, "deliveryDelay": {"0"}})
	want(t, p, http.StatusUnprocessableEntity)
	for field, msg := range map[string]string{
		"identifier":        "must match",
		"managerIdentifier": "is required",
		"deliveryDelay":     "must be from 1 to 604800000 ms",
	} {
		re := regexp.MustCompile(`id="e-` + field + `"><li>([^<]*)</li>`)
		if m := re.FindStringSubmatch(p.Body); m == nil || !strings.Contains(m[1], msg) {
			t.Errorf("%s: error beside the field %v, want %q", field, m, msg)
		}
		if !strings.Contains(p.Body, `<code>`+field+`</code>`) {
			t.Errorf("%s is not in the summary", field)
		}
	}
	if !strings.Contains(p.Body, `value="bad id"`) || !strings.Contains(p.Body, `aria-invalid="true"`) {
		t.Error("the form lost what was typed, or does not mark the invalid fields")
	}

	// A schema the API refuses, on the version form.
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms", map[string]any{"identifier": "orders", "managerIdentifier": "m"}), http.StatusCreated)
	apptest.Want(t, h.as(h.Admin, "POST", "/v1/rooms/orders/event-types", map[string]any{"identifier": "order.created"}), http.StatusCreated)
	b.get("/console/rooms/orders/event-types/order.created")
	p = b.post("/console/rooms/orders/event-types/order.created/versions", url.Values{"schema": {`{"type": "nope"}`}})
	want(t, p, http.StatusUnprocessableEntity)
	api := h.as(h.Admin, "POST", "/v1/rooms/orders/event-types/order.created/versions", map[string]any{"schema": map[string]any{"type": "nope"}})
	apptest.Want(t, api, http.StatusUnprocessableEntity)
	for _, f := range apptest.Fields(t, api) {
		if !strings.Contains(p.Body, `<code>`+f+`</code>`) {
			t.Errorf("the console's errors differ from the API's: %s missing", f)
		}
	}
	if !strings.Contains(p.Body, `id="e-schema"`) {
		t.Errorf("the schema's error is not beside the schema: %s", p.Body)
	}
}

// TestConsoleWithoutKeys: with authentication off, anyone signs in without
// a key and is told so on every page.
func TestConsoleWithoutKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, false)
	b := h.browser()
	if p := b.get("/console/login"); !strings.Contains(p.Body, "without API keys") {
		t.Errorf("the sign-in page does not say no key is needed: %s", p.Body)
	}
	b.signIn("")
	if p := b.get("/console/rooms"); p.Status != http.StatusOK || !strings.Contains(p.Body, "AUTH_DISABLED=true") {
		t.Errorf("rooms without keys: %d", p.Status)
	}
}

// TestConsoleEnabledSetting: CONSOLE_ENABLED=false leaves /console/
// unserved; by default the service serves it.
func TestConsoleEnabledSetting(t *testing.T) {
	t.Parallel()
	off := apptest.StartService(t, map[string]string{"CONSOLE_ENABLED": "false"})
	for _, path := range []string{"/console/", "/console/login", "/console/static/console.css"} {
		if status, _ := off.Send("GET", path, ""); status != http.StatusNotFound {
			t.Errorf("CONSOLE_ENABLED=false: GET %s → %d, want 404", path, status)
		}
	}
	on := apptest.StartService(t, nil)
	if status, body := on.Send("GET", "/console/login", ""); status != http.StatusOK || !strings.Contains(string(body), "Sign in") {
		t.Errorf("by default: GET /console/login → %d", status)
	}
}

// TestStaticFiles: the console's script and style sheet are served with
// their types, cacheable, and the directory is not listed.
func TestStaticFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t, store.SQLite, true)
	b := h.browser()
	for path, typ := range map[string]string{"/console/static/console.css": "text/css", "/console/static/console.js": "text/javascript"} {
		p := b.get(path)
		want(t, p, http.StatusOK)
		if ct := p.Header.Get("Content-Type"); !strings.HasPrefix(ct, typ) || p.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: Content-Type %q, nosniff %q", path, ct, p.Header.Get("X-Content-Type-Options"))
		}
	}
	want(t, b.get("/console/static/"), http.StatusNotFound)
	want(t, b.get("/console/static/nope.js"), http.StatusNotFound)
}
