package netguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		kind string // "" when allowed; else a part of the refusal
	}{
		// Public addresses pass.
		{"93.184.215.14", ""},
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"100.63.255.255", ""}, // just below CGNAT
		{"100.128.0.0", ""},    // just above CGNAT
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"2606:4700:4700::1111", ""},
		{"2a00:1450:4001:80b::200e", ""},
		// IPv4 special-purpose ranges.
		{"0.0.0.0", "is an unspecified address"},
		{"0.1.2.3", "reserved (this network)"},
		{"10.0.0.1", "is a private address"},
		{"10.255.255.255", "is a private address"},
		{"100.64.0.1", "is a CGNAT address"},
		{"100.127.255.254", "is a CGNAT address"},
		{"127.0.0.1", "is a loopback address"},
		{"127.255.0.9", "is a loopback address"},
		{"169.254.0.1", "is a link-local address"},
		{"169.254.169.254", "is a cloud metadata address"},
		{"169.254.170.2", "is a cloud metadata address"},
		{"100.100.100.200", "is a cloud metadata address"},
		{"168.63.129.16", "is a cloud metadata address"},
		{"172.16.0.1", "is a private address"},
		{"172.31.255.255", "is a private address"},
		{"192.0.0.8", "IETF protocol assignments"},
		{"192.0.2.10", "is a documentation address"},
		{"192.88.99.1", "6to4 relay anycast"},
		{"192.168.1.1", "is a private address"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.51.100.7", "is a documentation address"},
		{"203.0.113.9", "is a documentation address"},
		{"224.0.0.1", "is a multicast address"},
		{"239.255.255.250", "is a multicast address"},
		{"240.0.0.1", "future use"},
		{"255.255.255.255", "is a broadcast address"},
		// IPv6 special-purpose ranges.
		{"::", "is an unspecified address"},
		{"::1", "is a loopback address"},
		{"::7f00:1", "IPv4-compatible"},
		{"fe80::1", "is a link-local address"},
		{"fe80::1%eth0", "is a link-local address"},
		{"fc00::1", "is a unique-local address"},
		{"fd12:3456:789a::1", "is a unique-local address"},
		{"fd00:ec2::254", "is a cloud metadata address"},
		{"fec0::1", "site-local"},
		{"ff02::1", "is a multicast address"},
		{"ff0e::101", "is a multicast address"},
		{"100::1", "discard-only"},
		{"2001::1", "is a Teredo address"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "is a Teredo address"},
		{"2001:2::1", "IETF protocol assignments"},
		{"2001:10::1", "IETF protocol assignments"},
		{"2001:db8::1", "is a documentation address"},
		{"3fff::1", "is a documentation address"},
		{"5f00::1", "SRv6"},
		{"64:ff9b:1::a00:1", "local-use NAT64"},
		{"64:ff9b:1:abcd::808:808", "local-use NAT64"},
		{"64:ff9b:2::1", "is a non-global IPv6 address"},
		{"400::1", "is a non-global IPv6 address"},
		{"4000::1", "is a non-global IPv6 address"},
		{"c000::1", "is a non-global IPv6 address"},
		{"3ffe::1", ""}, // global unicast (the 6bone, returned), not special
		{"::ffff:0:a00:1", "IPv4-translated"},
		// IPv4 embedded in IPv6: judged as the IPv4 address.
		{"::ffff:127.0.0.1", "embeds 127.0.0.1 (IPv4-mapped), a loopback address"},
		{"::ffff:10.1.2.3", "embeds 10.1.2.3 (IPv4-mapped), a private address"},
		{"::ffff:169.254.169.254", "embeds 169.254.169.254 (IPv4-mapped), a cloud metadata address"},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::7f00:1", "embeds 127.0.0.1 (NAT64), a loopback address"},
		{"64:ff9b::a9fe:a9fe", "embeds 169.254.169.254 (NAT64), a cloud metadata address"},
		{"64:ff9b::192.168.0.1", "embeds 192.168.0.1 (NAT64), a private address"},
		{"64:ff9b::808:808", ""},
		{"2002:7f00:1::1", "embeds 127.0.0.1 (6to4), a loopback address"},
		{"2002:a00:1::", "embeds 10.0.0.1 (6to4), a private address"},
		{"2002:a9fe:a9fe::1", "embeds 169.254.169.254 (6to4), a cloud metadata address"},
		{"2002:6440:1::1", "embeds 100.64.0.1 (6to4), a CGNAT address"},
		{"2002:808:808::1", ""},
	}
	var g Guard
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			err := g.CheckAddr(netip.MustParseAddr(tt.addr))
			if tt.kind == "" {
				if err != nil {
					t.Fatalf("CheckAddr(%s) = %v, want allowed", tt.addr, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckAddr(%s) = nil, want refused (%s)", tt.addr, tt.kind)
			}
			var re *RefusedError
			if !errors.As(err, &re) || !errors.Is(err, ErrRefused) {
				t.Fatalf("CheckAddr(%s) = %T, want a *RefusedError matching ErrRefused", tt.addr, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "refused: ") || !strings.HasSuffix(msg, "(SSRF guard)") || !strings.Contains(msg, tt.kind) {
				t.Errorf("CheckAddr(%s) = %q, want refused: ... %s ... (SSRF guard)", tt.addr, msg, tt.kind)
			}
		})
	}
	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		if err := g.CheckAddr(netip.Addr{}); !errors.Is(err, ErrRefused) {
			t.Errorf("CheckAddr(zero) = %v, want refused", err)
		}
	})
}

