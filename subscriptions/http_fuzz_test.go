package subscriptions_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

var (
	fuzzRoomID  = uuid.MustParse("0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a3b")
	fuzzPushID  = uuid.MustParse("0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a01")
	fuzzPullID  = uuid.MustParse("0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a02")
	fuzzEventID = uuid.MustParse("0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a10")
)

// FuzzSubscriptionRequest drives POST and PATCH of PUSH and PULL
// subscriptions with any body: never a 500 or a panic; a rejection is a
// problem naming fields; an accepted subscription keeps every setting in
// range, its retry schedule finite, with delays from 0 to a week, and its
// attribute filter in a form that loads as itself.
func FuzzSubscriptionRequest(f *testing.F) {
	for _, s := range []string{
		`{"type":"PUSH","pushUrl":"https://example.com/hook","eventTypes":[{"eventType":"order.created"}]}`,
		`{"type":"PULL","eventTypes":[{"eventType":"order.created","versions":[2,1]}],"ackDeadline":600000}`,
		`{"type":"PUSH","pushUrl":"http://[::1]:80/x","eventTypes":[{"eventType":"order.created"}],"deliveryDelay":1,"deliveryDelayMultiplier":1000,"deliveryAttempts":1000,"maxDeliveryDelay":604800000,"deliveryJitter":1}`,
		`{"retryPolicy":{"backoffRetries":45,"maximumDelay":604800000,"minimumDelay":0,"retryBackoffFunction":"exponential"}}`,
		`{"retryPolicy":{"ignoreSubscriptionOverride":true}}`,
		`{"retryPolicy":null,"deliveryDelay":null,"deliveryAttempts":null,"ackDeadline":null}`,
		`{"eventTypes":[{"eventType":"order.created","versions":[1,1,3]},{"eventType":"order.created"},{"eventType":""},{"eventType":"nope"}]}`,
		`{"eventTypes":[]}`, `{"eventTypes":null}`, `{"eventTypes":[{"eventType":"order.created","versions":[-1,0,9223372036854775807]}]}`,
		`{"type":"PULL","pushUrl":"https://example.com"}`, `{"type":"push"}`, `{"type":null}`,
		`{"pushUrl":"https://example.com/#frag"}`, `{"pushUrl":"ftp://example.com"}`, `{"pushUrl":"http://"}`, `{"pushUrl":"%zz"}`,
		`{"status":"PAUSED"}`, `{"status":"TERMINATED"}`, `{"status":null}`, `{"owner":"team-a"}`,
		`{"deliveryDelayMultiplier":"NaN"}`, `{"deliveryJitter":1e400}`, `{"ackDeadline":-1}`,
		`{"eventtypes":[]}`, `{"":0}`, `{}`, `null`, ``, `[`, `{"type":"PUSH"}{}`,
		`{"eventTypes":[{"eventType":"order.created","versions":[` + strings.Repeat("2,", 100) + `1]}]}`,
		`{"pushAuth":{"type":"basic","username":"alice","password":"pa55-w0rd"}}`,
		`{"pushAuth":{"type":"bearer","token":"tok-1"}}`, `{"pushAuth":null}`, `{"pushAuth":{}}`, `{"pushAuth":"bearer"}`,
		`{"pushAuth":{"type":"headers","headers":{"X-Api-Key":"k","Authorization":"ApiKey k"}}}`,
		`{"pushAuth":{"type":"headers","headers":{"Host":"evil","x-api-key":"1","X-Api-Key":"2","a/b~c":"\r\n"}}}`,
		`{"pushAuth":{"type":"basic","username":"a:b","password":"p\nq","token":"t","headers":{}}}`,
		`{"pushAuth":{"type":"bearer","token":"a b","username":null}}`,
		`{"pushAuth":{"type":"headers","headers":{"X-A":" v ","X-B":"\u0000","Webhook-Id":"x","X-Attr-A":"1"}}}`,
		`{"type":"PULL","eventTypes":[{"eventType":"order.created"}],"pushAuth":{"type":"bearer","token":"t"}}`,
		`{"type":"PUSH","pushUrl":"https://example.com/h","eventTypes":[{"eventType":"order.created"}],"pushAuth":{"type":"bearer","token":"t"}}`,
		`{"attributeFilter":{"region":["eu","us"],"priority":[{"numeric":[">=",5]}],"source":[{"prefix":"web-"}],"traceId":[{"exists":true}],"tier":[{"anything-but":["free"]}]}}`,
		`{"attributeFilter":{"priority":[{"numeric":[">",0,"<=",5]}]}}`, `{"attributeFilter":{"priority":[{"numeric":[">=","5"]}]}}`,
		`{"attributeFilter":{"p":[{"numeric":[">",5,"<",1]}],"t":[{"anything-but":{"prefix":""}}]}}`, `{"attributeFilter":{"t":[5,null,[],{}]}}`,
		`{"attributeFilter":{}}`, `{"attributeFilter":null}`, `{"attributeFilter":[]}`, `{"attributeFilter":{"1a":["x"],"a/b":"x"}}`,
		`{"attributeFilter":{"a":["1"],"b":["1"],"c":["1"],"d":["1"],"e":["1"],"f":["1"]}}`,
		`{"attributeFilter":{"a":[` + strings.Repeat(`"x",`, 150) + `"x"]}}`,
	} {
		for mode := uint8(0); mode < 3; mode++ {
			f.Add([]byte(s), mode)
		}
	}
	h := newSubHarness() // one per worker: echo.New costs more than a request
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		h.store.reset()
		method, path, want := http.MethodPost, "/v1/rooms/orders/subscriptions", http.StatusCreated
		switch mode % 3 {
		case 1:
			method, path, want = http.MethodPatch, "/v1/rooms/orders/subscriptions/"+fuzzPushID.String(), http.StatusOK
		case 2:
			method, path, want = http.MethodPatch, "/v1/rooms/orders/subscriptions/"+fuzzPullID.String(), http.StatusOK
		}
		req := httptest.NewRequest(method, path, strings.NewReader(string(body)))
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		rec := httptest.NewRecorder()
		h.e.ServeHTTP(rec, req)
		apitest.CheckStatus(t, rec, want, http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusConflict)
		if rec.Code != want {
			return
		}
		var resp struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("%d body %q: %v", rec.Code, rec.Body, err)
		}
		sub, ok := h.store.subs[uuid.MustParse(resp.ID)]
		if !ok {
			t.Fatalf("answered %d for subscription %s, which was not stored", rec.Code, resp.ID)
		}
		checkSubscription(t, h.catalog.room, sub)
	})
}

