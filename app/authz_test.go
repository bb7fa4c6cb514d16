package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/auth"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// routeAccess says, independently of the rules declared with auth.Handle, which roles may call each
// route within their reach: a = admin, m = manager, p = publisher, s = subscriber.
// Every route the server registers must be listed here.
var routeAccess = map[string]string{
	"POST /v1/api-keys":                 "a",
	"GET /v1/api-keys":                  "a",
	"GET /v1/api-keys/current":          "amps",
	"GET /v1/api-keys/:keyId":           "a",
	"DELETE /v1/api-keys/:keyId":        "a",
	"POST /v1/retry-schedule\\:preview": "amps",

	"POST /v1/rooms":                                                    "am",
	"GET /v1/rooms":                                                     "amps",
	"GET /v1/rooms/:roomId":                                             "amps",
	"PATCH /v1/rooms/:roomId":                                           "am",
	"DELETE /v1/rooms/:roomId":                                          "am",
	"POST /v1/rooms/:roomId/event-types":                                "am",
	"GET /v1/rooms/:roomId/event-types":                                 "amps",
	"GET /v1/rooms/:roomId/event-types/:eventType":                      "amps",
	"DELETE /v1/rooms/:roomId/event-types/:eventType":                   "am",
	"POST /v1/rooms/:roomId/event-types/:eventType/versions":            "am",
	"GET /v1/rooms/:roomId/event-types/:eventType/versions":             "amps",
	"GET /v1/rooms/:roomId/event-types/:eventType/versions/:version":    "amps",
	"DELETE /v1/rooms/:roomId/event-types/:eventType/versions/:version": "am",

	"POST /v1/rooms/:roomId/messages":         "ap",
	"POST /v1/rooms/:roomId/messages\\:batch": "ap",
	"GET /v1/rooms/:roomId/messages":          "am",
	"GET /v1/rooms/:roomId/messages/:eventId": "am",

	"POST /v1/rooms/:roomId/subscriptions":                                              "ams",
	"GET /v1/rooms/:roomId/subscriptions":                                               "ams",
	"GET /v1/rooms/:roomId/subscriptions/:subscriptionId":                               "ams",
	"PATCH /v1/rooms/:roomId/subscriptions/:subscriptionId":                             "ams",
	"DELETE /v1/rooms/:roomId/subscriptions/:subscriptionId":                            "ams",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/secret\\:rotate":              "ams",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/circuit\\:reset":              "ams",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId\\:test":                       "ams",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId\\:approve":                    "am",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId\\:reject":                     "am",
	"GET /v1/rooms/:roomId/subscriptions/:subscriptionId/retry-schedule":                "ams",
	"GET /v1/rooms/:roomId/subscriptions/:subscriptionId/deliveries":                    "ams",
	"GET /v1/rooms/:roomId/subscriptions/:subscriptionId/dead-letters":                  "ams",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/dead-letters\\:replay":        "ams",
	"GET /v1/rooms/:roomId/subscriptions/:subscriptionId/dead-letters/:deadLetterId":    "ams",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/dead-letters/:deadLetterId":   "ams",
	"DELETE /v1/rooms/:roomId/subscriptions/:subscriptionId/dead-letters/:deadLetterId": "ams",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/pull":                         "as",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/ack":                          "as",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/nack":                         "as",
	"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/modify-ack-deadline":          "as",
}

// authFixture is a service with authentication on: rooms A (managed by
// team-a) and B (team-b), event type order.created v1 in each, a key of every
// role reaching room A, and subscriptions in A owned by sub-a and sub-b.
type authFixture struct {
	*apptest.API
	roomA, roomB   string
	subA, subOther string // in room A, owned by sub-a and sub-b
	subB           string // in room B
	keys           map[byte]string
	adminKeyID     string
	fresh          atomic.Int64
}

func authConfig() app.Config {
	cfg := apptest.Config()
	cfg.Auth.Disabled = false
	return cfg
}

