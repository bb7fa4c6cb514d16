package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/redact"
	"github.com/roomhub/messaging-api/tracing"
)

// TracingConfig is what the standard OTEL_* variables say of tracing. They
// are read from the environment only (no flags). Tracing is off unless
// OTEL_TRACES_EXPORTER names an exporter or an OTLP endpoint is set, and
// OTEL_SDK_DISABLED is not true.
type TracingConfig struct {
	// Exporters are otlp and console; none: tracing is off.
	Exporters []string
	// Protocol is the OTLP protocol: http/protobuf, http/json or grpc.
	Protocol string
	// Endpoint is where OTLP goes: a traces endpoint used as it is
	// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), else the base endpoint
	// (OTEL_EXPORTER_OTLP_ENDPOINT, to which http adds /v1/traces); ""
	// leaves the exporter's default (localhost:4318, or :4317 for grpc).
	Endpoint      string
	TraceEndpoint bool // Endpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	Sampler       sdktrace.Sampler
	// SamplerName is OTEL_TRACES_SAMPLER with its argument, for the log.
	SamplerName string
	// Resource is what every span says of the process: service.name
	// (OTEL_SERVICE_NAME, else OTEL_RESOURCE_ATTRIBUTES, else
	// messaging-api) and the other OTEL_RESOURCE_ATTRIBUTES.
	Resource []attribute.KeyValue
}

// Enabled reports whether spans are made and exported.
func (c TracingConfig) Enabled() bool { return len(c.Exporters) > 0 }

// LogValue is the tracing settings for the start-up line.
func (c TracingConfig) LogValue() slog.Value {
	if !c.Enabled() {
		return slog.StringValue("off")
	}
	return slog.GroupValue(slog.Any("exporters", c.Exporters), slog.String("protocol", c.Protocol),
		slog.String("endpoint", redact.ConnString(c.Endpoint)), slog.String("sampler", c.SamplerName))
}

// TracingVariables are the OTEL_* variables the service reads itself; the
// exporters and the SDK read the rest (OTEL_EXPORTER_OTLP_HEADERS,
// _TIMEOUT, _COMPRESSION, _CERTIFICATE, OTEL_BSP_*, OTEL_SPAN_*_LIMIT, ...).
var TracingVariables = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
}

// defaultServiceName is service.name unless the environment names it.
const defaultServiceName = "messaging-api"

// LoadTracing reads the OTEL_* variables; a value the service cannot honour
// (an unknown exporter, sampler or protocol, a bad ratio) is an error
// naming it, as any other setting's.
func LoadTracing(getenv func(string) string) (TracingConfig, error) {
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	var c TracingConfig
	var errs []error
	bad := func(k, why string) { errs = append(errs, fmt.Errorf("%s=%q: %s", k, env(k), why)) }

	disabled := false
	switch v := strings.ToLower(env("OTEL_SDK_DISABLED")); v {
	case "", "false":
	case "true":
		disabled = true
	default:
		bad("OTEL_SDK_DISABLED", "must be true or false")
	}

	c.Endpoint, c.TraceEndpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), true
	if c.Endpoint == "" {
		c.Endpoint, c.TraceEndpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT"), false
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k := "OTEL_EXPORTER_OTLP_ENDPOINT"
			if c.TraceEndpoint {
				k = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
			}
			bad(k, "must be an http:// or https:// URL")
		}
	}
	exporters := env("OTEL_TRACES_EXPORTER")
	if exporters == "" && c.Endpoint != "" {
		exporters = "otlp" // an endpoint alone turns tracing on
	}
	for e := range strings.SplitSeq(exporters, ",") {
		switch e = strings.ToLower(strings.TrimSpace(e)); e {
		case "", "none":
		case "otlp", "console":
			c.Exporters = append(c.Exporters, e)
		default:
			bad("OTEL_TRACES_EXPORTER", "must be otlp, console or none (a comma-separated list)")
		}
	}

	c.Protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	protocolKey := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	if c.Protocol == "" {
		c.Protocol, protocolKey = env("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	switch c.Protocol {
	case "":
		c.Protocol = "http/protobuf"
	case "http/protobuf", "http/json", "grpc":
	default:
		bad(protocolKey, "must be http/protobuf, http/json or grpc")
	}

	var err error
	if c.Sampler, c.SamplerName, err = loadSampler(env("OTEL_TRACES_SAMPLER"), env("OTEL_TRACES_SAMPLER_ARG")); err != nil {
		errs = append(errs, err)
	}
	if c.Resource, err = loadResource(env("OTEL_SERVICE_NAME"), env("OTEL_RESOURCE_ATTRIBUTES")); err != nil {
		errs = append(errs, err)
	}
	if disabled {
		c.Exporters = nil
	}
	return c, errors.Join(errs...)
}

