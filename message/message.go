// Package message is the broker message of one copy of an event: the
// headers it carries, how a copy is encoded for the broker (Encode) and how
// a consumer rebuilds the event from a delivery (Decode), with the W3C trace
// context that travels in it. The publisher's outbox relay, the push
// dispatcher and pulls all speak this format.
package message

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
)

// Headers every copy of an event carries, besides correlation-id, x-attempt,
// expires and persistent (see broker).
const (
	HeaderEventID        = "x-event-id"
	HeaderRoomID         = "x-room-id"
	HeaderSubscriptionID = "x-subscription-id"
	HeaderEventType      = "x-event-type"
	HeaderEventVersion   = "x-event-version"
	HeaderPublishedAt    = "x-published-at" // epoch µs
	HeaderSendID         = "x-send-id"      // the published_messages row of this copy
	// HeaderExpiresAt carries a copy's expiry (epoch ms) instead of the
	// broker's expires: an expired message must become a dead letter, which
	// only the dispatcher or a pull can make; the broker would drop it silently.
	HeaderExpiresAt = "x-expires-at"
	// HeaderHeld counts how often a push copy was held (PAUSED subscription)
	// or deferred (slow subscription) since its last attempt; present only
	// when that is at least once (Send.Held).
	HeaderHeld = "x-held"
	// AttributePrefix prefixes each publisher attribute's header name.
	AttributePrefix = "x-attr-"
)

// MaxAttributeValue bounds an attribute's value in bytes: it travels as a
// broker header and, for push, as an X-Attr-<name> HTTP header.
const MaxAttributeValue = 1024

// AttributeNamePattern is what an attribute's name must match: it becomes
// part of a header name.
const AttributeNamePattern = `^[a-zA-Z][a-zA-Z0-9_.-]{0,63}$`

var attributeName = regexp.MustCompile(AttributeNamePattern)

// ValidAttributeName reports whether name may name an attribute.
func ValidAttributeName(name string) bool { return attributeName.MatchString(name) }

// Status of one send in the published-messages log.
type Status string

const (
	StatusPending      Status = "pending"       // stored, not yet confirmed by the broker
	StatusSent         Status = "sent"          // in the broker, awaiting delivery
	StatusDelivered    Status = "delivered"     // the subscriber took it (2xx, or ack)
	StatusFailed       Status = "failed"        // this attempt failed; a later row retries it
	StatusExpired      Status = "expired"       // expired before it could be delivered
	StatusDeadLettered Status = "dead_lettered" // no more attempts
	StatusDropped      Status = "dropped"       // its subscription was terminated or deleted
)

// Event is one published event.
type Event struct {
	ID     uuid.UUID
	RoomID uuid.UUID
	// RequestID is shared by the events of one publish request (a batch).
	RequestID      uuid.UUID
	CorrelationID  string
	EventTypeID    uuid.UUID
	EventType      string
	Version        int
	Payload        json.RawMessage
	Attributes     map[string]string
	IdempotencyKey string
	RequestHash    string
	Destinations   int
	PublishedAt    time.Time
	ExpiresAt      time.Time // zero: never
	// Trace is the W3C trace context every copy carries.
	Trace Trace
}

// Send is one row of the published-messages log: one copy of an event sent
// (or owed) to the broker for one subscription and attempt.
type Send struct {
	ID               uuid.UUID
	EventID          uuid.UUID
	RoomID           uuid.UUID
	CorrelationID    string
	SubscriptionID   uuid.UUID
	SubscriptionType string
	Destination      string // the broker queue, FQQN
	Attempt          int
	// Held counts how often the push dispatcher re-queued this message
	// without an attempt (subscription PAUSED or slow) since its last
	// attempt; each time it waits longer. Sent as HeaderHeld.
	Held           int
	ScheduledDelay time.Duration
	CreatedAt      time.Time
	SentAt         time.Time // zero while pending
	Status         Status
	StatusCode     int // HTTP status of a push attempt, 0 if none
	// Latency is how long the push request of this attempt took; 0 if none.
	Latency     time.Duration
	Error       string
	CompletedAt time.Time
}

