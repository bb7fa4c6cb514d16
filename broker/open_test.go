package broker

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStompURL(t *testing.T) {
	for _, tc := range []struct {
		name  string
		url   string
		check func(t *testing.T, c stompConfig)
	}{
		{"Defaults", "stomp://broker.example:61613", func(t *testing.T, c stompConfig) {
			want := defaultStompConfig()
			if len(c.hosts) != 1 || c.hosts[0].addr != "broker.example:61613" || c.hosts[0].name != "broker.example" || c.hosts[0].tls != nil {
				t.Errorf("hosts %+v", c.hosts)
			}
			if c.dialect != "artemis" || c.senders != want.senders || c.heartbeat != want.heartbeat ||
				c.prefetch != want.prefetch || c.receiptTimeout != want.receiptTimeout ||
				c.maxReconnectDelay != want.maxReconnectDelay || c.managementAddress != "activemq.management" {
				t.Errorf("defaults not applied: %+v", c)
			}
		}},
		{"DefaultPort", "stomp://localhost", func(t *testing.T, c stompConfig) {
			wantAddrs(t, c, "localhost:61613")
		}},
		{"TLS", "stomp+ssl://mq.example", func(t *testing.T, c stompConfig) {
			wantAddrs(t, c, "mq.example:61614")
			if c.hosts[0].tls == nil || c.hosts[0].tls.ServerName != "mq.example" {
				t.Errorf("tls %+v", c.hosts[0].tls)
			}
		}},
		{"IPv6", "stomp://[::1]:61623", func(t *testing.T, c stompConfig) {
			wantAddrs(t, c, "[::1]:61623")
		}},
		{"Credentials", "stomp://user:p%40ss@h:1", func(t *testing.T, c stompConfig) {
			if c.login != "user" || c.passcode != "p@ss" {
				t.Errorf("login %q passcode %q", c.login, c.passcode)
			}
			if strings.Contains(c.redacted, "p@ss") || strings.Contains(c.redacted, "p%40ss") {
				t.Errorf("redacted URL %q contains the password", c.redacted)
			}
		}},
		{"Options", "stomp://h:1/?dialect=ActiveMQ&senders=8&heartbeat=2s&prefetch=20&windowPerMessage=1024" +
			"&connectTimeout=3s&receiptTimeout=5s&maxReconnectDelay=1s&managementAddress=mgmt", func(t *testing.T, c stompConfig) {
			if c.dialect != "activemq" || c.senders != 8 || c.heartbeat != 2*time.Second || c.prefetch != 20 ||
				c.windowPerMessage != 1024 || c.connectTimeout != 3*time.Second || c.receiptTimeout != 5*time.Second ||
				c.maxReconnectDelay != time.Second || c.managementAddress != "mgmt" {
				t.Errorf("options not applied: %+v", c)
			}
		}},
		{"HeartbeatOff", "stomp://h:1?heartbeat=0s&dialect=activemq", func(t *testing.T, c stompConfig) {
			if c.heartbeat != 0 {
				t.Errorf("heartbeat = %s", c.heartbeat)
			}
		}},
		{"SchemeCase", "STOMP://h:1", func(t *testing.T, c stompConfig) {
			wantAddrs(t, c, "h:1")
		}},
		{"Hosts", "stomp://user:pass@h1:61613,h2:61614?dialect=artemis", func(t *testing.T, c stompConfig) {
			wantAddrs(t, c, "h1:61613", "h2:61614")
			if c.hosts[1].name != "h2" || c.hosts[1].tls != nil || c.login != "user" || c.passcode != "pass" || c.dialect != "artemis" {
				t.Errorf("hosts %+v login %q passcode %q dialect %q", c.hosts, c.login, c.passcode, c.dialect)
			}
		}},
		{"HostsDefaultPorts", "stomp://h1,h2:7,h3", func(t *testing.T, c stompConfig) {
			wantAddrs(t, c, "h1:61613", "h2:7", "h3:61613")
		}},
		{"HostsTLS", "stomp+ssl://u:p@mq-a.example,mq-b.example:7000/", func(t *testing.T, c stompConfig) {
			wantAddrs(t, c, "mq-a.example:61614", "mq-b.example:7000")
			for _, h := range c.hosts {
				if h.tls == nil || h.tls.ServerName != h.name {
					t.Errorf("host %s: tls %+v, want the server name %s", h.addr, h.tls, h.name)
				}
			}
			if c.hosts[0].tls == c.hosts[1].tls {
				t.Error("the hosts share one tls.Config")
			}
		}},
		{"HostsIPv6", "stomp://[::1]:61613,[fe80::1%25eth0],10.0.0.2:1", func(t *testing.T, c stompConfig) {
			wantAddrs(t, c, "[::1]:61613", "[fe80::1%eth0]:61613", "10.0.0.2:1")
		}},
		{"HostsPasswordWithSeparators", "stomp://user:p%2C%40%3A%2F@h1,h2", func(t *testing.T, c stompConfig) {
			wantAddrs(t, c, "h1:61613", "h2:61613")
			if c.passcode != "p,@:/" {
				t.Errorf("passcode %q", c.passcode)
			}
		}},
		{"HostsAtMost16", "stomp://" + hostList(16), func(t *testing.T, c stompConfig) {
			if len(c.hosts) != 16 {
				t.Errorf("%d hosts", len(c.hosts))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseStompURL(tc.url)
			if err != nil {
				t.Fatalf("parseStompURL(%q): %v", tc.url, err)
			}
			tc.check(t, c)
		})
	}
}

func TestParseStompURLErrors(t *testing.T) {
	for _, tc := range []struct {
		url     string
		mention string // the error must name what is wrong
	}{
		{"amqp://h:5672", `unsupported scheme "amqp"`},
		{"stomp://", "missing host"},
		{"stomp:h:1", "missing host"},
		{"stomp://h:1/vhost", `unexpected path "/vhost"`},
		{"stomp://h:0", `invalid port "0"`},
		{"stomp://h:99999", `invalid port "99999"`},
		{"stomp://h:", "empty port"},
		{"stomp://h:1#frag", "fragment"},
		{"stomp://h:1?dialect=rabbit", `unknown dialect "rabbit"`},
		{"stomp://h:1?senders=0", "option senders: 0 is outside [1, 64]"},
		{"stomp://h:1?senders=four", `option senders: "four" is not an integer`},
		{"stomp://h:1?heartbeat=10", `option heartbeat: "10" is not a duration`},
		{"stomp://h:1?heartbeat=10ms", "below 100ms"},
		{"stomp://user:hunter2%0A@h:1", "line break or NUL"},
		{"stomp://h:1?prefetch=0", "option prefetch"},
		{"stomp://h:1?receiptTimeout=1ms", "option receiptTimeout"},
		{"stomp://h:1?maxReconnectDelay=1ms", "option maxReconnectDelay"},
		{"stomp://h:1?managementAddress=", "option managementAddress: empty"},
		{"stomp://h:1?sender=4", "option sender: unknown option"},
		{"stomp://h:1?senders=1&senders=2", `option "senders" given 2 times`},
		{"stomp://user:hunter2@h:1?bogus=1", "user:xxxxx@h:1"},
		{"stomp://user:hunter2@h:1 x", `host "h:1 x": not host[:port]`},
		{"stomp://user:hunter2@h:1?bogus=1", "user:xxxxx@h:1"},
		{"stomp://user:hunter2@h1:1,h2:x?dialect=artemis", `host "h2:x": not host[:port]`},
		{"stomp://user:hunter2@h1:1,h2:0", `host "h2:0": invalid port "0"`},
		{"stomp://user:hunter2@h1:1,h2:", `host "h2:": empty port`},
		{"stomp://user:hunter2@h1:1,:61613", `host ":61613": missing host`},
		{"stomp://user:hunter2@h1:1,,h2:1", "host 2 of 3 is empty"},
		{"stomp://user:hunter2@h1:1,", "host 2 of 2 is empty"},
		{"stomp://user:hunter2@,h1:1", "host 1 of 2 is empty"},
		{"stomp://user:hunter2@h1:1, h2:1", `host " h2:1": not host[:port]`},
		{"stomp://user:hunter2@h1:61613,h1", `host "h1": listed twice (as "h1:61613" before)`},
		{"stomp://user:hunter2@H1:1,h1:1", `host "h1:1": listed twice`},
		{"stomp://user:hunter2@[::1]:1,[::1]:1", `host "[::1]:1": listed twice`},
		{"stomp://user:hunter2@" + hostList(17), "17 hosts; at most 16"},
		{"stomp://user:hunter2@h1:1,[::1:2", `host "[::1:2": not host[:port]`},
		{"stomp://user:hunter2@h1:1,h2:1/vhost", `unexpected path "/vhost"`},
		// A password with an unescaped '/', '?' or '#': the host list as read
		// would hold a piece of it, so nothing of it is quoted.
		{"stomp://user:hun/ter2@h1:1,h2:1", "an '@' follows the host list"},
		{"stomp://user:hun?ter2@h1:1,h2:1", "an '@' follows the host list"},
		{"stomp://user:hun#ter2@h1:1", "an '@' follows the host list"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := parseStompURL(tc.url)
			if err == nil {
				t.Fatalf("parseStompURL(%q) succeeded", tc.url)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
			for _, piece := range []string{"hunter2", "hun", "ter2"} {
				if strings.Contains(err.Error(), piece) {
					t.Errorf("error %q leaks (part of) the password", err)
				}
			}
		})
	}
}

func wantAddrs(t *testing.T, c stompConfig, addrs ...string) {
	t.Helper()
	var got []string
	for _, h := range c.hosts {
		got = append(got, h.addr)
	}
	if !slices.Equal(got, addrs) {
		t.Errorf("hosts %q, want %q", got, addrs)
	}
}

// hostList is a list of n distinct hosts.
func hostList(n int) string {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = "h" + strconv.Itoa(i) + ":61613"
	}
	return strings.Join(hosts, ",")
}

