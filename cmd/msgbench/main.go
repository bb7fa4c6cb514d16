// Command msgbench measures the messaging service against the physical limit
// of the machine it runs on: the raw broker through broker.Open, with no service
// in between, measured in the same run. It runs the service as a subprocess on a
// free loopback port, with a fresh PostgreSQL schema (or SQLite file), a unique
// push queue and unique rooms, and a local HTTP sink as the push endpoint, then
// prints one table and writes it as JSON (-json).
//
// The broker is Apache ActiveMQ Artemis (the default) or ActiveMQ Classic:
// -broker-kind picks the local one that scripts/artemis.sh or
// scripts/activemq.sh runs, -broker any other on loopback. The two brokers'
// tables are comparable only through their ratios, each to its own baseline.
//
// Every figure and how it is measured:
//
//  1. baseline (after raw sends and consumes until their rates are steady,
//     since a broker on a JVM runs its first messages interpreted): durable
//     sends with receipts per second at the relay's concurrency (outbox.DefaultConfig.Concurrency over the broker URL's
//     senders); consume + individual ack per second at the dispatcher's prefetch;
//     the push ceiling: consume + POST to the sink + ack with no service (the
//     dispatcher's prefetch and worker count), the most any dispatcher could do;
//     the broker's own lateness on scheduled (AMQ_SCHEDULED_DELAY) messages.
//  2. publish: events accepted per second (202) through POST …/messages at
//     fan-out 1 and 10 (PULL subscriptions) and through messages:batch (100 per
//     request), and the rate at which the outbox relay got them to the broker.
//  3. push: deliveries per second to a sink answering 200 at once, drained from
//     a preloaded push queue by a dispatcher process (an api process loads it).
//  4. end to end: the pipeline's maximum (publish → relay → push) through the
//     serve process, and the publish → push received latency at a fixed rate,
//     offered open loop (latency counts from the intended send time): at half
//     the push maximum, and at half the end-to-end maximum.
//  5. retry timing: a sink fails the first attempt; the error between the
//     planned retry time (failure + delay) and the observed second attempt.
//  6. isolation: push throughput to a fast endpoint while another
//     subscription's endpoint hangs until PUSH_TIMEOUT.
//  7. pull: messages per second through pull (maxMessages 100) + ack.
//  8. the service's peak RSS (VmHWM) and CPU seconds per 1000 deliveries, and
//     the machine's CPU per 1000 messages in the raw sends, the raw consume +
//     ack, each publish mode, the push, end-to-end, isolation and latency
//     runs, split between the broker, PostgreSQL
//     (each found by the port it listens on), the service and msgbench
//     itself, with how many CPUs a rate would need at that cost.
//
// All load goes to 127.0.0.1; every phase is bounded in count and time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roomhub/messaging-api/store/storetest"
)

// The brokers -broker-kind chooses from, and the local broker of each that
// scripts/artemis.sh and scripts/activemq.sh run with their defaults.
const (
	kindArtemis  = "artemis"
	kindActiveMQ = "activemq"

	DefaultArtemisURL  = "stomp://artemis:artemis@127.0.0.1:61613?dialect=artemis"
	DefaultActiveMQURL = "stomp://127.0.0.1:61623?dialect=activemq"
)

// brokerNames are the brokers as the report names them.
var brokerNames = map[string]string{kindArtemis: "Apache ActiveMQ Artemis", kindActiveMQ: "ActiveMQ Classic"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "msgbench:", err)
		os.Exit(1)
	}
}

// config is every setting of a run.
type config struct {
	brokerKind  string // artemis or activemq: the dialect of brokerURL
	brokerURL   string
	dbURL       string
	embedded    bool
	jsonPath    string
	duration    time.Duration
	warmup      time.Duration
	concurrency int
	messages    int
	pullers     int
	retries     int
	retryDelays []time.Duration
	fixedRates  []float64 // extra latency runs at these offered rates
	maxSends    int       // broker sends one publish mode may ask for
	pushTimeout time.Duration
	hangShare   float64
	serviceBin  string
	keep        bool
	verbose     bool
	timeout     time.Duration
	phases      map[string]bool // empty: all
	scale       scaleConfig
	args        []string
}

// phaseNames are the phases after the baseline, in the order they run.
var phaseNames = []string{"publish", "pull", "flow", "push", "latency", "retry", "isolation", "scale"}

// namedOnly are the phases that run only when -phases names them: scale
// starts a dozen service processes and takes minutes of its own.
var namedOnly = map[string]bool{"scale": true}

