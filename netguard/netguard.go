// Package netguard keeps outgoing requests to user-supplied URLs (push
// deliveries) away from the service's own network: loopback, private,
// link-local, shared (CGNAT), multicast, reserved and cloud metadata
// addresses, including IPv4 addresses embedded in IPv6 ones. This is the
// guard against server-side request forgery (SSRF).
//
// The check that counts runs at dial time on the resolved address, through
// Guard.Control as a net.Dialer's Control hook: the address checked is the
// address connected to, so DNS rebinding (a name that resolves to a public
// address when checked and to a private one when used) cannot get past it.
// CheckURL is an early, literal-only check for validating a URL when it is
// configured; it does not resolve names.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
)

// ErrRefused matches every refusal of a Guard (errors.Is).
var ErrRefused = errors.New("refused by the SSRF guard")

// RefusedError says why a target was refused.
type RefusedError struct {
	// Target is what was refused: an address, a host name or a URL scheme.
	Target string
	// Reason completes "refused: Target ...", e.g. "is a private address".
	Reason string
}

func (e *RefusedError) Error() string { return "refused: " + e.Target + " " + e.Reason }

// Is makes errors.Is(err, ErrRefused) true for every RefusedError.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Guard decides which targets outgoing requests may reach. The zero Guard
// refuses every forbidden address and allows http and https. A Guard must
// not be changed while in use; it is safe for concurrent use.
type Guard struct {
	// Allow lists prefixes that are reachable even though they are
	// forbidden by default (tests allow loopback, for example).
	Allow []netip.Prefix
	// HTTPSOnly refuses http URLs.
	HTTPSOnly bool
}

// forbidden is a special-purpose range and what it is called in a refusal.
type forbidden struct {
	prefix netip.Prefix
	kind   string
}

// IPv4 special-purpose ranges (IANA IPv4 Special-Purpose Address Registry,
// RFC 6890 and successors) that an outgoing request must not reach. Order
// matters: the first match names the refusal, so specific entries (cloud
// metadata) come before the ranges that contain them.
var forbiddenV4 = []forbidden{
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata"}, // AWS, GCP, Azure, OpenStack, Oracle
	{netip.MustParsePrefix("169.254.170.2/32"), "cloud metadata"},   // AWS ECS task metadata
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata"}, // Alibaba Cloud
	{netip.MustParsePrefix("168.63.129.16/32"), "cloud metadata"},   // Azure WireServer: globally routable but internal
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified"},
	{netip.MustParsePrefix("0.0.0.0/8"), "reserved (this network)"}, // RFC 791
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},                // RFC 1918
	{netip.MustParsePrefix("100.64.0.0/10"), "CGNAT"},               // RFC 6598
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"}, // RFC 3927
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved (IETF protocol assignments)"}, // RFC 6890
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},                        // RFC 5737 TEST-NET-1
	{netip.MustParsePrefix("192.88.99.0/24"), "reserved (6to4 relay anycast)"},      // RFC 7526
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved (benchmarking)"}, // RFC 2544
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},         // TEST-NET-2
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},          // TEST-NET-3
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (future use)"}, // RFC 1112
}

