package push

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/rooms"
)

// TestURLAttributes: url.full never carries user info or query values (a
// webhook URL may hold a token); the server's port is the scheme's when
// the URL names none.
func TestURLAttributes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, full, host string
		port           int64
	}{
		{"https://user:pw@hooks.example.com/in?token=s3cret&x=1", "https://hooks.example.com/in?token=REDACTED&x=REDACTED", "hooks.example.com", 443},
		{"http://127.0.0.1:8080/hook", "http://127.0.0.1:8080/hook", "127.0.0.1", 8080},
		{"http://[::1]/h", "http://[::1]/h", "::1", 80},
	}
	for _, tt := range tests {
		got := map[string]any{}
		for _, a := range urlAttributes(tt.in) {
			got[string(a.Key)] = a.Value.AsInterface()
		}
		if got["url.full"] != tt.full || got["server.address"] != tt.host || got["server.port"] != tt.port {
			t.Errorf("urlAttributes(%q) = %v; want %s, %s, %d", tt.in, got, tt.full, tt.host, tt.port)
		}
	}
}

// BenchmarkDeliverTraced is BenchmarkDeliver's hot path (no breaker) with
// the message's process span around it, as handle makes it: tracing off
// (no tracer: no span at all), on with every trace sampled (the process
// and POST spans recorded and batched for an exporter that drops them), and
// on with 1 % sampled. Compare their ns/op and allocs/op.
func BenchmarkDeliverTraced(b *testing.B) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler // nil: tracing off
	}{
		{"off", nil},
		{"on, all sampled", sdktrace.AlwaysSample()},
		{"on, 1% sampled", sdktrace.TraceIDRatioBased(0.01)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sub, d := hotPathMessage()
			deps := Deps{Directory: fixedTarget{room: rooms.NewRoomDefaults(), sub: sub}, Log: nopLog{},
				Client: &http.Client{Transport: answer204{}}, Now: time.Now, Logger: slog.New(slog.DiscardHandler)}
			if tc.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				deps.Tracer = tp
			}
			p := New(DefaultConfig(broker.Destination{Address: "push", Queue: "push"}), deps)
			ctx := context.Background()
			for b.Loop() {
				j := &job{key: sub.ID, d: d}
				dec, err := p.deliver(p.startProcess(ctx, j), j)
				if err != nil || dec.outcome != "delivered" {
					b.Fatalf("%+v, %v", dec.outcome, err)
				}
				j.decided(dec)
				j.endProcess()
			}
		})
	}
}