// runs says whether the phase runs: every phase but the namedOnly ones by
// default, else those -phases names.
func (cfg config) runs(phase string) bool {
	if len(cfg.phases) == 0 {
		return !namedOnly[phase]
	}
	return cfg.phases[phase]
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{args: args}
	fs := flag.NewFlagSet("msgbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.brokerKind, "broker-kind", "", "the broker: artemis or activemq (default: the -broker URL's dialect, else artemis)")
	fs.StringVar(&cfg.brokerURL, "broker", "", "STOMP URL of the broker (loopback only); the service gets the same URL (default: "+
		DefaultArtemisURL+" for artemis, "+DefaultActiveMQURL+" for activemq)")
	fs.StringVar(&cfg.dbURL, "db", storetest.DefaultPostgresURL, "PostgreSQL URL (loopback only); the run uses a fresh schema in it")
	fs.BoolVar(&cfg.embedded, "embedded", false, "use the embedded broker and an SQLite file instead of -broker and -db")
	fs.StringVar(&cfg.jsonPath, "json", "bench.json", "write the report as JSON to this file (empty: do not)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "length of each timed phase (raw sends, each publish mode, each latency run)")
	fs.DurationVar(&cfg.warmup, "warmup", 40*time.Second, "at most this long of raw sends and consumes before the baseline, in 2 s rounds until two agree within 15 % (a broker on a JVM starts slow; 0: none)")
	fs.IntVar(&cfg.concurrency, "concurrency", 16, "concurrent HTTP publishers")
	fs.IntVar(&cfg.messages, "messages", 5000, "messages preloaded for the push, end-to-end, isolation and pull phases")
	fs.IntVar(&cfg.pullers, "pullers", 4, "concurrent pull+ack clients")
	fs.IntVar(&cfg.retries, "retries", 20, "retried events per scheduled delay")
	fs.IntVar(&cfg.maxSends, "publish-sends", 20000, "a publish mode stops after this many broker sends (events × fan-out) even before -duration ends, so that the relay's drain stays short")
	rates := fs.String("latency-rates", "", "extra latency runs at these fixed offered rates, events/s (comma-separated; to compare builds at equal load)")
	delays := fs.String("retry-delays", "1s,2s,3s,4s,5s", "scheduled retry delays measured (comma-separated)")
	fs.DurationVar(&cfg.pushTimeout, "push-timeout", 5*time.Second, "PUSH_TIMEOUT of the service: how long the hanging endpoint holds a delivery")
	fs.Float64Var(&cfg.hangShare, "hang-share", 0.1, "isolation: events for the hanging endpoint per event for the fast one")
	fs.StringVar(&cfg.serviceBin, "service-bin", "", "a prebuilt messaging-api binary (default: go build it into a temp dir)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the schema (or SQLite file), service logs and temp dir")
	fs.BoolVar(&cfg.verbose, "v", false, "print the service's logs when it stops")
	fs.DurationVar(&cfg.timeout, "timeout", 15*time.Minute, "stop the whole run after this long")
	only := fs.String("phases", "", "run only these phases after the baseline, e.g. flow,push (for profiling; "+strings.Join(phaseNames, ",")+"; default: all but scale, which runs only when named)")
	dispatchers := fs.String("scale-dispatchers", "1,2,4", "scale: the dispatcher process counts compared (must include 1)")
	apis := fs.String("scale-apis", "1,2", "scale: the API process counts compared (must include 1)")
	fs.IntVar(&cfg.scale.rounds, "scale-rounds", 2, "scale: rounds, each running every process count once (in the reverse order every other round)")
	fs.IntVar(&cfg.scale.messages, "scale-messages", 10000, "scale: events preloaded for each push drain, and published in batches through one API process for each outbox backlog")
	fs.Float64Var(&cfg.scale.rate, "scale-rate", 300, "scale: the fixed offered rate of the latency runs, events/s (below what one API process sustains)")
	fs.DurationVar(&cfg.scale.duration, "scale-duration", 5*time.Second, "scale: length of each latency run and of each closed-loop publish run")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: msgbench [flags]\n\nBenchmarks the messaging service against the raw broker; see `go doc ./cmd/msgbench`.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, s := range strings.Split(*delays, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < time.Millisecond {
			return cfg, fmt.Errorf("-retry-delays: %q is not a duration of at least 1ms", s)
		}
		cfg.retryDelays = append(cfg.retryDelays, d)
	}
	for _, s := range strings.Split(*rates, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || r < 1 || r > 1e6 {
			return cfg, fmt.Errorf("-latency-rates: %q is not a rate between 1 and 1000000 events/s", s)
		}
		cfg.fixedRates = append(cfg.fixedRates, r)
	}
	var err error
	if cfg.scale.dispatchers, err = parseCounts(*dispatchers); err != nil {
		return cfg, fmt.Errorf("-scale-dispatchers: %w", err)
	}
	if cfg.scale.apis, err = parseCounts(*apis); err != nil {
		return cfg, fmt.Errorf("-scale-apis: %w", err)
	}
	if *only != "" {
		cfg.phases = map[string]bool{}
		for _, p := range strings.Split(*only, ",") {
			if p = strings.TrimSpace(p); !slices.Contains(phaseNames, p) {
				return cfg, fmt.Errorf("-phases: unknown phase %q (want some of %s)", p, strings.Join(phaseNames, ","))
			}
			cfg.phases[p] = true
		}
	}
	switch {
	case cfg.duration < 100*time.Millisecond:
		return cfg, errors.New("-duration must be at least 100ms")
	case cfg.warmup < 0 || cfg.warmup > time.Minute:
		return cfg, errors.New("-warmup must be from 0 to 1m")
	case cfg.concurrency < 1 || cfg.concurrency > 512:
		return cfg, errors.New("-concurrency must be from 1 to 512")
	case cfg.messages < 10 || cfg.messages > 1_000_000:
		return cfg, errors.New("-messages must be from 10 to 1000000")
	case cfg.pullers < 1 || cfg.pullers > 64:
		return cfg, errors.New("-pullers must be from 1 to 64")
	case cfg.retries < 1 || cfg.retries > 1000:
		return cfg, errors.New("-retries must be from 1 to 1000")
	case cfg.pushTimeout < 100*time.Millisecond:
		return cfg, errors.New("-push-timeout must be at least 100ms")
	case cfg.hangShare <= 0 || cfg.hangShare > 1:
		return cfg, errors.New("-hang-share must be in (0, 1]")
	case cfg.scale.rounds < 1 || cfg.scale.rounds > 10:
		return cfg, errors.New("-scale-rounds must be from 1 to 10")
	case cfg.scale.messages < 100 || cfg.scale.messages > 1_000_000:
		return cfg, errors.New("-scale-messages must be from 100 to 1000000")
	case cfg.scale.rate < 1 || cfg.scale.rate > 100_000:
		return cfg, errors.New("-scale-rate must be from 1 to 100000 events/s")
	case cfg.scale.duration < 100*time.Millisecond:
		return cfg, errors.New("-scale-duration must be at least 100ms")
	}
	if err := cfg.chooseBroker(); err != nil {
		return cfg, err
	}
	if !cfg.embedded {
		for name, raw := range map[string]string{"-broker": cfg.brokerURL, "-db": cfg.dbURL} {
			if err := requireLoopback(raw); err != nil {
				return cfg, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return cfg, nil
}

// chooseBroker settles -broker-kind and -broker: either names the other's
// default, and when both are given the URL's dialect must be the kind (the
// service reads the dialect from the URL, so a mismatch would measure the
// wrong broker under the other's name).
func (cfg *config) chooseBroker() error {
	if cfg.brokerURL == "" {
		switch cfg.brokerKind {
		case "", kindArtemis:
			cfg.brokerKind, cfg.brokerURL = kindArtemis, DefaultArtemisURL
		case kindActiveMQ:
			cfg.brokerURL = DefaultActiveMQURL
		}
	}
	if _, ok := brokerNames[cfg.brokerKind]; !ok && cfg.brokerKind != "" {
		return fmt.Errorf("-broker-kind: %q is not artemis or activemq", cfg.brokerKind)
	}
	u, err := url.Parse(cfg.brokerURL)
	if err != nil {
		return errors.New("-broker: cannot parse the URL")
	}
	dialect := strings.ToLower(u.Query().Get("dialect"))
	if dialect == "" {
		dialect = kindArtemis // broker.Open's default
	}
	if _, ok := brokerNames[dialect]; !ok {
		return fmt.Errorf("-broker: dialect %q is not artemis or activemq", dialect)
	}
	switch {
	case cfg.brokerKind == "":
		cfg.brokerKind = dialect
	case cfg.brokerKind != dialect:
		return fmt.Errorf("-broker-kind %s, but the -broker URL's dialect is %s", cfg.brokerKind, dialect)
	}
	return nil
}

// requireLoopback refuses a URL whose host is not on this machine's loopback:
// a benchmark sends load, and load goes only to 127.0.0.0/8 or ::1.
func requireLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("cannot parse the URL")
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("host %q is not a loopback address: load goes only to 127.0.0.1", host)
}

// run parses args, runs every phase and prints the table to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	b := newBench(cfg, stderr)
	rep, runErr := b.run(ctx)
	if runErr != nil && !cfg.verbose {
		b.logTails(40)
	}
	cleanupErr := b.cleanup()
	if runErr != nil {
		return errors.Join(runErr, cleanupErr)
	}
	rep.Elapsed = time.Since(b.started).Round(time.Second).String()
	rep.print(stdout)
	if cfg.jsonPath != "" {
		if err := rep.writeJSON(cfg.jsonPath); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "msgbench: report written to %s\n", cfg.jsonPath)
	}
	return cleanupErr
}
