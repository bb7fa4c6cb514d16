package pull

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/subscriptions"
	"github.com/roomhub/messaging-api/tracing"
)

// annotate names the subscription on the request's span, when tracing is
// on (the span records).
func annotate(ctx context.Context, sub subscriptions.Subscription) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.RoomID.String(sub.RoomID.String()), tracing.SubscriptionID.String(sub.ID.String()),
			semconv.MessagingDestinationName(sub.Queue().FQQN()))
	}
}

// linkMessages links the pull request's span, when it records, to the span
// that sent each message it returns (the context the message carried), and
// counts them.
func linkMessages(ctx context.Context, msgs []Message) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.MessagingBatchMessageCount(len(msgs)))
	for _, m := range msgs {
		sc := message.Trace{Parent: m.Traceparent, State: m.Tracestate}.SpanContext()
		if sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
				semconv.MessagingMessageID(m.EventID), tracing.Attempt.Int(m.Attempt)}})
		}
	}
}
