package push

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/subscriptions"
	"github.com/roomhub/messaging-api/tracing"
)

// The spans of a push delivery, when tracing is on (p.tracer not nil):
//
//	process <queue>   CONSUMER  one per message taken, from the first handling
//	                            to its settlement; a child of the span whose
//	                            context the message carries (its send)
//	  POST            CLIENT    the attempt's request; the traceparent the
//	                            endpoint receives names this span
//	  send <queue>    PRODUCER  the copy republished for a retry or a
//	                            deferral, which carries this span's context
//
// So a message's whole life (publish, send, each attempt and each retry) is
// one trace. Off, nothing here runs: each attempt sends the event's
// traceparent with a new parent id, as before spans existed.

// startProcess starts j's process span once (a message waiting for its turn
// under a delivery rate keeps it across its sleeps) and returns ctx with it.
func (p *Dispatcher) startProcess(ctx context.Context, j *job) context.Context {
	if p.tracer == nil {
		return ctx
	}
	if j.span == nil {
		d := j.d
		parent := message.TraceOfDelivery(d).SpanContext()
		_, j.span = p.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parent), p.processName, trace.WithSpanKind(trace.SpanKindConsumer))
		if j.span.IsRecording() { // the attributes cost allocations: only for a sampled span
			j.span.SetAttributes(
				tracing.System, semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName(tracing.OpProcess),
				semconv.MessagingDestinationName(p.cfg.Queue.FQQN()),
				semconv.MessagingMessageID(d.Headers[message.HeaderEventID]),
				semconv.MessagingMessageConversationID(d.CorrelationID),
				tracing.RoomID.String(d.Headers[message.HeaderRoomID]),
				tracing.SubscriptionID.String(j.key.String()),
				tracing.EventType.String(d.Headers[message.HeaderEventType]),
				tracing.Attempt.Int(d.Attempt),
			)
		}
	}
	return trace.ContextWithSpan(ctx, j.span)
}

// decided records on j's process span what its handling decided.
func (j *job) decided(dec decision) {
	if j.span == nil || !j.span.IsRecording() {
		return
	}
	switch {
	case dec.deferred != "":
		j.span.SetAttributes(tracing.Outcome.String("deferred"), tracing.DeferReason.String(dec.deferred))
	case dec.outcome != "":
		j.span.SetAttributes(tracing.Outcome.String(dec.outcome))
	}
}

// endProcess ends j's process span.
func (j *job) endProcess() {
	if j.span != nil {
		j.span.End()
		j.span = nil
	}
}

// startAttempt starts the CLIENT span of an attempt's request to sub under
// the process span in ctx, and returns the traceparent the request sends:
// the span's, or with tracing off a new span id under the event's trace.
func (p *Dispatcher) startAttempt(ctx context.Context, sub subscriptions.Subscription, ev message.Event, attempt int) (trace.Span, string) {
	if p.tracer == nil {
		return nil, ev.Trace.Child(p.spanRand)
	}
	_, span := p.tracer.Start(ctx, http.MethodPost, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		attrs := append(make([]attribute.KeyValue, 0, 8), semconv.HTTPRequestMethodPost,
			tracing.SubscriptionID.String(sub.ID.String()), tracing.Attempt.Int(attempt))
		attrs = append(attrs, urlAttributes(sub.PushURL)...)
		if attempt > 1 {
			attrs = append(attrs, semconv.HTTPRequestResendCount(attempt-1))
		}
		span.SetAttributes(attrs...)
	}
	return span, message.TraceOf(span.SpanContext()).Parent
}

// endAttempt ends an attempt's span with its outcome: a failure is one
// whatever the status (a 4xx included, as the HTTP conventions say of a
// client span).
func endAttempt(span trace.Span, out Outcome) {
	if span == nil {
		return
	}
	if out.StatusCode != 0 && span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCode(out.StatusCode))
	}
	if out.Result != Delivered {
		class := errorClass(&out)
		if class == "http_status" {
			class = strconv.Itoa(out.StatusCode)
		}
		tracing.Fail(span, class, out.Err)
	}
	span.End()
}

// urlAttributes are url.full, server.address and server.port of a push
// URL: without user info, with each query value replaced by REDACTED (a
// webhook URL may carry a token), as the HTTP conventions ask.
func urlAttributes(raw string) []attribute.KeyValue {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	u.User = nil
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode()
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	out := []attribute.KeyValue{semconv.URLFull(u.String()), semconv.ServerAddress(u.Hostname())}
	if n, err := strconv.Atoi(port); err == nil {
		out = append(out, semconv.ServerPort(n))
	}
	return out
}

// send republishes a copy (a retry or a deferral) of the delivery's event,
// under a PRODUCER span of its own when tracing is on, whose context the
// copy carries.
func (p *Dispatcher) send(ctx context.Context, s message.Send, d *broker.Delivery, now time.Time) error {
	ev := message.Decode(d)
	return tracing.Send(ctx, p.tracer, p.broker, s, ev, message.Encode(s, ev, now))
}
