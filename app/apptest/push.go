package apptest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oapi-codegen/nullable"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/client"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/store/storetest"
)

// PushRequest is one request a Hook received.
type PushRequest struct {
	At         time.Time
	Header     http.Header
	Body       []byte
	RemoteAddr string
}

// Hook is a webhook receiver the test controls: respond answers the n-th
// request (n from 1), and every request is recorded on arrival, before
// respond runs.
type Hook struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	reqs    []PushRequest
	respond func(n int, w http.ResponseWriter, r *http.Request)
}

// NewHook starts a Hook that answers with respond; it stops with the test.
func NewHook(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *Hook {
	t.Helper()
	h := &Hook{t: t, respond: respond}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.reqs = append(h.reqs, PushRequest{At: time.Now(), Header: r.Header.Clone(), Body: body, RemoteAddr: r.RemoteAddr})
		n, respond := len(h.reqs), h.respond
		h.mu.Unlock()
		respond(n, w, r)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// StatusHook answers every request with the status it holds, which the test
// can change.
func StatusHook(t *testing.T, initial int) (*Hook, *atomic.Int32) {
	t.Helper()
	var status atomic.Int32
	status.Store(int32(initial))
	return NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
	}), &status
}

// SequenceHook answers the n-th request with codes[n-1], and the last code
// once they run out.
func SequenceHook(t *testing.T, codes ...int) *Hook {
	t.Helper()
	return NewHook(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(codes[min(n, len(codes))-1])
	})
}

// URL is the push URL of the hook.
func (h *Hook) URL() string { return h.srv.URL + "/hook" }

// Requests is every request received so far, in order of arrival.
func (h *Hook) Requests() []PushRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.reqs)
}

// Count is how many requests arrived so far.
func (h *Hook) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.reqs)
}

// WaitFor waits until the hook has received n requests and returns them all.
func (h *Hook) WaitFor(n int, within time.Duration) []PushRequest {
	h.t.Helper()
	apitest.EventuallyWithin(h.t, within, fmt.Sprintf("%d requests at the hook", n), func() bool { return h.Count() >= n })
	return h.Requests()
}

// WithID is the requests whose webhook-id is id.
func (h *Hook) WithID(id string) []PushRequest {
	var out []PushRequest
	for _, r := range h.Requests() {
		if r.Header.Get("Webhook-Id") == id {
			out = append(out, r)
		}
	}
	return out
}

// Sub is a subscription a test created, used through C.
type Sub struct {
	C    Client
	Room string // the room's identifier
	ID   string
}

// Path is the subscription's URL path.
func (s Sub) Path() string { return "/v1/rooms/" + s.Room + "/subscriptions/" + s.ID }

// PushSub is a PUSH subscription a test created.
type PushSub struct {
	Sub
	Secret string
}

// SetupPushRoom creates room with the delivery settings in fields (JSON
// members, e.g. `"deliveryDelay":100`), an event type "tick" with one
// version, and a PUSH subscription to url.
func (c Client) SetupPushRoom(room, fields, url string) PushSub {
	c.T.Helper()
	c.createRoom(room, fields)
	return c.AddPushSub(room, "tick", url)
}

// AddPushSub creates event type eventType (with version 1) in room and a
// PUSH subscription to url for it.
func (c Client) AddPushSub(room, eventType, url string) PushSub {
	c.T.Helper()
	c.createEventType(room, eventType)
	return c.CreatePushSub(room, eventType, url)
}

// createRoom creates room (manager "m") with fields, JSON members such as
// `"deliveryDelay":100`.
func (c Client) createRoom(room, fields string) {
	c.T.Helper()
	if fields != "" {
		fields = "," + fields
	}
	r, err := c.API().CreateRoomWithBodyWithResponse(c.T.Context(), "application/json",
		strings.NewReader(`{"identifier":"`+room+`","managerIdentifier":"m"`+fields+`}`))
	Must(c.T, r, err, r.JSON201)
}

// createEventType creates eventType in room with version 1, whose schema
// takes any JSON.
func (c Client) createEventType(room, eventType string) {
	c.T.Helper()
	api := c.API()
	et, err := api.CreateEventTypeWithResponse(c.T.Context(), room, client.EventTypeCreate{Identifier: eventType})
	Must(c.T, et, err, et.JSON201)
	v, err := api.CreateVersionWithResponse(c.T.Context(), room, eventType, client.VersionCreate{Schema: json.RawMessage("true")})
	Must(c.T, v, err, v.JSON201)
}

