package publish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
	"github.com/roomhub/messaging-api/tracing"
)

// Limits on a publish request.
const (
	MaxBatch          = 100
	maxAttributes     = 32
	maxCorrelationID  = 200
	maxIdempotencyKey = 200
)

var printableHeader = regexp.MustCompile(`^[\x21-\x7e][\x20-\x7e]*$`)

// Catalog finds rooms, event types and versions (rooms.Service is one).
type Catalog interface {
	Room(ctx context.Context, ref string) (rooms.Room, error)
	// The rest take a room or event type already resolved: a publish looks
	// each thing up once.
	EventTypeOf(ctx context.Context, roomID uuid.UUID, identifier string) (rooms.EventType, error)
	VersionOf(ctx context.Context, eventTypeID uuid.UUID, version int) (rooms.Version, error)
	VersionsOf(ctx context.Context, eventTypeID uuid.UUID) ([]rooms.Version, error)
}

// Subscribers lists a room's subscriptions (subscriptions.Store is one).
type Subscribers interface {
	Subscriptions(ctx context.Context, q subscriptions.Query) ([]subscriptions.Subscription, error)
}

// Notifier is told that pending sends were committed.
type Notifier interface{ Notify() }

// HandOff is a relay that takes fresh sends in memory, so that they go to the
// broker at once instead of waiting for a claim (outbox.Relay is one). A
// publish reserves a place for each send before it stores them leased to the
// relay, and hands them over after the commit (or gives the places back if
// the store failed); when Reserve answers false (no place free, or the
// hand-off is off) it stores them unleased and notifies.
type HandOff interface {
	Notifier
	Reserve(n int) (outbox.Lease, bool)
	Unreserve(n int)
	HandOff(lease outbox.Lease, p []outbox.Pending)
}

// Batch is one publish call's rows: its events, their sends, and the lease
// of the sends' outbox rows.
type Batch struct {
	Events []message.Event
	Sends  []message.Send
	Lease  outbox.Lease
}

// BatchStore stores several publishes in one transaction: all of them or
// none.
type BatchStore interface {
	PublishAll(ctx context.Context, batches []Batch) error
}

// Group commit bounds: a publish with more events than groupMaxEvents or
// more sends than groupMaxSends is stored alone, in a transaction of its
// own; one transaction takes at most groupMaxCalls publishes. Grouping
// serialises the writes (one group at a time), which pays while rows are
// few and costs throughput at a fan-out of 10
// (docs/benchmarks.md#what-limits-each-figure).
const (
	groupMaxEvents = 4
	groupMaxSends  = 4
	groupMaxCalls  = 64
)

// Limits bound what a publisher may send.
type Limits struct {
	// MaxPayload is the largest payload of one event in bytes (0: no limit
	// beyond the request body limit).
	MaxPayload int
	// Take, when set, takes n events from the caller's rate limit or returns
	// an *api.RateLimitedError.
	Take func(ctx context.Context, n int) error
}

// Deps is what a Service works with.
type Deps struct {
	Catalog     Catalog
	Subscribers Subscribers
	Store       Store
	// Batches stores concurrent small publishes in one transaction (the
	// store is one); nil stores each publish in a transaction of its own.
	Batches BatchStore
	// Relay is told of, or handed, the sends of each publish.
	Relay HandOff
	// PushQueue is where PUSH copies go.
	PushQueue broker.Destination
	Now       func() time.Time
	Limits    Limits
	// Observer sees every publish; nil: nothing does.
	Observer Observer
	// Tracer makes a span of each event published; nil: tracing is off and
	// each event keeps the publish request's trace context.
	Tracer trace.TracerProvider
}

// Service publishes events.
type Service struct {
	catalog   Catalog
	subs      Subscribers
	store     Store
	relay     HandOff
	pushQueue broker.Destination
	now       func() time.Time
	schemas   schemaCache
	limits    Limits
	obs       Observer
	group     *outbox.GroupCommit[Batch]
	tracer    trace.Tracer // nil: off
}

