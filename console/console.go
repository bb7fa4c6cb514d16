package console

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Config configures the console.
type Config struct {
	// IdleTimeout ends a session not used for this long.
	IdleTimeout time.Duration
	// MaxLifetime ends a session this long after sign-in, used or not.
	MaxLifetime time.Duration
}

// Totals are the process's counters since it started (metrics.Metrics
// gives them): events published, and what became of each copy by outcome.
type Totals struct {
	Published float64
	Outcomes  map[string]float64
}

// Deps is what the console works with.
type Deps struct {
	// API is the process's HTTP handler: the console calls its /v1 routes.
	API      http.Handler
	Sessions Sessions
	// Stats and Totals feed the dashboard's service-wide figures.
	Stats  Stats
	Totals func() Totals
	Now    func() time.Time
	Logger *slog.Logger
	Config Config
}

// Console serves the web console.
type Console struct {
	api      http.Handler
	sessions Sessions
	stats    Stats
	totals   func() Totals
	now      func() time.Time
	logger   *slog.Logger
	cfg      Config
	pages    map[string]*template.Template
	static   http.Handler
	samples  *sampler
	origins  *http.CrossOriginProtection
}

// New builds the console; it panics if its embedded templates do not parse
// (a build that never passed its tests).
func New(d Deps) *Console {
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err)
	}
	return &Console{
		api: d.API, sessions: d.Sessions, stats: d.Stats, totals: d.Totals, now: d.Now, logger: d.Logger, cfg: d.Config,
		pages:   parsePages(),
		static:  http.StripPrefix("/console/static/", http.FileServer(http.FS(static))),
		samples: &sampler{},
		origins: http.NewCrossOriginProtection(),
	}
}

// Routes registers the console's pages under /console on e, whose /v1
// routes it calls.
func (cn *Console) Routes(e *echo.Echo) {
	e.GET("/console", func(c echo.Context) error { return c.Redirect(http.StatusFound, "/console/") })
	// No group middleware: echo would add catch-all routes for it. Each
	// handler is wrapped instead.
	g := e.Group("/console")
	g.GET("/static/*", cn.plain(func(c echo.Context) error {
		if strings.HasSuffix(c.Request().URL.Path, "/") {
			return cn.renderError(c, http.StatusNotFound, "There is no such page.") // no listing
		}
		c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=300")
		cn.static.ServeHTTP(c.Response(), c.Request())
		return nil
	}))
	g.GET("/login", cn.plain(cn.loginForm))
	g.POST("/login", cn.plain(cn.login))
	g.POST("/logout", cn.page(cn.logout))
	g.GET("/", cn.page(cn.dashboard))

	g.GET("/rooms", cn.page(cn.rooms))
	g.POST("/rooms", cn.page(cn.createRoom))
	g.GET("/rooms/:room", cn.page(cn.room))
	g.POST("/rooms/:room", cn.page(cn.updateRoom))
	g.POST("/rooms/:room/preview", cn.page(cn.previewRoom))
	g.POST("/rooms/:room/terminate", cn.page(cn.terminateRoom))
	g.POST("/rooms/:room/event-types", cn.page(cn.createEventType))
	g.GET("/rooms/:room/event-types/:eventType", cn.page(cn.eventType))
	g.POST("/rooms/:room/event-types/:eventType/versions", cn.page(cn.createVersion))
	g.GET("/rooms/:room/publish", cn.page(cn.publishForm))
	g.POST("/rooms/:room/publish", cn.page(cn.publish))
	g.GET("/rooms/:room/messages/:event", cn.page(cn.timeline))

	g.GET("/rooms/:room/subscriptions/new", cn.page(cn.newSubscription))
	g.POST("/rooms/:room/subscriptions", cn.page(cn.createSubscription))
	g.GET("/rooms/:room/subscriptions/:sub", cn.page(cn.subscription))
	g.POST("/rooms/:room/subscriptions/:sub", cn.page(cn.updateSubscription))
	g.GET("/rooms/:room/subscriptions/:sub/edit", cn.page(cn.editSubscription))
	g.POST("/rooms/:room/subscriptions/:sub/status", cn.page(cn.setSubscriptionStatus))
	g.POST("/rooms/:room/subscriptions/:sub/approve", cn.page(cn.approveSubscription))
	g.POST("/rooms/:room/subscriptions/:sub/reject", cn.page(cn.rejectSubscription))
	g.POST("/rooms/:room/subscriptions/:sub/test", cn.page(cn.testSubscription))
	g.POST("/rooms/:room/subscriptions/:sub/circuit-reset", cn.page(cn.resetCircuit))
	g.POST("/rooms/:room/subscriptions/:sub/rotate", cn.page(cn.rotateSecret))
	g.GET("/rooms/:room/subscriptions/:sub/dead-letters", cn.page(cn.deadLetters))
	g.POST("/rooms/:room/subscriptions/:sub/dead-letters", cn.page(cn.actOnDeadLetters))
	g.GET("/rooms/:room/subscriptions/:sub/dead-letters/:dl", cn.page(cn.deadLetter))

	g.GET("/messages", cn.page(cn.messages))
	g.GET("/api-keys", cn.page(cn.keys))
	g.POST("/api-keys", cn.page(cn.createKey))
	g.POST("/api-keys/:key/revoke", cn.page(cn.revokeKey))
	g.RouteNotFound("/*", cn.plain(func(c echo.Context) error {
		return cn.renderError(c, http.StatusNotFound, "There is no such page.")
	}))
}

