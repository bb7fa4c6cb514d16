package console

import (
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
)

// loginTTL bounds how long a sign-in form may stay open.
const loginTTL = time.Hour

// endedBecause says why a browser was sent back to sign in.
var endedBecause = map[string]string{
	"expired":    "Your session reached its maximum lifetime. Sign in again.",
	"idle":       "Your session ended after a time without use. Sign in again.",
	"key":        "The API key of your session was revoked or expired. Sign in with a valid key.",
	"ended":      "Your session has ended. Sign in again.",
	"signed-out": "You signed out.",
}

type loginData struct {
	Form   *form
	Notice string
	Next   string
	Open   bool // the service runs without API keys
}

func (cn *Console) loginForm(c echo.Context) error {
	token := ""
	if ck, err := c.Cookie(loginCookie); err == nil && len(ck.Value) == 43 {
		token = ck.Value // another tab's form stays valid
	} else {
		token = newSecret()
	}
	c.SetCookie(cookie(c.Request(), loginCookie, token, "/console/login", loginTTL))
	d := loginData{Form: newForm(nil), Notice: endedBecause[c.QueryParam("ended")], Next: safeNext(c.QueryParam("next")), Open: cn.open(c)}
	return cn.render(c, http.StatusOK, "login", view{Title: "Sign in", CSRF: token, Data: d})
}

// open reports whether the API runs without keys: it answers who an
// anonymous caller is with 404 instead of 401.
func (cn *Console) open(c echo.Context) bool {
	cl := cn.newClient(c, uuid.Nil)
	p := problemOf(cl.do(http.MethodGet, "/v1/api-keys/current", nil, nil))
	return p != nil && p.Status == http.StatusNotFound
}

func (cn *Console) login(c echo.Context) error {
	if err := cn.origins.Check(c.Request()); err != nil {
		return errForbidden
	}
	ck, err := c.Cookie(loginCookie)
	if err != nil || !sameToken(c.FormValue("csrf"), ck.Value) {
		return errForbidden
	}
	f := newForm(nil)
	next := safeNext(c.FormValue("next"))
	cl := cn.newClient(c, uuid.Nil)
	cl.bearer = strings.TrimSpace(c.FormValue("apiKey"))
	var k auth.KeyResponse
	err = cl.do(http.MethodGet, "/v1/api-keys/current", nil, &k)
	var id uuid.UUID
	switch p := problemOf(err); {
	case err == nil:
		if id, err = uuid.Parse(k.ID); err != nil {
			return err
		}
	case p != nil && p.Status == http.StatusNotFound:
		// The service runs without keys: the session has none.
	case p != nil && p.Status == http.StatusUnauthorized:
		f.Problem = &api.Problem{Status: p.Status, Detail: p.Detail, Errors: []api.FieldError{{Field: "apiKey", Message: p.Detail}}}
		return cn.render(c, http.StatusUnauthorized, "login", view{Title: "Sign in", CSRF: ck.Value, Data: loginData{Form: f, Next: next}})
	default:
		return err
	}
	if old, err := c.Cookie(sessionCookie); err == nil {
		if err := cn.sessions.DeleteSession(c.Request().Context(), hashID(old.Value)); err != nil {
			return err
		}
	}
	sid, now := newSecret(), cn.now()
	s := Session{IDHash: hashID(sid), KeyID: id, CreatedAt: now, SeenAt: now, ExpiresAt: now.Add(cn.cfg.MaxLifetime)}
	if err := cn.sessions.CreateSession(c.Request().Context(), s); err != nil {
		return err
	}
	c.SetCookie(cookie(c.Request(), sessionCookie, sid, cookiePath, cn.cfg.MaxLifetime))
	c.SetCookie(cookie(c.Request(), loginCookie, "", "/console/login", -1))
	if next == "" {
		next = "/console/"
	}
	return c.Redirect(http.StatusSeeOther, next)
}

func (cn *Console) logout(r *request) error {
	if err := cn.sessions.DeleteSession(r.Request().Context(), r.session.IDHash); err != nil {
		return err
	}
	r.SetCookie(cookie(r.Request(), sessionCookie, "", cookiePath, -1))
	return r.Redirect(http.StatusSeeOther, "/console/login?ended=signed-out")
}

// safeNext keeps a page of the console to go back to after signing in, and
// nothing else (no other site, no protocol-relative URL).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/console/") || strings.HasPrefix(next, "/console/login") ||
		strings.ContainsAny(next, "\\\r\n") || strings.Contains(next, "//") {
		return ""
	}
	return next
}