// NewService wires a Service.
func NewService(d Deps) *Service {
	s := &Service{catalog: d.Catalog, subs: d.Subscribers, store: d.Store, relay: d.Relay, pushQueue: d.PushQueue,
		now: d.Now, limits: d.Limits, obs: d.Observer, tracer: tracing.Tracer(d.Tracer, "publish")}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	single := func(ctx context.Context, b Batch) error { return d.Store.Publish(ctx, b.Events, b.Sends, b.Lease) }
	var all func(context.Context, []Batch) error
	if d.Batches != nil {
		all = d.Batches.PublishAll
	}
	s.group = outbox.NewGroupCommit(groupMaxCalls, all, single)
	return s
}

// save stores one publish: a small one (up to four events and four
// destinations, as the common POST …/messages) shares a transaction with the
// small publishes that arrive while the previous one is being written.
func (s *Service) save(ctx context.Context, events []message.Event, sends []message.Send, lease outbox.Lease) error {
	if len(events) <= groupMaxEvents && len(sends) <= groupMaxSends {
		return s.group.Commit(ctx, Batch{Events: events, Sends: sends, Lease: lease})
	}
	return s.store.Publish(ctx, events, sends, lease)
}

// Input is one event to publish.
type Input struct {
	EventType        string            `json:"eventType"`
	EventTypeVersion *int              `json:"eventTypeVersion,omitempty"`
	Payload          json.RawMessage   `json:"payload"`
	CorrelationID    string            `json:"correlationId,omitempty"`
	Attributes       map[string]string `json:"attributes,omitempty"`
	// Trace comes from the request's traceparent and tracestate headers.
	Trace message.Trace `json:"-"`
}

// Result is what a publish answers for one event.
type Result struct {
	Event message.Event
	// Replayed is true when an Idempotency-Key matched an earlier publish and
	// nothing was sent again.
	Replayed bool
}

// Publish validates and stores events for the room ref names, with one
// pending send per destination, all or nothing. idempotencyKey may be "".
func (s *Service) Publish(ctx context.Context, ref string, inputs []Input, idempotencyKey string, batch bool) ([]Result, error) {
	room, err := s.catalog.Room(ctx, ref)
	if err != nil {
		return nil, err
	}
	if room.Status == rooms.StatusTerminated {
		return nil, rooms.ErrTerminated
	}
	if err := mayPublish(api.CallerFrom(ctx), room.ID, inputs, batch); err != nil {
		return nil, err
	}
	var hash string // only a keyed request is compared with a replay
	if idempotencyKey != "" {
		hash = requestHash(inputs)
		if len(idempotencyKey) > maxIdempotencyKey || !printableHeader.MatchString(idempotencyKey) {
			return nil, api.Invalid("Idempotency-Key", fmt.Sprintf("must be 1 to %d printable ASCII characters", maxIdempotencyKey))
		}
		if res, err := s.replay(ctx, room.ID, idempotencyKey, hash); res != nil || err != nil {
			return res, err
		}
	}

	now := s.now().UTC()
	requestID := uuid.Must(uuid.NewV7())
	subs, err := s.subs.Subscriptions(ctx, subscriptions.Query{RoomID: room.ID, Status: subscriptions.StatusActive})
	if err != nil {
		return nil, err
	}
	var (
		probs  api.Problems
		events = make([]message.Event, 0, len(inputs))
		sends  []message.Send
		checks = make([]payloadCheck, 0, len(inputs))
		budget rooms.ValidationBudget
	)
	for i, in := range inputs {
		if err := ctx.Err(); err != nil {
			return nil, err // the client is gone
		}
		field, pointer := "", ""
		if batch {
			field, pointer = fmt.Sprintf("messages[%d].", i), fmt.Sprintf("/messages/%d", i)
		}
		ev, check, ok, err := s.prepare(ctx, room, in, field, pointer, &probs)
		if err != nil {
			return nil, err
		}
		if check.schema != nil {
			if perr := budget.Spend(check.cost); perr != nil {
				// No payload is checked: the request would cost more than
				// any request may.
				probs.AddPointer(check.field, check.pointer, perr.Message)
				checks = nil
				break
			}
			checks = append(checks, check)
		}
		if !ok {
			continue
		}
		ev.ID = uuid.Must(uuid.NewV7())
		ev.RequestID = requestID
		ev.PublishedAt = now
		if room.MessageExpiration > 0 {
			ev.ExpiresAt = now.Add(time.Duration(room.MessageExpiration) * time.Millisecond)
		}
		if i == 0 && idempotencyKey != "" {
			// A batch is one request: its first event carries the key.
			ev.IdempotencyKey, ev.RequestHash = idempotencyKey, hash
		}
		sends = s.route(&ev, subs, now, sends)
		events = append(events, ev)
	}
	for _, c := range checks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c.run(&probs)
	}
	if err := probs.Err(); err != nil {
		return nil, err
	}
	if s.limits.Take != nil {
		if err := s.limits.Take(ctx, len(events)); err != nil {
			return nil, err
		}
	}
	var (
		lease   outbox.Lease
		handing bool
	)
	if len(sends) > 0 {
		lease, handing = s.relay.Reserve(len(sends))
	}
	spans := s.create(ctx, room, events)
	err = s.save(ctx, events, sends, lease)
	endSpans(spans, err)
	if err != nil {
		if handing {
			s.relay.Unreserve(len(sends))
		}
		if errors.Is(err, ErrDuplicateKey) && idempotencyKey != "" {
			// Another request with this key committed first: answer as it did.
			if res, rerr := s.replay(ctx, room.ID, idempotencyKey, hash); res != nil || rerr != nil {
				return res, rerr
			}
		}
		return nil, err
	}
	switch {
	case handing:
		s.relay.HandOff(lease, pendingOf(events, sends))
	case len(sends) > 0:
		s.relay.Notify()
	}
	s.observe(room, events, sends)
	out := make([]Result, len(events))
	for i, ev := range events {
		out[i] = Result{Event: ev}
	}
	return out, nil
}

