package app

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/pull"
	"github.com/roomhub/messaging-api/push"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/subscriptions"
)

// BrokerConn is what the HTTP server needs of the broker.
type BrokerConn interface {
	subscriptions.Queues
	pull.Consumer
	Connected() bool
}

// RelayState is what the HTTP server needs of the outbox relay.
type RelayState interface {
	publish.HandOff
	Healthy() error
}

// NewHandler builds the HTTP server of a process recording into m, which
// /metrics serves; without withAPI (a dispatcher) it serves only the health
// endpoints and /metrics. It returns the pull service too, whose lease reaper
// the caller runs (nil without the API).
func NewHandler(cfg Config, logger *slog.Logger, db *store.DB, b BrokerConn, relay RelayState, withAPI bool, m *metrics.Metrics, opts ...Option) (*echo.Echo, *pull.Service) {
	db = db.WithKeyring(cfg.PushAuth.Keyring())
	o := buildOptions(opts)
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	// The access log's line is the one line about a request, error included:
	// the error handler answers and leaves the error to it.
	e.HTTPErrorHandler = recordError(api.ErrorHandler(slog.New(slog.DiscardHandler)))
	e.JSONSerializer = api.JSONSerializer{}
	e.Use(middleware.RequestID())
	if o.tracer != nil {
		e.Use(serverSpans(o.tracer))
	}
	e.Use(accessLog(logger, time.Now))
	e.Use(api.LimitHeader(api.MaxHeaderBytes))
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableStackAll: true, LogErrorFunc: panicError}))
	e.Use(m.Middleware())
	e.Use(middleware.BodyLimit(formatBytes(cfg.HTTP.BodyLimit)))

	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/readyz", readiness(db, b, relay))
	// Unauthenticated like the probes: keep it off the public network.
	e.GET("/metrics", echo.WrapHandler(m.Handler()))
	stats := metrics.StoreQueries{Outbox: db.Events().OutboxBacklog, Parked: db.Events().ParkedCopies, OpenCircuits: db.Push().OpenCircuits}
	if withAPI {
		stats.Leases = db.Leases().Outstanding
	}
	m.CollectStore(stats, 2*time.Second, Clock, logger)
	if !withAPI {
		return e, nil
	}
	// Where the type URI of a problem leads: unauthenticated, like the
	// probes, as it documents the API and holds nothing of its data.
	e.GET(api.ProblemTypePrefix+":code", api.ProblemTypePage)

	// A change committed through this process empties the publish cache
	// before its answer leaves, so a client that publishes on receiving the
	// answer finds the change. The cache reads rooms through roomSvc, so it
	// is made after it; nothing changes before requests are served.
	var catalog *publish.Cache
	invalidate := func(uuid.UUID) { catalog.Invalidate() }
	roomSvc := rooms.NewService(rooms.Deps{
		Store: db.Rooms(), Cleanup: subscriptions.QueueCleanup{Queues: b, Logger: logger}, Now: Clock, OnChange: invalidate,
	})
	subSvc := subscriptions.NewService(subscriptions.Deps{
		Store: db.Subscriptions(), Catalog: roomSvc, Queues: b, CheckTarget: cfg.PushTarget.CheckURL, Now: Clock, Logger: logger,
		MaxPerRoom: cfg.Limits.MaxRoomSubscriptions, OnChange: invalidate,
		// Test events go out from this process, under the dispatcher's rules.
		Tester:       push.NewTester(push.NewHTTPClient(cfg.Push.Timeout, cfg.PushTarget), Clock),
		TestInterval: cfg.PushTestInterval,
	})
	catalog = publish.NewCache(roomSvc, db.Subscriptions(), cfg.CatalogCacheTTL, time.Now)
	pullSvc := pull.NewService(pull.Deps{
		Subscriptions: subSvc, Directory: db.Push(), Broker: b, Store: db.Leases(), Relay: relay,
		Now: Clock, Rand: rand.Float64, Logger: logger, Observer: m,
	})
	v1 := e.Group("/v1")
	keys := NewKeyService(db, roomSvc)
	if !cfg.Auth.Disabled {
		e.Use(under("/v1", keys.Middleware(authResolver{rooms: catalog, subs: subSvc})))
	}
	keys.Routes(v1)
	rooms.Routes(v1, roomSvc)
	subscriptions.Routes(v1, subSvc)
	pubSvc := publish.NewService(publish.Deps{
		Catalog: catalog, Subscribers: catalog, Store: db.Events(), Batches: db.Events(), Relay: relay,
		PushQueue: cfg.PushQueue, Now: Clock, Observer: m, Tracer: o.tracer,
		Limits: publish.Limits{
			MaxPayload: cfg.Limits.MaxPayload,
			Take:       auth.NewRateLimiter(cfg.Limits.PublishRate, cfg.Limits.PublishBurst, time.Now).Take,
		},
	})
	publish.Routes(v1, pubSvc)
	delivery.Routes(v1, delivery.NewService(delivery.Deps{
		Store: db.Push(), Subscriptions: subSvc, Relay: relay, PushQueue: cfg.PushQueue, Now: Clock, Observer: m,
	}))
	retry.Routes(v1, subSvc)
	pullSvc.Routes(v1)
	return e, pullSvc
}

// under applies mw to the requests for prefix and the paths below it, known
// routes or not (so that an unknown path under /v1 is authenticated before it
// is answered 404). A group's middleware (echo's Group.Use) would do the
// same, but it adds a catch-all route of the group that answers 404 where the
// router would answer 405 (a known path with another method).
func under(prefix string, mw echo.MiddlewareFunc) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		wrapped := mw(next)
		return func(c echo.Context) error {
			if p := c.Request().URL.Path; p == prefix || strings.HasPrefix(p, prefix+"/") {
				return wrapped(c)
			}
			return next(c)
		}
	}
}

// authResolver answers the authorization rules' questions about rooms and
// subscriptions.
type authResolver struct {
	// rooms is the publish cache: a publisher's key check and its publish
	// read the room once between them, and a room handed to another manager
	// changes hands within CATALOG_CACHE_TTL on the other processes.
	rooms interface {
		Room(ctx context.Context, ref string) (rooms.Room, error)
	}
	subs *subscriptions.Service
}

func (r authResolver) Room(ctx context.Context, ref string) (uuid.UUID, string, error) {
	room, err := r.rooms.Room(ctx, ref)
	return room.ID, room.ManagerIdentifier, err
}

func (r authResolver) SubscriptionOwner(ctx context.Context, roomRef, id string) (string, error) {
	_, s, err := r.subs.Get(ctx, roomRef, id)
	return s.Owner, err
}

// Clock is the service's time: UTC, truncated to what PostgreSQL stores
// (microseconds), so a value answered at creation equals the one read back.
func Clock() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

type readyResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// readiness answers 200 when the database answers, the broker is connected
// and the outbox relay's last round worked, else 503 naming what is down.
func readiness(db *store.DB, b BrokerConn, relay RelayState) echo.HandlerFunc {
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