// Encode builds the broker message for the send s of the event ev. A
// scheduled resend that waited in the outbox (broker down) keeps its planned
// time: the delay is what is left of it at now.
func Encode(s Send, ev Event, now time.Time) broker.Message {
	delay := s.ScheduledDelay
	if delay > 0 {
		delay = max(0, s.CreatedAt.Add(s.ScheduledDelay).Sub(now))
	}
	h := map[string]string{
		HeaderEventID:        ev.ID.String(),
		HeaderRoomID:         ev.RoomID.String(),
		HeaderSubscriptionID: s.SubscriptionID.String(),
		HeaderEventType:      ev.EventType,
		HeaderEventVersion:   strconv.Itoa(ev.Version),
		HeaderPublishedAt:    strconv.FormatInt(ev.PublishedAt.UnixMicro(), 10),
		HeaderSendID:         s.ID.String(),
	}
	for k, v := range ev.Attributes {
		h[AttributePrefix+k] = v
	}
	if ev.Trace.Parent != "" {
		h[HeaderTraceparent] = ev.Trace.Parent
	}
	if ev.Trace.State != "" {
		h[HeaderTracestate] = ev.Trace.State
	}
	if s.Held > 0 {
		h[HeaderHeld] = strconv.Itoa(s.Held)
	}
	expires := ev.ExpiresAt
	if !expires.IsZero() {
		h[HeaderExpiresAt] = strconv.FormatInt(expires.UnixMilli(), 10)
		expires = time.Time{}
	}
	addr, queue := splitFQQN(s.Destination)
	return broker.Message{
		Destination:   broker.Destination{Address: addr, Queue: queue},
		Headers:       h,
		Body:          ev.Payload,
		ContentType:   "application/json",
		CorrelationID: s.CorrelationID,
		Attempt:       s.Attempt,
		Delay:         delay,
		Expires:       expires,
	}
}

func splitFQQN(s string) (string, string) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == ':' && s[i+1] == ':' {
			return s[:i], s[i+2:]
		}
	}
	return s, s
}

// ExpiresAt is when the event a delivery carries expires (zero: never): the
// broker's expiry, else the service's header.
func ExpiresAt(d *broker.Delivery) time.Time {
	if !d.Expires.IsZero() {
		return d.Expires
	}
	if ms, err := strconv.ParseInt(d.Headers[HeaderExpiresAt], 10, 64); err == nil {
		return time.UnixMilli(ms).UTC()
	}
	return time.Time{}
}

// Decode rebuilds the event a delivery carries from its headers and body.
func Decode(d *broker.Delivery) Event {
	ev := Event{
		CorrelationID: d.CorrelationID, EventType: d.Headers[HeaderEventType],
		Payload: json.RawMessage(d.Body), ExpiresAt: ExpiresAt(d), Attributes: map[string]string{},
	}
	// uuid.Parse returns a half-filled id with its error: keep uuid.Nil.
	if id, err := uuid.Parse(d.Headers[HeaderEventID]); err == nil {
		ev.ID = id
	}
	if id, err := uuid.Parse(d.Headers[HeaderRoomID]); err == nil {
		ev.RoomID = id
	}
	if v, err := strconv.Atoi(d.Headers[HeaderEventVersion]); err == nil { // Atoi clamps an out-of-range value
		ev.Version = v
	}
	if us, err := strconv.ParseInt(d.Headers[HeaderPublishedAt], 10, 64); err == nil {
		ev.PublishedAt = time.UnixMicro(us).UTC()
	}
	ev.Trace = TraceOfDelivery(d)
	for k, v := range d.Headers {
		if name, ok := strings.CutPrefix(k, AttributePrefix); ok {
			ev.Attributes[name] = v
		}
	}
	return ev
}

// TraceOfDelivery is the trace context a delivery carries (the zero Trace
// if its traceparent is missing or invalid).
func TraceOfDelivery(d *broker.Delivery) Trace {
	tp, ok := ParseTraceparent(d.Headers[HeaderTraceparent])
	if !ok {
		return Trace{}
	}
	return Trace{Parent: tp, State: ParseTracestate(d.Headers[HeaderTracestate])}
}

// RequestStartedAt is when an attempt's push request began: completed less
// the request's latency; nil when no request was made (or it has not
// ended). The log stores when the copy reached the broker (SentAt) and
// when the attempt ended, not the start, which comes between them.
func RequestStartedAt(completed time.Time, latency time.Duration, statusCode int) *time.Time {
	if completed.IsZero() || (latency <= 0 && statusCode == 0) {
		return nil
	}
	t := completed.Add(-latency)
	return &t
}
