package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/console"
	"github.com/roomhub/messaging-api/netguard"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/push"
	"github.com/roomhub/messaging-api/redact"
	"github.com/roomhub/messaging-api/seal"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/subscriptions"
)

// Config is every setting of the service, read once from the environment and
// flags (flags win) and validated before anything starts.
type Config struct {
	HTTP        HTTPConfig
	DatabaseURL string
	BrokerURL   string
	PushQueue   broker.Destination
	Outbox      OutboxConfig
	Push        push.Config
	// PushTarget is the SSRF guard of push URLs: at subscription creation
	// and on every delivery.
	PushTarget netguard.Guard
	// PushAuth holds the keys that seal the push credentials of
	// subscriptions in the database.
	PushAuth PushAuthConfig
	// PushTestInterval is how often one subscription may be sent a test
	// event by one API process.
	PushTestInterval time.Duration
	LogLevel         slog.Level
	LogFormat        string
	MigrateOnStart   bool
	Auth             AuthConfig
	// CatalogCacheTTL is how long an API process trusts what it read about
	// rooms, event types, versions and subscriptions when publishing.
	CatalogCacheTTL time.Duration
	Limits          LimitsConfig
	Metrics         MetricsConfig
	Console         ConsoleConfig
	// Tracing is what the OTEL_* variables say (environment only).
	Tracing TracingConfig
}

// ConsoleConfig configures the web console.
type ConsoleConfig struct {
	Enabled bool
	console.Config
}

// PushAuthConfig is PUSH_AUTH_KEY and PUSH_AUTH_OLD_KEYS.
type PushAuthConfig struct {
	Key     seal.Key // the zero Key: none
	OldKeys []seal.Key
}

// Keyring seals with Key and opens with every key; nil when there is none
// at all.
func (c PushAuthConfig) Keyring() *seal.Keyring {
	if c.Key.ID() == "" && len(c.OldKeys) == 0 {
		return nil
	}
	return seal.NewKeyring(c.Key, c.OldKeys...)
}

// MetricsConfig configures /metrics.
type MetricsConfig struct {
	// RoomLabel keeps a room label on the publish counters.
	RoomLabel bool
}

// OutboxConfig configures the outbox relay and the purge of old events.
type OutboxConfig struct {
	Relay         outbox.Config
	Retention     time.Duration
	PurgeInterval time.Duration
}

// AuthConfig configures API keys.
type AuthConfig struct {
	Disabled bool
	// BootstrapAdminKey, when set, is stored as an admin key at start unless
	// it exists already: a way to provision the first key without the CLI.
	BootstrapAdminKey string
}

// LimitsConfig bounds what clients may do.
type LimitsConfig struct {
	PublishRate          float64
	PublishBurst         int
	MaxPayload           int
	MaxRoomSubscriptions int
}

// HTTPConfig configures the API server.
type HTTPConfig struct {
	Addr            string
	BodyLimit       int64
	ReadTimeout     time.Duration
	WriteTimeout    time.Duration
	ShutdownTimeout time.Duration
}

// setting is one configuration entry: its environment variable, flag, the
// kind of value it takes, default and help.
type setting struct {
	env, flag string
	kind      kind
	def, help string
	apply     func(c *Config, v string) error
}

// kind names the value a setting takes, as the help shows it after the flag.
type kind string

const (
	kindInt      kind = "int"
	kindNumber   kind = "number" // a decimal, such as 0.5
	kindBool     kind = "bool"
	kindDuration kind = "duration" // Go's form: 250ms, 15s, 1h30m
	kindURL      kind = "URL"
	kindAddress  kind = "host:port"
	kindQueue    kind = "NAME|ADDRESS::QUEUE"
	kindCIDRs    kind = "CIDR,..."
	kindKey      kind = "base64-key"
	kindKeys     kind = "base64-key,..."
	kindAPIKey   kind = "API-key"
	kindLevel    kind = "debug|info|warn|error"
	kindFormat   kind = "text|json"
)

// base is the configuration before any setting applies: the defaults the
// packages declare, which the settings below show rather than repeat.
var base = Config{
	Push:   push.DefaultConfig(broker.Destination{}),
	Outbox: OutboxConfig{Relay: outbox.DefaultConfig},
}

