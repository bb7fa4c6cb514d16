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
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/rooms"
)

// Exit codes.
const (
	exitFailed = 1 // the command failed
	exitUsage  = 2 // the command line is wrong: unknown command or flag, missing argument
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	app.TuneGC(os.LookupEnv, app.CgroupMemoryLimit)
	code := cli(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is where a command reads its environment and writes.
type env struct {
	getenv         func(string) string
	stdout, stderr io.Writer
}

// command is one subcommand.
type command struct {
	name, args, summary string
	// settings: the command takes the service's settings as flags.
	settings bool
	run      func(ctx context.Context, args []string, e env) error
	// help writes what follows the command's usage line; nil: its summary
	// and, with settings, the flags.
	help func(w io.Writer)
}

func commands() []command {
	process := func(name string) func(context.Context, []string, env) error {
		return func(ctx context.Context, args []string, e env) error {
			return app.Main(ctx, name, args, e.getenv, e.stderr)
		}
	}
	return []command{
		{name: "serve", summary: "run the HTTP API and the push dispatcher (the default command)", settings: true, run: process("serve")},
		{name: "api", summary: "run only the HTTP API (with the outbox relay and purge)", settings: true, run: process("api")},
		{name: "dispatcher", summary: "run only the push dispatcher (with the outbox relay, /healthz and /readyz)", settings: true, run: process("dispatcher")},
		{name: "migrate", summary: "apply the database migrations to DATABASE_URL and exit", settings: true, run: process("migrate")},
		{name: "check-broker", summary: "check that BROKER_URL's broker suits the service (creating the push queue, as a start would), print what it finds and exit", settings: true,
			run: func(ctx context.Context, args []string, e env) error {
				cfg, err := app.LoadConfig(args, e.getenv, e.stderr)
				if err != nil {
					return err
				}
				return checkBroker(ctx, cfg, app.NewLogger(cfg, e.stderr), e.stdout)
			}},
		{name: "push-rule", summary: "store the push target rule of these settings (PUSH_ALLOWED_CIDRS, PUSH_HTTPS_ONLY) as the one every process sharing DATABASE_URL must start with", settings: true,
			run: func(ctx context.Context, args []string, e env) error {
				return runPushRule(ctx, args, e.getenv, e.stdout, e.stderr)
			}},
		{name: "apikey", summary: "create, list and revoke API keys, straight in DATABASE_URL (the way to make the first admin key)",
			run: func(ctx context.Context, args []string, e env) error {
				return runAPIKey(ctx, args, e.getenv, e.stdout, e.stderr)
			},
			help: apiKeyHelp},
		{name: "help", args: "[COMMAND]", summary: "show the commands and flags, or one command's"},
	}
}

// cli runs the command line args and returns the exit code.
func cli(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := run(ctx, args, env{getenv: getenv, stdout: stdout, stderr: stderr})
	var usage *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "messaging-api: %v\n(messaging-api help lists the commands and every flag)\n", err)
		return exitUsage
	case errors.Is(err, app.ErrUsage):
		return exitUsage // LoadConfig said what was wrong
	default:
		fmt.Fprintln(stderr, "messaging-api:", err)
		return exitFailed
	}
}

// usageError is a command line cli refuses: it prints it with a pointer to
// the help and exits with exitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// run runs one command of args until ctx is done; serve when args start
// with a flag or are empty.
func run(ctx context.Context, args []string, e env) error {
	name, named := "serve", len(args) > 0 && !strings.HasPrefix(args[0], "-")
	if named {
		name, args = args[0], args[1:]
	}
	cmds := commands()
	if name == "help" {
		switch {
		case len(args) == 0:
			writeHelp(e.stdout, cmds)
			return nil
		case len(args) == 1:
			c, ok := find(cmds, args[0])
			if !ok {
				return usagef("no command %q", args[0])
			}
			writeCommandHelp(e.stdout, c)
			return nil
		}
		return usagef("help takes one command, not %q", strings.Join(args, " "))
	}
	c, ok := find(cmds, name)
	if !ok {
		return usagef("unknown command %q", name)
	}
	if c.settings && asksHelp(args) {
		if !named { // messaging-api -h
			writeHelp(e.stdout, cmds)
		} else {
			writeCommandHelp(e.stdout, c)
		}
		return nil
	}
	return c.run(ctx, args, e)
}

func find(cmds []command, name string) (command, bool) {
	for _, c := range cmds {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// asksHelp reports whether args ask for help among the flags: -h, -help or
// --help before any "--".
func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help", "--h":
			return true
		}
	}
	return false
}

// writeHelp writes the whole help: the commands, then the flags.
func writeHelp(w io.Writer, cmds []command) {
	fmt.Fprint(w, "messaging-api runs the room/subscription messaging service, and its operator's tasks.\n\n"+
		"usage: messaging-api [COMMAND] [flags]\n\ncommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nmessaging-api help COMMAND shows one command's usage.\n\n")
	writeSettingsHelp(w)
}

// writeSettingsHelp introduces and writes the settings' flags.
func writeSettingsHelp(w io.Writer) {
	fmt.Fprint(w, "flags (serve, api, dispatcher, migrate, check-broker and push-rule): each setting is read\n"+
		"from its environment variable, and its flag (-name value, -name=value) wins over it; an\n"+
		"empty value counts as unset. A bool flag alone means true. Durations are Go's: 250ms, 15s, 1h30m.\n\n")
	app.WriteSettings(w)
}

// writeCommandHelp writes one command's usage.
func writeCommandHelp(w io.Writer, c command) {
	if c.help != nil {
		fmt.Fprintf(w, "messaging-api %s: %s.\n\n", c.name, c.summary)
		c.help(w)
		return
	}
	args := c.args
	if c.settings {
		args = "[flags]"
	}
	fmt.Fprintf(w, "usage: messaging-api %s %s\n\n%s.\n", c.name, args, c.summary)
	if c.settings {
		fmt.Fprintln(w)
		writeSettingsHelp(w)
	}
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
