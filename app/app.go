// Package app builds one process of the service from its configuration (the
// HTTP API, the outbox relay and purge, the push dispatcher, the pull lease
// reaper) and runs it, stopping the parts in order.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/console"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/pull"
	"github.com/roomhub/messaging-api/push"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
)

// Role is what one process runs.
type Role string

const (
	// Serve runs the HTTP API and the push dispatcher.
	Serve Role = "serve"
	// API runs the HTTP API (with the outbox relay and purge).
	API Role = "api"
	// Dispatcher runs the push dispatcher (with the outbox relay, which
	// sends the copies it parks and reschedules) and the health endpoints.
	Dispatcher Role = "dispatcher"
)

// Commands are the process commands Main runs.
var Commands = []string{string(Serve), string(API), string(Dispatcher), "migrate"}

// Main reads the configuration (flags from args), and runs command (one of
// Commands) until ctx is done.
func Main(ctx context.Context, command string, args []string, getenv func(string) string, stderr io.Writer, opts ...Option) error {
	cfg, err := LoadConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := NewLogger(cfg, stderr)
	logger.Info("starting", slog.String("command", command), slog.Any("config", cfg.LogValue()), slog.String("gc", gcSettings()))

	db, err := store.Open(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return err
	}
	defer db.Close()
	if command == "migrate" {
		n, err := db.Migrate(ctx, logger)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		logger.Info("migrations done", slog.Int("applied", n))
		return nil
	}
	role := Role(command)
	if role != Serve && role != API && role != Dispatcher {
		return fmt.Errorf("unknown command %q", command)
	}
	if cfg.MigrateOnStart {
		if _, err := db.Migrate(ctx, logger); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if err := agreePushRule(ctx, cfg, db); err != nil {
		return err
	}
	if cfg.PushAuth.Key.ID() == "" && strings.HasPrefix(cfg.DatabaseURL, "sqlite:") {
		if cfg.PushAuth.Key, err = embeddedPushAuthKey(cfg.DatabaseURL, logger); err != nil {
			return err
		}
	}
	if err := preparePushAuth(ctx, cfg, db.WithKeyring(cfg.PushAuth.Keyring()), logger); err != nil {
		return err
	}
	if role != Dispatcher {
		if err := prepareAuth(ctx, cfg, NewKeyService(db, rooms.NewService(rooms.Deps{Store: db.Rooms(), Cleanup: NoCleanup{}, Now: Clock})), logger, stderr); err != nil {
			return err
		}
	}
	if role != Serve && broker.IsEmbedded(cfg.BrokerURL) {
		// Its copies would stay in this process: an api's would never
		// reach a dispatcher, a dispatcher would never get any.
		return fmt.Errorf("%s: the embedded broker lives inside one process, so it cannot join an api to a dispatcher: "+
			"set BROKER_URL to a shared broker (stomp://…), or run serve", role)
	}
	o := buildOptions(opts)
	if o.tracer == nil {
		tp, stop, err := startTracing(ctx, cfg.Tracing, role)
		if err != nil {
			return err
		}
		// After Run: every span of the process has ended by then.
		defer flushTracing(stop, logger)
		if tp != nil {
			otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
				logger.Warn("tracing: exporting spans failed", slog.Any("error", err))
			}))
		}
		opts = append(opts, WithTracerProvider(tp))
	}
	b, err := broker.Open(ctx, cfg.BrokerURL, logger)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	defer b.Close()
	return New(cfg, role, db, b, logger, opts...).Run(ctx)
}

// Option changes how Main, New or NewHandler build a process.
type Option func(*options)

type options struct {
	// tracer makes the process's spans; nil: tracing is off.
	tracer trace.TracerProvider
}

// WithTracerProvider makes the process's spans with tp instead of what the
// OTEL_* settings install (nil: none), as tests do with an in-memory
// exporter; the caller flushes it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// flushTracing exports the spans still buffered and stops the exporters,
// waiting flushTimeout at most.
func flushTracing(stop func(context.Context) error, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if err := stop(ctx); err != nil {
		logger.Warn("tracing: flushing spans at shutdown failed", slog.Any("error", err))
	}
}

// App is one process: its HTTP handler and the workers its role runs.
type App struct {
	cfg     Config
	logger  *slog.Logger
	broker  broker.Broker
	metrics *metrics.Metrics
	handler *echo.Echo

	relay   *outbox.Relay
	purger  *outbox.Purger   // nil without the API
	console *console.Console // nil without the API or when turned off
	push    *push.Dispatcher // nil unless the role delivers
	pull    *pull.Service    // nil without the API
}

// New builds the process of role from cfg over db and b.
func New(cfg Config, role Role, db *store.DB, b broker.Broker, logger *slog.Logger, opts ...Option) *App {
	db = db.WithKeyring(cfg.PushAuth.Keyring())
	o := buildOptions(opts)
	m := metrics.New(metrics.Options{RoomLabel: cfg.Metrics.RoomLabel})
	relay := outbox.NewRelay(cfg.Outbox.Relay, outbox.Deps{
		Store: db.Events(), Broker: b, Vacuum: db.Events(), Now: Clock, Logger: logger, Observer: m, Tracer: o.tracer,
	})
	a := &App{cfg: cfg, logger: logger, broker: b, metrics: m, relay: relay}
	withAPI := role != Dispatcher
	if withAPI {
		a.purger = outbox.NewPurger(db.Events(), cfg.Outbox.Retention, cfg.Outbox.PurgeInterval, Clock, logger)
	}
	if role != API {
		a.push = push.New(cfg.Push, push.Deps{
			Broker: b, Directory: db.Push(), Log: db.Push(), Batches: db.Push(),
			Client: push.NewHTTPClient(cfg.Push.Timeout, cfg.PushTarget), Now: Clock, Logger: logger,
			Observer: m, Ping: db.Ping, PingEvery: time.Second, OnParkedReleased: relay.Notify,
			Circuits: db.Push(), Pace: db.Push(), Tracer: o.tracer,
		})
	}
	a.handler, a.pull = NewHandler(cfg, logger, db, b, relay, withAPI, m, opts...)
	if withAPI && cfg.Console.Enabled {
		a.console = NewConsole(cfg, logger, db, a.handler, m)
	}
	return a
}

