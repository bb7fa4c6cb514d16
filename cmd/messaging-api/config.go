package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/push"
	"github.com/roomhub/messaging-api/store"
)

// Config is every setting of the service, read once from the environment and
// flags (flags win) and validated before anything starts.
type Config struct {
	HTTP           HTTPConfig
	DatabaseURL    string
	BrokerURL      string
	PushQueue      broker.Destination
	Outbox         OutboxConfig
	Push           push.Config
	LogLevel       slog.Level
	LogFormat      string
	MigrateOnStart bool
}

// OutboxConfig configures the outbox relay and the purge of old events.
type OutboxConfig struct {
	Poll          time.Duration
	Retention     time.Duration
	PurgeInterval time.Duration
}

// HTTPConfig configures the API server.
type HTTPConfig struct {
	Addr            string
	BodyLimit       int64
	ReadTimeout     time.Duration
	WriteTimeout    time.Duration
	ShutdownTimeout time.Duration
}

// setting is one configuration entry: its environment variable, flag, default and help.
type setting struct {
	env, flag, def, help string
	apply                func(c *Config, v string) error
}

var settings = []setting{
	{"HTTP_ADDR", "addr", ":8080", "address the API listens on", func(c *Config, v string) error {
		c.HTTP.Addr = v
		return nil
	}},
	{"DATABASE_URL", "database-url", "sqlite:data/messaging-api.db", "postgres://user:pass@host:5432/db, or sqlite:PATH for the embedded default", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://") && !strings.HasPrefix(v, "sqlite:") {
			return errors.New("must be a postgres://, postgresql:// or sqlite: URL")
		}
		c.DatabaseURL = v
		return nil
	}},
	{"BROKER_URL", "broker-url", "embedded", "stomp://user:pass@host:61613?dialect=artemis|activemq, stomp+ssl://…, or embedded (in-process, not durable)", func(c *Config, v string) error {
		c.BrokerURL = v
		return nil
	}},
	{"PUSH_QUEUE", "push-queue", "messaging.push", "the shared queue of PUSH deliveries: NAME, or ADDRESS::QUEUE", func(c *Config, v string) error {
		addr, queue, ok := strings.Cut(v, "::")
		if !ok {
			queue = addr
		}
		if addr == "" || queue == "" || strings.ContainsAny(v, " \n\r") {
			return errors.New("must be NAME or ADDRESS::QUEUE")
		}
		c.PushQueue = broker.Destination{Address: addr, Queue: queue}
		c.Push.Queue = c.PushQueue
		return nil
	}},
	{"PUSH_WORKERS", "push-workers", "64", "concurrent push deliveries per dispatcher process", intInto(1, 4096, func(c *Config) *int { return &c.Push.Workers })},
	{"PUSH_PER_SUBSCRIPTION", "push-per-subscription", "16", "concurrent push deliveries to one subscription (so one slow endpoint cannot take every worker)", intInto(1, 4096, func(c *Config) *int { return &c.Push.PerSubscription })},
	{"PUSH_PREFETCH", "push-prefetch", "128", "unacknowledged push messages the broker hands one dispatcher", intInto(1, 10000, func(c *Config) *int { return &c.Push.Prefetch })},
	{"PUSH_TIMEOUT", "push-timeout", "15s", "time one push request may take", durationInto(func(c *Config) *time.Duration { return &c.Push.Timeout })},
	{"PUSH_MAX_RETRY_AFTER", "push-max-retry-after", "1h", "longest delay a Retry-After header can ask for", durationInto(func(c *Config) *time.Duration { return &c.Push.MaxRetryAfter })},
	{"OUTBOX_POLL_INTERVAL", "outbox-poll", "1s", "how often the outbox relay looks for sends left pending (by a crash or a broker outage)", durationInto(func(c *Config) *time.Duration { return &c.Outbox.Poll })},
	{"EVENT_RETENTION", "event-retention", "168h", "how long events and their log are kept when the room does not expire them sooner (at least 24h, the idempotency window)", durationInto(func(c *Config) *time.Duration { return &c.Outbox.Retention })},
	{"PURGE_INTERVAL", "purge-interval", "10m", "how often expired events and logs are purged", durationInto(func(c *Config) *time.Duration { return &c.Outbox.PurgeInterval })},
	{"LOG_LEVEL", "log-level", "info", "debug, info, warn or error", func(c *Config, v string) error {
		return c.LogLevel.UnmarshalText([]byte(v))
	}},
	{"LOG_FORMAT", "log-format", "text", "text or json", func(c *Config, v string) error {
		if v != "text" && v != "json" {
			return errors.New("must be text or json")
		}
		c.LogFormat = v
		return nil
	}},
	{"MIGRATE_ON_START", "migrate-on-start", "true", "apply database migrations when serve starts", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		c.MigrateOnStart = b
		return err
	}},
	{"HTTP_BODY_LIMIT", "body-limit", "1048576", "largest request body in bytes", func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1024 {
			return errors.New("must be a number of bytes, at least 1024")
		}
		c.HTTP.BodyLimit = n
		return nil
	}},
	{"HTTP_READ_TIMEOUT", "read-timeout", "30s", "time to read a request", durationInto(func(c *Config) *time.Duration { return &c.HTTP.ReadTimeout })},
	{"HTTP_WRITE_TIMEOUT", "write-timeout", "60s", "time to write a response (long polls included)", durationInto(func(c *Config) *time.Duration { return &c.HTTP.WriteTimeout })},
	{"SHUTDOWN_TIMEOUT", "shutdown-timeout", "15s", "time in-flight requests get to finish on SIGTERM", durationInto(func(c *Config) *time.Duration { return &c.HTTP.ShutdownTimeout })},
}

func intInto(lo, hi int, field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("must be an integer from %d to %d", lo, hi)
		}
		*field(c) = n
		return nil
	}
}

func durationInto(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("must be a positive duration such as 15s")
		}
		*field(c) = d
		return nil
	}
}

// loadConfig reads defaults, then the environment, then flags from args.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("messaging-api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	values := make([]*string, len(settings))
	for i, s := range settings {
		values[i] = fs.String(s.flag, "", fmt.Sprintf("%s (env %s, default %q)", s.help, s.env, s.def))
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: messaging-api [serve|api|dispatcher|migrate] [flags]\n\n"+
			"  serve       run the HTTP API and the push dispatcher (default)\n"+
			"  api         run only the HTTP API (and the outbox relay)\n"+
			"  dispatcher  run only the push dispatcher (and /healthz, /readyz)\n"+
			"  migrate     apply database migrations and exit\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg := Config{Push: push.DefaultConfig(broker.Destination{})}
	var errs []error
	for i, s := range settings {
		v, from := s.def, "default"
		if e := getenv(s.env); e != "" {
			v, from = e, "env "+s.env
		}
		if *values[i] != "" {
			v, from = *values[i], "flag -"+s.flag
		}
		if err := s.apply(&cfg, v); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s=%q): %w", s.env, from, v, err))
		}
	}
	return cfg, errors.Join(errs...)
}

// logValue lists the settings with secrets masked, for the start-up log line.
func (c Config) logValue() slog.Value {
	return slog.GroupValue(
		slog.String("http_addr", c.HTTP.Addr),
		slog.String("database_url", store.Redact(c.DatabaseURL)),
		slog.String("broker_url", broker.Redact(c.BrokerURL)),
		slog.String("log_level", c.LogLevel.String()),
		slog.Bool("migrate_on_start", c.MigrateOnStart),
		slog.Int64("body_limit", c.HTTP.BodyLimit),
	)
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