// TestOpenRefusesOptionsOfTheWrongDialect: options a dialect cannot work
// with fail Open (port 1 refuses connections, which alone is no error).
func TestOpenRefusesOptionsOfTheWrongDialect(t *testing.T) {
	for _, tc := range []struct{ url, mention string }{
		{"stomp://user:hunter2@127.0.0.1:1?heartbeat=0", "0 is refused with dialect=artemis"},
		{"stomp://127.0.0.1:1?heartbeat=0s&dialect=artemis", "connection TTL"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			b, err := Open(t.Context(), tc.url, slog.New(slog.DiscardHandler))
			if err == nil {
				_ = b.Close()
				t.Fatalf("Open(%q) succeeded", tc.url)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q leaks the password", err)
			}
		})
	}
}

func TestOpenEmbedded(t *testing.T) {
	for _, raw := range []string{"", "embedded", "embedded://", " embedded "} {
		t.Run(raw, func(t *testing.T) {
			var logged strings.Builder
			b, err := Open(t.Context(), raw, slog.New(slog.NewTextHandler(&logged, nil)))
			if err != nil {
				t.Fatalf("Open(%q): %v", raw, err)
			}
			defer b.Close()
			if _, ok := b.(*Embedded); !ok {
				t.Errorf("Open(%q) = %T, want *Embedded", raw, b)
			}
			if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "NOT durable") {
				t.Errorf("no warning about durability; logged %q", logged.String())
			}
		})
	}
}