func newAuthFixture(t *testing.T, d store.Dialect) *authFixture {
	t.Helper()
	f := &authFixture{API: apptest.NewConfig(t, d, authConfig()), keys: map[byte]string{}}
	keys := app.NewKeyService(f.DB, rooms.NewService(rooms.Deps{Store: f.DB.Rooms(), Cleanup: app.NoCleanup{}, Now: app.Clock}))
	k, token, err := keys.Create(context.Background(), auth.Spec{Name: "test admin", Role: api.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	f.keys['a'], f.adminKeyID = token, k.ID.String()

	f.roomA = f.room(t, "team-a")
	f.roomB = f.room(t, "team-b")
	f.keys['m'] = f.key(t, map[string]any{"name": "manager", "role": "manager", "subject": "team-a"})
	f.keys['p'] = f.key(t, map[string]any{"name": "publisher", "role": "publisher",
		"rooms": []any{map[string]any{"roomId": f.roomA, "eventTypes": []string{"order.created"}}}})
	f.keys['s'] = f.key(t, map[string]any{"name": "subscriber", "role": "subscriber", "subject": "sub-a",
		"rooms": []any{map[string]any{"roomId": f.roomA}}})
	f.subA = f.subscription(t, f.roomA, "sub-a")
	f.subOther = f.subscription(t, f.roomA, "sub-b")
	f.subB = f.subscription(t, f.roomB, "")
	return f
}

// as sends a request with key (role letter, or a raw token).
func (f *authFixture) as(who string, method, path string, body any) apptest.Response {
	f.T.Helper()
	h := map[string]string{}
	switch {
	case len(who) == 1:
		h["Authorization"] = "Bearer " + f.keys[who[0]]
	case who != "":
		h["Authorization"] = who
	}
	return f.DoHeaders(method, path, body, h)
}

func (f *authFixture) room(t *testing.T, manager string) string {
	t.Helper()
	name := fmt.Sprintf("room-%d", f.fresh.Add(1))
	r := f.as("a", "POST", "/v1/rooms", map[string]any{"identifier": name, "managerIdentifier": manager})
	apptest.Want(t, r, http.StatusCreated)
	id := r.JSON(t)["id"].(string)
	apptest.Want(t, f.as("a", "POST", "/v1/rooms/"+id+"/event-types", map[string]any{"identifier": "order.created"}), http.StatusCreated)
	apptest.Want(t, f.as("a", "POST", "/v1/rooms/"+id+"/event-types/order.created/versions", `{"schema":`+apptest.OrderSchema+`}`), http.StatusCreated)
	return id
}

func (f *authFixture) key(t *testing.T, spec map[string]any) string {
	t.Helper()
	r := f.as("a", "POST", "/v1/api-keys", spec)
	apptest.Want(t, r, http.StatusCreated)
	return r.JSON(t)["key"].(string)
}

func (f *authFixture) subscription(t *testing.T, room, owner string) string {
	t.Helper()
	body := map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}}
	if owner != "" {
		body["owner"] = owner
	}
	r := f.as("a", "POST", "/v1/rooms/"+room+"/subscriptions", body)
	apptest.Want(t, r, http.StatusCreated)
	return r.JSON(t)["id"].(string)
}

