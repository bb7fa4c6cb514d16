package subscriptions_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/rooms"
)

// TestDeliverySettingsRefusedAlike: a room and a subscription refuse the
// same delivery settings with the same status and fields, and messages that
// differ only in what a null would mean.
func TestDeliverySettingsRefusedAlike(t *testing.T) {
	t.Parallel()
	h := setupDelivery(t)
	for _, tc := range []struct {
		name, body string
		status     int
		fields     []string
	}{
		{"delay zero", `{"deliveryDelay":0}`, 422, []string{"deliveryDelay"}},
		{"delay negative", `{"deliveryDelay":-3}`, 422, []string{"deliveryDelay"}},
		{"delay past a week", `{"deliveryDelay":604800001}`, 422, []string{"deliveryDelay"}},
		{"delay not a number", `{"deliveryDelay":"5"}`, 422, []string{"deliveryDelay"}},
		{"multiplier below 1", `{"deliveryDelayMultiplier":0.5}`, 422, []string{"deliveryDelayMultiplier"}},
		{"multiplier past the cap", `{"deliveryDelayMultiplier":1001}`, 422, []string{"deliveryDelayMultiplier"}},
		{"attempts negative", `{"deliveryAttempts":-1}`, 422, []string{"deliveryAttempts"}},
		{"attempts past the cap", `{"deliveryAttempts":1001}`, 422, []string{"deliveryAttempts"}},
		{"attempts a fraction", `{"deliveryAttempts":2.5}`, 422, []string{"deliveryAttempts"}},
		{"max delay zero", `{"maxDeliveryDelay":0}`, 422, []string{"maxDeliveryDelay"}},
		{"max delay past a week", `{"maxDeliveryDelay":604800001}`, 422, []string{"maxDeliveryDelay"}},
		{"jitter negative", `{"deliveryJitter":-0.1}`, 422, []string{"deliveryJitter"}},
		{"jitter above 1", `{"deliveryJitter":1.5}`, 422, []string{"deliveryJitter"}},
		{
			"every field at once",
			`{"deliveryDelay":0,"deliveryDelayMultiplier":0,"deliveryAttempts":-1,"maxDeliveryDelay":-1,"deliveryJitter":2,"retryPolicy":{"jitter":2}}`,
			422, []string{"deliveryDelay", "deliveryDelayMultiplier", "deliveryAttempts", "maxDeliveryDelay", "deliveryJitter", "retryPolicy.jitter"},
		},
		{
			"policy counts", `{"retryPolicy":{"retriesWithNoDelay":-1,"minimumDelayRetries":1001,"backoffRetries":-1,"maximumDelayRetries":1001}}`, 422,
			[]string{"retryPolicy.retriesWithNoDelay", "retryPolicy.minimumDelayRetries", "retryPolicy.backoffRetries", "retryPolicy.maximumDelayRetries"},
		},
		{"policy delays", `{"retryPolicy":{"minimumDelay":-1,"maximumDelay":604800001}}`, 422, []string{"retryPolicy.minimumDelay", "retryPolicy.maximumDelay"}},
		{"policy minimum above the default maximum", `{"retryPolicy":{"minimumDelay":40000}}`, 422, []string{"retryPolicy.minimumDelay"}},
		{"policy maximum below minimum", `{"retryPolicy":{"minimumDelay":5000,"maximumDelay":10}}`, 422, []string{"retryPolicy.maximumDelay"}},
		{"policy function", `{"retryPolicy":{"retryBackoffFunction":"quadratic"}}`, 422, []string{"retryPolicy.retryBackoffFunction"}},
		{"policy geometric from 0", `{"retryPolicy":{"minimumDelay":0,"retryBackoffFunction":"geometric"}}`, 422, []string{"retryPolicy.minimumDelay"}},
		{"policy jitter", `{"retryPolicy":{"jitter":-1}}`, 422, []string{"retryPolicy.jitter"}},
		{"policy too many attempts", `{"retryPolicy":{"retriesWithNoDelay":1000}}`, 422, []string{"retryPolicy"}},
		{"policy unknown field", `{"retryPolicy":{"minimumDelays":1}}`, 422, []string{"retryPolicy.minimumDelays"}},
		{"policy not an object", `{"retryPolicy":5}`, 422, []string{"retryPolicy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			room, sub := h.patchRoom(t, tc.body), h.patchSubscription(t, tc.body)
			if room.Status != tc.status || sub.Status != tc.status {
				t.Fatalf("status: room %d, subscription %d, want %d", room.Status, sub.Status, tc.status)
			}
			if got := fieldsOf(room); !slices.Equal(got, tc.fields) {
				t.Errorf("room fields %q, want %q", got, tc.fields)
			}
			if got := fieldsOf(sub); !slices.Equal(got, tc.fields) {
				t.Errorf("subscription fields %q, want %q", got, tc.fields)
			}
			if r, s := rangesOf(room), rangesOf(sub); !slices.Equal(r, s) {
				t.Errorf("messages differ:\nroom         %q\nsubscription %q", r, s)
			}
		})
	}
}

