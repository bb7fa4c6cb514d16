// Command messaging-api runs the room/subscription messaging service: the
// management and publishing HTTP API over PostgreSQL (or embedded SQLite) and a
// STOMP broker (or the embedded one).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/push"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tuneGC(os.LookupEnv, cgroupMemoryLimit)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "apikey" {
		err = runAPIKey(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
	} else {
		err = run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	}
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "messaging-api:", err)
		}
		os.Exit(1)
	}
}

// run parses the command line and runs one subcommand until ctx is done.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "serve", "api", "dispatcher", "migrate":
			cmd, args = args[0], args[1:]
		default:
			return fmt.Errorf("unknown command %q (want serve, api, dispatcher, migrate or apikey)", args[0])
		}
	}
	cfg, err := loadConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stderr)
	logger.Info("starting", slog.String("command", cmd), slog.Any("config", cfg.logValue()), slog.String("gc", gcSettings()))

	db, err := store.Open(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return err
	}
	defer db.Close()

	if cmd == "migrate" {
		n, err := db.Migrate(ctx, logger)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		logger.Info("migrations done", slog.Int("applied", n))
		return nil
	}
	if cfg.MigrateOnStart {
		if _, err := db.Migrate(ctx, logger); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}

	if cmd != "dispatcher" {
		keys := newKeyService(db, rooms.NewService(db.Rooms(), noCleanup{}, clock))
		if err := prepareAuth(ctx, cfg, keys, logger, stderr); err != nil {
			return err
		}
	}

	b, err := broker.Open(ctx, cfg.BrokerURL, logger)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	defer b.Close()

	relayCfg := publish.DefaultRelayConfig
	relayCfg.Poll = cfg.Outbox.Poll
	relayCfg.HandOff = cfg.Outbox.HandOff
	relayCfg.MaxRefusals = cfg.Outbox.MaxRefusals
	m := metrics.New(metrics.Options{RoomLabel: cfg.Metrics.RoomLabel})
	relay := publish.NewRelay(db.Events(), b, relayCfg, clock, logger).Observe(m)
	purger := publish.NewPurger(db.Events(), cfg.Outbox.Retention, cfg.Outbox.PurgeInterval, clock, logger)

	// Background workers stop after the HTTP server, so requests accepted
	// during shutdown still get relayed.
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { relay.Run(workCtx) })
	wg.Go(func() { ensureQueue(workCtx, b, cfg.PushQueue, logger) })
	wg.Go(func() { m.WatchBroker(workCtx, b.Connected, time.Second) })
	withAPI := cmd != "dispatcher"
	if withAPI {
		wg.Go(func() { purger.Run(workCtx) })
	}
	if cmd == "serve" || cmd == "dispatcher" {
		// The dispatcher stops with ctx: it finishes in-flight deliveries
		// while the HTTP server drains.
		d := push.New(cfg.Push, b, db.Push(), db.Push(), push.NewHTTPClient(cfg.Push.Timeout, cfg.PushTarget), clock, logger).
			Observe(m).WatchDatabase(db.Ping, time.Second).OnParkedReleased(relay.Notify)
		wg.Go(func() {
			if err := d.Run(ctx); err != nil {
				logger.Error("push dispatcher failed", slog.Any("error", err))
			}
		})
	}
	defer func() {
		stopWork()
		wg.Wait()
	}()
	srv, pullSvc := newServerWithMetrics(cfg, logger, db, b, relay, withAPI, m)
	if pullSvc != nil {
		wg.Go(func() { pullSvc.RunReaper(workCtx, 500*time.Millisecond) })
	}
	err = serve(ctx, cfg, logger, srv)
	relay.Notify()
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

// ensureQueue creates dest on the broker, retrying while the broker is away:
// the API accepts publishes into the outbox meanwhile.
func ensureQueue(ctx context.Context, b broker.Broker, dest broker.Destination, logger *slog.Logger) {
	for wait := time.Second; ; wait = min(wait*2, time.Minute) {
		err := b.EnsureQueue(ctx, dest)
		if err == nil || ctx.Err() != nil {
			return
		}
		logger.WarnContext(ctx, "queue not created yet; retrying", slog.String("queue", dest.FQQN()), slog.Any("error", err), slog.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