// request builds a call of route for role: inside the role's reach (room
// A, sub-a's subscription) or outside it (room B). Deletions get a fresh
// target each time.
func (f *authFixture) request(t *testing.T, route string, inside bool) (method, path string, body any) {
	t.Helper()
	method, tmpl, _ := strings.Cut(route, " ")
	roomID, subID := f.roomA, f.subA
	if !inside {
		roomID, subID = f.roomB, f.subB
	}
	if method == "DELETE" && tmpl == "/v1/rooms/:roomId" {
		roomID = f.room(t, map[bool]string{true: "team-a", false: "team-b"}[inside])
	}
	if method == "DELETE" && strings.HasSuffix(tmpl, "/:subscriptionId") {
		owner := map[bool]string{true: "sub-a", false: ""}[inside]
		subID = f.subscription(t, roomID, owner)
	}
	keyID := uuid.NewString()
	if method == "GET" {
		keyID = f.adminKeyID
	}
	path = strings.NewReplacer(
		":roomId", roomID, ":subscriptionId", subID, ":eventType", "order.created",
		":version", "1", ":eventId", uuid.NewString(), ":deadLetterId", uuid.NewString(),
		":keyId", keyID, "\\:", ":",
	).Replace(tmpl)
	if method == "POST" && strings.HasSuffix(tmpl, "/:deadLetterId") {
		path += ":replay" // echo's route takes the whole segment, "{id}:replay"
	}
	if method == "DELETE" && strings.Contains(tmpl, "/event-types/") {
		// Nothing to delete: an allowed call answers 404, a denied one 403.
		path = strings.Replace(path, "order.created", "nope", 1)
	}
	n := f.fresh.Add(1)
	bodies := map[string]any{
		"POST /v1/api-keys":                                                        map[string]any{"name": "x", "role": "admin"},
		"POST /v1/rooms":                                                           map[string]any{"identifier": "new-" + strconv.FormatInt(n, 10), "managerIdentifier": "team-a"},
		"PATCH /v1/rooms/:roomId":                                                  map[string]any{"deliveryAttempts": 3},
		"POST /v1/rooms/:roomId/event-types":                                       map[string]any{"identifier": "type-" + strconv.FormatInt(n, 10)},
		"POST /v1/rooms/:roomId/event-types/:eventType/versions":                   `{"schema":` + apptest.OrderSchema + `}`,
		"POST /v1/rooms/:roomId/messages":                                          map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "1"}},
		"POST /v1/rooms/:roomId/messages\\:batch":                                  map[string]any{"messages": []any{map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "1"}}}},
		"POST /v1/rooms/:roomId/subscriptions":                                     map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}},
		"PATCH /v1/rooms/:roomId/subscriptions/:subscriptionId":                    map[string]any{"ackDeadline": 20000},
		"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/pull":                map[string]any{"maxMessages": 1, "waitMs": 0},
		"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/ack":                 map[string]any{"ackIds": []string{uuid.NewString()}},
		"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/nack":                map[string]any{"ackIds": []string{uuid.NewString()}},
		"POST /v1/rooms/:roomId/subscriptions/:subscriptionId/modify-ack-deadline": map[string]any{"ackIds": []string{uuid.NewString()}, "ackDeadlineMs": 1000},
		"POST /v1/rooms/:roomId/subscriptions/:subscriptionId\\:reject":            map[string]any{"reason": "not here"},
		"POST /v1/retry-schedule\\:preview":                                        map[string]any{"deliveryDelay": 100, "deliveryDelayMultiplier": 2, "deliveryAttempts": 3},
	}
	if b, ok := bodies[route]; ok {
		body = b
	} else if method == "POST" || method == "PATCH" {
		body = map[string]any{}
	}
	return method, path, body
}

