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

	"github.com/google/uuid"
	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/outbox"
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
	} else if len(os.Args) > 1 && os.Args[1] == "push-rule" {
		err = runPushRule(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
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
		case "serve", "api", "dispatcher", "migrate", "check-broker":
			cmd, args = args[0], args[1:]
		default:
			return fmt.Errorf("unknown command %q (want serve, api, dispatcher, migrate, check-broker, apikey or push-rule)", args[0])
		}
	}
	cfg, err := loadConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stderr)
	logger.Info("starting", slog.String("command", cmd), slog.Any("config", cfg.logValue()), slog.String("gc", gcSettings()))

	if cmd == "check-broker" {
		return checkBroker(ctx, cfg, logger, stderr)
	}

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
	if err := agreePushRule(ctx, cfg, db); err != nil {
		return err
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

	relayCfg := outbox.DefaultConfig
	relayCfg.Poll = cfg.Outbox.Poll
	relayCfg.HandOff = cfg.Outbox.HandOff
	relayCfg.MaxRefusals = cfg.Outbox.MaxRefusals
	m := metrics.New(metrics.Options{RoomLabel: cfg.Metrics.RoomLabel})
	relay := outbox.NewRelay(relayCfg, outbox.Deps{Store: db.Events(), Broker: b, Vacuum: db.Events(), Now: clock, Logger: logger, Observer: m})
	purger := outbox.NewPurger(db.Events(), cfg.Outbox.Retention, cfg.Outbox.PurgeInterval, clock, logger)

	// A broker whose settings break the delivery contract stops the process
	// (with that error) once it is reachable; the API serves meanwhile.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)

	// Background workers stop after the HTTP server, so requests accepted
	// during shutdown still get relayed. The relay starts at once (it also
	// dead-letters what expires while the broker is away); the broker creates
	// each queue before its first send until Prepare says it need not. The
	// dispatcher starts once the push queue exists and the settings are checked.
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	prepared := make(chan struct{})
	wg.Go(func() {
		if err := prepareBroker(workCtx, b, cfg.PushQueue, logger); err != nil {
			if errors.Is(err, broker.ErrMisconfigured) {
				fail(err)
			}
			return
		}
		close(prepared)
	})
	wg.Go(func() { relay.Run(workCtx) })
	wg.Go(func() { m.WatchBroker(workCtx, b.Connected, time.Second) })
	withAPI := cmd != "dispatcher"
	if withAPI {
		wg.Go(func() { purger.Run(workCtx) })
	}
	if cmd == "serve" || cmd == "dispatcher" {
		// The dispatcher stops with ctx: it finishes in-flight deliveries
		// while the HTTP server drains.
		d := push.New(cfg.Push, push.Deps{
			Broker: b, Directory: db.Push(), Log: db.Push(), Batches: db.Push(),
			Client: push.NewHTTPClient(cfg.Push.Timeout, cfg.PushTarget), Now: clock, Logger: logger,
			Observer: m, Ping: db.Ping, PingEvery: time.Second, OnParkedReleased: relay.Notify,
		})
		wg.Go(func() {
			if !waitClosed(ctx, prepared) {
				return
			}
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

// checkBroker runs the broker checks of prepareBroker once (creating the push
// queue, as a start would) and prints what
// they find: an operator's way to see that the broker (its broker.properties
// included) suits the service before starting it.
func checkBroker(ctx context.Context, cfg Config, logger *slog.Logger, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b, err := broker.Open(ctx, cfg.BrokerURL, logger)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	defer b.Close()
	if err := b.EnsureQueue(ctx, cfg.PushQueue); err != nil {
		return fmt.Errorf("push queue %s: %w", cfg.PushQueue, err)
	}
	warnings, err := b.Prepare(ctx, []string{rooms.Address(uuid.Nil), cfg.PushQueue.Address})
	for _, w := range warnings {
		fmt.Fprintln(out, "warning:", w)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ok: %s suits the service (%d warnings)\n", broker.Redact(cfg.BrokerURL), len(warnings))
	return nil
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
