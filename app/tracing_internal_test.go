package app

import (
	"context"
	"testing"
	"time"
)

// TestStartTracing: each exporter and OTLP protocol the settings accept
// starts (nothing is dialled before the first export) and stops at once
// with nothing to send; off, there is no provider.
func TestStartTracing(t *testing.T) {
	t.Parallel()
	off, stop, err := startTracing(context.Background(), TracingConfig{}, Serve)
	if off != nil || err != nil || stop(context.Background()) != nil {
		t.Errorf("off: provider %v, error %v", off, err)
	}
	for _, env := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"OTEL_TRACES_EXPORTER": "console"},
	} {
		cfg, err := LoadTracing(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		tp, stop, err := startTracing(context.Background(), cfg, Dispatcher)
		if err != nil || tp == nil {
			t.Fatalf("%v: provider %v, error %v", env, tp, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := stop(ctx); err != nil {
			t.Errorf("%v: stop: %v", env, err)
		}
		cancel()
	}
}
