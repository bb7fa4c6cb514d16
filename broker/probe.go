package broker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
)

// HostState is what one host of a STOMP broker URL answered to a
// connection attempt (see ProbeHosts).
type HostState struct {
	Host  string // host:port, as in the URL (with the default port filled in)
	State string // HostLive, HostRefused, HostUnreachable or HostFailed
	Err   error  // why it is not live; nil when live
}

// The states of a host.
const (
	// HostLive accepted a STOMP connection: the live broker.
	HostLive = "live"
	// HostRefused refused the TCP connection: a broker that is down, or an
	// Artemis backup that is not live (it opens its acceptors only then).
	HostRefused = "refused"
	// HostUnreachable gave no answer within connectTimeout (to the TCP
	// connection or to the STOMP CONNECT), or its name or route is unknown.
	HostUnreachable = "unreachable"
	// HostFailed answered, but no STOMP connection came of it: a TLS
	// failure, a refused login, something else than STOMP on the port.
	HostFailed = "failed"
)

// ProbeHosts connects to every host of the STOMP URL rawURL once, all at
// once, each bounded by the URL's connectTimeout, and reports each host's
// state in the URL's order. The connections made are closed at once. An
// embedded URL has no hosts: nil. Errors name the URL's fault, never its
// password.
func ProbeHosts(ctx context.Context, rawURL string, logger *slog.Logger) ([]HostState, error) {
	if isEmbeddedURL(rawURL) {
		return nil, nil
	}
	cfg, err := parseStompURL(rawURL)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &stompBroker{cfg: cfg, log: logger.With("broker", cfg.redacted)}
	states := make([]HostState, len(cfg.hosts))
	var wg sync.WaitGroup
	for i, h := range cfg.hosts {
		wg.Go(func() {
			c, err := b.dialHost(ctx, "probe", i)
			if err == nil {
				c.close()
			}
			states[i] = HostState{Host: h.addr, State: hostState(err), Err: err}
		})
	}
	wg.Wait()
	return states, nil
}

// hostState classifies the error of dialHost.
func hostState(err error) string {
	var (
		op  *net.OpError
		ne  net.Error
		dns *net.DNSError
	)
	switch {
	case err == nil:
		return HostLive
	case errors.Is(err, syscall.ECONNREFUSED):
		return HostRefused
	case errors.As(err, &dns), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return HostUnreachable
	case errors.As(err, &op) && op.Op == "dial":
		return HostUnreachable
	}
	return HostFailed
}
