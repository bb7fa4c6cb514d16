package publish_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

var (
	fuzzRoomID  = uuid.MustParse("0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a3b")
	fuzzEventID = uuid.MustParse("0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a10")
)

// FuzzPublishRequest drives POST /v1/rooms/{room}/messages and
// /messages:batch with any body and any X-Correlation-ID, Idempotency-Key
// and traceparent headers: never a 500 or a panic; a rejection is a problem
// naming fields; an accepted event can travel: every value that becomes a
// STOMP or HTTP header (correlation id, event type, attributes) is a valid
// HTTP field value, since push sends each as a request header. A replay
// with the same Idempotency-Key answers the same events.
func FuzzPublishRequest(f *testing.F) {
	for _, s := range []string{
		`{"eventType":"order.created","payload":{"orderId":"o-1"}}`,
		`{"eventType":"order.created","eventTypeVersion":2,"payload":null,"correlationId":"c-1","attributes":{"region":"eu","Region2":"x"}}`,
		`{"eventType":"order.created","payload":{"orderId":"o-1"},"attributes":{"note":"a\nb","bell":"\u0007","del":"\u007f","tab":"a\tb"}}`,
		`{"eventType":"order.created","payload":{"orderId":"o-1"},"attributes":{"region":"eu","REGION":"us"}}`,
		`{"eventType":"order.created","payload":{"orderId":1}}`,
		`{"eventType":"order.created","eventTypeVersion":3,"payload":{}}`,
		`{"eventType":"order.created","eventTypeVersion":0,"payload":{}}`,
		`{"eventType":"nope","payload":{}}`, `{"eventType":"","payload":{}}`, `{"eventType":"order.created"}`,
		`{"eventType":"order.created","payload":{"orderId":"o"},"correlationId":"with space"}`,
		`{"eventType":"order.created","payload":{"orderId":"o"},"correlationId":"\u00e9"}`,
		`{"eventType":"order.created","payload":[[[[[[[[[[[[[[[[[[[[[[[[[[[[{}]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
		`{"eventType":"order.created","payload":1e400}`, `{"eventType":"order.created","payload":{"orderId":"o","orderId":"p"}}`,
		`{"messages":[{"eventType":"order.created","payload":{"orderId":"o-1"}},{"eventType":"order.created","eventTypeVersion":2,"payload":7}]}`,
		`{"messages":[]}`, `{"messages":null}`, `{"messages":[{"eventType":"order.created","payload":{}},{"eventType":"nope","payload":{}}]}`,
		`{"messages":[{"eventType":"order.created","payload":{"orderId":"o"},"attributes":{"a":"\r\n"}}]}`,
		`{"eventTypes":"order.created"}`, `{"":1}`, `{}`, `null`, ``, `{"eventType":"order.created","payload":{}}x`,
	} {
		f.Add([]byte(s), false, "", "", "")
		f.Add([]byte(s), true, "", "", "")
		f.Add([]byte(s), strings.HasPrefix(s, `{"messages"`), "cid-1", "key-1", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	}
	f.Add([]byte(`{"eventType":"order.created","payload":{"orderId":"o"}}`), false, "cid\n2", "key 2", "00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	f.Add([]byte(`{"eventType":"order.created","payload":{"orderId":"o"},"correlationId":"a"}`), false, "b", "\x7f", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h := newPublishHarness(nil) // one per worker: echo.New costs more than a request
	f.Fuzz(func(t *testing.T, body []byte, batch bool, correlationID, idempotencyKey, traceparent string) {
		h.store.events = nil
		path := "/v1/rooms/orders/messages"
		if batch {
			path += ":batch"
		}
		do := func() *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
			req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
			for name, v := range map[string]string{"X-Correlation-ID": correlationID, "Idempotency-Key": idempotencyKey, "traceparent": traceparent} {
				if v != "" {
					req.Header.Set(name, v)
				}
			}
			rec := httptest.NewRecorder()
			h.e.ServeHTTP(rec, req)
			return rec
		}
		rec := do()
		apitest.CheckStatus(t, rec, http.StatusAccepted, http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusNotFound)
		if rec.Code != http.StatusAccepted {
			if len(h.store.events) > 0 {
				t.Fatalf("answered %d but stored %d events", rec.Code, len(h.store.events))
			}
			return
		}
		if len(h.store.events) == 0 {
			t.Fatalf("answered 202 and stored nothing")
		}
		for _, ev := range h.store.events {
			checkTransmissible(t, ev)
		}
		if idempotencyKey == "" {
			return
		}
		first := len(h.store.events)
		again := do()
		if again.Code != http.StatusAccepted || again.Header().Get("Idempotent-Replayed") != "true" || len(h.store.events) != first {
			t.Fatalf("replay: %d, Idempotent-Replayed %q, %d events stored (%d before): %s",
				again.Code, again.Header().Get("Idempotent-Replayed"), len(h.store.events), first, again.Body)
		}
	})
}

// checkTransmissible: what push puts in request headers can be sent.
func checkTransmissible(t *testing.T, ev message.Event) {
	t.Helper()
	values := map[string]string{"correlation id": ev.CorrelationID, "event type": ev.EventType}
	for k, v := range ev.Attributes {
		values["attribute "+k] = v
		if !validFieldValue(k) || strings.ContainsAny(k, " \t:") {
			t.Fatalf("attribute name %q cannot be a header name", k)
		}
	}
	for what, v := range values {
		if !validFieldValue(v) {
			t.Fatalf("accepted %s %q cannot be sent as an HTTP header (push sends it as one)", what, v)
		}
	}
}

// validFieldValue is RFC 9110's field-value as net/http checks it before
// sending: no control characters but horizontal tab.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

type publishHarness struct {
	e     *echo.Echo
	store *memEvents
}

// newPublishHarness serves the publish routes over fixedCatalog, with the
// versions extra adds to order.created.
func newPublishHarness(extra map[int]string) publishHarness {
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	store := &memEvents{}
	svc := publish.NewService(publish.Deps{Catalog: fixedCatalog{extra: extra}, Subscribers: fixedSubscribers{}, Store: store,
		Relay: nopRelay{}, PushQueue: broker.Destination{Address: "push", Queue: "dispatch"}, Now: now})
	e := echo.New()
	e.HTTPErrorHandler = api.ErrorHandler(slog.New(slog.DiscardHandler))
	publish.Routes(e.Group("/v1"), svc)
	return publishHarness{e: e, store: store}
}

// fixedCatalog has one room, "orders" (messages expire after a minute), with
// order.created in version 1 (an object with a string orderId) and 2
// (anything), and the versions in extra, which only a request naming them
// gets.
type fixedCatalog struct{ extra map[int]string }

var versionSchemas = map[int]string{
	1: `{"type":"object","required":["orderId"],"properties":{"orderId":{"type":"string"}}}`,
	2: `{}`,
}

func (fixedCatalog) Room(_ context.Context, ref string) (rooms.Room, error) {
	if ref != "orders" && ref != fuzzRoomID.String() {
		return rooms.Room{}, rooms.ErrNotFound
	}
	r := rooms.NewRoomDefaults()
	r.ID, r.Identifier, r.ManagerIdentifier, r.MessageExpiration = fuzzRoomID, "orders", "team-a", 60_000
	return r, nil
}

func (fixedCatalog) EventTypeOf(_ context.Context, roomID uuid.UUID, identifier string) (rooms.EventType, error) {
	if roomID != fuzzRoomID || identifier != "order.created" {
		return rooms.EventType{}, rooms.ErrEventTypeNotFound
	}
	return rooms.EventType{ID: fuzzEventID, RoomID: roomID, Identifier: identifier}, nil
}

func (c fixedCatalog) VersionOf(_ context.Context, eventTypeID uuid.UUID, version int) (rooms.Version, error) {
	s, ok := versionSchemas[version]
	if e, found := c.extra[version]; found {
		s, ok = e, true
	}
	if eventTypeID != fuzzEventID || !ok {
		return rooms.Version{}, rooms.ErrVersionNotFound
	}
	return rooms.Version{EventTypeID: eventTypeID, Version: version, Schema: json.RawMessage(s)}, nil
}

func (c fixedCatalog) VersionsOf(ctx context.Context, eventTypeID uuid.UUID) ([]rooms.Version, error) {
	var out []rooms.Version
	for v := 1; v <= len(versionSchemas); v++ { // not the extra ones
		ver, err := c.VersionOf(ctx, eventTypeID, v)
		if err != nil {
			return nil, err
		}
		out = append(out, ver)
	}
	return out, nil
}

// fixedSubscribers: a PUSH subscription to every version, a PULL one to version 2.
type fixedSubscribers struct{}

func (fixedSubscribers) Subscriptions(context.Context, subscriptions.Query) ([]subscriptions.Subscription, error) {
	return []subscriptions.Subscription{
		{ID: uuid.MustParse("0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a01"), RoomID: fuzzRoomID, Type: subscriptions.TypePush, PushURL: "https://example.com/hook",
			EventTypes: []subscriptions.Filter{{EventTypeID: fuzzEventID, EventType: "order.created"}}, Status: subscriptions.StatusActive},
		{ID: uuid.MustParse("0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a02"), RoomID: fuzzRoomID, Type: subscriptions.TypePull,
			EventTypes: []subscriptions.Filter{{EventTypeID: fuzzEventID, EventType: "order.created", Versions: []int{2}}}, Status: subscriptions.StatusActive},
	}, nil
}

// nopRelay is a relay whose hand-off is off and that sends nothing.
type nopRelay struct{}

func (nopRelay) Notify()                                {}
func (nopRelay) Reserve(int) (outbox.Lease, bool)       { return outbox.Lease{}, false }
func (nopRelay) Unreserve(int)                          {}
func (nopRelay) HandOff(outbox.Lease, []outbox.Pending) {}

// memEvents is the part of publish.Store the publish endpoints use; the
// rest is embedded nil and panics if called, which the fuzz target reports.
type memEvents struct {
	publish.Store
	events []message.Event
}

func (m *memEvents) Publish(_ context.Context, events []message.Event, _ []message.Send, _ outbox.Lease) error {
	for _, ev := range events {
		if ev.IdempotencyKey == "" {
			continue
		}
		if _, err := m.EventByIdempotencyKey(context.Background(), ev.RoomID, ev.IdempotencyKey); err == nil {
			return publish.ErrDuplicateKey
		}
	}
	m.events = append(m.events, events...)
	return nil
}

func (m *memEvents) EventByIdempotencyKey(_ context.Context, roomID uuid.UUID, key string) (message.Event, error) {
	for _, ev := range m.events {
		if ev.RoomID == roomID && ev.IdempotencyKey == key {
			return ev, nil
		}
	}
	return message.Event{}, publish.ErrEventNotFound
}

func (m *memEvents) EventsByRequest(_ context.Context, roomID, requestID uuid.UUID) ([]message.Event, error) {
	var out []message.Event
	for _, ev := range m.events {
		if ev.RoomID == roomID && ev.RequestID == requestID {
			out = append(out, ev)
		}
	}
	return out, nil
}