// TestDeliverySettingsNull: where a room and a subscription part, on purpose.
// A subscription's null is the room's setting; a room has no setting to fall
// back on but the default cap of maxDeliveryDelay. Only a room may make its
// settings win over every subscription's.
func TestDeliverySettingsNull(t *testing.T) {
	t.Parallel()
	h := setupDelivery(t)
	for _, tc := range []struct {
		name, body         string
		roomFields, fields []string // nil: accepted
	}{
		{"delay null", `{"deliveryDelay":null}`, []string{"deliveryDelay"}, nil},
		{"multiplier null", `{"deliveryDelayMultiplier":null}`, []string{"deliveryDelayMultiplier"}, nil},
		{"attempts null", `{"deliveryAttempts":null}`, []string{"deliveryAttempts"}, nil},
		{"jitter null", `{"deliveryJitter":null}`, []string{"deliveryJitter"}, nil},
		{"max delay null", `{"maxDeliveryDelay":null}`, nil, nil},
		{"policy null", `{"retryPolicy":null}`, nil, nil},
		{"ignoreSubscriptionOverride", `{"retryPolicy":{"ignoreSubscriptionOverride":true}}`, nil, []string{"retryPolicy.ignoreSubscriptionOverride"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fieldsOf(h.patchRoom(t, tc.body)); !slices.Equal(got, tc.roomFields) {
				t.Errorf("room refused %q, want %q", got, tc.roomFields)
			}
			if got := fieldsOf(h.patchSubscription(t, tc.body)); !slices.Equal(got, tc.fields) {
				t.Errorf("subscription refused %q, want %q", got, tc.fields)
			}
		})
	}
}

// deliveryHarness serves the room "orders" and its PULL subscription.
type deliveryHarness struct {
	rooms *echo.Echo
	subs  subHarness
}

func setupDelivery(t *testing.T) deliveryHarness {
	t.Helper()
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	subs := newSubHarness()
	e := echo.New()
	e.HTTPErrorHandler = api.ErrorHandler(slog.New(slog.DiscardHandler))
	rooms.Routes(e.Group("/v1"), rooms.NewService(rooms.Deps{Store: oneRoom{room: subs.catalog.room}, Now: now}))
	return deliveryHarness{rooms: e, subs: subs}
}

func (h deliveryHarness) patchRoom(t *testing.T, body string) api.Problem {
	t.Helper()
	return patch(t, h.rooms, "/v1/rooms/orders", body)
}

func (h deliveryHarness) patchSubscription(t *testing.T, body string) api.Problem {
	t.Helper()
	h.subs.store.reset()
	return patch(t, h.subs.e, "/v1/rooms/orders/subscriptions/"+fuzzPullID.String(), body)
}

// patch sends a PATCH and returns its problem, or one with status 200 and
// no errors when it was accepted.
func patch(t *testing.T, e *echo.Echo, path, body string) api.Problem {
	t.Helper()
	req := httptest.NewRequest(http.MethodPatch, path, strings.NewReader(body))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code == http.StatusOK {
		return api.Problem{Status: http.StatusOK}
	}
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("PATCH %s: %d %q: %v", path, rec.Code, rec.Body, err)
	}
	return p
}

func fieldsOf(p api.Problem) []string {
	var out []string
	for _, f := range p.Errors {
		out = append(out, f.Field)
	}
	return out
}

// nullClause is where a message says what a null would mean.
var nullClause = regexp.MustCompile(`null \([^)]*\) or `)

func rangesOf(p api.Problem) []string {
	var out []string
	for _, f := range p.Errors {
		out = append(out, f.Field+": "+nullClause.ReplaceAllString(f.Message, ""))
	}
	return out
}

// oneRoom is the part of rooms.Store a room's PATCH uses; it keeps nothing.
type oneRoom struct {
	rooms.Store
	room rooms.Room
}

func (s oneRoom) Room(_ context.Context, id uuid.UUID) (rooms.Room, error) {
	if id != s.room.ID {
		return rooms.Room{}, rooms.ErrNotFound
	}
	return s.room, nil
}

func (s oneRoom) RoomByIdentifier(_ context.Context, identifier string) (rooms.Room, error) {
	if identifier != s.room.Identifier {
		return rooms.Room{}, rooms.ErrNotFound
	}
	return s.room, nil
}

func (oneRoom) UpdateRoom(context.Context, rooms.Room) error { return nil }
