// Package tracing is what the service's OpenTelemetry spans share: the
// instrumentation scope, the span names, the attributes of the service's own
// (roomhub.*) beside those of the OpenTelemetry semantic conventions, and
// how a failure is recorded on a span. It uses only the OpenTelemetry API.
//
// Tracing is off unless the OTEL_* settings turn it on (app installs the
// SDK then). Off, every feature holds a nil trace.Tracer and makes no span
// at all: no context is derived, no attribute is built, and the trace
// context the service forwards is what it was before spans existed.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
)

// ScopeName prefixes the instrumentation scope of each package's tracer.
const ScopeName = "github.com/roomhub/messaging-api"

// Tracer is the tracer of package pkg from tp; nil when tp is nil (tracing
// off), which the features check before making a span.
func Tracer(tp trace.TracerProvider, pkg string) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(ScopeName + "/" + pkg)
}

// Attributes of the service's own.
const (
	RoomID         = attribute.Key("roomhub.room.id")
	SubscriptionID = attribute.Key("roomhub.subscription.id")
	EventType      = attribute.Key("roomhub.event.type")
	EventVersion   = attribute.Key("roomhub.event.version")
	// Attempt is the delivery attempt a copy is for (1 for the first).
	Attempt = attribute.Key("roomhub.attempt")
	// Destinations is how many subscriptions an event went to.
	Destinations = attribute.Key("roomhub.destinations")
	// SendID is the published-messages log row of a copy.
	SendID = attribute.Key("roomhub.send.id")
	// ScheduledDelay is how long the broker holds a copy (ms).
	ScheduledDelay = attribute.Key("roomhub.scheduled_delay_ms")
	// Outcome is what a push handling decided: delivered, retried,
	// dead_lettered, refused, expired, dropped, or deferred.
	Outcome = attribute.Key("roomhub.outcome")
	// DeferReason says why a push message was deferred without an attempt.
	DeferReason = attribute.Key("roomhub.defer_reason")
)

// Templates of the broker destinations in span names and
// messaging.destination.template: a room's address and a PULL
// subscription's queue have an id each, the push queue is one name.
const (
	RoomTemplate      = "room-{roomId}"
	PullQueueTemplate = "room-{roomId}::subscription-{subscriptionId}"
)

// Messaging operations (messaging.operation.name; each span's name starts
// with one).
const (
	OpCreate  = "create"  // a publish makes an event's message (PRODUCER)
	OpSend    = "send"    // a copy goes to the broker (PRODUCER)
	OpProcess = "process" // the push dispatcher handles a copy (CONSUMER)
)

// System is messaging.system: Artemis and ActiveMQ Classic are both ActiveMQ.
var System = semconv.MessagingSystemActiveMQ

// Event is what names an event on a span: its id (messaging.message.id),
// correlation id (messaging.message.conversation_id), room, type and version.
func Event(ev message.Event) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingMessageID(ev.ID.String()),
		semconv.MessagingMessageConversationID(ev.CorrelationID),
		RoomID.String(ev.RoomID.String()),
		EventType.String(ev.EventType),
		EventVersion.Int(ev.Version),
	}
}

// Fail marks span as failed: errType is its error.type (a short class such
// as an HTTP status code or "timeout"), text the status description, free of
// secrets.
func Fail(span trace.Span, errType, text string) {
	span.SetAttributes(semconv.ErrorTypeKey.String(errType))
	span.SetStatus(codes.Error, text)
}

// FailErr marks span as failed with err (error.type its Go type).
func FailErr(span trace.Span, err error) {
	span.SetAttributes(semconv.ErrorType(err))
	span.SetStatus(codes.Error, err.Error())
}

// Sender sends a message to the broker (broker.Broker is one).
type Sender interface {
	Send(ctx context.Context, msg broker.Message) error
}

// Send sends msg, copy s of event ev, with b: with tracer (not nil) under a
// PRODUCER span, a child of the span in ctx or else of the event's trace
// context (the publish's span, stored with the event). msg then carries the
// span's context in its trace headers, so that its consumer's span is a
// child of this send.
func Send(ctx context.Context, tracer trace.Tracer, b Sender, s message.Send, ev message.Event, msg broker.Message) error {
	if tracer == nil {
		return b.Send(ctx, msg)
	}
	span := startSend(ctx, tracer, s, ev, &msg)
	err := b.Send(ctx, msg)
	if err != nil {
		FailErr(span, err)
	}
	span.End()
	return err
}

func startSend(ctx context.Context, tracer trace.Tracer, s message.Send, ev message.Event, msg *broker.Message) trace.Span {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, ev.Trace.SpanContext())
	}
	pull := s.SubscriptionType == "PULL" // one queue per subscription: named by its template
	name := OpSend + " " + PullQueueTemplate
	if !pull {
		name = OpSend + " " + s.Destination
	}
	_, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() { // the attributes cost allocations: only for a sampled span
		attrs := append(Event(ev), System, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName(OpSend),
			semconv.MessagingDestinationName(s.Destination), SubscriptionID.String(s.SubscriptionID.String()),
			Attempt.Int(s.Attempt), SendID.String(s.ID.String()))
		if pull {
			attrs = append(attrs, semconv.MessagingDestinationTemplate(PullQueueTemplate))
		}
		if msg.Delay > 0 {
			attrs = append(attrs, ScheduledDelay.Int64(msg.Delay.Milliseconds()))
		}
		span.SetAttributes(attrs...)
	}
	if t := message.TraceOf(span.SpanContext()); t.Parent != "" {
		msg.Headers[message.HeaderTraceparent] = t.Parent
		delete(msg.Headers, message.HeaderTracestate)
		if t.State != "" {
			msg.Headers[message.HeaderTracestate] = t.State
		}
	}
	return span
}