// IPv6 special-purpose ranges (IANA IPv6 Special-Purpose Address Registry).
// The ranges that embed an IPv4 address at a fixed place (mapped, NAT64
// 64:ff9b::/96, 6to4) are not here: embeddedV4 extracts the IPv4 address and
// it is checked like any other.
var forbiddenV6 = []forbidden{
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"}, // AWS IMDS over IPv6
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	// IPv4-compatible addresses are deprecated (RFC 4291 §2.5.5.1); nothing
	// public lives there.
	{netip.MustParsePrefix("::/96"), "reserved (IPv4-compatible)"},
	// Local-use NAT64 (RFC 8215) translates inside an operator's own network,
	// and where the IPv4 address sits depends on the operator's prefix length
	// (RFC 6052 §2.2), so it cannot be checked: refuse it whole.
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
	{netip.MustParsePrefix("100::/64"), "reserved (discard-only)"}, // RFC 6666
	// Teredo (RFC 4380) tunnels to an IPv4 client address stored
	// complemented; refuse it whole rather than decode it.
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},                          // RFC 3849
	{netip.MustParsePrefix("2001::/23"), "reserved (IETF protocol assignments)"},       // RFC 2928: benchmarking, ORCHID, ...
	{netip.MustParsePrefix("3fff::/20"), "documentation"},                              // RFC 9637
	{netip.MustParsePrefix("5f00::/16"), "reserved (SRv6 SIDs)"},                       // RFC 9602
	{netip.MustParsePrefix("fc00::/7"), "unique-local"},                                // RFC 4193
	{netip.MustParsePrefix("fe80::/10"), "link-local"},                                 // RFC 4291
	{netip.MustParsePrefix("fec0::/10"), "site-local"},                                 // deprecated by RFC 3879
	{netip.MustParsePrefix("ff00::/8"), "multicast"},                                   // RFC 4291
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "reserved (IPv4-translated, SIIT)"},     // RFC 2765
	{netip.MustParsePrefix("100:0:0:1::/64"), "reserved (dummy prefix)"},               // RFC 9780
	{netip.MustParsePrefix("2620:4f:8000::/48"), "reserved (AS112 direct delegation)"}, // RFC 7534
}

var (
	nat64 = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052 well-known prefix
	sixTo = netip.MustParsePrefix("2002::/16")    // RFC 3056 6to4
	// Global unicast IPv6 (RFC 4291 §2.4, IANA IPv6 Address Space): the rest
	// of the space is reserved, link- or site-scoped, or multicast.
	global6 = netip.MustParsePrefix("2000::/3")
)

// embeddedV4 returns the IPv4 address that a connection to a reaches:
// IPv4-mapped (::ffff:a.b.c.d), NAT64 64:ff9b::a.b.c.d (RFC 6052) and 6to4
// 2002:AABB:CCDD::/48 (RFC 3056, the address in bits 16-47).
func embeddedV4(a netip.Addr) (v4 netip.Addr, form string, ok bool) {
	b := a.As16()
	switch {
	case a.Is4In6():
		return a.Unmap(), "IPv4-mapped", true
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64", true
	case sixTo.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	}
	return netip.Addr{}, "", false
}

// kindOf names the forbidden range a belongs to, or "" when a is a public
// unicast address. It ignores the allowlist.
func kindOf(a netip.Addr) string {
	table := forbiddenV6
	if a.Is4() {
		table = forbiddenV4
	}
	for _, f := range table {
		if f.prefix.Contains(a) {
			return f.kind
		}
	}
	if a.Is6() && !global6.Contains(a) {
		return "non-global IPv6"
	}
	return ""
}

// CheckAddr returns a *RefusedError when a must not be connected to, nil
// when it may: a public unicast address, or one in g.Allow. An IPv4 address
// embedded in IPv6 is judged as that IPv4 address, allowlist included.
func (g Guard) CheckAddr(a netip.Addr) error {
	if !a.IsValid() {
		return &RefusedError{Target: "the target", Reason: "has no valid IP address (SSRF guard)"}
	}
	a = a.WithZone("")
	if g.allowed(a) {
		return nil
	}
	if v4, form, ok := embeddedV4(a); ok {
		if g.allowed(v4) {
			return nil
		}
		if kind := kindOf(v4); kind != "" {
			return &RefusedError{Target: a.String(), Reason: fmt.Sprintf("embeds %s (%s), %s %s address (SSRF guard)", v4, form, article(kind), kind)}
		}
		return nil
	}
	if kind := kindOf(a); kind != "" {
		return &RefusedError{Target: a.String(), Reason: "is " + article(kind) + " " + kind + " address (SSRF guard)"}
	}
	return nil
}