var settings = []setting{
	{"HTTP_ADDR", "addr", kindAddress, ":8080", "address the API listens on", func(c *Config, v string) error {
		c.HTTP.Addr = v
		return nil
	}},
	{"DATABASE_URL", "database-url", kindURL, "sqlite:data/messaging-api.db", "postgres://user:pass@host:5432/db, or sqlite:PATH for the embedded default", func(c *Config, v string) error {
		if !strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://") && !strings.HasPrefix(v, "sqlite:") {
			return errors.New("must be a postgres://, postgresql:// or sqlite: URL")
		}
		c.DatabaseURL = v
		return nil
	}},
	{"BROKER_URL", "broker-url", kindURL, "embedded", "stomp://user:pass@host:61613?dialect=artemis|activemq (several hosts, h1:61613,h2:61613, fail over to the live one), stomp+ssl://…, or embedded (in-process, not durable)", func(c *Config, v string) error {
		c.BrokerURL = v
		return nil
	}},
	{"PUSH_QUEUE", "push-queue", kindQueue, "messaging.push", "the shared queue of PUSH deliveries: NAME, or ADDRESS::QUEUE", func(c *Config, v string) error {
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
	{"PUSH_WORKERS", "push-workers", kindInt, strconv.Itoa(base.Push.Workers), "concurrent push deliveries per dispatcher process", intInto(1, 4096, func(c *Config) *int { return &c.Push.Workers })},
	{"PUSH_PER_SUBSCRIPTION", "push-per-subscription", kindInt, strconv.Itoa(base.Push.PerSubscription), "concurrent push deliveries to one subscription (so one slow endpoint cannot take every worker)", intInto(1, 4096, func(c *Config) *int { return &c.Push.PerSubscription })},
	{"PUSH_PREFETCH", "push-prefetch", kindInt, strconv.Itoa(base.Push.Prefetch), "unacknowledged push messages the broker hands one dispatcher", intInto(1, 10000, func(c *Config) *int { return &c.Push.Prefetch })},
	{"PUSH_TIMEOUT", "push-timeout", kindDuration, formatDuration(base.Push.Timeout), "time one push request may take", durationInto(func(c *Config) *time.Duration { return &c.Push.Timeout })},
	{"PUSH_ALLOWED_CIDRS", "push-allowed-cidrs", kindCIDRs, "", "comma-separated CIDRs that push URLs may reach although the SSRF guard refuses them (loopback, private, link-local, ...), e.g. 127.0.0.0/8,::1/128 for a local receiver", func(c *Config, v string) error {
		allow, err := netguard.ParseAllow(v)
		c.PushTarget.Allow = allow
		return err
	}},
	{"PUSH_HTTPS_ONLY", "push-https-only", kindBool, "false", "refuse http push URLs (422 at subscription creation, a permanent failure at delivery)", boolInto(func(c *Config) *bool { return &c.PushTarget.HTTPSOnly })},
	{"PUSH_AUTH_KEY", "push-auth-key", kindKey, "", "the key that encrypts the push credentials of subscriptions (pushAuth) in the database: the base64 of 32 random bytes (openssl rand -base64 32); without it pushAuth is refused, except with an SQLite DATABASE_URL, where a key file is made beside the database; secret, never logged", func(c *Config, v string) error {
		if v == "" {
			return nil
		}
		k, err := seal.ParseKey(v)
		c.PushAuth.Key = k
		return err
	}},
	{"PUSH_AUTH_OLD_KEYS", "push-auth-old-keys", kindKeys, "", "comma-separated earlier PUSH_AUTH_KEYs, which only decrypt: credentials they encrypted are encrypted again with PUSH_AUTH_KEY at start; secret, never logged", func(c *Config, v string) error {
		c.PushAuth.OldKeys = nil
		for part := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			k, err := seal.ParseKey(part)
			if err != nil {
				return err
			}
			c.PushAuth.OldKeys = append(c.PushAuth.OldKeys, k)
		}
		return nil
	}},
	{"PUSH_TEST_INTERVAL", "push-test-interval", kindDuration, formatDuration(subscriptions.DefaultTestInterval), "how often one subscription may be sent a test event (POST …:test) by one API process", durationInto(func(c *Config) *time.Duration { return &c.PushTestInterval })},
	{"PUSH_MAX_RETRY_AFTER", "push-max-retry-after", kindDuration, formatDuration(base.Push.MaxRetryAfter), "longest delay a Retry-After header can ask for", durationInto(func(c *Config) *time.Duration { return &c.Push.MaxRetryAfter })},
	{"OUTBOX_POLL_INTERVAL", "outbox-poll", kindDuration, formatDuration(base.Outbox.Relay.Poll), "how often the outbox relay looks for sends left pending (by a crash or a broker outage)", durationInto(func(c *Config) *time.Duration { return &c.Outbox.Relay.Poll })},
	{"OUTBOX_HANDOFF", "outbox-handoff", kindInt, strconv.Itoa(base.Outbox.Relay.HandOff), "fresh sends a publish may hand to its process's outbox relay in memory, so that they go to the broker at once instead of waiting for a claim (0: every publish waits for a claim)", intInto(0, 100000, func(c *Config) *int { return &c.Outbox.Relay.HandOff })},
	{"OUTBOX_MAX_REFUSALS", "outbox-max-refusals", kindInt, strconv.Itoa(base.Outbox.Relay.MaxRefusals), "how often the broker may refuse one copy (an ERROR frame: no such queue, not authorised, ...) before it becomes a dead letter with reason broker_refused; the relay tries it again 1 s, 2 s, 4 s, ... up to a minute later (10: about 4 minutes); a copy refused because the address is full is kept up to 24 h", intInto(1, 1000, func(c *Config) *int { return &c.Outbox.Relay.MaxRefusals })},
	{"EVENT_RETENTION", "event-retention", kindDuration, "168h", "how long events and their log are kept when the room does not expire them sooner (at least 24h, the idempotency window)", durationInto(func(c *Config) *time.Duration { return &c.Outbox.Retention })},
	{"PURGE_INTERVAL", "purge-interval", kindDuration, "10m", "how often expired events and logs are purged", durationInto(func(c *Config) *time.Duration { return &c.Outbox.PurgeInterval })},
	{"LOG_LEVEL", "log-level", kindLevel, "info", "debug, info, warn or error", func(c *Config, v string) error {
		return c.LogLevel.UnmarshalText([]byte(v))
	}},
	{"LOG_FORMAT", "log-format", kindFormat, "text", "text or json", func(c *Config, v string) error {
		if v != "text" && v != "json" {
			return errors.New("must be text or json")
		}
		c.LogFormat = v
		return nil
	}},
	{"MIGRATE_ON_START", "migrate-on-start", kindBool, "true", "apply database migrations when serve starts", boolInto(func(c *Config) *bool { return &c.MigrateOnStart })},
	{"CATALOG_CACHE_TTL", "catalog-cache-ttl", kindDuration, "1s", "how long publishing trusts what it read of rooms, event types, versions and subscriptions: a change made through another API process reaches this one's publishes within it (0: read every time)", func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > time.Minute {
			return errors.New("must be a duration from 0 to 1m, such as 1s")
		}
		c.CatalogCacheTTL = d
		return nil
	}},
	{"AUTH_DISABLED", "auth-disabled", kindBool, "false", "serve the API without API keys (every request may do anything); only for trusted networks and tests", boolInto(func(c *Config) *bool { return &c.Auth.Disabled })},
	{"AUTH_BOOTSTRAP_ADMIN_KEY", "auth-bootstrap-admin-key", kindAPIKey, "", "an admin API key (at least 32 characters) to create at start unless it exists; secret, never logged", func(c *Config, v string) error {
		c.Auth.BootstrapAdminKey = v
		if v == "" {
			return nil
		}
		return auth.CheckTokenShape(v)
	}},
	{"PUBLISH_RATE_LIMIT", "publish-rate-limit", kindNumber, "0", "events per second each API key may publish, per API process (0: no limit; a key's publishRateLimit overrides it)", func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > auth.MaxPublishRate || math.IsNaN(f) {
			return fmt.Errorf("must be a number from 0 to %d", auth.MaxPublishRate)
		}
		c.Limits.PublishRate = f
		return nil
	}},
	{"PUBLISH_RATE_BURST", "publish-rate-burst", kindInt, "0", "events a key may publish at once above its rate (0: one second's worth)", intInto(0, auth.MaxPublishBurst, func(c *Config) *int { return &c.Limits.PublishBurst })},
	{"PUBLISH_MAX_PAYLOAD", "publish-max-payload", kindInt, "262144", "largest payload of one event in bytes (a request is also bounded by HTTP_BODY_LIMIT)", intInto(1, 64<<20, func(c *Config) *int { return &c.Limits.MaxPayload })},
	{"ROOM_MAX_SUBSCRIPTIONS", "room-max-subscriptions", kindInt, "1000", "subscriptions one room may have (TERMINATED and REJECTED ones do not count; 0: no cap)", intInto(0, 1000000, func(c *Config) *int { return &c.Limits.MaxRoomSubscriptions })},
	{"METRICS_ROOM_LABEL", "metrics-room-label", kindBool, "true", "label the publish counters of /metrics by room (one series per room; false counts every room under room=\"_all\")", boolInto(func(c *Config) *bool { return &c.Metrics.RoomLabel })},
	{"CONSOLE_ENABLED", "console", kindBool, "true", "serve the web console at /console/ (API processes; sign in with an API key)", boolInto(func(c *Config) *bool { return &c.Console.Enabled })},
	{"CONSOLE_SESSION_IDLE", "console-session-idle", kindDuration, "30m", "a console session not used for this long ends", sessionLifetime(func(c *Config) *time.Duration { return &c.Console.IdleTimeout })},
	{"CONSOLE_SESSION_MAX", "console-session-max", kindDuration, "12h", "a console session ends this long after sign-in, used or not (at least CONSOLE_SESSION_IDLE)", sessionLifetime(func(c *Config) *time.Duration { return &c.Console.MaxLifetime })},
	{"HTTP_BODY_LIMIT", "body-limit", kindInt, "1048576", "largest request body in bytes", func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1024 {
			return errors.New("must be a number of bytes, at least 1024")
		}
		c.HTTP.BodyLimit = n
		return nil
	}},
	{"HTTP_READ_TIMEOUT", "read-timeout", kindDuration, "30s", "time to read a request", durationInto(func(c *Config) *time.Duration { return &c.HTTP.ReadTimeout })},
	{"HTTP_WRITE_TIMEOUT", "write-timeout", kindDuration, "60s", "time to write a response (long polls included)", durationInto(func(c *Config) *time.Duration { return &c.HTTP.WriteTimeout })},
	{"SHUTDOWN_TIMEOUT", "shutdown-timeout", kindDuration, "15s", "time in-flight requests get to finish on SIGTERM", durationInto(func(c *Config) *time.Duration { return &c.HTTP.ShutdownTimeout })},
}