// Run samples the dashboard's counters every few seconds and purges ended
// sessions every minute, until ctx ends.
func (cn *Console) Run(ctx context.Context) {
	sample := time.NewTicker(sampleEvery)
	defer sample.Stop()
	purge := time.NewTicker(time.Minute)
	defer purge.Stop()
	cn.sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sample.C:
			cn.sample()
		case <-purge.C:
			cn.Purge(ctx)
		}
	}
}

// Purge deletes the sessions that ended: ran out, sat idle, or lost their key.
func (cn *Console) Purge(ctx context.Context) {
	now := cn.now()
	n, err := cn.sessions.PurgeSessions(ctx, PurgeQuery{Now: now, IdleBefore: now.Add(-cn.cfg.IdleTimeout)})
	switch {
	case err != nil && ctx.Err() == nil:
		cn.logger.WarnContext(ctx, "console: purging ended sessions failed", slog.Any("error", err))
	case n > 0:
		cn.logger.DebugContext(ctx, "console: ended sessions purged", slog.Int("sessions", n))
	}
}

func (cn *Console) sample() {
	if cn.totals != nil {
		cn.samples.add(cn.now(), cn.totals())
	}
}

// contentSecurityPolicy allows nothing inline and nothing from elsewhere.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'"

// secureHeaders go on every console answer.
func secureHeaders(c echo.Context) {
	h := c.Response().Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if !strings.HasPrefix(c.Request().URL.Path, "/console/static/") {
		h.Set(echo.HeaderCacheControl, "no-store")
	}
}

// plain wraps a handler that needs no session: security headers, and
// errors rendered as a page rather than the API's problem documents.
func (cn *Console) plain(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		secureHeaders(c)
		if err := h(c); err != nil {
			return cn.fail(c, err)
		}
		return nil
	}
}

// request is one console request of a signed-in browser.
type request struct {
	echo.Context
	cn      *Console
	api     *client
	sid     string // the session id from the cookie
	session Session
	me      me
}

// me is who the session's key is.
type me struct {
	ID, Name, Role, Subject string
	// Open: the service runs without API keys, and anyone may do anything.
	Open bool
}

// Admin reports whether the key may do anything.
func (m me) Admin() bool { return m.Open || m.Role == api.RoleAdmin }

// page wraps the handler of a signed-in page: it finds the session, ends
// it when it ran out, checks a POST's origin and CSRF token, asks the API
// who the key is (which fails once the key is revoked or expired), and
// renders what the handler returns as an error.
func (cn *Console) page(h func(*request) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		secureHeaders(c)
		r, err := cn.begin(c)
		if err != nil {
			return cn.fail(c, err)
		}
		if err := h(r); err != nil {
			return cn.fail(c, err)
		}
		return nil
	}
}

// errSignIn sends the browser to the sign-in page; why says what ended.
type errSignIn struct{ why string }

func (e errSignIn) Error() string { return "sign in: " + e.why }

// errForbidden is a refused POST: another origin, or no valid CSRF token.
var errForbidden = errors.New("this form was not sent from this console's own page, or its page is too old; reload the page and try again")