// checkSubscription: the stored subscription's settings are in range, and
// the policy its messages follow is finite with delays from 0 to a week.
func checkSubscription(t *testing.T, room rooms.Room, s subscriptions.Subscription) {
	t.Helper()
	inRange := func(v *int64, lo, hi int64) bool { return v == nil || (*v >= lo && *v <= hi) }
	switch {
	case s.Type != subscriptions.TypePush && s.Type != subscriptions.TypePull,
		(s.Type == subscriptions.TypePush) != (s.PushURL != ""),
		len(s.EventTypes) == 0,
		!inRange(s.DeliveryDelay, 1, rooms.MaxDeliveryDelay),
		!inRange(s.MaxDeliveryDelay, 1, rooms.MaxDeliveryDelay),
		s.DeliveryAttempts != nil && (*s.DeliveryAttempts < 0 || *s.DeliveryAttempts > rooms.MaxDeliveryAttempts),
		s.DeliveryDelayMultiplier != nil && !(*s.DeliveryDelayMultiplier >= 1 && *s.DeliveryDelayMultiplier <= rooms.MaxDeliveryDelayMultiplier),
		s.DeliveryJitter != nil && !(*s.DeliveryJitter >= 0 && *s.DeliveryJitter <= 1),
		s.AckDeadline < subscriptions.MinAckDeadline || s.AckDeadline > subscriptions.MaxAckDeadline:
		t.Fatalf("stored subscription out of range: %+v", s)
	}
	for _, f := range s.EventTypes {
		if f.EventTypeID != fuzzEventID {
			t.Fatalf("filter %+v names an event type that does not exist", f)
		}
	}
	checkPushAuth(t, s)
	if s.AttributeFilter != nil {
		// What the store keeps loads as the same filter.
		if text := s.AttributeFilter.Text(); subscriptions.LoadAttributeFilter(text).Text() != text || !json.Valid([]byte(text)) {
			t.Fatalf("attribute filter %s does not load as itself", text)
		}
	}
	policy := retry.For(room, s)
	if n := policy.MaxAttempts(); n < 1 || n > rooms.MaxTotalAttempts {
		t.Fatalf("subscription %+v allows %d attempts", s, n)
	}
	for _, sc := range retry.Schedule(policy) {
		lo, hi := sc.Step.Range()
		if sc.Step.Delay < 0 || lo < 0 || hi > time.Duration(rooms.MaxDeliveryDelay)*time.Millisecond || sc.SinceMin < 0 {
			t.Fatalf("subscription %+v: attempt %d: step %+v, range [%v, %v]", s, sc.Attempt, sc.Step, lo, hi)
		}
	}
}

// checkPushAuth: a stored credential belongs to a PUSH subscription, has
// what its type needs, and nothing a request could not carry as it is.
func checkPushAuth(t *testing.T, s subscriptions.Subscription) {
	t.Helper()
	a := s.PushAuth
	if a == nil {
		return
	}
	printable := func(v string, space bool) bool {
		return v != "" && strings.IndexFunc(v, func(r rune) bool { return r > 0x7e || r < 0x20 || (!space && r == ' ') }) < 0
	}
	ok := s.Type == subscriptions.TypePush
	switch a.Type {
	case subscriptions.AuthBasic:
		ok = ok && a.Username != "" && !strings.ContainsAny(a.Username, ":\r\n\x00") && a.Password != "" && !strings.ContainsAny(a.Password, "\r\n\x00")
	case subscriptions.AuthBearer:
		ok = ok && printable(a.Token, false)
	case subscriptions.AuthHeaders:
		ok = ok && len(a.Headers) > 0 && len(a.Headers) <= 16
		seen := map[string]bool{}
		for name, v := range a.Headers {
			ok = ok && !subscriptions.ReservedHeader(name) && !seen[http.CanonicalHeaderKey(name)] &&
				printable(name, false) && printable(v, true) && strings.TrimSpace(v) == v
			seen[http.CanonicalHeaderKey(name)] = true
		}
	default:
		ok = false
	}
	if !ok {
		t.Fatalf("stored pushAuth %s of a %s subscription is not one to send", a, s.Type)
	}
}

