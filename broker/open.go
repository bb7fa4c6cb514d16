package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/roomhub/messaging-api/redact"
)

// Open connects to the broker named by rawURL.
//
//	"", "embedded", "embedded://"          the in-process broker (not durable)
//	stomp://user:pass@host:port?options    STOMP over TCP (default port 61613)
//	stomp+ssl://user:pass@host:port?...    STOMP over TLS (default port 61614; stomp+tls:// too)
//	stomp://user:pass@h1:port,h2:port?...  several hosts (at most 16) of one broker: an
//	                                       Artemis primary and its backups
//
// With several hosts every connection (each sender, each subscription, each
// management call) goes to the live one: it tries the hosts in the URL's
// order, starting from the one a connection last reached, and takes the
// first that accepts its CONNECT. A host that refuses the TCP connection (an
// Artemis backup opens its acceptors only once it becomes live) costs nothing,
// one that does not answer costs connectTimeout; a round over every host is
// one step of the redial backoff. Each host may omit its port (the scheme's
// default applies) and is the TLS server name of its own connections; the
// login, password and options hold for every host. A lost connection redials
// the same way and resubscribes; a send whose receipt had not come is sent
// again (Send returns only on a receipt), so a failover may store a message
// twice but never loses one the broker confirmed to a caller.
//
// STOMP options (query parameters; unknown ones are an error so typos surface):
//
//	dialect=artemis|activemq   broker flavour (default artemis)
//	senders=4                  connections used by Send; each carries one send awaiting its receipt
//	heartbeat=10s              heart-beat interval both ways; 0 turns heart-beats off (ActiveMQ Classic only:
//	                           Artemis closes a connection without heart-beats once idle for 60s)
//	prefetch=8                 prefetch of subscriptions that ask for 0
//	windowPerMessage=1024      Artemis: consumer-window-size bytes per prefetched message
//	connectTimeout=10s         bound on TCP + TLS + CONNECT
//	receiptTimeout=30s         a send without receipt after this drops its connection
//	maxReconnectDelay=10s      cap of the exponential redial backoff (which starts at 100ms)
//	managementAddress=activemq.management   Artemis management address
//
// Open fails fast when the URL is wrong or the broker refuses the login. A broker
// that cannot be reached is not an error: the connections keep redialing in the
// background, Connected reports false and Send waits for its context.
func Open(ctx context.Context, rawURL string, logger *slog.Logger) (Broker, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if isEmbeddedURL(rawURL) {
		logger.WarnContext(ctx, "broker: using the embedded in-process broker; messages are NOT durable and are lost when the process stops",
			"url", rawURL)
		return NewEmbedded(logger), nil
	}
	cfg, err := parseStompURL(rawURL)
	if err != nil {
		return nil, err
	}
	return openStomp(ctx, cfg, logger, time.Now)
}

// IsEmbedded reports whether rawURL names the in-process broker, which only
// the process that opens it can reach.
func IsEmbedded(rawURL string) bool { return isEmbeddedURL(rawURL) }

func isEmbeddedURL(raw string) bool {
	switch strings.TrimSpace(raw) {
	case "", "embedded", "embedded:", "embedded://":
		return true
	}
	return false
}

// dialectNamed returns what makes the dialect a URL names (option dialect)
// for a broker: the one place that knows which type serves which broker.
func dialectNamed(name string) (newDialect func(*stompBroker) (dialect, error), ok bool) {
	switch name {
	case "artemis":
		return newArtemis, true
	case "activemq":
		return newActiveMQ, true
	}
	return nil, false
}

// defaultWindowPerMessage is the Artemis consumer window, in bytes, that one
// prefetched message is given: a message the service sends with a 200-byte
// payload is a MESSAGE frame of about 960 bytes, so a prefetch of n holds about
// n such messages (docs/benchmarks.md#broker-flow-control-and-pulls).
const defaultWindowPerMessage = 1 << 10

// maxHosts bounds the host list of a STOMP URL: every connection may try each
// host once per round, so a long list is a slow round.
const maxHosts = 16

// stompHost is one broker host of a STOMP URL.
type stompHost struct {
	addr string      // host:port, as dialed and logged
	name string      // the host alone: the CONNECT host header and the TLS server name
	tls  *tls.Config // nil for stomp://
}

