// Command messaging-api runs the room/subscription messaging service: the
// management and publishing HTTP API over PostgreSQL (or embedded SQLite) and a
// STOMP broker (or the embedded one). The process is built by package app;
// this command adds the operator's subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/rooms"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app.TuneGC(os.LookupEnv, app.CgroupMemoryLimit)
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
		if !slices.Contains(app.Commands, args[0]) && args[0] != "check-broker" {
			return fmt.Errorf("unknown command %q (want serve, api, dispatcher, migrate, check-broker, apikey or push-rule)", args[0])
		}
		cmd, args = args[0], args[1:]
	}
	if cmd != "check-broker" {
		return app.Main(ctx, cmd, args, getenv, stderr)
	}
	cfg, err := app.LoadConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	return checkBroker(ctx, cfg, app.NewLogger(cfg, stderr), stderr)
}

// checkBroker reports the state of each host of the broker URL, then runs
// the broker checks of prepareBroker once (creating the push queue, as a
// start would) and prints what they find: an operator's way to see that the
// broker (its broker.properties included) suits the service before starting
// it. It fails at once when no host is live.
func checkBroker(ctx context.Context, cfg app.Config, logger *slog.Logger, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hosts, err := broker.ProbeHosts(ctx, cfg.BrokerURL, logger)
	if err != nil {
		return err
	}
	live := 0
	for _, h := range hosts {
		if h.State == broker.HostLive {
			live++
			fmt.Fprintf(out, "host %s: %s\n", h.Host, h.State)
		} else {
			fmt.Fprintf(out, "host %s: %s (%v)\n", h.Host, h.State, h.Err)
		}
	}
	if len(hosts) > 0 && live == 0 {
		return fmt.Errorf("broker: no host of %s is live", broker.Redact(cfg.BrokerURL))
	}
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