func (g Guard) allowed(a netip.Addr) bool {
	for _, p := range g.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// article is "a" or "an" for the word w.
func article(w string) string {
	if w != "" && strings.ContainsRune("aeiouAEIOU", rune(w[0])) && !strings.HasPrefix(w, "uni") {
		return "an"
	}
	return "a"
}

// CheckURL checks what can be known of u without resolving its host: the
// scheme (http or https; https only when g.HTTPSOnly) and, when the host is
// an IP literal or a localhost name (RFC 6761), its address. A host name is
// checked when it is dialed (Control).
func (g Guard) CheckURL(u *url.URL) error {
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https":
	case scheme == "http" && g.HTTPSOnly:
		return &RefusedError{Target: "http", Reason: "is not allowed: push URLs must use https (https-only mode)"}
	case scheme == "http":
	default:
		return &RefusedError{Target: "scheme " + u.Scheme, Reason: "is not allowed: use http or https"}
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		// localhost names resolve to loopback (RFC 6761 §6.3).
		if g.CheckAddr(netip.AddrFrom4([4]byte{127, 0, 0, 1})) == nil || g.CheckAddr(netip.IPv6Loopback()) == nil {
			return nil
		}
		return &RefusedError{Target: u.Hostname(), Reason: "is a loopback address (SSRF guard)"}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return g.CheckAddr(a)
	}
	if numericLabel(host[strings.LastIndexByte(host, '.')+1:]) {
		// "127.1", "2130706433", "0x7f.1", "0177.0.0.1": not a name (the
		// last label of one is never numeric, RFC 3696 §2) but an IPv4
		// address in a form that some resolvers and URL parsers accept.
		return &RefusedError{Target: u.Hostname(), Reason: "is not a host name: write an IPv4 address as four decimal numbers (SSRF guard)"}
	}
	return nil
}

// numericLabel reports whether a DNS label is a decimal, octal or 0x hex
// number, which URL parsers take for (part of) an IPv4 address.
func numericLabel(label string) bool {
	if len(label) > 2 && (label[:2] == "0x" || label[:2] == "0X") {
		label = label[2:]
		return strings.Trim(label, "0123456789abcdefABCDEF") == "" && label != ""
	}
	return label != "" && strings.Trim(label, "0123456789") == ""
}

// Control is a net.Dialer Control hook: it refuses to connect to an address
// that CheckAddr refuses. It runs after name resolution, once per address
// tried, right before the connection is made.
func (g Guard) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Target: address, Reason: "is not an IP address and port (SSRF guard)"}
	}
	return g.CheckAddr(ap.Addr())
}

// Dialer returns a copy of d whose connections g checks (d's own Control
// hook, if any, runs after g's).
func (g Guard) Dialer(d *net.Dialer) *net.Dialer {
	guarded := *d
	next := d.Control
	guarded.ControlContext = nil
	guarded.Control = func(network, address string, c syscall.RawConn) error {
		if err := g.Control(network, address, c); err != nil {
			return err
		}
		if next != nil {
			return next(network, address, c)
		}
		return nil
	}
	if d.ControlContext != nil {
		// ControlContext takes precedence over Control in net.Dialer; keep
		// both hooks by running g first inside it.
		nextCtx := d.ControlContext
		guarded.Control = nil
		guarded.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
			if err := g.Control(network, address, c); err != nil {
				return err
			}
			return nextCtx(ctx, network, address, c)
		}
	}
	return &guarded
}

// Rule is the guard's settings as one text, the same for the same settings
// in any order: "allow=PREFIX,... https-only=BOOL", the prefixes sorted and
// without repeats ("allow=none" for none). Processes that must decide alike
// compare it.
func (g Guard) Rule() string {
	ps := slices.Clone(g.Allow)
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	ps = slices.Compact(ps)
	allow := make([]string, len(ps))
	for i, p := range ps {
		allow[i] = p.String()
	}
	if len(allow) == 0 {
		allow = []string{"none"}
	}
	return fmt.Sprintf("allow=%s https-only=%t", strings.Join(allow, ","), g.HTTPSOnly)
}

// ParseAllow reads a comma-separated list of CIDR prefixes or single
// addresses ("127.0.0.0/8, ::1") into an allowlist.
func ParseAllow(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for field := range strings.SplitSeq(s, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		if p, err := netip.ParsePrefix(field); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(field)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is not a CIDR prefix such as 127.0.0.0/8 or ::1/128", field)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
