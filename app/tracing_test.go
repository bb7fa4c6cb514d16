package app_test

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/roomhub/messaging-api/app"
)

// TestLoadTracing: tracing is off unless an exporter or an OTLP endpoint is
// named, OTEL_SDK_DISABLED wins, and a value the service cannot honour
// stops the start naming the variable.
func TestLoadTracing(t *testing.T) {
	t.Parallel()
	ok := []struct {
		name      string
		env       map[string]string
		exporters []string
		protocol  string
		sampler   string
	}{
		{"nothing set: off", nil, nil, "http/protobuf", "parentbased_always_on"},
		{"service name alone: off", map[string]string{"OTEL_SERVICE_NAME": "x"}, nil, "http/protobuf", "parentbased_always_on"},
		{"an endpoint turns it on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, []string{"otlp"}, "http/protobuf", "parentbased_always_on"},
		{"a traces endpoint too", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c/v1/traces"}, []string{"otlp"}, "http/protobuf", "parentbased_always_on"},
		{"exporter named", map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, []string{"otlp", "console"}, "http/protobuf", "parentbased_always_on"},
		{"none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, nil, "http/protobuf", "parentbased_always_on"},
		{"disabled", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, nil, "http/protobuf", "parentbased_always_on"},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, []string{"otlp"}, "grpc", "parentbased_always_on"},
		{"traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, []string{"otlp"}, "http/json", "parentbased_always_on"},
		{"ratio", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}, []string{"otlp"}, "http/protobuf", "parentbased_traceidratio(0.01)"},
		{"always off", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "always_off"}, []string{"otlp"}, "http/protobuf", "always_off"},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := app.LoadTracing(func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Exporters, tt.exporters) || c.Enabled() != (len(tt.exporters) > 0) || c.Protocol != tt.protocol || c.SamplerName != tt.sampler {
				t.Errorf("exporters %v, protocol %s, sampler %s; want %v, %s, %s", c.Exporters, c.Protocol, c.SamplerName, tt.exporters, tt.protocol, tt.sampler)
			}
		})
	}

	bad := []struct{ env, value string }{
		{"OTEL_TRACES_EXPORTER", "zipkin"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc/json"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"},
		{"OTEL_TRACES_SAMPLER", "sometimes"},
		{"OTEL_SDK_DISABLED", "yes"},
		{"OTEL_RESOURCE_ATTRIBUTES", "team"},
	}
	for _, b := range bad {
		t.Run(b.env, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"OTEL_TRACES_EXPORTER": "otlp", b.env: b.value}
			if _, err := app.LoadTracing(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), b.env) {
				t.Errorf("%s=%q: error %v, want one naming it", b.env, b.value, err)
			}
			// LoadConfig refuses it too.
			if _, err := app.LoadConfig(nil, func(k string) string { return env[k] }, io.Discard); err == nil {
				t.Errorf("%s=%q: LoadConfig accepted it", b.env, b.value)
			}
		})
	}
	for _, arg := range []string{"1.5", "-0.1", "half"} {
		env := map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": arg}
		if _, err := app.LoadTracing(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER_ARG") {
			t.Errorf("ratio %q: error %v, want one naming OTEL_TRACES_SAMPLER_ARG", arg, err)
		}
	}
}

// TestTracingResource: OTEL_SERVICE_NAME wins over a service.name in
// OTEL_RESOURCE_ATTRIBUTES, which wins over the default; values are
// percent-decoded.
func TestTracingResource(t *testing.T) {
	t.Parallel()
	get := func(env map[string]string) map[string]string {
		c, err := app.LoadTracing(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, a := range c.Resource {
			out[string(a.Key)] = a.Value.String()
		}
		return out
	}
	if got := get(nil)["service.name"]; got != "messaging-api" {
		t.Errorf("default service.name %q", got)
	}
	r := get(map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=orders,deployment.environment.name=prod%2Ceu"})
	if r["service.name"] != "orders" || r["deployment.environment.name"] != "prod,eu" {
		t.Errorf("from OTEL_RESOURCE_ATTRIBUTES: %v", r)
	}
	r = get(map[string]string{"OTEL_SERVICE_NAME": "billing", "OTEL_RESOURCE_ATTRIBUTES": "service.name=orders"})
	if r["service.name"] != "billing" {
		t.Errorf("OTEL_SERVICE_NAME should win: %v", r)
	}
}