func (cn *Console) begin(c echo.Context) (*request, error) {
	ck, err := c.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return nil, errSignIn{}
	}
	r := &request{Context: c, cn: cn, sid: ck.Value}
	ctx := c.Request().Context()
	r.session, err = cn.sessions.Session(ctx, hashID(ck.Value))
	if errors.Is(err, ErrSessionNotFound) {
		return nil, errSignIn{why: "ended"}
	}
	if err != nil {
		return nil, err
	}
	now := cn.now()
	switch {
	case !now.Before(r.session.ExpiresAt):
		return nil, cn.end(r, "expired")
	case now.Sub(r.session.SeenAt) >= cn.cfg.IdleTimeout:
		return nil, cn.end(r, "idle")
	}
	if c.Request().Method == http.MethodPost {
		if err := cn.origins.Check(c.Request()); err != nil {
			return nil, errForbidden
		}
		if !sameToken(c.FormValue("csrf"), csrfToken(r.sid)) {
			return nil, errForbidden
		}
	}
	// Touched often enough that a session in use never looks idle, however
	// short the idle timeout.
	if now.Sub(r.session.SeenAt) >= min(touchEvery, cn.cfg.IdleTimeout/4) {
		if err := cn.sessions.TouchSession(ctx, r.session.IDHash, now); err != nil {
			return nil, err
		}
	}
	r.api = cn.newClient(c, r.session.KeyID)
	var k auth.KeyResponse
	err = r.api.do(http.MethodGet, "/v1/api-keys/current", nil, &k)
	switch p := problemOf(err); {
	case err == nil:
		r.me = me{ID: k.ID, Name: k.Name, Role: k.Role, Subject: k.Subject}
	case p != nil && p.Status == http.StatusNotFound:
		r.me = me{Open: true, Name: "anyone", Role: api.RoleAdmin} // authentication is off
	default:
		return nil, err // a 401 ends the session in fail
	}
	return r, nil
}

// end deletes r's session and sends the browser to sign in again.
func (cn *Console) end(r *request, why string) error {
	if err := cn.sessions.DeleteSession(r.Request().Context(), r.session.IDHash); err != nil {
		return err
	}
	return errSignIn{why: why}
}

// fail answers err: a sign-in, a refusal, the API's problem, or a 500.
func (cn *Console) fail(c echo.Context, err error) error {
	var signIn errSignIn
	p := problemOf(err)
	switch {
	case p != nil && p.Status == http.StatusUnauthorized:
		// The key was revoked or expired: its session ends with it.
		if ck, cerr := c.Cookie(sessionCookie); cerr == nil {
			_ = cn.sessions.DeleteSession(c.Request().Context(), hashID(ck.Value))
		}
		signIn.why = "key"
		fallthrough
	case errors.As(err, &signIn):
		c.SetCookie(cookie(c.Request(), sessionCookie, "", cookiePath, -1))
		q := url.Values{}
		if signIn.why != "" {
			q.Set("ended", signIn.why)
		}
		if c.Request().Method == http.MethodGet && c.Request().URL.Path != "/console/" {
			q.Set("next", c.Request().URL.RequestURI())
		}
		to := "/console/login"
		if len(q) > 0 {
			to += "?" + q.Encode()
		}
		return c.Redirect(http.StatusSeeOther, to)
	case errors.Is(err, errForbidden):
		return cn.renderError(c, http.StatusForbidden, err.Error())
	case p != nil:
		return cn.renderError(c, p.Status, p.Detail)
	}
	cn.logger.ErrorContext(c.Request().Context(), "console request failed", slog.String("path", c.Request().URL.Path),
		slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)), slog.Any("error", err))
	return cn.renderError(c, http.StatusInternalServerError, "The console could not complete the request; it has been logged.")
}

// sampler keeps the last sampleKeep samples of the process's counters.
type sampler struct {
	mu      sync.Mutex
	samples []sample
}

type sample struct {
	At time.Time
	Totals
}

const (
	sampleEvery = 5 * time.Second
	sampleKeep  = 61 // five minutes
)

func (s *sampler) add(at time.Time, t Totals) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, sample{At: at, Totals: t})
	if len(s.samples) > sampleKeep {
		s.samples = append(s.samples[:0], s.samples[len(s.samples)-sampleKeep:]...)
	}
}

func (s *sampler) all() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}