// create starts a PRODUCER span for each event, under the request's span,
// and makes its context the event's trace context: the one stored with the
// event and carried by each of its copies. The spans last while the events
// are stored. Nil when tracing is off: the events keep the request's trace
// context.
func (s *Service) create(ctx context.Context, room rooms.Room, events []message.Event) []trace.Span {
	if s.tracer == nil {
		return nil
	}
	dest := rooms.Address(room.ID)
	spans := make([]trace.Span, len(events))
	for i := range events {
		_, span := s.tracer.Start(ctx, tracing.OpCreate+" "+tracing.RoomTemplate, trace.WithSpanKind(trace.SpanKindProducer))
		if span.IsRecording() { // the attributes cost allocations: only for a sampled span
			span.SetAttributes(append(tracing.Event(events[i]), tracing.System, semconv.MessagingOperationTypeCreate,
				semconv.MessagingOperationName(tracing.OpCreate), semconv.MessagingDestinationName(dest),
				semconv.MessagingDestinationTemplate(tracing.RoomTemplate), tracing.Destinations.Int(events[i].Destinations))...)
		}
		events[i].Trace = message.TraceOf(span.SpanContext())
		spans[i] = span
	}
	return spans
}

// endSpans ends the spans of create, failed with err if it is not nil.
func endSpans(spans []trace.Span, err error) {
	for _, span := range spans {
		if err != nil {
			tracing.FailErr(span, err)
		}
		span.End()
	}
}

// pendingOf pairs each send with its event.
func pendingOf(events []message.Event, sends []message.Send) []outbox.Pending {
	byID := make(map[uuid.UUID]int, len(events))
	for i, ev := range events {
		byID[ev.ID] = i
	}
	out := make([]outbox.Pending, len(sends))
	for i, sd := range sends {
		out[i] = outbox.Pending{Send: sd, Event: events[byID[sd.EventID]]}
	}
	return out
}