// TestAuthorizationTable calls every route with a key of every role, inside
// and outside the key's reach, and without a key.
func TestAuthorizationTable(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t, store.SQLite)

	srv, _ := app.NewHandler(authConfig(), slog.New(slog.DiscardHandler), f.DB, &apptest.Queues{}, apptest.IdleRelay{}, true, metrics.New(metrics.Options{}))
	var routes []string
	for _, r := range srv.Routes() {
		if !strings.HasPrefix(r.Path, "/v1/") || strings.HasSuffix(r.Path, "*") {
			continue
		}
		verbs, ok := strings.CutPrefix(r.Name, auth.VerbsRoutePrefix)
		if !ok {
			routes = append(routes, r.Method+" "+r.Path)
			continue
		}
		// One route of custom methods (auth.HandleVerbs), each with its own rule.
		for verb := range strings.SplitSeq(verbs, ",") {
			routes = append(routes, r.Method+" "+r.Path+"\\:"+verb)
		}
	}
	slices.Sort(routes)
	for _, route := range routes {
		if _, ok := routeAccess[route]; !ok {
			t.Errorf("route %s is missing from routeAccess: decide who may call it (and declare it with auth.Handle)", route)
		}
	}
	for route := range routeAccess {
		if !slices.Contains(routes, route) {
			t.Errorf("routeAccess lists %s, which the server does not register", route)
		}
	}

	for _, route := range routes {
		access := routeAccess[route]
		scoped := strings.Contains(route, ":roomId")
		t.Run(route, func(t *testing.T) {
			method, path, body := f.request(t, route, true)
			if r := f.as("", method, path, body); r.Status != http.StatusUnauthorized {
				t.Errorf("without a key: %d, want 401: %s", r.Status, r.Body)
			} else if r.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			for _, role := range "amps" {
				for _, inside := range []bool{true, false} {
					if !inside && !scoped {
						continue
					}
					method, path, body := f.request(t, route, inside)
					r := f.as(string(role), method, path, body)
					allowed := strings.ContainsRune(access, role) && (inside || role == 'a')
					denied := r.Status == http.StatusForbidden || r.Status == http.StatusUnauthorized
					switch {
					case allowed && denied:
						t.Errorf("%c key, inside=%v: %s %s → %d, want it allowed: %s", role, inside, method, path, r.Status, r.Body)
					case !allowed && r.Status != http.StatusForbidden:
						t.Errorf("%c key, inside=%v: %s %s → %d, want 403: %s", role, inside, method, path, r.Status, r.Body)
					case allowed && r.Status >= 500 && r.Status != http.StatusServiceUnavailable:
						t.Errorf("%c key: %s %s → %d: %s", role, method, path, r.Status, r.Body)
					}
				}
			}
		})
	}
}