// loadSampler is the sampler OTEL_TRACES_SAMPLER names (the SDK's default,
// parentbased_always_on, when empty), with its ratio argument.
func loadSampler(name, arg string) (sdktrace.Sampler, string, error) {
	ratio := 1.0
	if arg != "" && strings.HasSuffix(name, "traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: must be a ratio from 0 to 1", arg)
		}
		ratio = r
	}
	switch strings.ToLower(name) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), "parentbased_always_on", nil
	case "always_on":
		return sdktrace.AlwaysSample(), name, nil
	case "always_off":
		return sdktrace.NeverSample(), name, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), name, nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), fmt.Sprintf("%s(%g)", name, ratio), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), fmt.Sprintf("%s(%g)", name, ratio), nil
	}
	return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER=%q: must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// loadResource reads OTEL_RESOURCE_ATTRIBUTES (key=value pairs, comma
// separated, values percent-encoded) and OTEL_SERVICE_NAME, which wins over
// a service.name among the attributes.
func loadResource(serviceName, attrs string) ([]attribute.KeyValue, error) {
	var out []attribute.KeyValue
	named := false
	for pair := range strings.SplitSeq(attrs, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		value, err := url.PathUnescape(strings.TrimSpace(v))
		if !ok || k == "" || err != nil {
			return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %q is not key=value (with the value percent-encoded)", pair)
		}
		if k == string(semconv.ServiceNameKey) {
			if serviceName != "" {
				continue
			}
			named = true
		}
		out = append(out, attribute.String(k, value))
	}
	switch {
	case serviceName != "":
		out = append(out, semconv.ServiceName(serviceName))
	case !named:
		out = append(out, semconv.ServiceName(defaultServiceName))
	}
	return out, nil
}

// startTracing installs the SDK cfg describes for a process of role: a
// tracer provider with a batch span processor per exporter. The returned
// stop flushes what is left and shuts the exporters down. Off, it returns a
// nil provider (every feature then makes no span) and a stop that does
// nothing.
func startTracing(ctx context.Context, cfg TracingConfig, role Role) (trace.TracerProvider, func(context.Context) error, error) {
	if !cfg.Enabled() {
		return nil, func(context.Context) error { return nil }, nil
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(cfg.Sampler)}
	for _, name := range cfg.Exporters {
		exp, err := newExporter(ctx, cfg, name)
		if err != nil {
			return nil, nil, fmt.Errorf("tracing: %s exporter: %w", name, err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	attrs := append([]attribute.KeyValue{
		semconv.ServiceInstanceID(uuid.NewString()),
		attribute.String("roomhub.process.role", string(role)),
	}, cfg.Resource...)
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, attrs...))
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	return tp, tp.Shutdown, nil
}

func newExporter(ctx context.Context, cfg TracingConfig, name string) (sdktrace.SpanExporter, error) {
	if name == "console" {
		return stdouttrace.New()
	}
	if cfg.Protocol == "grpc" {
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf)}
	if cfg.Protocol == "http/json" {
		opts[0] = otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON)
	}
	if endpoint := cfg.Endpoint; endpoint != "" {
		if !cfg.TraceEndpoint {
			// The base endpoint: the signal's path goes after it.
			endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	}
	return otlptracehttp.New(ctx, opts...)
}

// flushTimeout bounds how long a stopping process waits for its last
// spans to be exported.
const flushTimeout = 5 * time.Second

// serverSpans makes a SERVER span of each request but the probes, a child
// of the request's traceparent when it has a valid one, with the HTTP
// semantic conventions' attributes; the handlers see it in the request's
// context. It must run outside the access log, which answers errors.
func serverSpans(tp trace.TracerProvider) echo.MiddlewareFunc {
	tracer := tracing.Tracer(tp, "app")
	prop := propagation.TraceContext{}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			route := c.Path()
			if probe(route) {
				return next(c)
			}
			req := c.Request()
			attrs := []attribute.KeyValue{semconv.URLPath(req.URL.Path), semconv.URLScheme(scheme(req)),
				semconv.UserAgentOriginal(req.UserAgent()), semconv.ClientAddress(c.RealIP()),
				semconv.NetworkProtocolVersion(fmt.Sprintf("%d.%d", req.ProtoMajor, req.ProtoMinor))}
			name := req.Method
			if knownMethod(req.Method) {
				attrs = append(attrs, semconv.HTTPRequestMethodKey.String(req.Method))
			} else {
				// An unknown method is not a span name (the conventions'
				// rule against unbounded names).
				name = "HTTP"
				attrs = append(attrs, semconv.HTTPRequestMethodOther, semconv.HTTPRequestMethodOriginal(req.Method))
			}
			if route != "" && route != "/*" {
				name += " " + route
				attrs = append(attrs, semconv.HTTPRoute(route))
			}
			ctx := prop.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
			defer span.End()
			c.SetRequest(req.WithContext(ctx))
			if err := next(c); err != nil {
				c.Error(err)
			}
			status := c.Response().Status
			span.SetAttributes(semconv.HTTPResponseStatusCode(status))
			if status >= 500 {
				// A 4xx is the client's: not an error of a server span.
				span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
				span.SetStatus(codes.Error, "")
			}
			return nil
		}
	}
}

func knownMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch:
		return true
	}
	return false
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}