func TestOpenUnreachableBrokerIsNotAnError(t *testing.T) {
	// Port 1 on localhost refuses connections: the broker is "down", not misconfigured.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	b, err := Open(ctx, "stomp://127.0.0.1:1?dialect=activemq&connectTimeout=500ms", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b.Close()
	if b.Connected() {
		t.Error("Connected() = true without a broker")
	}
	sendCtx, cancelSend := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancelSend()
	err = b.Send(sendCtx, Message{Destination: Destination{Address: "a", Queue: "q"}, Attempt: 1})
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Errorf("Send without a broker: %v, want the context's deadline", err)
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"stomp://user:secret@h:61613?dialect=artemis", "stomp://user:xxxxx@h:61613?dialect=artemis"},
		{"stomp://user@h:61613", "stomp://user@h:61613"},
		{"stomp://user:secret@h1:61613,h2:61613?dialect=artemis", "stomp://user:xxxxx@h1:61613,h2:61613?dialect=artemis"},
		{"stomp+ssl://user:p%2C%40@h1,[::1]:1", "stomp+ssl://user:xxxxx@h1,[::1]:1"},
		{"stomp://h:61613", "stomp://h:61613"},
		{"embedded", "embedded"},
		{"", ""},
		// Unparseable URLs still lose their password.
		{"stomp://user:sec ret@h:1/x", "stomp://user:xxxxx@h:1/x"},
		{"stomp://user:secret@h:1 ?a=b", "stomp://user:xxxxx@h:1 ?a=b"},
		{"garbage user:secret@host", "xxxxx"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := Redact(tc.in); got != tc.want {
				t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	lo, hi := 100*time.Millisecond, 10*time.Second
	for _, tc := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{0, 0, 50 * time.Millisecond},
		{0, 0.999999, 100 * time.Millisecond},
		{1, 0, 100 * time.Millisecond},
		{3, 0.5, 600 * time.Millisecond}, // d = 800ms: 400ms + 0.5 × 400ms
		{6, 0, 3200 * time.Millisecond},
		{7, 0, 5 * time.Second}, // 12.8s capped at 10s
		{40, 0, 5 * time.Second},
		{1000, 0.5, 7500 * time.Millisecond},
	} {
		got := backoff(tc.attempt, lo, hi, tc.r)
		if diff := got - tc.want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("backoff(%d, r=%v) = %s, want %s", tc.attempt, tc.r, got, tc.want)
		}
	}
}

func TestConsumerWindow(t *testing.T) {
	c := defaultStompConfig()
	for _, tc := range []struct{ prefetch, want int }{{1, 0}, {0, 0}, {2, 2 << 10}, {8, 8 << 10}, {256, 256 << 10}} {
		if got := consumerWindow(tc.prefetch, c.windowPerMessage); got != tc.want {
			t.Errorf("consumerWindow(%d) = %d, want %d", tc.prefetch, got, tc.want)
		}
	}
	// The largest options allowed overflow Artemis' int32: clamped.
	c, err := parseStompURL("stomp://h:1?prefetch=10000&windowPerMessage=16777216")
	if err != nil {
		t.Fatal(err)
	}
	if got := consumerWindow(10000, c.windowPerMessage); got != math.MaxInt32 {
		t.Errorf("consumerWindow(10000) with 16 MiB per message = %d, want %d", got, math.MaxInt32)
	}
}
