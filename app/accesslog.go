package app

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/loglimit"
)

// A client sending a flood of bad requests gets rejectedLines INFO lines per
// rejectedInterval; the rest are counted in one summary line. The bound on
// clients remembered keeps memory flat under many addresses.
const (
	rejectedLines    = 20
	rejectedInterval = 10 * time.Second
	rejectedClients  = 10_000
)

// errorKey is where the error handler leaves the error it answered, for the
// access log line, which is the only line about a request.
const errorKey = "access_log_error"

// recordError wraps the HTTP error handler so that the error it answers
// reaches the access log whichever middleware handed it over.
func recordError(h echo.HTTPErrorHandler) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Get(errorKey) == nil {
			c.Set(errorKey, err)
		}
		h(err, c)
	}
}

// panicError keeps a recovered panic's stack with it, for the access log.
func panicError(_ echo.Context, err error, stack []byte) error {
	return fmt.Errorf("panic: %w\n%s", err, stack)
}

// probe reports the routes that load balancers and Prometheus call every few
// seconds: logged at DEBUG so that they do not drown the rest.
func probe(route string) bool {
	return route == "/healthz" || route == "/readyz" || route == "/metrics"
}

// accessLog writes one line per request once it is answered: INFO; DEBUG for
// the probes; ERROR for a 5xx with an error. A client's 4xx lines are rate
// limited, with a summary line for what was held back.
func accessLog(logger *slog.Logger, now func() time.Time) echo.MiddlewareFunc {
	rejected := loglimit.New(rejectedLines, rejectedInterval, rejectedClients, func(s loglimit.Summary[string]) {
		client := s.Key
		if s.Others {
			client = "others"
		}
		logger.Info("http: more rejected requests not logged", slog.String("remote_ip", client),
			slog.Int("not_logged", s.Suppressed), slog.Duration("in_the_last", now().Sub(s.Since).Round(time.Second)))
	})
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := now()
			if err := next(c); err != nil {
				c.Error(err) // here, so that the status logged is the one answered
			}
			req, res := c.Request(), c.Response()
			route := c.Path()
			if route == "" || res.Status == http.StatusNotFound && route == "/*" {
				route = "unmatched"
			}
			err, _ := c.Get(errorKey).(error)
			level := slog.LevelInfo
			switch {
			case res.Status >= 500 && err != nil:
				level = slog.LevelError
			case probe(route):
				level = slog.LevelDebug
			}
			ctx := req.Context()
			if !logger.Enabled(ctx, level) {
				return nil
			}
			ip := c.RealIP()
			if res.Status >= 400 && res.Status < 500 && level == slog.LevelInfo && !rejected.Allow(ip, start) {
				return nil
			}
			attrs := make([]slog.Attr, 0, 11)
			attrs = append(attrs,
				slog.String("method", req.Method), slog.String("route", route), slog.Int("status", res.Status),
				slog.Duration("latency", now().Sub(start)), slog.String("request_id", res.Header().Get(echo.HeaderXRequestID)),
				slog.Int64("bytes_out", res.Size), slog.String("remote_ip", ip))
			if caller := api.CallerFrom(ctx); caller != nil {
				attrs = append(attrs, slog.String("api_key_id", caller.KeyID.String()))
			}
			if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
				// Tracing is on: the request's span.
				attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
			}
			switch {
			case err == nil:
			case res.Status >= 500:
				attrs = append(attrs, slog.Any("error", err))
			default:
				attrs = append(attrs, slog.String("error", err.Error()))
			}
			logger.LogAttrs(ctx, level, "request", attrs...)
			return nil
		}
	}
}