// TestAuthorizationScope checks what the table cannot: lists show only what
// a key reaches, body-level rules, and that nothing outside leaks.
func TestAuthorizationScope(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			f := newAuthFixture(t, d)
			ids := func(r apptest.Response) []string {
				t.Helper()
				apptest.Want(t, r, http.StatusOK)
				var out []string
				for _, it := range r.JSON(t)["items"].([]any) {
					out = append(out, it.(map[string]any)["id"].(string))
				}
				return out
			}
			if got := ids(f.as("m", "GET", "/v1/rooms", nil)); !slices.Equal(got, []string{f.roomA}) {
				t.Errorf("manager lists rooms %v, want only room A", got)
			}
			if got := ids(f.as("p", "GET", "/v1/rooms", nil)); !slices.Equal(got, []string{f.roomA}) {
				t.Errorf("publisher lists rooms %v, want only room A", got)
			}
			if got := ids(f.as("a", "GET", "/v1/rooms", nil)); len(got) != 2 {
				t.Errorf("admin lists %d rooms, want 2", len(got))
			}
			if got := ids(f.as("s", "GET", "/v1/rooms/"+f.roomA+"/subscriptions", nil)); !slices.Equal(got, []string{f.subA}) {
				t.Errorf("subscriber lists subscriptions %v, want only its own %s", got, f.subA)
			}
			if got := ids(f.as("m", "GET", "/v1/rooms/"+f.roomA+"/subscriptions", nil)); len(got) != 2 {
				t.Errorf("manager lists %d subscriptions of room A, want 2", len(got))
			}

			// Another subscriber's subscription is as good as absent.
			apptest.Want(t, f.as("s", "GET", "/v1/rooms/"+f.roomA+"/subscriptions/"+f.subOther, nil), http.StatusNotFound)
			apptest.Want(t, f.as("s", "POST", "/v1/rooms/"+f.roomA+"/subscriptions/"+f.subOther+"/pull", map[string]any{"maxMessages": 1}), http.StatusNotFound)
			// A room outside reach answers the same whether it exists or not.
			r1 := f.as("m", "GET", "/v1/rooms/"+f.roomB, nil)
			r2 := f.as("m", "GET", "/v1/rooms/"+uuid.NewString(), nil)
			apptest.Want(t, r1, http.StatusForbidden)
			apptest.Want(t, r2, http.StatusForbidden)
			if strings.Contains(string(r1.Body), "team-b") {
				t.Errorf("403 leaks the room's manager: %s", r1.Body)
			}

			// A subscriber's new subscription is its own; it cannot give one away.
			r := f.as("s", "POST", "/v1/rooms/"+f.roomA+"/subscriptions", map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}})
			apptest.Want(t, r, http.StatusCreated)
			if o := r.JSON(t)["owner"]; o != "sub-a" {
				t.Errorf("owner %v, want sub-a", o)
			}
			apptest.Want(t, f.as("s", "POST", "/v1/rooms/"+f.roomA+"/subscriptions", map[string]any{"type": "PULL", "owner": "sub-b",
				"eventTypes": []any{map[string]any{"eventType": "order.created"}}}), http.StatusForbidden)

			// Managers create rooms they manage, and cannot hand them away.
			r = f.as("m", "POST", "/v1/rooms", map[string]any{"identifier": "mine"})
			apptest.Want(t, r, http.StatusCreated)
			if m := r.JSON(t)["managerIdentifier"]; m != "team-a" {
				t.Errorf("managerIdentifier %v, want the manager's subject team-a", m)
			}
			apptest.Want(t, f.as("m", "POST", "/v1/rooms", map[string]any{"identifier": "theirs", "managerIdentifier": "team-b"}), http.StatusForbidden)
			apptest.Want(t, f.as("m", "PATCH", "/v1/rooms/"+f.roomA, map[string]any{"managerIdentifier": "team-b"}), http.StatusForbidden)

			// Publishers publish only the event types granted, in batches too.
			apptest.Want(t, f.as("a", "POST", "/v1/rooms/"+f.roomA+"/event-types", map[string]any{"identifier": "order.paid"}), http.StatusCreated)
			apptest.Want(t, f.as("p", "POST", "/v1/rooms/"+f.roomA+"/messages", map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "1"}}), http.StatusAccepted)
			r = f.as("p", "POST", "/v1/rooms/"+f.roomA+"/messages:batch", map[string]any{"messages": []any{
				map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "1"}},
				map[string]any{"eventType": "order.paid", "payload": map[string]any{}},
			}})
			apptest.Want(t, r, http.StatusForbidden)
			if !strings.Contains(string(r.Body), "messages[1].eventType") {
				t.Errorf("403 does not name the field: %s", r.Body)
			}

			// Keys never show their secret after creation.
			r = f.as("a", "GET", "/v1/api-keys", nil)
			apptest.Want(t, r, http.StatusOK)
			for _, k := range f.keys {
				if strings.Contains(string(r.Body), k) || strings.Contains(string(r.Body), auth.HashToken(k)) {
					t.Fatalf("the key list shows a key or its hash: %s", r.Body)
				}
			}
			r = f.as("s", "GET", "/v1/api-keys/current", nil)
			apptest.Want(t, r, http.StatusOK)
			if m := r.JSON(t); m["role"] != "subscriber" || m["key"] != nil {
				t.Errorf("current key: %v", m)
			}
		})
	}
}