type subHarness struct {
	e       *echo.Echo
	store   *memSubs
	catalog *fixedCatalog
}

func newSubHarness() subHarness {
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	room := rooms.NewRoomDefaults()
	room.ID, room.Identifier, room.ManagerIdentifier = fuzzRoomID, "orders", "team-a"
	filter := []subscriptions.Filter{{EventTypeID: fuzzEventID, EventType: "order.created"}}
	store := &memSubs{initial: map[uuid.UUID]subscriptions.Subscription{
		fuzzPushID: {ID: fuzzPushID, RoomID: fuzzRoomID, Type: subscriptions.TypePush, PushURL: "https://example.com/hook",
			EventTypes: filter, AckDeadline: subscriptions.DefaultAckDeadline, Status: subscriptions.StatusActive, SigningSecret: "whsec_AAAA"},
		fuzzPullID: {ID: fuzzPullID, RoomID: fuzzRoomID, Type: subscriptions.TypePull,
			EventTypes: filter, AckDeadline: subscriptions.DefaultAckDeadline, Status: subscriptions.StatusActive},
	}}
	store.reset()
	catalog := &fixedCatalog{room: room}
	svc := subscriptions.NewService(subscriptions.Deps{Store: store, Catalog: catalog, Queues: noQueues{}, CheckTarget: nil, Now: now, Logger: slog.New(slog.DiscardHandler)})
	e := echo.New()
	e.HTTPErrorHandler = api.ErrorHandler(slog.New(slog.DiscardHandler))
	subscriptions.Routes(e.Group("/v1"), svc)
	return subHarness{e: e, store: store, catalog: catalog}
}

// fixedCatalog has one room, "orders", with the event type order.created in
// versions 1 and 2.
type fixedCatalog struct{ room rooms.Room }

func (c *fixedCatalog) Room(_ context.Context, ref string) (rooms.Room, error) {
	if ref == c.room.Identifier || ref == c.room.ID.String() {
		return c.room, nil
	}
	return rooms.Room{}, rooms.ErrNotFound
}

func (c *fixedCatalog) EventTypeOf(_ context.Context, roomID uuid.UUID, identifier string) (rooms.EventType, error) {
	if roomID != c.room.ID || identifier != "order.created" {
		return rooms.EventType{}, rooms.ErrEventTypeNotFound
	}
	return rooms.EventType{ID: fuzzEventID, RoomID: roomID, Identifier: identifier}, nil
}

func (c *fixedCatalog) ExistingVersions(_ context.Context, eventTypeID uuid.UUID, versions []int) ([]int, error) {
	var out []int
	for _, v := range []int{1, 2} {
		if eventTypeID == fuzzEventID && slices.Contains(versions, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// memSubs is the part of subscriptions.Store the endpoints use; the rest is
// embedded nil and panics if called, which the fuzz target reports.
type memSubs struct {
	subscriptions.Store
	initial, subs map[uuid.UUID]subscriptions.Subscription
}

// reset leaves only the initial PUSH and PULL subscriptions.
func (m *memSubs) reset() { m.subs = maps.Clone(m.initial) }

func (m *memSubs) CreateSubscription(_ context.Context, s subscriptions.Subscription) error {
	m.subs[s.ID] = s
	return nil
}

func (m *memSubs) UpdateSubscription(_ context.Context, s subscriptions.Subscription) error {
	m.subs[s.ID] = s
	return nil
}

func (m *memSubs) Subscription(_ context.Context, roomID, id uuid.UUID) (subscriptions.Subscription, error) {
	if s, ok := m.subs[id]; ok && s.RoomID == roomID {
		return s, nil
	}
	return subscriptions.Subscription{}, subscriptions.ErrNotFound
}

func (m *memSubs) CountSubscriptions(context.Context, uuid.UUID) (int, error) {
	return len(m.subs), nil
}

func (m *memSubs) ResetCircuit(_ context.Context, roomID, id uuid.UUID) error {
	s, err := m.Subscription(context.Background(), roomID, id)
	if err == nil {
		s.Circuit = subscriptions.Circuit{State: subscriptions.CircuitClosed}
		m.subs[id] = s
	}
	return err
}

type noQueues struct{}

func (noQueues) EnsureQueue(context.Context, broker.Destination) error { return nil }
func (noQueues) DeleteQueue(context.Context, broker.Destination) error { return nil }
