// Command faultsuite drives publish load through the real service and a real
// broker and breaks things while it runs, then checks that no accepted
// message was lost.
//
// It brings up infrastructure of its own, so it never disturbs the machine's
// shared PostgreSQL or brokers: a throwaway PostgreSQL cluster (initdb in a
// temp dir, a free loopback port, trust auth; as the postgres user when run as
// root), a broker with its instance in the temp dir and a free STOMP port
// (Artemis through scripts/artemis.sh by default, ActiveMQ Classic through
// scripts/activemq.sh with -broker-kind activemq), the service binary built
// from this module and run as 2 `api` and 2 `dispatcher` processes, and a
// loopback HTTP sink as the PUSH endpoint.
//
// The load: one room, one PUSH subscription to the sink and one PULL
// subscription pulled and acked over REST while the load runs; publishes at a
// fixed rate, round-robin over the API processes, each with a unique
// correlation id and Idempotency-Key. During the load, rounds of faults, each
// -gap apart: SIGKILL a dispatcher and restart it; kill -9 the broker and
// restart it; restart PostgreSQL (fast shutdown, as pg_ctl restart -m fast);
// SIGKILL an API process while publishes to it are in flight, and restart it.
// Then the load stops, publishes whose outcome is unknown are retried once with
// their Idempotency-Key, and the suite waits (at most -drain-timeout) until
// both subscriptions have received every accepted publish.
//
// With -ha the broker is an Artemis primary/backup pair with replication
// (scripts/artemis.sh pair foreground, four free ports), the service gets a
// BROKER_URL naming both nodes, and each round of faults is a failover and a
// fail-back instead: kill -9 the active node (the other takes over), then
// start it again (it rejoins as the passive node, synchronizes and takes
// over again); the next round waits until the pair is synchronized again.
// Per failover and fail-back the report gives how long no node answered
// STOMP, how long publishing stalled (202 answers, and the relays' sends
// the broker confirmed, from the API processes' metrics), how long deliveries
// stalled (push and pull) and how many duplicates arrived.
//
// It prints published, accepted, rejected, unknown, per subscription
// delivered, duplicated and lost, and per fault how long deliveries stalled;
// it exits 1 unless lost is 0 for both, both received something, no retry
// published an event twice and no service process exited by itself. All load goes to 127.0.0.1; everything is bounded
// in count and time; every child runs in its own process group and is stopped
// when the suite ends, fails or is interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/roomhub/messaging-api/cmd/internal/svcproc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "faultsuite:", err)
		os.Exit(1)
	}
}

// config is every setting of a run.
type config struct {
	short         bool
	duration      time.Duration
	rate          float64
	gap           time.Duration
	rounds        int
	drainTimeout  time.Duration
	maxInFlight   int
	timeout       time.Duration
	jsonPath      string
	keep          bool
	verbose       bool
	serviceBin    string
	pgBin         string
	brokerKind    string // artemis or activemq
	ha            bool   // an Artemis primary/backup pair; failovers instead of the fault sequence
	amqScript     string
	artemisScript string
}