// TestAuthentication checks every way a key can fail to authenticate.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t, store.SQLite)
	for name, header := range map[string]string{
		"no scheme":    f.keys['a'],
		"basic":        "Basic " + f.keys['a'],
		"unknown":      "Bearer " + auth.TokenPrefix + strings.Repeat("x", 43),
		"empty bearer": "Bearer ",
	} {
		if r := f.as(header, "GET", "/v1/rooms", nil); r.Status != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, r.Status)
		}
	}
	apptest.Want(t, f.as("a", "GET", "/v1/rooms", nil), http.StatusOK)
	apptest.Want(t, f.as("bearer "+f.keys['a'], "GET", "/v1/rooms", nil), http.StatusOK) // the scheme is case-insensitive

	// Revocation takes effect at once on the process that revoked.
	victim := f.key(t, map[string]any{"name": "victim", "role": "manager", "subject": "team-a"})
	apptest.Want(t, f.as("Bearer "+victim, "GET", "/v1/rooms", nil), http.StatusOK)
	r := f.as("Bearer "+victim, "GET", "/v1/api-keys/current", nil)
	apptest.Want(t, r, http.StatusOK)
	id := r.JSON(t)["id"].(string)
	r = f.as("a", "DELETE", "/v1/api-keys/"+id, nil)
	apptest.Want(t, r, http.StatusOK)
	if r.JSON(t)["revokedAt"] == nil {
		t.Error("revoked key has no revokedAt")
	}
	apptest.Want(t, f.as("Bearer "+victim, "GET", "/v1/rooms", nil), http.StatusUnauthorized)

	// An expired key is refused.
	token, hash := auth.NewToken()
	past := app.Clock().Add(-time.Minute)
	if err := f.DB.Keys().CreateKey(context.Background(), auth.Key{ID: uuid.Must(uuid.NewV7()), Name: "old", Role: api.RoleAdmin,
		Prefix: token[:10], Hash: hash, CreatedAt: past.Add(-time.Hour), ExpiresAt: &past}); err != nil {
		t.Fatal(err)
	}
	apptest.Want(t, f.as("Bearer "+token, "GET", "/v1/rooms", nil), http.StatusUnauthorized)

	// Key validation names the field.
	r = f.as("a", "POST", "/v1/api-keys", map[string]any{"name": "m", "role": "manager"})
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	if !strings.Contains(string(r.Body), `"subject"`) {
		t.Errorf("manager key without subject: %s", r.Body)
	}
	r = f.as("a", "POST", "/v1/api-keys", map[string]any{"name": "p", "role": "publisher", "rooms": []any{map[string]any{"roomId": uuid.NewString()}}})
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	if !strings.Contains(string(r.Body), "rooms[0].roomId") {
		t.Errorf("grant of a missing room: %s", r.Body)
	}
	apptest.Want(t, f.as("a", "POST", "/v1/api-keys", map[string]any{"name": "x", "role": "root"}), http.StatusUnprocessableEntity)
}

// TestPublishRateLimit: a key's bucket empties, the 429 says when to retry,
// and other keys are unaffected.
func TestPublishRateLimit(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t, store.SQLite)
	slow := f.key(t, map[string]any{"name": "slow", "role": "publisher", "publishRateLimit": 0.5, "publishBurst": 2,
		"rooms": []any{map[string]any{"roomId": f.roomA}}})
	msg := map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "1"}}
	path := "/v1/rooms/" + f.roomA + "/messages"
	apptest.Want(t, f.as("Bearer "+slow, "POST", path, msg), http.StatusAccepted)
	apptest.Want(t, f.as("Bearer "+slow, "POST", path, msg), http.StatusAccepted)
	r := f.as("Bearer "+slow, "POST", path, msg)
	apptest.Want(t, r, http.StatusTooManyRequests)
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 2 {
		t.Errorf("Retry-After %q, want 1..2 s (0.5 events/s)", r.Header.Get("Retry-After"))
	}
	// A batch counts each event; a rejected request takes nothing.
	apptest.Want(t, f.as("Bearer "+slow, "POST", path+":batch", map[string]any{"messages": []any{msg, msg}}), http.StatusTooManyRequests)
	apptest.Want(t, f.as("p", "POST", path, msg), http.StatusAccepted)
}