// Handler is the process's HTTP API (only the health endpoints and
// /metrics for a dispatcher).
func (a *App) Handler() http.Handler { return a.handler }

// Run runs the workers and serves HTTP on cfg.HTTP.Addr until ctx is done,
// then stops in order: the HTTP server drains (the dispatcher finishing its
// in-flight deliveries meanwhile), then the relay, purge and reaper stop, so
// that what was accepted during shutdown is still relayed. A broker whose
// settings break the delivery contract stops the process with that error
// once it is reachable; the API serves meanwhile.
func (a *App) Run(ctx context.Context) error {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)

	// The relay starts at once (it also dead-letters what expires while the
	// broker is away); the broker creates each queue before its first send
	// until Prepare says it need not. The dispatcher starts once the push
	// queue exists and the settings are checked.
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		stopWork()
		wg.Wait()
	}()
	prepared := make(chan struct{})
	wg.Go(func() {
		if err := prepareBroker(workCtx, a.broker, a.cfg.PushQueue, a.logger); err != nil {
			if errors.Is(err, broker.ErrMisconfigured) {
				fail(err)
			}
			return
		}
		close(prepared)
	})
	wg.Go(func() { a.relay.Run(workCtx) })
	wg.Go(func() { a.metrics.WatchBroker(workCtx, a.broker.Connected, time.Second) })
	if a.purger != nil {
		wg.Go(func() { a.purger.Run(workCtx) })
	}
	if a.pull != nil {
		wg.Go(func() { a.pull.RunReaper(workCtx, 500*time.Millisecond) })
	}
	if a.console != nil {
		a.logger.Info("web console", slog.String("url", ConsoleURL(a.cfg.HTTP.Addr)))
		wg.Go(func() { a.console.Run(workCtx) })
	}
	if a.push != nil {
		// The dispatcher stops with ctx: it finishes in-flight deliveries
		// while the HTTP server drains.
		wg.Go(func() {
			if !waitClosed(ctx, prepared) {
				return
			}
			if err := a.push.Run(ctx); err != nil {
				a.logger.Error("push dispatcher failed", slog.Any("error", err))
			}
		})
	}
	err := serve(ctx, a.cfg, a.logger, a.handler)
	a.relay.Notify()
	if cause := context.Cause(ctx); errors.Is(cause, broker.ErrMisconfigured) {
		return cause
	}
	return err
}

// serve runs srv until ctx is done, then gives in-flight requests
// ShutdownTimeout to finish.
func serve(ctx context.Context, cfg Config, logger *slog.Logger, handler http.Handler) error {
	srv := &http.Server{
		Addr:              cfg.HTTP.Addr,
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       2 * time.Minute,

		// Above api.MaxHeaderBytes, so that the API answers a large header
		// with problem details; past this one net/http answers in plain text.
		MaxHeaderBytes: api.ServerMaxHeaderBytes,
	}
	errc := make(chan error, 1)
	go func() {
		logger.Info("http listening", slog.String("addr", cfg.HTTP.Addr))
		errc <- srv.ListenAndServe()
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", slog.Duration("timeout", cfg.HTTP.ShutdownTimeout))
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	logger.Info("stopped")
	return nil
}

// prepareBroker creates the push queue and checks the broker's settings
// (broker.Broker.Prepare) for room addresses and the push queue's address,
// retrying while the broker is away: the API accepts publishes into the
// outbox meanwhile. It fails on a setting the service cannot work with
// (broker.ErrMisconfigured), or when ctx ends first.
func prepareBroker(ctx context.Context, b broker.Broker, pushQueue broker.Destination, logger *slog.Logger) error {
	addresses := []string{rooms.Address(uuid.Nil), pushQueue.Address}
	for wait := time.Second; ; wait = min(wait*2, time.Minute) {
		err := b.EnsureQueue(ctx, pushQueue)
		var warnings []string
		if err == nil {
			warnings, err = b.Prepare(ctx, addresses)
		}
		for _, w := range warnings {
			logger.WarnContext(ctx, "broker: "+w)
		}
		switch {
		case err == nil:
			logger.InfoContext(ctx, "broker: prepared", slog.String("push_queue", pushQueue.FQQN()))
			return nil
		case errors.Is(err, broker.ErrMisconfigured):
			logger.ErrorContext(ctx, "broker: settings break the delivery contract; stopping", slog.Any("error", err))
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		logger.WarnContext(ctx, "broker: not prepared yet; retrying", slog.String("queue", pushQueue.FQQN()),
			slog.Any("error", err), slog.Duration("retry_in", wait))
		if !sleepCtx(ctx, wait) {
			return ctx.Err()
		}
	}
}

// waitClosed waits for ch to close; false when ctx ends first.
func waitClosed(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
