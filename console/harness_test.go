package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/console"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// clock is the console's time in tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// harness is the API of one process over a fresh database with the console
// mounted on it, as app.NewConsole mounts it but on a clock the test moves.
type harness struct {
	t      *testing.T
	URL    string
	DB     *store.DB
	Clock  *clock
	API    *apptest.API // the same database through an API server of its own
	keys   *auth.Service
	Admin  string // an admin key's token
	Config console.Config
}

var lifetimes = console.Config{IdleTimeout: 30 * time.Minute, MaxLifetime: 12 * time.Hour}

func newHarness(t *testing.T, d store.Dialect, authOn bool) *harness {
	t.Helper()
	cfg := apptest.Config()
	cfg.Auth.Disabled = !authOn
	db := storetest.Open(t, d)
	logger := slog.New(slog.DiscardHandler)
	e, _ := app.NewHandler(cfg, logger, db, &apptest.Queues{}, apptest.IdleRelay{}, true, metrics.New(metrics.Options{}))
	h := &harness{t: t, DB: db, Clock: &clock{t: time.Now().UTC().Truncate(time.Microsecond)}, Config: lifetimes}
	m := metrics.New(metrics.Options{})
	console.New(console.Deps{
		API: e, Sessions: db.Console(), Stats: db.Console(), Now: h.Clock.now, Logger: logger, Config: lifetimes,
		Totals: func() console.Totals {
			t := m.Totals()
			return console.Totals{Published: t.Published, Outcomes: t.Outcomes}
		},
	}).Routes(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	h.URL = srv.URL
	h.API = apptest.Serve(t, db, &apptest.Queues{}, apptest.IdleRelay{}, cfg)
	h.keys = app.NewKeyService(db, rooms.NewService(rooms.Deps{Store: db.Rooms(), Cleanup: app.NoCleanup{}, Now: app.Clock}))
	if authOn {
		h.Admin = h.key(auth.Spec{Name: "admin", Role: api.RoleAdmin})
	}
	return h
}

// key makes an API key and returns its token.
func (h *harness) key(spec auth.Spec) string {
	h.t.Helper()
	_, token, err := h.keys.Create(context.Background(), spec)
	if err != nil {
		h.t.Fatal(err)
	}
	return token
}

// as calls the API with a key.
func (h *harness) as(token, method, path string, body any) apptest.Response {
	h.t.Helper()
	return h.API.DoHeaders(method, path, body, map[string]string{"Authorization": "Bearer " + token})
}

// browser is a client with cookies that does not follow redirects, and
// sends what a browser sends with a form of the page it is on.
type browser struct {
	h      *harness
	client *http.Client
	// csrf is the token of the last page read.
	csrf string
	// header is added to every request.
	header http.Header
}

func (h *harness) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{h: h, header: http.Header{}, client: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// page is an answer of the console.
type page struct {
	Status   int
	Header   http.Header
	Body     string
	Location string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) do(method, path string, form url.Values, header http.Header) page {
	b.h.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.h.URL+path, body)
	if err != nil {
		b.h.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, vs := range b.header {
		req.Header[k] = vs
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	p := page{Status: resp.StatusCode, Header: resp.Header, Body: string(raw), Location: resp.Header.Get("Location")}
	if m := csrfField.FindStringSubmatch(p.Body); m != nil {
		b.csrf = m[1]
	}
	return p
}

// get reads a page.
func (b *browser) get(path string) page {
	b.h.t.Helper()
	return b.do(http.MethodGet, path, nil, http.Header{"Sec-Fetch-Site": {"same-origin"}})
}

// post sends a form as the console's own page does: the page's CSRF token,
// from the console's origin.
func (b *browser) post(path string, form url.Values) page {
	b.h.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if form.Get("csrf") == "" {
		form.Set("csrf", b.csrf)
	}
	return b.do(http.MethodPost, path, form, http.Header{"Origin": {b.h.URL}, "Sec-Fetch-Site": {"same-origin"}})
}

// signIn signs in with token and fails unless the console lets it in.
func (b *browser) signIn(token string) {
	b.h.t.Helper()
	b.get("/console/login")
	p := b.post("/console/login", url.Values{"apiKey": {token}})
	if p.Status != http.StatusSeeOther || p.Location != "/console/" {
		b.h.t.Fatalf("sign-in: %d to %q: %s", p.Status, p.Location, p.Body)
	}
}

// want fails unless p has status code.
func want(t *testing.T, p page, code int) {
	t.Helper()
	if p.Status != code {
		t.Fatalf("status %d, want %d (to %q): %s", p.Status, code, p.Location, p.Body)
	}
}

// cookieOf is the Set-Cookie of name in p.
func cookieOf(t *testing.T, p page, name string) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: p.Header}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s cookie set; headers %v", name, p.Header)
	return nil
}