func TestCheckAddrMessage(t *testing.T) {
	t.Parallel()
	got := Guard{}.CheckAddr(netip.MustParseAddr("10.0.0.1")).Error()
	if want := "refused: 10.0.0.1 is a private address (SSRF guard)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestAllow(t *testing.T) {
	t.Parallel()
	allow, err := ParseAllow("127.0.0.0/8, ::1/128,10.1.0.0/16, 169.254.169.254")
	if err != nil {
		t.Fatal(err)
	}
	g := Guard{Allow: allow}
	tests := []struct {
		addr    string
		allowed bool
	}{
		{"127.0.0.1", true},
		{"127.9.9.9", true},
		{"::1", true},
		{"::ffff:127.0.0.1", true}, // the mapped form of an allowed address
		{"64:ff9b::7f00:1", true},  // NAT64 of an allowed address
		{"2002:7f00:1::", true},    // 6to4 of an allowed address
		{"10.1.200.3", true},
		{"10.2.0.1", false},
		{"169.254.169.254", true},
		{"169.254.169.253", false},
		{"192.168.0.1", false},
		{"fe80::1", false},
		{"8.8.8.8", true},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			if err := g.CheckAddr(netip.MustParseAddr(tt.addr)); (err == nil) != tt.allowed {
				t.Errorf("CheckAddr(%s) = %v, want allowed=%v", tt.addr, err, tt.allowed)
			}
		})
	}
}

func TestParseAllow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string // the prefixes joined by ","
		wantErr bool
	}{
		{"", "", false},
		{" , ", "", false},
		{"127.0.0.0/8,::1/128", "127.0.0.0/8,::1/128", false},
		{"10.1.2.3/8", "10.0.0.0/8", false},
		{"192.168.1.5", "192.168.1.5/32", false},
		{"fd00::1", "fd00::1/128", false},
		{"localhost", "", true},
		{"10.0.0.0/33", "", true},
		{"fe80::1%eth0", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseAllow(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseAllow(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if strings.Join(s, ",") != tt.want {
				t.Errorf("ParseAllow(%q) = %v, want %s", tt.in, s, tt.want)
			}
		})
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	tests := []struct {
		name   string
		guard  Guard
		url    string
		refuse string // "" when allowed
	}{
		{"public name", Guard{}, "https://hooks.example.com/x", ""},
		{"http name", Guard{}, "http://hooks.example.com/x", ""},
		{"public literal", Guard{}, "http://8.8.8.8:8080/x", ""},
		{"private literal", Guard{}, "http://10.0.0.1/x", "refused: 10.0.0.1 is a private address (SSRF guard)"},
		{"metadata literal", Guard{}, "http://169.254.169.254/latest/meta-data/", "cloud metadata"},
		{"loopback v6 literal", Guard{}, "http://[::1]:9000/x", "loopback"},
		{"mapped literal", Guard{}, "http://[::ffff:192.168.0.1]/x", "embeds 192.168.0.1"},
		{"zoned literal", Guard{}, "http://[fe80::1%25eth0]/x", "link-local"},
		{"localhost", Guard{}, "http://localhost:9000/hooks", "refused: localhost is a loopback address (SSRF guard)"},
		{"LOCALHOST.", Guard{}, "http://LOCALHOST.:9000/hooks", "loopback"},
		{"sub.localhost", Guard{}, "http://api.localhost/hooks", "loopback"},
		{"localhost allowed", Guard{Allow: loopback}, "http://localhost:9000/hooks", ""},
		{"loopback allowed", Guard{Allow: loopback}, "http://127.0.0.1:9000/hooks", ""},
		{"name not resolved", Guard{}, "http://localtest.me/x", ""},
		{"https only refuses http", Guard{HTTPSOnly: true}, "http://hooks.example.com/x", "https-only"},
		{"https only allows https", Guard{HTTPSOnly: true}, "https://hooks.example.com/x", ""},
		{"https only still checks the address", Guard{HTTPSOnly: true}, "https://192.168.1.1/x", "private"},
		{"other scheme", Guard{}, "ftp://hooks.example.com/x", "scheme ftp"},
		{"short IPv4", Guard{}, "http://127.1/x", "is not a host name"},
		{"decimal IPv4", Guard{}, "http://2130706433/x", "is not a host name"},
		{"hex IPv4", Guard{}, "http://0x7f000001/x", "is not a host name"},
		{"octal IPv4", Guard{}, "http://0177.0.0.1/x", "is not a host name"},
		{"hex label", Guard{}, "http://10.0x0.0.1/x", "is not a host name"},
		{"numeric first label", Guard{}, "http://1password.example.com/x", ""},
		{"digits in the last label", Guard{}, "http://hooks.example.c0m/x", ""},
		{"hex-looking name", Guard{}, "http://hooks.0xcafe.dev/x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			err = tt.guard.CheckURL(u)
			switch {
			case tt.refuse == "" && err != nil:
				t.Errorf("CheckURL(%s) = %v, want allowed", tt.url, err)
			case tt.refuse != "" && (err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.refuse)):
				t.Errorf("CheckURL(%s) = %v, want a refusal with %q", tt.url, err, tt.refuse)
			}
		})
	}
}

