package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/client"
	"github.com/roomhub/messaging-api/store/storetest"
)

// adminKey is the bootstrap admin key of the services the tests start.
const adminKey = "mapi_roomctl-test-admin-key-0123456789-abcdef"

// service is a service a test started (the whole service, on PostgreSQL and
// the real broker of BROKER_TEST_URL, with API keys on) and roomctl's
// environment to reach it.
type service struct {
	t   *testing.T
	api apptest.Client // as the admin
	env map[string]string
}

// startService starts the service with settings over the tests' own.
func startService(t *testing.T, settings ...string) *service {
	t.Helper()
	brokerURL := apptest.RealBroker(t)
	env := map[string]string{
		"DATABASE_URL": storetest.PostgresSchemaURL(t), "BROKER_URL": brokerURL,
		"AUTH_DISABLED": "", "AUTH_BOOTSTRAP_ADMIN_KEY": adminKey, "OUTBOX_POLL_INTERVAL": "100ms",
	}
	for i := 0; i+1 < len(settings); i += 2 {
		env[settings[i]] = settings[i+1]
	}
	c := apptest.StartService(t, env)
	return &service{t: t, api: c.As(adminKey), env: map[string]string{envURL: c.Base, envKey: adminKey}}
}

// as is s with roomctl using the API key key.
func (s *service) as(key string) *service {
	env := map[string]string{envURL: s.env[envURL], envKey: key}
	return &service{t: s.t, api: s.api, env: env}
}

// run runs roomctl against the service.
func (s *service) run(stdin string, args ...string) result {
	s.t.Helper()
	return roomctl(s.t, s.env, stdin, args...)
}

// ok runs roomctl, fails unless it exits 0, and returns its stdout.
func (s *service) ok(args ...string) string {
	s.t.Helper()
	return s.run("", args...).want(s.t, exitOK, args...).out
}

// json runs roomctl with -o json, fails unless it exits 0, and decodes its
// stdout into out.
func (s *service) json(out any, args ...string) {
	s.t.Helper()
	raw := s.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(raw), out); err != nil {
		s.t.Fatalf("roomctl %s -o json: %v: %s", strings.Join(args, " "), err, raw)
	}
}

// jsonLines decodes each line of out, a JSON object per line.
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var all []T
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var v T
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		all = append(all, v)
	}
	return all
}

// wantLine fails unless text has a line matching the regular expression
// pattern (the table's columns: words separated by runs of spaces).
func wantLine(t *testing.T, text, pattern string) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + pattern + `\s*$`)
	if !re.MatchString(text) {
		t.Errorf("no line matches %q in:\n%s", pattern, text)
	}
}

