package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/broker"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// runCheckBroker runs check-broker with BROKER_URL brokerURL and a push
// queue of the test's own; it returns what it printed and its error.
func runCheckBroker(t *testing.T, brokerURL string) (string, error) {
	t.Helper()
	env := map[string]string{"BROKER_URL": brokerURL, "PUSH_QUEUE": apptest.UniquePushQueue(t)}
	cfg, err := app.LoadConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err = checkBroker(t.Context(), cfg, slog.New(slog.DiscardHandler), &out)
	t.Cleanup(func() {
		// The push queue check-broker created on the shared broker.
		if b, err := broker.Open(context.WithoutCancel(t.Context()), brokerURL, nil); err == nil {
			_ = b.DeleteQueue(context.WithoutCancel(t.Context()), cfg.PushQueue)
			_ = b.Close()
		}
	})
	return out.String(), err
}

// TestCheckBrokerNoHostLive: check-broker reports each host's state and
// fails at once when none is live, without the password.
func TestCheckBrokerNoHostLive(t *testing.T) {
	t.Parallel()
	a, b := closedPort(t), closedPort(t)
	out, err := runCheckBroker(t, "stomp://u:s3cret@"+a+","+b+"?dialect=artemis")
	if err == nil || !strings.Contains(err.Error(), "is live") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("check-broker with no host live: %v, want an error saying no host is live (without the password)", err)
	}
	for _, h := range []string{a, b} {
		if !strings.Contains(out, "host "+h+": refused (") {
			t.Errorf("output does not report %s refused:\n%s", h, out)
		}
	}
}

// TestCheckBrokerMultiHost: with the first host refusing and the second the
// real broker, check-broker reports both and finds the broker suitable.
func TestCheckBrokerMultiHost(t *testing.T) {
	raw := apptest.RealBroker(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	live, down := u.Host, closedPort(t)
	u.Host = down + "," + live
	out, err := runCheckBroker(t, u.String())
	if err != nil {
		t.Fatalf("check-broker: %v\n%s", err, out)
	}
	for _, line := range []string{"host " + down + ": refused (", "host " + live + ": live\n", "ok: "} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
}