// TestLimits: payload size and subscriptions per room.
func TestLimits(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config()
	cfg.Limits.MaxPayload = 100
	cfg.Limits.MaxRoomSubscriptions = 2
	a := apptest.NewConfig(t, store.SQLite, cfg)
	a.Seed(t)
	big := map[string]any{"orderId": strings.Repeat("x", 200)}
	r := a.Do("POST", "/v1/rooms/orders/messages", map[string]any{"eventType": "order.created", "payload": big})
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	if !strings.Contains(string(r.Body), `"payload"`) {
		t.Errorf("oversized payload: %s", r.Body)
	}
	r = a.Do("POST", "/v1/rooms/orders/messages:batch", map[string]any{"messages": []any{
		map[string]any{"eventType": "order.created", "payload": map[string]any{"orderId": "1"}},
		map[string]any{"eventType": "order.created", "payload": big},
	}})
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	if !strings.Contains(string(r.Body), "messages[1].payload") {
		t.Errorf("oversized payload in a batch: %s", r.Body)
	}
	sub := map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "order.created"}}}
	apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions", sub), http.StatusCreated)
	apptest.Want(t, a.Do("POST", "/v1/rooms/orders/subscriptions", sub), http.StatusCreated)
	r = a.Do("POST", "/v1/rooms/orders/subscriptions", sub)
	apptest.Want(t, r, http.StatusConflict)
	if !strings.Contains(string(r.Body), "ROOM_MAX_SUBSCRIPTIONS") {
		t.Errorf("cap reached: %s", r.Body)
	}
}

// TestProbes: a request carrying a key's id as a console session's
// (auth.WithSessionKey) is authorized as the key's token would be, and a probe
// (auth.WithProbe) answers 204 exactly where the route's rule admits the
// key, without running the handler.
func TestProbes(t *testing.T) {
	t.Parallel()
	f := newAuthFixture(t, store.SQLite)
	srv, _ := app.NewHandler(authConfig(), slog.New(slog.DiscardHandler), f.DB, &apptest.Queues{}, apptest.IdleRelay{}, true, metrics.New(metrics.Options{}))
	ids := map[rune]uuid.UUID{}
	for _, role := range "amps" {
		r := f.as(string(role), "GET", "/v1/api-keys/current", nil)
		apptest.Want(t, r, http.StatusOK)
		ids[role] = uuid.MustParse(r.JSON(t)["id"].(string))
	}
	call := func(ctx context.Context, method, path string) int {
		req := httptest.NewRequestWithContext(ctx, method, path, nil)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}
	routes := slices.Sorted(maps.Keys(routeAccess))
	for _, route := range routes {
		access := routeAccess[route]
		scoped := strings.Contains(route, ":roomId")
		for _, role := range "amps" {
			for _, inside := range []bool{true, false} {
				if !inside && !scoped {
					continue
				}
				method, path, _ := f.request(t, route, inside)
				allowed := strings.ContainsRune(access, role) && (inside || role == 'a')
				got := call(auth.WithProbe(auth.WithSessionKey(context.Background(), ids[role])), method, path)
				if allowed != (got == http.StatusNoContent) || !allowed && got != http.StatusForbidden {
					t.Errorf("probe of %s by a %c key, inside=%v: %d, allowed=%v", route, role, inside, got, allowed)
				}
			}
		}
	}
	// The probe ran no handler: the room is still there.
	if got := call(auth.WithProbe(auth.WithSessionKey(context.Background(), ids['a'])), "DELETE", "/v1/rooms/"+f.roomB+"?force=true"); got != http.StatusNoContent {
		t.Fatalf("probe of DELETE: %d", got)
	}
	apptest.Want(t, f.as("a", "GET", "/v1/rooms/"+f.roomB, nil), http.StatusOK)

	// A session of an unknown or revoked key is refused like its token.
	if got := call(auth.WithSessionKey(context.Background(), uuid.New()), "GET", "/v1/rooms"); got != http.StatusUnauthorized {
		t.Errorf("unknown session key: %d, want 401", got)
	}
	// Revoked through the same process, whose cache forgets the key at once.
	if got := call(auth.WithSessionKey(context.Background(), ids['a']), "DELETE", "/v1/api-keys/"+ids['m'].String()); got != http.StatusOK {
		t.Fatalf("revoke: %d", got)
	}
	if got := call(auth.WithSessionKey(context.Background(), ids['m']), "GET", "/v1/rooms"); got != http.StatusUnauthorized {
		t.Errorf("session key of a revoked key: %d, want 401", got)
	}
}