// replay answers a request whose Idempotency-Key was seen before, or returns
// nil, nil when it was not.
func (s *Service) replay(ctx context.Context, roomID uuid.UUID, key, hash string) ([]Result, error) {
	first, err := s.store.EventByIdempotencyKey(ctx, roomID, key)
	if errors.Is(err, ErrEventNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if first.RequestHash != hash {
		return nil, ErrIdempotencyKey
	}
	evs, err := s.store.EventsByRequest(ctx, roomID, first.RequestID)
	if err != nil {
		return nil, err
	}
	out := make([]Result, len(evs))
	for i, ev := range evs {
		out[i] = Result{Event: ev, Replayed: true}
	}
	return out, nil
}

// prepare validates one input and resolves its event type and version. Its
// payload is decoded, to be checked against the version's schema once every
// payload of the request is known to fit the validation budget.
func (s *Service) prepare(ctx context.Context, room rooms.Room, in Input, field, pointer string, probs *api.Problems) (message.Event, payloadCheck, bool, error) {
	before := probs.Len()
	ev := message.Event{RoomID: room.ID, CorrelationID: in.CorrelationID, Attributes: in.Attributes, Trace: in.Trace}
	if ev.CorrelationID == "" {
		ev.CorrelationID = uuid.NewString()
	} else if len(ev.CorrelationID) > maxCorrelationID || !printableHeader.MatchString(ev.CorrelationID) {
		probs.Add(field+"correlationId", fmt.Sprintf("must be 1 to %d printable ASCII characters", maxCorrelationID))
	}
	attrs := in.Attributes
	if len(attrs) > maxAttributes {
		probs.Add(field+"attributes", fmt.Sprintf("must have at most %d entries", maxAttributes))
		attrs = nil // one problem, not one per entry
	}
	lower := map[string]string{}
	for k, v := range attrs {
		if prev, dup := lower[strings.ToLower(k)]; dup {
			// They become X-Attr-<name> HTTP headers, where case does not count.
			probs.Add(field+"attributes."+k, fmt.Sprintf("differs from %q only in case", prev))
		}
		lower[strings.ToLower(k)] = k
		if !message.ValidAttributeName(k) {
			probs.Add(field+"attributes."+k, "names must match "+message.AttributeNamePattern)
		}
		if len(v) > message.MaxAttributeValue {
			probs.Add(field+"attributes."+k, fmt.Sprintf("must be at most %d bytes", message.MaxAttributeValue))
		}
		if strings.ContainsFunc(v, func(r rune) bool { return (r < ' ' && r != '\t') || r == 0x7f }) {
			// Push sends it as an X-Attr-<name> header, which net/http refuses to send.
			probs.Add(field+"attributes."+k, "must not contain control characters other than tab")
		}
	}
	switch {
	case len(in.Payload) == 0:
		probs.Add(field+"payload", "is required (any JSON value; null is allowed only if the schema allows it)")
	case s.limits.MaxPayload > 0 && len(in.Payload) > s.limits.MaxPayload:
		probs.Add(field+"payload", fmt.Sprintf("is %d bytes, more than the limit of %d (PUBLISH_MAX_PAYLOAD)", len(in.Payload), s.limits.MaxPayload))
	case !utf8.Valid(in.Payload):
		// It is stored and delivered byte for byte: JSON text is UTF-8.
		probs.Add(field+"payload", "is not valid UTF-8: JSON text must be UTF-8")
	}
	if in.EventType == "" {
		probs.Add(field+"eventType", "is required")
		return ev, payloadCheck{}, false, nil
	}
	if in.EventTypeVersion != nil && !rooms.ValidVersion(*in.EventTypeVersion) {
		probs.Add(field+"eventTypeVersion", fmt.Sprintf("must be an integer from 1 to %d", rooms.MaxVersion))
		return ev, payloadCheck{}, false, nil
	}
	// What the request names and does not exist is a 404 naming the field,
	// which in a batch says which message.
	et, err := s.catalog.EventTypeOf(ctx, room.ID, in.EventType)
	if err != nil {
		return ev, payloadCheck{}, false, api.InField(field+"eventType", pointer+"/eventType", err)
	}
	var version rooms.Version
	if in.EventTypeVersion != nil {
		version, err = s.catalog.VersionOf(ctx, et.ID, *in.EventTypeVersion)
		if err != nil {
			return ev, payloadCheck{}, false, api.InField(field+"eventTypeVersion", pointer+"/eventTypeVersion", err)
		}
	} else {
		vs, err := s.catalog.VersionsOf(ctx, et.ID)
		if err != nil {
			return ev, payloadCheck{}, false, err
		}
		if len(vs) == 0 {
			return ev, payloadCheck{}, false, api.InField(field+"eventType", pointer+"/eventType", ErrNoVersions)
		}
		version = vs[len(vs)-1]
	}
	ev.EventTypeID, ev.EventType, ev.Version = et.ID, et.Identifier, version.Version
	var check payloadCheck
	if len(in.Payload) > 0 {
		schema, err := s.schemas.get(ctx, version)
		if err != nil {
			return ev, payloadCheck{}, false, err
		}
		check = decodePayload(schema, in.Payload, field+"payload", pointer+"/payload", probs)
		ev.Payload = compact(in.Payload)
	}
	if ev.Attributes == nil {
		ev.Attributes = map[string]string{}
	}
	return ev, check, probs.Len() == before, nil
}

// route appends to sends the first send of ev to each of subs (the room's
// ACTIVE subscriptions) whose filters take it, counting them in
// ev.Destinations: the routing rule of docs/api-guide.md#routing.
func (s *Service) route(ev *message.Event, subs []subscriptions.Subscription, now time.Time, sends []message.Send) []message.Send {
	for i := range subs {
		if !subs[i].Receives(ev.EventTypeID, ev.Version, ev.Attributes) {
			continue
		}
		sends = append(sends, s.newSend(*ev, subs[i], now))
		ev.Destinations++
	}
	return sends
}

// newSend is the first send of ev to sub.
func (s *Service) newSend(ev message.Event, sub subscriptions.Subscription, now time.Time) message.Send {
	dest := s.pushQueue
	if sub.Type == subscriptions.TypePull {
		dest = sub.Queue()
	}
	return message.Send{
		ID:               uuid.Must(uuid.NewV7()),
		EventID:          ev.ID,
		RoomID:           ev.RoomID,
		CorrelationID:    ev.CorrelationID,
		SubscriptionID:   sub.ID,
		SubscriptionType: string(sub.Type),
		Destination:      dest.FQQN(),
		Attempt:          1,
		CreatedAt:        now,
		Status:           message.StatusPending,
	}
}

// requestHash identifies the content of a request, so that a reused
// Idempotency-Key with another body is refused rather than answered wrongly.
func requestHash(inputs []Input) string {
	b, _ := json.Marshal(inputs)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// Event returns one event of the room with every send of it.
func (s *Service) Event(ctx context.Context, ref, id string) (message.Event, []message.Send, error) {
	room, err := s.catalog.Room(ctx, ref)
	if err != nil {
		return message.Event{}, nil, err
	}
	eid, err := uuid.Parse(id)
	if err != nil {
		return message.Event{}, nil, ErrEventNotFound
	}
	ev, err := s.store.Event(ctx, room.ID, eid)
	if err != nil {
		return message.Event{}, nil, err
	}
	sends, err := s.store.Sends(ctx, []uuid.UUID{ev.ID})
	return ev, sends, err
}

// Events lists the room's events, newest first, optionally by correlation id,
// with their sends.
func (s *Service) Events(ctx context.Context, ref, correlationID string, page api.Page) ([]message.Event, map[uuid.UUID][]message.Send, error) {
	room, err := s.catalog.Room(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	if correlationID != "" && (len(correlationID) > maxCorrelationID || !printableHeader.MatchString(correlationID)) {
		// No event has it (publishing refuses it), and the database may refuse
		// to compare it (a NUL character, invalid UTF-8).
		return nil, nil, api.Invalid("correlationId", fmt.Sprintf("must be 1 to %d printable ASCII characters", maxCorrelationID))
	}
	q := EventQuery{RoomID: room.ID, CorrelationID: correlationID, Limit: page.Limit}
	if q.Before, err = page.AfterID(); err != nil {
		return nil, nil, err
	}
	evs, err := s.store.Events(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]uuid.UUID, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	sends, err := s.store.Sends(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	by := map[uuid.UUID][]message.Send{}
	for _, sd := range sends {
		by[sd.EventID] = append(by[sd.EventID], sd)
	}
	return evs, by, nil
}

// mayPublish checks the caller's grants for every event of a request, before
// anything about the room's event types is looked up.
func mayPublish(c *api.Caller, roomID uuid.UUID, inputs []Input, batch bool) error {
	if c.Admin() {
		return nil
	}
	if c.Role != api.RolePublisher {
		return api.Forbidden("a %s key may not publish", c.Role)
	}
	for i, in := range inputs {
		if !c.MayPublish(roomID, in.EventType) {
			field := "eventType"
			if batch {
				field = fmt.Sprintf("messages[%d].eventType", i)
			}
			return api.Forbidden("%s: this key may not publish %q events to this room", field, in.EventType)
		}
	}
	return nil
}