// TestDialerRefusesAfterResolution dials a name: the guard sees the address
// the name resolved to, not the name, and refuses before connecting.
func TestDialerRefusesAfterResolution(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	base := &net.Dialer{Timeout: 2 * time.Second, Resolver: &net.Resolver{PreferGo: true}}
	// A name that resolves to loopback, as a rebinding DNS answer would:
	// localhost comes from /etc/hosts (or the Go resolver's own fallback).
	target := net.JoinHostPort("localhost", port)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	_, err = Guard{}.Dialer(base).DialContext(ctx, "tcp4", target)
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "refused: 127.0.0.1 is a loopback address (SSRF guard)") {
		t.Fatalf("dial %s = %v, want the SSRF guard's refusal of 127.0.0.1", target, err)
	}
	select {
	case <-accepted:
		t.Fatal("the guard let the connection through")
	case <-time.After(100 * time.Millisecond):
	}

	// The same dial with loopback allowed connects.
	allow := Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	c, err := allow.Dialer(base).DialContext(ctx, "tcp4", target)
	if err != nil {
		t.Fatalf("dial %s with loopback allowed: %v", target, err)
	}
	c.Close()
}

func TestDialerKeepsControlHooks(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g := Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	mine := errors.New("the dialer's own hook ran")
	hook := func(string, string, syscall.RawConn) error { return mine }
	ctxHook := func(context.Context, string, string, syscall.RawConn) error { return mine }
	for name, d := range map[string]*net.Dialer{
		"Control":        {Control: hook},
		"ControlContext": {ControlContext: ctxHook},
	} {
		if _, err := g.Dialer(d).Dial("tcp", l.Addr().String()); !errors.Is(err, mine) {
			t.Errorf("%s: dial = %v, want the dialer's own hook to run after the guard", name, err)
		}
		if _, err := (Guard{}).Dialer(d).Dial("tcp", l.Addr().String()); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: dial = %v, want the guard to refuse first", name, err)
		}
	}
}

// TestRule: the same settings give the same rule whatever their order or
// spelling; other settings another.
func TestRule(t *testing.T) {
	t.Parallel()
	rule := func(allow string, httpsOnly bool) string {
		t.Helper()
		ps, err := ParseAllow(allow)
		if err != nil {
			t.Fatal(err)
		}
		return Guard{Allow: ps, HTTPSOnly: httpsOnly}.Rule()
	}
	if got, want := rule("", false), "allow=none https-only=false"; got != want {
		t.Errorf("the zero guard: %q, want %q", got, want)
	}
	same := []string{"127.0.0.0/8,::1/128", " ::1 , 127.0.0.1/8", "::1/128,127.0.0.0/8,127.0.0.0/8"}
	for _, s := range same {
		if got, want := rule(s, true), "allow=127.0.0.0/8,::1/128 https-only=true"; got != want {
			t.Errorf("%q: %q, want %q", s, got, want)
		}
	}
	if rule("127.0.0.0/8", false) == rule("127.0.0.0/16", false) || rule("", true) == rule("", false) {
		t.Error("other settings give the same rule")
	}
}