// TestRoomsEventTypesVersions drives rooms, event types and versions
// through roomctl, in tables and JSON.
func TestRoomsEventTypesVersions(t *testing.T) {
	t.Parallel()
	s := startService(t)
	room := apptest.UniqueRoom("cli-rooms")

	out := s.ok("rooms", "create", room, "--manager", "team-orders", "--message-expiration", "1h", "--delivery-attempts", "5", "--delivery-delay", "500ms")
	wantLine(t, out, `IDENTIFIER\s+`+room)
	wantLine(t, out, `MANAGER\s+team-orders`)
	wantLine(t, out, `MESSAGE EXPIRATION\s+1h`)
	wantLine(t, out, `RETRY\s+5 attempts, 500ms ×2`)
	wantLine(t, out, `CIRCUIT BREAKER\s+enabled=true failureRate=0.9 window=50 minimumAttempts=20 cooldown=30s maxCooldown=10m`)

	var r client.Room
	s.json(&r, "rooms", "get", room)
	if r.Identifier != room || r.DeliveryAttempts != 5 || r.DeliveryDelay != 500 || r.MessageExpiration.MustGet() != 3600000 {
		t.Errorf("room %+v", r)
	}
	s.json(&r, "rooms", "update", room, "--delivery-attempts", "7", "--subscription-approval", "manual", "--reset", "message-expiration")
	if r.DeliveryAttempts != 7 || !r.MessageExpiration.IsNull() || r.SubscriptionApproval != "MANUAL" || r.DeliveryDelay != 500 {
		t.Errorf("updated room %+v", r)
	}
	out = s.ok("rooms", "list", "--limit", "500")
	wantLine(t, out, `ID\s+IDENTIFIER\s+MANAGER\s+STATUS\s+EXPIRATION\s+RETRY\s+APPROVAL\s+CREATED`)
	wantLine(t, out, `\S+\s+`+room+`\s+team-orders\s+ACTIVE\s+never\s+7 attempts, 500ms ×2\s+MANUAL\s+\S+`)
	var rooms client.RoomList
	s.json(&rooms, "rooms", "list", "--limit", "1")
	if len(rooms.Items) != 1 {
		t.Errorf("--limit 1 listed %d rooms", len(rooms.Items))
	}

	// Event types and versions: a schema from standard input, one inline.
	out = s.ok("event-types", "create", room, "order.created", "--description", "A customer placed an order")
	wantLine(t, out, `IDENTIFIER\s+order.created`)
	s.ok("event-types", "create", room, "order.paid")
	out = s.ok("event-types", "list", room)
	wantLine(t, out, `IDENTIFIER\s+DESCRIPTION\s+CREATED`)
	wantLine(t, out, `order.created\s+A customer placed an order\s+\S+`)
	wantLine(t, out, `order.paid\s+-\s+\S+`)
	var et client.EventType
	s.json(&et, "event-types", "get", room, "order.created")
	if et.Description != "A customer placed an order" || et.RoomId != r.Id {
		t.Errorf("event type %+v", et)
	}
	const schema = `{"type":"object","required":["orderId"],"properties":{"orderId":{"type":"string"}}}`
	out = s.run(schema+"\n", "event-types", "versions", "create", room, "order.created", "--schema-file", "-").want(t, exitOK).out
	wantLine(t, out, `VERSION\s+1`)
	var v client.Version
	s.json(&v, "event-types", "versions", "create", room, "order.created", "--schema", `{"type":"object"}`, "--version", "5")
	if v.Version != 5 || string(v.Schema) != `{"type":"object"}` {
		t.Errorf("version %+v", v)
	}
	out = s.ok("event-types", "versions", "list", room, "order.created")
	wantLine(t, out, `VERSION\s+CREATED\s+SCHEMA`)
	wantLine(t, out, `1\s+\S+\s+`+regexp.QuoteMeta(schema[:79])+"…") // long schemas are cut
	wantLine(t, out, `5\s+\S+\s+\{"type":"object"\}`)
	s.json(&v, "event-types", "versions", "get", room, "order.created", "1")
	if string(v.Schema) != schema {
		t.Errorf("version 1's schema %s", v.Schema)
	}
	s.ok("event-types", "versions", "delete", room, "order.created", "5")
	s.ok("event-types", "delete", room, "order.paid")

	// Refusals print the problem and exit 1.
	res := s.run("", "rooms", "create", "bad id", "--delivery-delay", "0s")
	if res.code != exitFailed || res.out != "" || !strings.Contains(res.err, "roomctl: 422 Validation failed: ") ||
		!strings.Contains(res.err, "  identifier: must match") || !strings.Contains(res.err, "  deliveryDelay: must be from 1 to 604800000 ms") ||
		!strings.Contains(res.err, "  type: /problems/validation_failed\n") || !strings.Contains(res.err, "  request id: ") {
		t.Errorf("a bad room: exit %d, stdout %q, stderr %q", res.code, res.out, res.err)
	}
	res = s.run("", "event-types", "versions", "create", room, "order.created", "--schema", `{"type":"object","required":"orderId"}`, "-o", "json")
	var p client.Problem
	if res.code != exitFailed || json.Unmarshal([]byte(res.err), &p) != nil || p.Status != 422 || p.Errors == nil || (*p.Errors)[0].Field != "schema" {
		t.Errorf("a bad schema with -o json: exit %d, stderr %q; want the problem document", res.code, res.err)
	}
	res = s.run("", "rooms", "get", "no-such-room-"+room)
	if res.code != exitFailed || !strings.Contains(res.err, "roomctl: 404 Not found: ") || !strings.Contains(res.err, "  type: /problems/not_found\n") {
		t.Errorf("a missing room: exit %d, stderr %q", res.code, res.err)
	}
	res = s.as("mapi_not-a-key-of-the-service-0123456789-0123").run("", "rooms", "list")
	if res.code != exitFailed || !strings.Contains(res.err, "roomctl: 401 ") || !strings.Contains(res.err, "  type: /problems/unauthorized\n") {
		t.Errorf("a wrong key: exit %d, stderr %q", res.code, res.err)
	}

	other := apptest.UniqueRoom("cli-rooms-del")
	s.ok("rooms", "create", other, "--manager", "m")
	wantLine(t, s.ok("rooms", "delete", other), "deleted room "+other)
	if res := s.run("", "rooms", "get", other); res.code != exitFailed {
		t.Errorf("the deleted room is still there: %+v", res)
	}
}

