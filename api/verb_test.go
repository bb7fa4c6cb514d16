package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

// TestVerbs: a custom method's verb is cut off the parameter before the
// rest of the route sees it; another verb is a 404, none a 405 listing the
// path's other methods.
func TestVerbs(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.HTTPErrorHandler = ErrorHandler(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var seen string // what the middleware after Verbs saw
	after := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			seen = c.Param("id")
			return next(c)
		}
	}
	e.GET("/things/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.DELETE("/things/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.POST("/things/:id", func(c echo.Context) error {
		return c.String(http.StatusOK, c.Param("owner")+"/"+c.Param("id")+" "+Verb(c))
	}, Verbs("id", "test", "ping"), after)
	e.POST("/owners/:owner/things/:id", func(c echo.Context) error {
		return c.String(http.StatusOK, c.Param("owner")+"/"+c.Param("id")+" "+Verb(c))
	}, Verbs("id", "test"))
	for _, tc := range []struct {
		path   string
		status int
		body   string
		allow  string
	}{
		{"/things/42:test", http.StatusOK, "/42 test", ""},
		{"/things/42:ping", http.StatusOK, "/42 ping", ""},
		{"/things/urn:uuid:42:test", http.StatusOK, "/urn:uuid:42 test", ""},
		{"/owners/o:1/things/42:test", http.StatusOK, "o:1/42 test", ""},
		{"/things/42:nope", http.StatusNotFound, "", ""},
		{"/things/42:", http.StatusNotFound, "", ""},
		{"/things/42", http.StatusMethodNotAllowed, "", "DELETE, GET"},
	} {
		seen = ""
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, tc.path, nil))
		if rec.Code != tc.status || (tc.body != "" && rec.Body.String() != tc.body) || rec.Header().Get("Allow") != tc.allow {
			t.Errorf("POST %s: %d %q Allow %q; want %d %q Allow %q", tc.path, rec.Code, rec.Body, rec.Header().Get("Allow"), tc.status, tc.body, tc.allow)
		}
		if tc.path == "/things/42:test" && seen != "42" {
			t.Errorf("the next middleware saw id %q, want 42", seen)
		}
	}
}