// stompConfig is a parsed STOMP broker URL.
type stompConfig struct {
	hosts             []stompHost // in the URL's order; at least one
	login, passcode   string
	dialect           string // see dialectNamed
	senders           int
	heartbeat         time.Duration
	prefetch          int
	windowPerMessage  int
	connectTimeout    time.Duration
	receiptTimeout    time.Duration
	minReconnectDelay time.Duration
	maxReconnectDelay time.Duration
	managementAddress string
	redacted          string // the URL without its password, for logs
}

func defaultStompConfig() stompConfig {
	return stompConfig{
		dialect:           "artemis",
		senders:           4,
		heartbeat:         10 * time.Second,
		prefetch:          defaultPrefetch,
		windowPerMessage:  defaultWindowPerMessage,
		connectTimeout:    10 * time.Second,
		receiptTimeout:    30 * time.Second,
		minReconnectDelay: 100 * time.Millisecond,
		maxReconnectDelay: 10 * time.Second,
		managementAddress: "activemq.management",
	}
}

// parseStompURL validates rawURL and returns the configuration it describes;
// errors name the offending part but never echo the password.
//
// url.Parse reads one host only, so the host list is cut out first: the
// authority runs from "://" to the first '/', '?' or '#', its userinfo to
// its last '@' (as url.Parse reads it), and the rest is the host list, split
// at commas. The URL with one placeholder host in place of the list goes to
// url.Parse (userinfo, path, query); each host is parsed on its own.
func parseStompURL(rawURL string) (stompConfig, error) {
	cfg := defaultStompConfig()
	red := Redact(rawURL)
	cfg.redacted = red
	scheme, rest, found := strings.Cut(rawURL, "://")
	if !found {
		scheme, _, _ = strings.Cut(rawURL, ":")
	}
	scheme = strings.ToLower(scheme)
	defaultPort := "61613"
	switch scheme {
	case "stomp":
	case "stomp+ssl", "stomp+tls":
		defaultPort = "61614"
	default:
		return cfg, fmt.Errorf("broker: url %s: unsupported scheme %q (want embedded, stomp or stomp+ssl)", red, scheme)
	}
	if !found {
		return cfg, fmt.Errorf("broker: url %s: missing host (want %s://host:port)", red, scheme)
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	at := strings.LastIndex(authority, "@")
	beforeQuery, _, _ := strings.Cut(tail, "?")
	if strings.Contains(beforeQuery, "@") || (at < 0 && strings.Contains(tail, "@")) {
		// Most likely a password holding an unescaped '/', '?' or '#': the
		// host list as read would quote a piece of it.
		return cfg, fmt.Errorf("broker: url %s: an '@' follows the host list: percent-encode '/', '?', '#' and '@' in the login and password", red)
	}
	userinfo, hostList := authority[:at+1], authority[at+1:]
	u, err := url.Parse(scheme + "://" + userinfo + "placeholder" + tail)
	if err != nil {
		return cfg, fmt.Errorf("broker: url %s: cannot parse", red)
	}
	if u.Path != "" && u.Path != "/" {
		return cfg, fmt.Errorf("broker: url %s: unexpected path %q", red, u.Path)
	}
	if u.Fragment != "" {
		return cfg, fmt.Errorf("broker: url %s: unexpected fragment", red)
	}
	if cfg.hosts, err = parseHosts(scheme, hostList, defaultPort); err != nil {
		return cfg, fmt.Errorf("broker: url %s: %w", red, err)
	}
	if u.User != nil {
		cfg.login = u.User.Username()
		cfg.passcode, _ = u.User.Password()
		// CONNECT headers are sent unescaped (see rawConnect), so these
		// cannot be carried at all.
		if strings.ContainsAny(cfg.login+cfg.passcode, "\r\n\x00") {
			return cfg, fmt.Errorf("broker: url %s: the login or password holds a line break or NUL, which STOMP cannot carry", red)
		}
	}

	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return cfg, fmt.Errorf("broker: url %s: query: %w", red, err)
	}
	for key, values := range q {
		if len(values) != 1 {
			return cfg, fmt.Errorf("broker: url %s: option %q given %d times", red, key, len(values))
		}
		v := values[0]
		var err error
		switch key {
		case "dialect":
			cfg.dialect = strings.ToLower(v)
			if _, ok := dialectNamed(cfg.dialect); !ok {
				err = fmt.Errorf("unknown dialect %q (want artemis or activemq)", v)
			}
		case "senders":
			cfg.senders, err = parseIntOption(v, 1, 64)
		case "heartbeat":
			cfg.heartbeat, err = parseDurationOption(v, 0, time.Hour)
			if err == nil && cfg.heartbeat > 0 && cfg.heartbeat < 100*time.Millisecond {
				err = fmt.Errorf("%s is below 100ms", v)
			}
		case "prefetch":
			cfg.prefetch, err = parseIntOption(v, 1, 10000)
		case "windowPerMessage":
			cfg.windowPerMessage, err = parseIntOption(v, 1, 16<<20)
		case "connectTimeout":
			cfg.connectTimeout, err = parseDurationOption(v, 100*time.Millisecond, 5*time.Minute)
		case "receiptTimeout":
			cfg.receiptTimeout, err = parseDurationOption(v, 100*time.Millisecond, 10*time.Minute)
		case "maxReconnectDelay":
			cfg.maxReconnectDelay, err = parseDurationOption(v, cfg.minReconnectDelay, 10*time.Minute)
		case "managementAddress":
			if v == "" {
				err = fmt.Errorf("empty")
			}
			cfg.managementAddress = v
		default:
			err = fmt.Errorf("unknown option")
		}
		if err != nil {
			return cfg, fmt.Errorf("broker: url %s: option %s: %w", red, key, err)
		}
	}
	return cfg, nil
}