// setupRoom creates room with event type "tick" (version 1: any JSON)
// through roomctl, with flags for rooms create.
func (s *service) setupRoom(room string, flags ...string) {
	s.t.Helper()
	s.ok(append([]string{"rooms", "create", room, "--manager", "m"}, flags...)...)
	s.ok("event-types", "create", room, "tick")
	s.ok("event-types", "versions", "create", room, "tick", "--schema", "true")
}

// TestSubscriptionsAndVerify drives PUSH and PULL subscriptions through
// roomctl, and verifies the signatures of the pushes their endpoint got.
func TestSubscriptionsAndVerify(t *testing.T) {
	t.Parallel()
	s := startService(t)
	room := apptest.UniqueRoom("cli-subs")
	s.setupRoom(room)
	hook := apptest.NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })

	var push client.Subscription
	s.json(&push, "subscriptions", "create", room, "--push-url", hook.URL(), "--event-type", "tick:1", "--delivery-attempts", "4")
	if push.Type != "PUSH" || push.SigningSecret == nil || push.DeliveryAttempts.MustGet() != 4 || eventTypes(push.EventTypes) != "tick:1" {
		t.Fatalf("push subscription %+v", push)
	}
	firstSecret := *push.SigningSecret
	res := s.run("", "subscriptions", "create", room, "--type", "PULL", "--event-type", "tick", "--ack-deadline", "1m")
	res.want(t, exitOK)
	wantLine(t, res.out, `TYPE\s+PULL`)
	wantLine(t, res.out, `ACK DEADLINE\s+1m`)
	wantLine(t, res.out, `DESTINATION\s+room-\S+::subscription-\S+`)
	if strings.Contains(res.out, "SIGNING SECRET") || strings.Contains(res.err, "signing secret") {
		t.Errorf("a PULL subscription shows a secret:\n%s%s", res.out, res.err)
	}

	out := s.ok("subscriptions", "list", room)
	wantLine(t, out, `ID\s+TYPE\s+STATUS\s+EVENT TYPES\s+TARGET\s+OWNER\s+CREATED`)
	wantLine(t, out, push.Id.String()+`\s+PUSH\s+ACTIVE\s+tick:1\s+`+regexp.QuoteMeta(hook.URL())+`\s+-\s+\S+`)
	wantLine(t, out, `\S+\s+PULL\s+ACTIVE\s+tick\s+room-\S+\s+-\s+\S+`)
	var list client.SubscriptionList
	s.json(&list, "subscriptions", "list", room, "--type", "PULL")
	if len(list.Items) != 1 || list.Items[0].Type != "PULL" {
		t.Errorf("--type PULL lists %+v", list.Items)
	}
	id := push.Id.String()

	wantLine(t, s.ok("subscriptions", "pause", room, id), `STATUS\s+PAUSED`)
	wantLine(t, s.ok("subscriptions", "resume", room, id), `STATUS\s+ACTIVE`)
	out = s.ok("subscriptions", "update", room, id, "--max-delivery-rate", "5", "--attribute-filter", `{"region":["eu"]}`, "--delivery-delay", "250ms")
	wantLine(t, out, `DELIVERY OVERRIDES\s+deliveryDelay=250ms deliveryAttempts=4`)
	wantLine(t, out, `MAX DELIVERY RATE\s+5/s`)
	wantLine(t, out, `ATTRIBUTE FILTER\s+\{"region":\["eu"\]\}`)
	var sub client.Subscription
	s.json(&sub, "subscriptions", "update", room, id, "--reset", "attribute-filter,max-delivery-rate,delivery-delay")
	if !sub.AttributeFilter.IsNull() || !sub.MaxDeliveryRate.IsNull() || !sub.DeliveryDelay.IsNull() || sub.DeliveryAttempts.MustGet() != 4 {
		t.Errorf("after --reset: %+v", sub)
	}
	wantLine(t, s.ok("subscriptions", "circuit-reset", room, id), `CIRCUIT\s+closed`)

	// A test event reaches the endpoint, signed with the first secret.
	out = s.ok("subscriptions", "test", room, id)
	wantLine(t, out, `OUTCOME\s+delivered`)
	wantLine(t, out, `STATUS CODE\s+200`)
	wantLine(t, out, `RESPONSE BODY\s+ok`)
	test := hook.WaitFor(1, 10*time.Second)[0]
	if test.Header.Get("X-Event-Type") != "messaging.test" {
		t.Fatalf("the hook got %v", test.Header)
	}

	// Rotate: both secrets sign until the grace period ends.
	var rotated client.Subscription
	s.json(&rotated, "subscriptions", "rotate-secret", room, id, "--grace-period", "1h")
	if rotated.SigningSecret == nil || *rotated.SigningSecret == firstSecret {
		t.Fatalf("rotate-secret answered %+v", rotated)
	}
	newSecret := *rotated.SigningSecret
	ev := publishOne(t, s, room, `{"n":1}`, "verify-1")
	var pushed apptest.PushRequest
	apitest.EventuallyWithin(t, 15*time.Second, "the push of "+ev, func() bool {
		reqs := hook.WithID(ev)
		if len(reqs) > 0 {
			pushed = reqs[0]
		}
		return len(reqs) > 0
	})

	dir := t.TempDir()
	var raw strings.Builder
	raw.WriteString("POST /hook HTTP/1.1\r\nHost: receiver\r\n")
	for name, values := range pushed.Header {
		for _, v := range values {
			fmt.Fprintf(&raw, "%s: %s\r\n", name, v)
		}
	}
	raw.WriteString("\r\n")
	raw.Write(pushed.Body)
	request := filepath.Join(dir, "request.http")
	if err := os.WriteFile(request, []byte(raw.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	wantLine(t, s.ok("verify", "--secret", newSecret, "--request-file", request), `valid: webhook-id `+ev+`, webhook-timestamp \d+, signed with secret 1 of 1`)
	wantLine(t, s.ok("verify", "--secret", "whsec_c2VjcmV0LW9mLWFub3RoZXItc3Vic2NyaXB0aW9u", "--secret", firstSecret, "--request-file", request), `valid: .*signed with secret 2 of 2`)
	tampered := strings.Replace(raw.String(), `{"n":1}`, `{"n":2}`, 1)
	res = s.run(tampered, "verify", "--secret", newSecret, "--request-file", "-")
	if res.code != exitFailed || !strings.Contains(res.err, "invalid: no signature matches the secrets") {
		t.Errorf("a tampered body: exit %d, stderr %q", res.code, res.err)
	}

	// Fields without a flag come from a body file; a misspelt one is
	// caught before anything is sent.
	dir = t.TempDir()
	bodyFile := filepath.Join(dir, "sub.json")
	if err := os.WriteFile(bodyFile, []byte(`{"type":"PUSH","pushUrl":"`+hook.URL()+`","eventTypes":[{"eventType":"tick"}],
		"pushAuth":{"type":"bearer","token":"t0ken"},"retryPolicy":{"backoffRetries":2}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var withAuth client.Subscription
	s.json(&withAuth, "subscriptions", "create", room, "--body-file", bodyFile, "--delivery-attempts", "2")
	if pa, err := withAuth.PushAuth.Get(); err != nil || pa.Type != "bearer" || !withAuth.RetryPolicy.IsSpecified() || withAuth.RetryPolicy.IsNull() || withAuth.DeliveryAttempts.MustGet() != 2 {
		t.Errorf("created from a body file: %+v", withAuth)
	}
	if err := os.WriteFile(bodyFile, []byte(`{"type":"PUSH","pushUrl":"`+hook.URL()+`","eventTypes":[{"eventType":"tick"}],"pushAuht":null}`), 0o600); err != nil {
		t.Fatal(err)
	}
	res = s.run("", "subscriptions", "create", room, "--body-file", bodyFile)
	if res.code != exitUsage || !strings.Contains(res.err, `unknown field "pushAuht"`) {
		t.Errorf("a misspelt field in the body file: exit %d, stderr %q", res.code, res.err)
	}

	// Completion offers the rooms, then their subscriptions.
	out = s.ok("__complete", "listen", "")
	if !strings.Contains(out, room+"\tmanaged by m\n") {
		t.Errorf("ROOM completes to:\n%s", out)
	}
	out = s.ok("__complete", "subscriptions", "pause", room, "")
	if !strings.Contains(out, id+"\tPUSH ACTIVE tick:1\n") || !strings.Contains(out, withAuth.Id.String()+"\t") {
		t.Errorf("SUBSCRIPTION completes to:\n%s", out)
	}
	out = s.ok("__complete", "event-types", "versions", "list", room, "")
	if !strings.Contains(out, "tick\n") {
		t.Errorf("EVENT-TYPE completes to:\n%s", out)
	}

	wantLine(t, s.ok("subscriptions", "delete", room, id), "deleted subscription "+id)
	if res := s.run("", "subscriptions", "get", room, id); res.code != exitFailed || !strings.Contains(res.err, "404 Not found: ") {
		t.Errorf("the deleted subscription: %+v", res)
	}
}

// publishOne publishes payload as a "tick" with correlation id corr and
// returns its event id.
func publishOne(t *testing.T, s *service, room, payload, corr string) string {
	t.Helper()
	var m client.PublishedMessage
	s.json(&m, "publish", room, "--type", "tick", "--data", payload, "--correlation-id", corr)
	return m.EventId.String()
}

// TestApproval: a subscriber key's subscription in a MANUAL room starts
// PENDING; the admin approves one and rejects another.
func TestApproval(t *testing.T) {
	t.Parallel()
	s := startService(t)
	room := apptest.UniqueRoom("cli-approval")
	s.setupRoom(room, "--subscription-approval", "MANUAL")
	key := s.api.Call("POST", "/v1/api-keys", `{"name":"sub","role":"subscriber","subject":"team-b","rooms":[{"roomId":"`+room+`"}]}`, http.StatusCreated)["key"].(string)
	subscriber := s.as(key)

	var a, b client.Subscription
	subscriber.json(&a, "subscriptions", "create", room, "--event-type", "tick")
	subscriber.json(&b, "subscriptions", "create", room, "--event-type", "tick")
	if a.Status != "PENDING" || a.Owner.MustGet() != "team-b" {
		t.Fatalf("a subscriber's subscription in a MANUAL room: %+v", a)
	}
	out := s.ok("subscriptions", "list", room, "--status", "pending")
	if strings.Count(out, "PENDING") != 2 {
		t.Errorf("--status pending lists:\n%s", out)
	}
	res := subscriber.run("", "subscriptions", "approve", room, a.Id.String())
	if res.code != exitFailed || !strings.Contains(res.err, "type: /problems/forbidden\n") {
		t.Errorf("a subscriber approving: exit %d, stderr %q", res.code, res.err)
	}
	out = s.ok("subscriptions", "approve", room, a.Id.String())
	wantLine(t, out, `STATUS\s+ACTIVE`)
	wantLine(t, out, `DECIDED BY\s+\S+`)
	out = s.ok("subscriptions", "reject", room, b.Id.String(), "--reason", "Only billing receives ticks.")
	wantLine(t, out, `STATUS\s+REJECTED`)
	wantLine(t, out, `REJECTION REASON\s+Only billing receives ticks.`)
	res = s.run("", "subscriptions", "approve", room, b.Id.String())
	if res.code != exitFailed || !strings.Contains(res.err, "type: /problems/invalid_state\n") || !strings.Contains(res.err, "REJECTED") {
		t.Errorf("approving a rejected subscription: exit %d, stderr %q", res.code, res.err)
	}
}

// TestPublishListenMessages publishes from JSON lines on standard input,
// listens to a PULL subscription (acking what it printed, nacking what it
// could not print), and shows the timeline.
func TestPublishListenMessages(t *testing.T) {
	t.Parallel()
	s := startService(t)
	room := apptest.UniqueRoom("cli-pull")
	s.setupRoom(room, "--delivery-delay", "10ms")
	s.ok("event-types", "create", room, "order.created")
	s.ok("event-types", "versions", "create", room, "order.created", "--schema", `{"type":"object","required":["orderId"],"properties":{"orderId":{"type":"string"}}}`)
	var pull client.Subscription
	s.json(&pull, "subscriptions", "create", room, "--event-type", "tick", "--event-type", "order.created")
	sub := pull.Id.String()

	// Lines: good ones, a line that is not JSON, one the API refuses by its
	// payload, one of an unknown event type; the good ones go out in
	// batches of 2, the refused ones do not stop their batch.
	lines := strings.Join([]string{
		`{"eventType":"tick","payload":{"n":1},"correlationId":"lines-1","attributes":{"seq":"1"}}`,
		`{"eventType":"order.created","payload":{"orderId":42},"correlationId":"lines-1"}`,
		``,
		`not json`,
		`{"eventType":"tick","payload":{"n":2},"correlationId":"lines-1"}`,
		`{"eventType":"no.such.type","payload":{}}`,
		`{"eventType":"order.created","payload":{"orderId":"A-3"},"correlationId":"lines-1"}`,
	}, "\n")
	res := s.run(lines, "publish", room, "--jsonl", "-", "--batch-size", "2")
	if res.code != exitFailed || !strings.Contains(res.err, "published 3 of 6 lines") || !strings.Contains(res.err, "3 of 6 lines were not published") {
		t.Fatalf("publish --jsonl: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.out, res.err)
	}
	wantLine(t, res.out, `line 1: published \S+ \(correlation lines-1, tick v1, 1 destinations\)`)
	wantLine(t, res.out, `line 2: not published: 422 Validation failed; payload: got number, want string`)
	wantLine(t, res.out, `line 4: not published: the line is not JSON`)
	wantLine(t, res.out, `line 5: published .*`)
	wantLine(t, res.out, `line 6: not published: 404 Not found; eventType: .*`)
	wantLine(t, res.out, `line 7: published \S+ \(correlation lines-1, order.created v1, 1 destinations\)`)
	if n := strings.Count(res.out, "\n"); n != 6 {
		t.Errorf("%d result lines for 6 lines:\n%s", n, res.out)
	}

	// With --type each line is a payload; -o json gives a result per line.
	res = s.run("{\"n\":3}\n{\"n\":4}\n", "publish", room, "--type", "tick", "--jsonl", "-", "--correlation-id", "lines-2", "-o", "json").want(t, exitOK)
	results := jsonLines[lineResult](t, res.out)
	var m client.PublishedMessage
	if len(results) != 2 || results[1].Line != 2 || json.Unmarshal(results[1].Published, &m) != nil || m.CorrelationId != "lines-2" || m.EventType != "tick" {
		t.Errorf("-o json results: %s", res.out)
	}

	// listen prints the 5 messages, acking each: nothing is left.
	res = s.run("", "listen", room, sub, "--count", "5", "--wait", "5s", "-o", "json").want(t, exitOK)
	payloads := map[string]bool{}
	for _, pm := range jsonLines[client.PulledMessage](t, res.out) {
		payloads[string(pm.Payload)] = true
	}
	for _, p := range []string{`{"n":1}`, `{"n":2}`, `{"orderId":"A-3"}`, `{"n":3}`, `{"n":4}`} {
		if !payloads[p] {
			t.Errorf("listen did not print %s: %s", p, res.out)
		}
	}
	if left := s.api.Call("POST", "/v1/rooms/"+room+"/subscriptions/"+sub+"/pull", `{"waitMs":1000}`, http.StatusOK)["messages"].([]any); len(left) != 0 {
		t.Errorf("after listen acked, a pull still gets %d messages", len(left))
	}

	// The timeline of lines-1 shows each event delivered (acked).
	out := s.ok("messages", room, "lines-1")
	if n := len(regexp.MustCompile(`(?m)^event `).FindAllString(out, -1)); n != 3 {
		t.Errorf("the timeline of lines-1 shows %d events:\n%s", n, out)
	}
	wantLine(t, out, `  PULL subscription `+sub+` \(room-\S+::subscription-`+sub+`\)`)
	wantLine(t, out, `    ATTEMPT\s+STATUS\s+CODE\s+LATENCY\s+DELAY\s+CREATED\s+SENT\s+STARTED\s+COMPLETED\s+ERROR`)
	if strings.Count(out, " delivered ") != 3 {
		t.Errorf("the timeline does not show the 3 events delivered:\n%s", out)
	}
	var timeline client.MessageList
	s.json(&timeline, "messages", room, "lines-1")
	if len(timeline.Items) != 3 {
		t.Fatalf("-o json: %d events", len(timeline.Items))
	}
	var one client.Message
	s.json(&one, "messages", room, "--event-id", timeline.Items[0].EventId.String())
	if one.EventId != timeline.Items[0].EventId || len(one.Deliveries) != 1 {
		t.Errorf("--event-id: %+v", one)
	}
	if res := s.run("", "messages", room, "no-such-correlation"); res.code != exitOK || !strings.Contains(res.err, `no event with correlation id "no-such-correlation"`) {
		t.Errorf("an unknown correlation id: %+v", res)
	}

	// A message listen could not print is nacked: it comes again.
	ev := publishOne(t, s, room, `{"n":5}`, "nacked")
	w := &failingWriter{}
	res = roomctlTo(t, s.env, "", w, "listen", room, sub, "--count", "1", "--wait", "5s")
	if res.code != exitFailed || !strings.Contains(res.err, "broken pipe (1 message(s) nacked)") {
		t.Fatalf("listen printing to a broken pipe: exit %d, stderr %q", res.code, res.err)
	}
	var again client.PulledMessage
	raw := s.run("", "listen", room, sub, "--count", "1", "--wait", "5s", "-o", "json").want(t, exitOK).out
	if err := json.Unmarshal([]byte(raw), &again); err != nil || again.EventId.String() != ev || again.Attempt != 2 {
		t.Errorf("after the nack: %s (%v); want event %s at attempt 2", raw, err, ev)
	}
	// The readable form.
	ev = publishOne(t, s, room, `{"n":6}`, "readable")
	out = s.ok("listen", room, sub, "--count", "1", "--wait", "5s")
	wantLine(t, out, `\S+  tick v1  attempt 1  event `+ev+`  correlation readable`)
	wantLine(t, out, `  \{"n":6\}`)

	// A PUSH subscription cannot be pulled: the refusal ends listen.
	hook := apptest.NewHook(t, func(int, http.ResponseWriter, *http.Request) {})
	var push client.Subscription
	s.json(&push, "subscriptions", "create", room, "--push-url", hook.URL(), "--event-type", "tick")
	res = s.run("", "listen", room, push.Id.String(), "--wait", "1s")
	if res.code != exitFailed || !strings.Contains(res.err, "type: /problems/invalid_state\n") {
		t.Errorf("listen to a PUSH subscription: exit %d, stderr %q", res.code, res.err)
	}
}

// TestDeadLetters lists dead letters with filters, replays them by id and
// by filter, and deletes one.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	s := startService(t)
	room := apptest.UniqueRoom("cli-dl")
	s.setupRoom(room, "--delivery-attempts", "1")
	hook, status := apptest.StatusHook(t, http.StatusBadRequest)
	var push client.Subscription
	s.json(&push, "subscriptions", "create", room, "--push-url", hook.URL(), "--event-type", "tick")
	sub := push.Id.String()
	for i := 1; i <= 3; i++ {
		publishOne(t, s, room, fmt.Sprintf(`{"n":%d}`, i), fmt.Sprintf("dl-%d", i))
	}
	var letters client.DeadLetterList
	apitest.EventuallyWithin(t, 20*time.Second, "3 dead letters", func() bool {
		s.json(&letters, "dead-letters", "list", room, sub)
		return len(letters.Items) == 3
	})
	status.Store(http.StatusOK)

	// Dead letters are listed in the order they were made, which need not
	// be the order of the publishes.
	first, second, third := letters.Items[0], letters.Items[1], letters.Items[2]
	out := s.ok("dead-letters", "list", room, sub, "--reason", "permanent_failure", "--since", "1h")
	wantLine(t, out, `ID\s+EVENT TYPE\s+REASON\s+ATTEMPTS\s+LAST STATUS\s+LAST ERROR\s+DEAD-LETTERED\s+CORRELATION ID`)
	wantLine(t, out, first.Id.String()+`\s+tick v1\s+permanent_failure\s+1\s+400\s+HTTP 400\s+\S+\s+`+first.CorrelationId)
	if n := strings.Count(out, "permanent_failure"); n != 3 {
		t.Errorf("--reason permanent_failure lists %d:\n%s", n, out)
	}
	for _, filter := range [][]string{{"--reason", "expired"}, {"--until", "1h"}, {"--event-type", "other"}} {
		var none client.DeadLetterList
		s.json(&none, append([]string{"dead-letters", "list", room, sub}, filter...)...)
		if len(none.Items) != 0 {
			t.Errorf("%v lists %d dead letters", filter, len(none.Items))
		}
	}
	var page client.DeadLetterList
	s.json(&page, "dead-letters", "list", room, sub, "--limit", "2")
	if len(page.Items) != 2 || page.NextCursor == nil {
		t.Fatalf("--limit 2: %+v", page)
	}
	s.json(&page, "dead-letters", "list", room, sub, "--limit", "2", "--cursor", *page.NextCursor)
	if len(page.Items) != 1 || page.Items[0].Id != third.Id {
		t.Errorf("the second page: %+v", page.Items)
	}
	out = s.ok("dead-letters", "get", room, sub, first.Id.String())
	wantLine(t, out, `PAYLOAD\s+`+regexp.QuoteMeta(string(first.Payload)))
	wantLine(t, out, `REASON\s+permanent_failure`)

	// Replay the first by id, delete the third, and replay what is left by
	// filter and time range.
	res := s.run("", "dead-letters", "replay", room, sub, first.Id.String()).want(t, exitOK)
	wantLine(t, res.out, `DEAD LETTER\s+NEW EVENT\s+CORRELATION ID`)
	wantLine(t, res.out, first.Id.String()+`\s+\S+\s+`+first.CorrelationId)
	if !strings.Contains(res.err, "replayed 1 dead letters") {
		t.Errorf("stderr %q", res.err)
	}
	wantLine(t, s.ok("dead-letters", "delete", room, sub, third.Id.String()), "deleted dead letter "+third.Id.String())
	var replay client.DeadLetterReplay
	s.json(&replay, "dead-letters", "replay", room, sub, "--reason", "permanent_failure", "--event-type", "tick", "--since", "1h")
	if len(replay.Replayed) != 1 || replay.Replayed[0].DeadLetterId != second.Id || replay.Replayed[0].CorrelationId != second.CorrelationId {
		t.Errorf("replay by filter: %+v", replay.Replayed)
	}
	apitest.EventuallyWithin(t, 20*time.Second, "the replays delivered", func() bool {
		return len(hook.Requests()) >= 5 && strings.Contains(s.ok("messages", room, second.CorrelationId), " delivered ")
	})
	s.json(&letters, "dead-letters", "list", room, sub)
	if len(letters.Items) != 0 {
		t.Errorf("dead letters left: %+v", letters.Items)
	}
	// Nothing left to replay: --all replays none.
	res = s.run("", "dead-letters", "replay", room, sub, "--all").want(t, exitOK)
	if !strings.Contains(res.err, "replayed 0 dead letters") {
		t.Errorf("replay --all of none: %q", res.err)
	}
}

// TestPublishRetries: a publish that got no answer, or a 429, is sent
// again with the same Idempotency-Key, and the event is published once.
func TestPublishRetries(t *testing.T) {
	t.Parallel()
	s := startService(t, "PUBLISH_RATE_LIMIT", "1", "PUBLISH_RATE_BURST", "1")
	room := apptest.UniqueRoom("cli-retry")
	s.setupRoom(room)
	s.ok("subscriptions", "create", room, "--event-type", "tick")

	t.Run("no answer", func(t *testing.T) {
		// A proxy that lets the first publish through to the service and
		// then drops the connection, as a network failure after the commit
		// would.
		target, _ := url.Parse(s.env[envURL])
		proxy := httputil.NewSingleHostReverseProxy(target)
		var publishes atomic.Int32
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/messages") || publishes.Add(1) > 1 {
				proxy.ServeHTTP(w, r)
				return
			}
			proxy.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}))
		t.Cleanup(front.Close)
		var m client.PublishedMessage
		raw := roomctl(t, map[string]string{envURL: front.URL, envKey: adminKey}, "",
			"publish", room, "--type", "tick", "--data", `{"n":4}`, "--correlation-id", "lost-answer", "-o", "json")
		raw.want(t, exitOK)
		if err := json.Unmarshal([]byte(raw.out), &m); err != nil {
			t.Fatal(err)
		}
		if publishes.Load() < 2 || !strings.Contains(raw.err, "sending again in 1s with the same Idempotency-Key") {
			t.Errorf("the publish was sent %d times (stderr %q); want it sent again", publishes.Load(), raw.err)
		}
		var list client.MessageList
		s.json(&list, "messages", room, "lost-answer")
		if len(list.Items) != 1 || list.Items[0].EventId != m.EventId {
			t.Errorf("after a lost answer: %d events (%+v); want the one event %s", len(list.Items), list.Items, m.EventId)
		}
	})

	t.Run("rate limited", func(t *testing.T) {
		start := time.Now()
		res := s.run("{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n", "publish", room, "--type", "tick", "--jsonl", "-", "--batch-size", "1", "--correlation-id", "limited").want(t, exitOK)
		if !strings.Contains(res.err, "the publish rate limit is reached; sending again in 1s") || time.Since(start) < time.Second {
			t.Errorf("stderr %q after %v; want a retry after the Retry-After", res.err, time.Since(start))
		}
		var list client.MessageList
		s.json(&list, "messages", room, "limited")
		if len(list.Items) != 3 {
			t.Errorf("%d events published, want 3", len(list.Items))
		}
	})
}
