package broker_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/roomhub/messaging-api/broker"
)

// silentPort returns a loopback address that accepts connections and never
// answers: a broker that hangs.
func silentPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln.Addr().String()
}

// TestProbeHosts: each host of a URL is reported live, refused (down, or a
// backup not live yet), unreachable (no answer) or failed (an answer, but
// no STOMP connection: here a refused login), in the URL's order.
func TestProbeHosts(t *testing.T) {
	live, refusing := newFakeStomp(t), newFakeStomp(t)
	refusing.onConnect = func(*frame.Frame) *frame.Frame {
		e := frame.New(frame.ERROR, frame.Message, "Security Error occurred: User name [roomhub] or password is invalid.")
		e.Body = []byte("AMQ229031")
		return e
	}
	closed, silent := closedPort(t), silentPort(t)
	raw := "stomp://roomhub:s3cret@" + strings.Join([]string{closed, silent, live.addr, refusing.addr}, ",") + "?connectTimeout=300ms"
	states, err := broker.ProbeHosts(testCtx(t), raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ host, state string }{
		{closed, broker.HostRefused},
		{silent, broker.HostUnreachable},
		{live.addr, broker.HostLive},
		{refusing.addr, broker.HostFailed},
	}
	if len(states) != len(want) {
		t.Fatalf("states %+v, want %d", states, len(want))
	}
	for i, w := range want {
		s := states[i]
		if s.Host != w.host || s.State != w.state || (s.Err == nil) != (w.state == broker.HostLive) {
			t.Errorf("host %d: %s %s (%v), want %s %s", i+1, s.Host, s.State, s.Err, w.host, w.state)
		}
		if s.Err != nil && strings.Contains(s.Err.Error(), "s3cret") {
			t.Errorf("host %s: error %q holds the password", s.Host, s.Err)
		}
	}
	if s := states[3]; s.Err == nil || !strings.Contains(s.Err.Error(), "password is invalid") {
		t.Errorf("the refused login is not told: %v", s.Err)
	}
	// The live host's connection was closed with a DISCONNECT.
	live.waitFrame(0, 5*time.Second, isCommand(frame.DISCONNECT))

	if states, err := broker.ProbeHosts(testCtx(t), "embedded", nil); err != nil || states != nil {
		t.Errorf("ProbeHosts(embedded) = %v, %v; want no hosts", states, err)
	}
	if _, err := broker.ProbeHosts(testCtx(t), "stomp://u:s3cret@h1,h1", nil); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("ProbeHosts of a bad URL: %v, want an error without the password", err)
	}
}