// shown is v as an error about setting s quotes it: a connection string
// with its passwords masked, a secret not at all.
func (s setting) shown(v string) string {
	switch s.env {
	case "DATABASE_URL", "BROKER_URL":
		return redact.ConnString(v)
	case "AUTH_BOOTSTRAP_ADMIN_KEY", "PUSH_AUTH_KEY", "PUSH_AUTH_OLD_KEYS":
		return redact.Mask
	}
	return v
}

// formatDuration writes d as a setting's default: 1h, 15s, 250ms, not
// time.Duration's 1h0m0s.
func formatDuration(d time.Duration) string {
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

func boolInto(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("must be true or false")
		}
		*field(c) = b
		return nil
	}
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

// sessionLifetime reads a console session lifetime: a minute to 30 days.
func sessionLifetime(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > 30*24*time.Hour {
			return errors.New("must be a duration from 1m to 720h, such as 30m")
		}
		*field(c) = d
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

// LoadConfig reads defaults, then the environment, then flags from args.
// An empty value counts as unset, in the environment as in a flag. A bool
// setting's flag may stand alone (-auth-disabled) or take a value
// (-auth-disabled=false, or -auth-disabled false as scripts wrote it).
func LoadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("messaging-api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	values := make([]flagValue, len(settings))
	for i, s := range settings {
		values[i].bool = s.kind == kindBool
		fs.Var(&values[i], s.flag, s.help)
	}
	fs.Usage = func() { fmt.Fprintln(stderr, "(messaging-api help lists the commands and every flag)") }
	if err := fs.Parse(joinBoolValues(args)); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return Config{}, fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	cfg := base
	var errs []error
	for i, s := range settings {
		v, from := s.def, "default"
		if e := getenv(s.env); e != "" {
			v, from = e, "env "+s.env
		}
		if values[i].v != "" {
			v, from = values[i].v, "flag -"+s.flag
		}
		if err := s.apply(&cfg, v); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s=%q): %w", s.env, from, s.shown(v), err))
		}
	}
	tracingCfg, err := LoadTracing(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Tracing = tracingCfg
	if len(errs) == 0 && cfg.Console.IdleTimeout > cfg.Console.MaxLifetime {
		errs = append(errs, fmt.Errorf("CONSOLE_SESSION_IDLE (%v) must not exceed CONSOLE_SESSION_MAX (%v)", cfg.Console.IdleTimeout, cfg.Console.MaxLifetime))
	}
	return cfg, errors.Join(errs...)
}