// Defaults of the full form, and of -short, -ha and -ha -short where they
// differ. A round of -ha is a failover and a fail-back.
var (
	full    = config{duration: 2 * time.Minute, rate: 100, gap: 10 * time.Second, rounds: 2, drainTimeout: 120 * time.Second}
	short   = config{duration: 30 * time.Second, rate: 40, gap: 5 * time.Second, rounds: 1, drainTimeout: 75 * time.Second}
	haFull  = config{duration: 2 * time.Minute, rate: 100, gap: 10 * time.Second, rounds: 3, drainTimeout: 120 * time.Second}
	haShort = config{duration: 30 * time.Second, rate: 40, gap: 6 * time.Second, rounds: 1, drainTimeout: 75 * time.Second}
)

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("faultsuite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&cfg.short, "short", false, fmt.Sprintf("the CI form: -duration %s -rate %g -gap %s -rounds %d -drain-timeout %s unless given (with -ha: %s)",
		short.duration, short.rate, short.gap, short.rounds, short.drainTimeout, haShort.describe()))
	fs.BoolVar(&cfg.ha, "ha", false, fmt.Sprintf("run an Artemis primary/backup pair and fail it over and back each round (%s unless given)", haFull.describe()))
	fs.DurationVar(&cfg.duration, "duration", full.duration, "least time the load runs; it also runs until every fault is done and one -gap more")
	fs.Float64Var(&cfg.rate, "rate", full.rate, "publishes per second")
	fs.DurationVar(&cfg.gap, "gap", full.gap, "time between faults")
	fs.IntVar(&cfg.rounds, "rounds", full.rounds, "times the fault sequence runs")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", full.drainTimeout, "how long to wait after the load for every accepted publish to arrive")
	fs.IntVar(&cfg.maxInFlight, "max-in-flight", 256, "bound on publish requests in flight (ticks beyond it are skipped and counted)")
	fs.DurationVar(&cfg.timeout, "timeout", 15*time.Minute, "stop the whole run after this long")
	fs.StringVar(&cfg.jsonPath, "json", "", "also write the report as JSON to this file")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the temp dir (logs, PostgreSQL cluster, broker store)")
	fs.BoolVar(&cfg.verbose, "v", false, "print the tails of every log at the end")
	fs.StringVar(&cfg.serviceBin, "service-bin", "", "a prebuilt messaging-api binary (default: go build it into the temp dir)")
	fs.StringVar(&cfg.pgBin, "pg-bin", "", "directory of initdb and postgres (default: newest /usr/lib/postgresql/*/bin)")
	fs.StringVar(&cfg.brokerKind, "broker-kind", kindArtemis, "the broker the suite runs and kills: artemis or activemq (ActiveMQ Classic)")
	fs.StringVar(&cfg.artemisScript, "artemis-script", filepath.Join(svcproc.ModuleDir(), "scripts", "artemis.sh"), "scripts/artemis.sh")
	fs.StringVar(&cfg.amqScript, "activemq-script", filepath.Join(svcproc.ModuleDir(), "scripts", "activemq.sh"), "scripts/activemq.sh")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: faultsuite [flags]\n\nRuns load through the service while killing its processes, the broker and PostgreSQL;\nfails if an accepted message is lost. See `go doc ./cmd/faultsuite` and docs/fault-suite.md.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var form config
	switch {
	case cfg.ha && cfg.short:
		form = haShort
	case cfg.ha:
		form = haFull
	case cfg.short:
		form = short
	default:
		form = full
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["duration"] {
		cfg.duration = form.duration
	}
	if !set["rate"] {
		cfg.rate = form.rate
	}
	if !set["gap"] {
		cfg.gap = form.gap
	}
	if !set["rounds"] {
		cfg.rounds = form.rounds
	}
	if !set["drain-timeout"] {
		cfg.drainTimeout = form.drainTimeout
	}
	switch {
	case cfg.brokerKind != kindArtemis && cfg.brokerKind != kindActiveMQ:
		return cfg, fmt.Errorf("-broker-kind must be artemis or activemq, not %q", cfg.brokerKind)
	case cfg.ha && cfg.brokerKind != kindArtemis:
		return cfg, errors.New("-ha runs an Artemis pair: -broker-kind must be artemis")
	case cfg.duration < time.Second || cfg.duration > time.Hour:
		return cfg, errors.New("-duration must be from 1s to 1h")
	case cfg.rate < 1 || cfg.rate > 2000:
		return cfg, errors.New("-rate must be from 1 to 2000")
	case cfg.gap < time.Second || cfg.gap > 10*time.Minute:
		return cfg, errors.New("-gap must be from 1s to 10m")
	case cfg.rounds < 0 || cfg.rounds > 20:
		return cfg, errors.New("-rounds must be from 0 to 20")
	case cfg.drainTimeout < time.Second || cfg.drainTimeout > 30*time.Minute:
		return cfg, errors.New("-drain-timeout must be from 1s to 30m")
	case cfg.maxInFlight < 1 || cfg.maxInFlight > 4096:
		return cfg, errors.New("-max-in-flight must be from 1 to 4096")
	case cfg.timeout < time.Minute:
		return cfg, errors.New("-timeout must be at least 1m")
	}
	return cfg, nil
}

// describe names a form's settings, for the usage text.
func (c config) describe() string {
	return fmt.Sprintf("-duration %s -rate %g -gap %s -rounds %d -drain-timeout %s", c.duration, c.rate, c.gap, c.rounds, c.drainTimeout)
}

// run parses args, runs the suite and prints the report to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	s := &suite{cfg: cfg, log: stderr, started: time.Now()}
	rep, runErr := s.run(ctx)
	if runErr != nil || cfg.verbose || (rep != nil && !rep.Pass) {
		s.logTails(stderr, 40)
	}
	// A child that would not stop, or a temp dir that would not go, is worth
	// a look but says nothing of the delivery contract: a warning.
	// A failed run keeps its logs and data for a look.
	failed := runErr != nil || rep == nil || !rep.Pass
	if err := s.cleanup(cfg.keep || failed); err != nil {
		fmt.Fprintln(stderr, "faultsuite: warning: cleanup:", err)
	}
	if rep != nil {
		rep.Elapsed = round1(time.Since(s.started).Seconds())
		rep.print(stdout)
		if cfg.jsonPath != "" {
			if err := rep.writeJSON(cfg.jsonPath); err != nil {
				return errors.Join(runErr, err)
			}
		}
	}
	if runErr != nil {
		return runErr
	}
	if !rep.Pass {
		return errors.New("FAIL: " + rep.Verdict)
	}
	return nil
}
