package push

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/netguard"
)

// loopbackAllowed is the guard of tests whose receivers listen on loopback.
func loopbackAllowed() netguard.Guard {
	return netguard.Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
}

// postWith runs post against url with client.
func postWith(t *testing.T, client *http.Client, url string) Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return post(ctx, client, Request{URL: url, Body: []byte(`{"n":1}`), Headers: h}, 1024, time.Now)
}

func TestPostRefusedTargetIsPermanent(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {})
	_, port, _ := net.SplitHostPort(rcv.Listener.Addr().String())
	tests := []struct {
		name  string
		guard netguard.Guard
		url   string
		want  string
	}{
		{"private", netguard.Guard{}, "http://10.0.0.1/hook", "refused: 10.0.0.1 is a private address (SSRF guard)"},
		{"metadata", netguard.Guard{}, "http://169.254.169.254/latest/meta-data/", "refused: 169.254.169.254 is a cloud metadata address (SSRF guard)"},
		{"mapped", netguard.Guard{}, "http://[::ffff:172.16.0.1]/hook", "refused: ::ffff:172.16.0.1 embeds 172.16.0.1 (IPv4-mapped), a private address (SSRF guard)"},
		{"loopback receiver", netguard.Guard{}, rcv.URL + "/hook", "refused: 127.0.0.1 is a loopback address (SSRF guard)"},
		{"localhost", netguard.Guard{}, "http://localhost:" + port + "/hook", "refused: localhost is a loopback address (SSRF guard)"},
		{"http in https-only mode", netguard.Guard{HTTPSOnly: true, Allow: loopbackAllowed().Allow}, rcv.URL + "/hook", "refused: http is not allowed: push URLs must use https (https-only mode)"},
	}
	t.Run("refused", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				out := postWith(t, NewHTTPClient(5*time.Second, tt.guard), tt.url)
				if out.Result != Permanent || out.StatusCode != 0 || out.Err != tt.want {
					t.Errorf("got %v %d %q, want permanent without a status: %q", out.Result, out.StatusCode, out.Err, tt.want)
				}
			})
		}
	})
	if n := rcv.hits.Load(); n != 0 {
		t.Errorf("the receiver got %d requests; the guard must refuse before connecting", n)
	}
	// The same receiver, allowed explicitly, is reachable.
	if out := postWith(t, NewHTTPClient(5*time.Second, loopbackAllowed()), rcv.URL+"/hook"); out.Result != Delivered {
		t.Fatalf("with loopback allowed: %v %q, want delivered", out.Result, out.Err)
	}
}

// TestPostRefusesAfterResolution resolves a push URL's host name through a
// DNS server that answers with a loopback address, as a rebinding attacker's
// would: the guard checks the address dialed, not the name.
func TestPostRefusesAfterResolution(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {})
	_, port, _ := net.SplitHostPort(rcv.Listener.Addr().String())
	resolver := fakeDNS(t, netip.MustParseAddr("127.0.0.1"))
	url := "http://hooks.rebind.test:" + port + "/hook"

	out := postWith(t, newHTTPClient(5*time.Second, netguard.Guard{}, resolver), url)
	if out.Result != Permanent || out.Err != "refused: 127.0.0.1 is a loopback address (SSRF guard)" {
		t.Fatalf("got %v %q, want permanent: the loopback address refused", out.Result, out.Err)
	}
	if n := rcv.hits.Load(); n != 0 {
		t.Fatalf("the receiver got %d requests", n)
	}
	// The name does resolve: allowed, the same request is delivered.
	out = postWith(t, newHTTPClient(5*time.Second, loopbackAllowed(), resolver), url)
	if out.Result != Delivered || rcv.hits.Load() != 1 {
		t.Fatalf("with loopback allowed: %v %q, %d requests; want delivered once", out.Result, out.Err, rcv.hits.Load())
	}
}

// fakeDNS runs a DNS server on loopback that answers every A question with
// addr (and AAAA with no record) and returns a resolver that asks only it.
func fakeDNS(t *testing.T, addr netip.Addr) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp, ok := dnsAnswer(buf[:n], addr); ok {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	server := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", server)
	}}
}

// dnsAnswer answers the one question of query (RFC 1035 §4.1): the header
// and question copied back, and for type A one record holding addr.
func dnsAnswer(query []byte, addr netip.Addr) ([]byte, bool) {
	if len(query) < 12 {
		return nil, false
	}
	end := 12
	for end < len(query) && query[end] != 0 { // the question's name: labels up to a zero length
		end += 1 + int(query[end])
	}
	end += 1 + 4 // the zero length, QTYPE, QCLASS
	if end > len(query) {
		return nil, false
	}
	qtype := binary.BigEndian.Uint16(query[end-4:])
	resp := append([]byte(nil), query[:end]...)
	binary.BigEndian.PutUint16(resp[2:], 0x8180) // a response, recursion desired and available, no error
	binary.BigEndian.PutUint16(resp[4:], 1)      // one question
	binary.BigEndian.PutUint16(resp[8:], 0)      // no authority
	binary.BigEndian.PutUint16(resp[10:], 0)     // no additional records
	if qtype != 1 || !addr.Is4() {
		binary.BigEndian.PutUint16(resp[6:], 0)
		return resp, true
	}
	binary.BigEndian.PutUint16(resp[6:], 1)
	a := addr.As4()
	resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4) // name -> the question's, A, IN, TTL 60, 4 bytes
	return append(resp, a[:]...), true
}
