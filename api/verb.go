package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

const verbKey = "api.verb"

// Verbs is the middleware of the custom methods of one resource, POST
// .../{id}:verb (Google AIP-136). echo routes no literal after a parameter,
// so such a route is declared on the parameter, which arrives as "id:verb":
// Verbs leaves the parameter the bare id, for the route's authorization and
// handler alike, and the verb for Verb. A request whose last segment has
// another verb gets 404 (no such resource); one without a verb gets 405, as
// if the route were not there.
func Verbs(param string, verbs ...string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			raw := c.Param(param)
			i := strings.LastIndexByte(raw, ':')
			id, verb := raw[:max(i, 0)], raw[i+1:]
			switch {
			case i < 0:
				return methodNotAllowed(c)
			case !slices.Contains(verbs, verb):
				return echo.ErrNotFound
			}
			values := c.ParamValues()
			for i, name := range c.ParamNames() {
				if name == param && i < len(values) {
					values[i] = id
				}
			}
			c.SetParamValues(values...)
			c.Set(verbKey, verb)
			return next(c)
		}
	}
}

// Verb is the custom method Verbs found on the request.
func Verb(c echo.Context) string {
	v, _ := c.Get(verbKey).(string)
	return v
}

// methodNotAllowed answers 405 with the Allow header echo's router would
// have sent: the other methods of the route's path.
func methodNotAllowed(c echo.Context) error {
	var allow []string
	for _, r := range c.Echo().Routes() {
		if r.Path == c.Path() && r.Method != c.Request().Method && !slices.Contains(allow, r.Method) {
			allow = append(allow, r.Method)
		}
	}
	slices.Sort(allow)
	c.Response().Header().Set(echo.HeaderAllow, strings.Join(allow, ", "))
	return echo.NewHTTPError(http.StatusMethodNotAllowed, http.StatusText(http.StatusMethodNotAllowed))
}