// parseHosts parses the comma-separated host list of a STOMP URL: each host
// is host[:port] (an IPv6 address in brackets), with the scheme's port by
// default. Errors quote the host at fault; the list holds no userinfo.
func parseHosts(scheme, list, defaultPort string) ([]stompHost, error) {
	entries := strings.Split(list, ",")
	if len(entries) == 1 && entries[0] == "" {
		return nil, fmt.Errorf("missing host (want %s://host:port)", scheme)
	}
	if len(entries) > maxHosts {
		return nil, fmt.Errorf("%d hosts; at most %d", len(entries), maxHosts)
	}
	hosts := make([]stompHost, 0, len(entries))
	seen := make(map[string]string, len(entries))
	for i, entry := range entries {
		if entry == "" {
			return nil, fmt.Errorf("host %d of %d is empty", i+1, len(entries))
		}
		h, err := parseHost(scheme, entry, defaultPort)
		if err != nil {
			return nil, fmt.Errorf("host %q: %w", entry, err)
		}
		key := strings.ToLower(h.addr)
		if first, dup := seen[key]; dup {
			return nil, fmt.Errorf("host %q: listed twice (as %q before)", entry, first)
		}
		seen[key] = entry
		hosts = append(hosts, h)
	}
	return hosts, nil
}

func parseHost(scheme, entry, defaultPort string) (stompHost, error) {
	u, err := url.Parse(scheme + "://" + entry)
	if err != nil || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return stompHost{}, errors.New("not host[:port]")
	}
	name := u.Hostname()
	if name == "" {
		return stompHost{}, errors.New("missing host")
	}
	port := u.Port()
	if port == "" {
		if strings.HasSuffix(entry, ":") {
			return stompHost{}, errors.New("empty port")
		}
		port = defaultPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return stompHost{}, fmt.Errorf("invalid port %q", port)
	}
	h := stompHost{addr: net.JoinHostPort(name, port), name: name}
	if scheme != "stomp" {
		h.tls = &tls.Config{ServerName: name, MinVersion: tls.VersionTLS12}
	}
	return h, nil
}

func parseIntOption(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is outside [%d, %d]", n, lo, hi)
	}
	return n, nil
}

func parseDurationOption(v string, lo, hi time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration like 10s or 500ms", v)
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("%s is outside [%s, %s]", d, lo, hi)
	}
	return d, nil
}

// Redact returns rawURL with its passwords masked (the userinfo's, and a
// query parameter named like one), for logs and errors.
func Redact(rawURL string) string { return redact.ConnString(rawURL) }
