package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
)

// MaxHeaderBytes is the largest request header (request line and header
// fields) the API reads: LimitHeader answers a larger one with 431.
const MaxHeaderBytes = 64 << 10

// ServerMaxHeaderBytes is the http.Server's own limit: it must be above
// MaxHeaderBytes, so that LimitHeader, not net/http, answers a header between
// the two. net/http answers a header above this one before any handler runs,
// with a text/plain 431 that nothing here can change.
const ServerMaxHeaderBytes = 1 << 20

// LimitHeader answers 431 (as problem details, like every error) to a
// request whose header takes more than limit bytes, counted as they are on
// the wire.
func LimitHeader(limit int) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if n := headerSize(c.Request()); n > limit {
				c.Response().Header().Set(echo.HeaderConnection, "close")
				return echo.NewHTTPError(http.StatusRequestHeaderFieldsTooLarge,
					fmt.Sprintf("the request header has %d bytes, more than the limit of %d", n, limit))
			}
			return next(c)
		}
	}
}

// headerSize is the size of r's request line and header fields on the wire
// (HTTP/1.1 framing: "Name: value" and CRLF each).
func headerSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	n += len("Host: ") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n + 2
}

// JSONSerializer is echo's JSON serializer without HTML escaping, so that a
// payload embedded in an answer as json.RawMessage (a pull, the message log,
// a dead letter) has the bytes it was published with: encoding/json would
// rewrite <, > and & in it as \u003c, \u003e and \u0026, and U+2028 and U+2029
// as escapes.
type JSONSerializer struct{ echo.DefaultJSONSerializer }

// Serialize writes i as JSON.
func (JSONSerializer) Serialize(c echo.Context, i any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(i)
}
