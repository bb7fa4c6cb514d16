package main

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/pull"
	"github.com/roomhub/messaging-api/push"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/subscriptions"
)

// brokerConn is what the HTTP server needs of the broker.
type brokerConn interface {
	subscriptions.Queues
	pull.Consumer
	Connected() bool
}

// relayState is what the HTTP server needs of the outbox relay.
type relayState interface {
	publish.Notifier
	Healthy() error
}

// newServer builds the echo server; without withAPI (a dispatcher-only
// process) it serves only the health endpoints.
func newServer(cfg Config, logger *slog.Logger, db *store.DB, b brokerConn, relay relayState, withAPI bool) *echo.Echo {
	e, _ := newServerWithPull(cfg, logger, db, b, relay, withAPI)
	return e
}

// newServerWithPull is newServer that also returns the pull service, whose
// lease reaper the caller runs (nil without the API).
func newServerWithPull(cfg Config, logger *slog.Logger, db *store.DB, b brokerConn, relay relayState, withAPI bool) (*echo.Echo, *pull.Service) {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = api.ErrorHandler(logger)
	e.Use(middleware.RequestID())
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true}))
	e.Use(middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogMethod: true, LogURIPath: true, LogStatus: true, LogLatency: true, LogRequestID: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			logger.LogAttrs(c.Request().Context(), slog.LevelDebug, "request",
				slog.String("method", v.Method), slog.String("path", v.URIPath), slog.Int("status", v.Status),
				slog.Duration("latency", v.Latency), slog.String("request_id", v.RequestID))
			return nil
		},
	}))
	e.Use(middleware.BodyLimit(formatBytes(cfg.HTTP.BodyLimit)))

	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/readyz", readiness(db, b, relay))
	if !withAPI {
		return e, nil
	}

	roomSvc := rooms.NewService(db.Rooms(), subscriptions.QueueCleanup{Queues: b, Logger: logger}, clock)
	subSvc := subscriptions.NewService(db.Subscriptions(), roomSvc, b, clock, logger)
	pullSvc := pull.NewService(subSvc, db.Push(), b, db.Leases(), relay, clock, rand.Float64, logger)
	v1 := e.Group("/v1")
	rooms.Routes(v1, roomSvc)
	subscriptions.Routes(v1, subSvc)
	publish.Routes(v1, publish.NewService(roomSvc, db.Subscriptions(), db.Events(), relay, cfg.PushQueue, clock))
	push.NewDeadLetters(db.Push(), subSvc, relay, cfg.PushQueue, clock).Routes(v1)
	retry.Routes(v1, subSvc)
	pullSvc.Routes(v1)
	return e, pullSvc
}

// clock is the service's time: UTC, truncated to what PostgreSQL stores
// (microseconds), so a value answered at creation equals the one read back.
func clock() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

type readyResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// readiness answers 200 when the database answers, the broker is connected
// and the outbox relay's last round worked, else 503 naming what is down.
func readiness(db *store.DB, b brokerConn, relay relayState) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		resp := readyResponse{Status: "ready", Checks: map[string]string{"database": "ok", "broker": "ok", "outbox": "ok"}}
		if relay.Healthy() != nil {
			resp.Status, resp.Checks["outbox"] = "unavailable", "failing"
		}
		if err := db.Ping(ctx); err != nil {
			resp.Status, resp.Checks["database"] = "unavailable", "unreachable"
		}
		if !b.Connected() {
			resp.Status, resp.Checks["broker"] = "unavailable", "disconnected"
		}
		code := http.StatusOK
		if resp.Status != "ready" {
			code = http.StatusServiceUnavailable
		}
		return c.JSON(code, resp)
	}
}

// formatBytes writes n in the unit syntax echo's BodyLimit parses.
func formatBytes(n int64) string {
	return strconv.FormatInt(n, 10) + "B"
}
