package rooms_test

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
	"github.com/roomhub/messaging-api/retry"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// FuzzRoomRequest drives POST /v1/rooms and PATCH /v1/rooms/{id} with any
// body: never a 500 or a panic; a rejection is a problem naming fields; an
// accepted room is valid (its settings pass validation again) and its retry
// schedule is finite with delays from 0 to a week.
func FuzzRoomRequest(f *testing.F) {
	for _, s := range []string{
		`{"identifier":"payments","managerIdentifier":"team-a"}`,
		`{"identifier":"p","managerIdentifier":"m","messageExpiration":null,"deliveryDelay":1,"deliveryDelayMultiplier":1000,"deliveryAttempts":1000,"maxDeliveryDelay":604800000,"deliveryJitter":1,"status":"ACTIVE"}`,
		`{"identifier":"p","managerIdentifier":"m","retryPolicy":{"retriesWithNoDelay":0,"minimumDelayRetries":0,"minimumDelay":0,"backoffRetries":40,"maximumDelay":604800000,"maximumDelayRetries":0,"retryBackoffFunction":"exponential"}}`,
		`{"identifier":"p","managerIdentifier":"m","retryPolicy":{"backoffRetries":1000,"retryBackoffFunction":"geometric","minimumDelay":1,"jitter":0.5,"ignoreSubscriptionOverride":true}}`,
		`{"identifier":"p","managerIdentifier":"m","retryPolicy":{"retriesWithNoDelay":1000,"maximumDelayRetries":1000}}`,
		`{"identifier":"p","managerIdentifier":"m","retryPolicy":{"maximumDelay":1,"unknown":1}}`,
		`{"identifier":"p","managerIdentifier":"m","retryPolicy":null}`,
		`{"identifier":null,"managerIdentifier":null,"deliveryDelay":null,"status":null}`,
		`{"identifier":"0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a3b","managerIdentifier":" "}`,
		`{"identifier":"orders","managerIdentifier":"m"}`,
		`{"deliveryDelay":9223372036854775807,"deliveryDelayMultiplier":1e308,"deliveryAttempts":-1,"maxDeliveryDelay":-1,"deliveryJitter":-0}`,
		`{"deliveryDelay":1e400}`, `{"deliveryJitter":"NaN"}`, `{"status":"TERMINATED"}`, `{"status":"terminated"}`,
		`{"identifier":"a","identifier":"b"}`, `{"identifer":"typo"}`, `{"":1}`, `{}`, `null`, `[]`, ``, `{`, `{}{}`, //nolint:misspell // a deliberate typo: an unknown field
		`{"managerIdentifier":"\u0000\ud800"}`,
		`{"retryPolicy":{"retryPolicy":{"retryPolicy":{}}}}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	h := newRoomHarness() // one per worker: echo.New costs more than a request
	f.Fuzz(func(t *testing.T, body []byte, update bool) {
		h.store.reset()
		method, path, want := http.MethodPost, "/v1/rooms", http.StatusCreated
		if update {
			method, path, want = http.MethodPatch, "/v1/rooms/orders", http.StatusOK
		}
		rec := h.do(method, path, body)
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
		room, ok := h.store.byID[uuid.MustParse(resp.ID)]
		if !ok {
			t.Fatalf("answered %d for room %s, which was not stored", rec.Code, resp.ID)
		}
		checkRoom(t, room)
	})
}

// checkRoom: the stored room's settings pass validation again, and its
// retry schedule is finite with delays from 0 to a week.
func checkRoom(t *testing.T, r rooms.Room) {
	t.Helper()
	var p rooms.RoomPatch
	p.Identifier = api.Nullable[string]{Set: true, Value: r.Identifier}
	p.ManagerIdentifier = api.Nullable[string]{Set: true, Value: r.ManagerIdentifier}
	p.MessageExpiration = api.Nullable[int64]{Set: true, Value: r.MessageExpiration}
	p.DeliveryDelay = api.Nullable[int64]{Set: true, Value: r.DeliveryDelay}
	p.DeliveryDelayMultiplier = api.Nullable[float64]{Set: true, Value: r.DeliveryDelayMultiplier}
	p.DeliveryAttempts = api.Nullable[int]{Set: true, Value: r.DeliveryAttempts}
	p.MaxDeliveryDelay = api.Nullable[int64]{Set: true, Value: r.MaxDeliveryDelay, Null: r.MaxDeliveryDelay == 0}
	p.DeliveryJitter = api.Nullable[float64]{Set: true, Value: r.DeliveryJitter}
	if r.RetryPolicy != nil {
		p.RetryPolicy = api.Nullable[rooms.RetryPolicy]{Set: true, Value: *r.RetryPolicy}
	}
	p.Status = api.Nullable[rooms.Status]{Set: true, Value: r.Status}
	again := r
	if err := p.ApplyTo(&again); err != nil {
		t.Fatalf("stored room %+v does not validate: %v", r, err)
	}
	policy := retry.For(r, subscriptions.Subscription{})
	if n := policy.MaxAttempts(); n < 1 || n > rooms.MaxTotalAttempts {
		t.Fatalf("room %+v allows %d attempts", r, n)
	}
	for _, s := range retry.Schedule(policy) {
		lo, hi := s.Step.Range()
		if s.Step.Delay < 0 || lo < 0 || hi > time.Duration(rooms.MaxDeliveryDelay)*time.Millisecond || s.SinceMin < 0 {
			t.Fatalf("room %+v: attempt %d: step %+v, range [%v, %v]", r, s.Attempt, s.Step, lo, hi)
		}
	}
}

type roomHarness struct {
	e     *echo.Echo
	store *memRooms
}

func newRoomHarness() roomHarness {
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	existing := rooms.NewRoomDefaults()
	existing.ID, existing.Identifier, existing.ManagerIdentifier = uuid.MustParse("0190b7a4-8f7e-7c3e-9c1a-2b7f0d1e2a3b"), "orders", "team-a"
	existing.CreatedAt, existing.UpdatedAt = now(), now()
	store := &memRooms{existing: existing}
	store.reset()
	e := echo.New()
	e.HTTPErrorHandler = api.ErrorHandler(slog.New(slog.DiscardHandler))
	rooms.Routes(e.Group("/v1"), rooms.NewService(rooms.Deps{Store: store, Now: now}))
	return roomHarness{e: e, store: store}
}

func (h roomHarness) do(method, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(string(body)))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	rec := httptest.NewRecorder()
	h.e.ServeHTTP(rec, req)
	return rec
}

// memRooms is the part of rooms.Store the room endpoints use; the rest of
// the interface is embedded nil and panics if called, which the fuzz target
// reports.
type memRooms struct {
	rooms.Store
	existing rooms.Room
	byID     map[uuid.UUID]rooms.Room
}

// reset leaves only the room "orders".
func (m *memRooms) reset() { m.byID = map[uuid.UUID]rooms.Room{m.existing.ID: m.existing} }

func (m *memRooms) taken(r rooms.Room) bool {
	for _, o := range m.byID {
		if o.ID != r.ID && o.Identifier == r.Identifier {
			return true
		}
	}
	return false
}

func (m *memRooms) CreateRoom(_ context.Context, r rooms.Room) error {
	if m.taken(r) {
		return rooms.ErrIdentifierTaken
	}
	m.byID[r.ID] = r
	return nil
}

func (m *memRooms) UpdateRoom(_ context.Context, r rooms.Room) error {
	if m.taken(r) {
		return rooms.ErrIdentifierTaken
	}
	m.byID[r.ID] = r
	return nil
}

func (m *memRooms) Room(_ context.Context, id uuid.UUID) (rooms.Room, error) {
	if r, ok := m.byID[id]; ok {
		return r, nil
	}
	return rooms.Room{}, rooms.ErrNotFound
}

func (m *memRooms) RoomByIdentifier(_ context.Context, identifier string) (rooms.Room, error) {
	for _, r := range m.byID {
		if r.Identifier == identifier {
			return r, nil
		}
	}
	return rooms.Room{}, rooms.ErrNotFound
}