// ErrUsage marks an error in the command line (not in a setting's value):
// an unknown flag, a flag without its value, an extra argument. LoadConfig
// has written what is wrong to its stderr.
var ErrUsage = errors.New("usage")

// flagValue is a setting's flag: the text given, which the setting's apply
// reads as it reads the environment's.
type flagValue struct {
	v    string
	bool bool
}

func (f *flagValue) String() string {
	if f == nil {
		return ""
	}
	return f.v
}

func (f *flagValue) Set(v string) error {
	f.v = v
	return nil
}

// IsBoolFlag lets a bool setting's flag stand alone, meaning true.
func (f *flagValue) IsBoolFlag() bool { return f.bool }

// joinBoolValues rewrites "-flag VALUE" as "-flag=VALUE" for the bool
// settings, so that the form with a separate value keeps working although
// their flags may also stand alone.
func joinBoolValues(args []string) []string {
	kinds := make(map[string]kind, len(settings))
	for _, s := range settings {
		kinds[s.flag] = s.kind
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "-" || a == "--" || !strings.HasPrefix(a, "-") {
			return append(out, args[i+1:]...)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		k, known := kinds[name]
		if !known || i+1 == len(args) { // with "=", or not a setting: left to the flag package
			continue
		}
		if k != kindBool {
			out = append(out, args[i+1]) // its value, whatever it looks like
			i++
			continue
		}
		if _, err := strconv.ParseBool(args[i+1]); err == nil {
			out[len(out)-1] = a + "=" + args[i+1]
			i++
		}
	}
	return out
}

// WriteSettings writes the flags of the settings, each with the kind of
// value it takes, its environment variable, default and help.
func WriteSettings(w io.Writer) {
	for _, s := range settings {
		value := " " + string(s.kind)
		if s.kind == kindBool {
			value = "[=true|false]"
		}
		def := "default " + s.def
		if s.def == "" {
			def = "no default"
		}
		fmt.Fprintf(w, "  -%s%s\n    \t%s (env %s; %s)\n", s.flag, value, s.help, s.env, def)
	}
}

// LogValue lists the settings with secrets masked, for the start-up log line.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("http_addr", c.HTTP.Addr),
		slog.String("database_url", store.Redact(c.DatabaseURL)),
		slog.String("broker_url", broker.Redact(c.BrokerURL)),
		slog.String("log_level", c.LogLevel.String()),
		slog.Bool("migrate_on_start", c.MigrateOnStart),
		slog.Int64("body_limit", c.HTTP.BodyLimit),
		slog.Any("push_allowed_cidrs", c.PushTarget.Allow),
		slog.Bool("push_https_only", c.PushTarget.HTTPSOnly),
		slog.String("push_auth_key_id", c.PushAuth.Key.ID()),
		slog.Any("push_auth_old_key_ids", keyIDs(c.PushAuth.OldKeys)),
		slog.Duration("push_test_interval", c.PushTestInterval),
		slog.Duration("catalog_cache_ttl", c.CatalogCacheTTL),
		slog.Bool("auth_disabled", c.Auth.Disabled),
		slog.Bool("auth_bootstrap_admin_key_set", c.Auth.BootstrapAdminKey != ""),
		slog.Float64("publish_rate_limit", c.Limits.PublishRate),
		slog.Int("publish_rate_burst", c.Limits.PublishBurst),
		slog.Int("publish_max_payload", c.Limits.MaxPayload),
		slog.Int("room_max_subscriptions", c.Limits.MaxRoomSubscriptions),
		slog.Bool("metrics_room_label", c.Metrics.RoomLabel),
		slog.Bool("console_enabled", c.Console.Enabled),
		slog.Duration("console_session_idle", c.Console.IdleTimeout),
		slog.Duration("console_session_max", c.Console.MaxLifetime),
		slog.Any("tracing", c.Tracing),
	)
}

// keyIDs are the ids of keys, which may be logged.
func keyIDs(keys []seal.Key) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.ID()
	}
	return out
}

// NewLogger is the service's logger as cfg configures it.
func NewLogger(cfg Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