// CreatePushSub creates a PUSH subscription to url for eventType, which
// room has, and checks it was given a Standard Webhooks secret.
func (c Client) CreatePushSub(room, eventType, url string) PushSub {
	c.T.Helper()
	r, err := c.API().CreateSubscriptionWithResponse(c.T.Context(), room, client.SubscriptionCreate{
		Type:       client.SubscriptionTypePUSH,
		PushUrl:    nullable.NewNullableWithValue(url),
		EventTypes: client.EventTypeFilters{{EventType: eventType}},
	})
	sub := Must(c.T, r, err, r.JSON201)
	secret := ""
	if sub.SigningSecret != nil {
		secret = *sub.SigningSecret
	}
	if !strings.HasPrefix(secret, "whsec_") {
		c.T.Fatalf("signingSecret %q is not a Standard Webhooks secret", secret)
	}
	return PushSub{Sub: Sub{C: c, Room: room, ID: sub.Id.String()}, Secret: secret}
}

// Publish publishes one message (body: the publish request) to room.
func (c Client) Publish(room, body string) publish.PublishResponse {
	c.T.Helper()
	var p publish.PublishResponse
	c.CallJSON("POST", "/v1/rooms/"+room+"/messages", body, http.StatusAccepted, &p)
	return p
}

// Deliveries is the subscription's delivery log of event (of every event
// when empty), oldest first.
func (s Sub) Deliveries(event string) []delivery.DeliveryResponse {
	s.C.T.Helper()
	var list api.List[delivery.DeliveryResponse]
	s.C.CallJSON("GET", s.Path()+"/deliveries?limit=500", "", http.StatusOK, &list)
	var out []delivery.DeliveryResponse
	for _, d := range list.Items {
		if event == "" || d.EventID == event {
			out = append(out, d)
		}
	}
	slices.Reverse(out) // the API lists newest first
	return out
}

// DeadLetters is the subscription's dead letters, oldest first.
func (s Sub) DeadLetters() []delivery.DeadLetterResponse {
	s.C.T.Helper()
	var list api.List[delivery.DeadLetterResponse]
	s.C.CallJSON("GET", s.Path()+"/dead-letters", "", http.StatusOK, &list)
	return list.Items
}

// WaitDeadLetters waits until the subscription has n dead letters, and fails
// if it has more.
func (s Sub) WaitDeadLetters(n int, within time.Duration) []delivery.DeadLetterResponse {
	s.C.T.Helper()
	var dls []delivery.DeadLetterResponse
	apitest.EventuallyWithin(s.C.T, within, fmt.Sprintf("%d dead letters", n), func() bool {
		dls = s.DeadLetters()
		return len(dls) >= n
	})
	if len(dls) != n {
		s.C.T.Fatalf("%d dead letters, want %d", len(dls), n)
	}
	return dls
}

// WaitStatuses waits until the delivery log of event holds exactly these
// statuses, oldest first, and returns it. A log that ends in a final status
// (delivered, dead_lettered, dropped, expired) shows that no further attempt
// is coming: the dispatcher logs a retry's row before it sends the retry.
func (s Sub) WaitStatuses(event string, within time.Duration, want ...string) []delivery.DeliveryResponse {
	s.C.T.Helper()
	var ds []delivery.DeliveryResponse
	var got []string
	settled := false
	defer func() {
		if !settled { // EventuallyWithin failed the test: say what the log held
			s.C.T.Logf("delivery log of %s: %v, want %v", event, got, want)
		}
	}()
	apitest.EventuallyWithin(s.C.T, within, fmt.Sprintf("delivery log of %s to read %v", event, want), func() bool {
		ds = s.Deliveries(event)
		got = make([]string, len(ds))
		for i, d := range ds {
			got[i] = d.Status
		}
		return slices.Equal(got, want)
	})
	settled = true
	return ds
}

// Backends runs f against the service on the embedded broker with SQLite,
// and, when BROKER_TEST_URL names a real broker, on it with PostgreSQL; f
// passes env to StartService.
func Backends(t *testing.T, f func(t *testing.T, env map[string]string)) {
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		f(t, map[string]string{"OUTBOX_POLL_INTERVAL": "100ms"})
	})
	if os.Getenv("BROKER_TEST_URL") == "" || testing.Short() {
		return
	}
	t.Run("broker", func(t *testing.T) {
		t.Parallel()
		f(t, map[string]string{
			"OUTBOX_POLL_INTERVAL": "100ms", "BROKER_URL": RealBroker(t),
			"DATABASE_URL": storetest.PostgresSchemaURL(t), "PUSH_QUEUE": UniquePushQueue(t),
		})
	})
}
