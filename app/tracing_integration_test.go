package app_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/store/storetest"
)

// callerTrace is the traceparent a publisher sends.
const callerTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// publishTraced publishes one tick to room with the caller's traceparent.
func publishTraced(t *testing.T, c apptest.Client, room, traceparent string) publish.PublishResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, c.Base+"/v1/rooms/"+room+"/messages",
		strings.NewReader(`{"eventType":"tick","payload":{"n":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("publish: %d %s", resp.StatusCode, body)
	}
	return apptest.Decode[publish.PublishResponse](t, apptest.Response{Status: resp.StatusCode, Body: body})
}

// spans finds recorded spans by name and attributes.
type spans tracetest.SpanStubs

func attrValue(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// find is the spans named name that have every attribute of want.
func (ss spans) find(name string, want ...attribute.KeyValue) []tracetest.SpanStub {
	var out []tracetest.SpanStub
next:
	for _, s := range ss {
		if s.Name != name {
			continue
		}
		for _, w := range want {
			if v, ok := attrValue(s, w.Key); !ok || v != w.Value {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// one is the one span find finds, or a failure.
func (ss spans) one(t *testing.T, name string, want ...attribute.KeyValue) tracetest.SpanStub {
	t.Helper()
	got := ss.find(name, want...)
	if len(got) != 1 {
		var names []string
		for _, s := range ss {
			names = append(names, s.Name)
		}
		t.Fatalf("%d spans %q with %v, want 1; recorded: %q", len(got), name, want, names)
	}
	return got[0]
}

// wantChild fails unless child's parent is parent.
func wantChild(t *testing.T, what string, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Errorf("%s: %q (parent %s) is not a child of %q (%s)", what, child.Name, child.Parent.SpanID(), parent.Name, parent.SpanContext.SpanID())
	}
}

// traceparentOf is the traceparent naming span s.
func traceparentOf(s tracetest.SpanStub) string { return message.TraceOf(s.SpanContext).Parent }

// TestTracingFollowsAMessage: with a tracer provider, one publish to a room
// with a PUSH and a PULL subscription, whose endpoint fails the first
// attempt, is one trace under the publisher's traceparent: the publish
// request, the event's create span, a send per copy, and for the push copy a
// process span per attempt with its POST, the retry sent under the first;
// the endpoint receives the traceparent of each POST. The pull request's
// span links to the pull copy's send. Real Artemis and PostgreSQL.
func TestTracingFollowsAMessage(t *testing.T) {
	brokerURL := apptest.RealBroker(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pushQueue := apptest.UniquePushQueue(t)
	c := apptest.StartService(t, map[string]string{
		"BROKER_URL": brokerURL, "DATABASE_URL": storetest.PostgresSchemaURL(t),
		"OUTBOX_POLL_INTERVAL": "100ms", "PUSH_QUEUE": pushQueue,
	}, app.WithTracerProvider(tp))
	pushFQQN := pushQueue + "::" + pushQueue

	hook := apptest.SequenceHook(t, http.StatusServiceUnavailable, http.StatusNoContent)
	room := apptest.UniqueRoom("traced")
	pushed := c.SetupPushRoom(room, `"deliveryDelay":50,"deliveryDelayMultiplier":1,"deliveryAttempts":3`, hook.URL())
	pulled := c.AddPullSub(room, "")
	roomID := c.Call("GET", "/v1/rooms/"+room, "", http.StatusOK)["id"].(string)

	pub := publishTraced(t, c, room, callerTrace)
	reqs := hook.WaitFor(2, 30*time.Second)
	msgs := pulled.PullN(1, 15*time.Second)
	if res := pulled.Ack(msgs[0].AckID); res[0].Status != "acked" {
		t.Fatalf("ack: %+v", res)
	}
	pushed.WaitStatuses(pub.EventID, 15*time.Second, "failed", "delivered")

	event := attribute.String("messaging.message.id", pub.EventID)
	pushSub := attribute.String("roomhub.subscription.id", pushed.ID)
	pullSub := attribute.String("roomhub.subscription.id", pulled.ID)
	attempt := func(n int) attribute.KeyValue { return attribute.Int("roomhub.attempt", n) }
	pullQueue := "room-" + roomID + "::subscription-" + pulled.ID
	var ss spans
	apitest.EventuallyWithin(t, 15*time.Second, "every span of the message ended", func() bool {
		ss = spans(exp.GetSpans())
		return len(ss.find("process "+pushFQQN)) == 2 && len(ss.find("POST")) == 2 &&
			len(ss.find("POST /v1/rooms/:roomId/subscriptions/:subscriptionId/pull", pullSub)) >= 1 &&
			len(ss.find("POST /v1/rooms/:roomId/subscriptions/:subscriptionId/ack", pullSub)) == 1
	})

	server := ss.one(t, "POST /v1/rooms/:roomId/messages")
	if server.SpanKind != trace.SpanKindServer || server.Parent.SpanID().String() != callerTrace[36:52] ||
		server.SpanContext.TraceID().String() != callerTrace[3:35] {
		t.Errorf("publish request span: kind %v, parent %s, trace %s; want a SERVER span under the caller's %s",
			server.SpanKind, server.Parent.SpanID(), server.SpanContext.TraceID(), callerTrace)
	}
	if v, _ := attrValue(server, "http.response.status_code"); v.AsInt64() != http.StatusAccepted {
		t.Errorf("publish request span: http.response.status_code %v, want 202", v.String())
	}
	create := ss.one(t, "create room-{roomId}", event, attribute.String("roomhub.room.id", roomID),
		attribute.String("roomhub.event.type", "tick"), attribute.Int("roomhub.destinations", 2),
		attribute.String("messaging.destination.name", "room-"+roomID))
	wantChild(t, "create", create, server)
	if pub.Traceparent != traceparentOf(create) {
		t.Errorf("publish answered traceparent %s, want the create span's %s", pub.Traceparent, traceparentOf(create))
	}

	// The push copy: sent, attempted (503), sent again under the first
	// attempt's process span, attempted (204).
	send1 := ss.one(t, "send "+pushFQQN, pushSub, attempt(1))
	wantChild(t, "first push send", send1, create)
	process1 := ss.one(t, "process "+pushFQQN, pushSub, attempt(1), attribute.String("roomhub.outcome", "retried"))
	wantChild(t, "first process", process1, send1)
	post1 := ss.one(t, "POST", pushSub, attempt(1))
	wantChild(t, "first POST", post1, process1)
	send2 := ss.one(t, "send "+pushFQQN, pushSub, attempt(2))
	wantChild(t, "retry send", send2, process1)
	process2 := ss.one(t, "process "+pushFQQN, pushSub, attempt(2), attribute.String("roomhub.outcome", "delivered"))
	wantChild(t, "second process", process2, send2)
	post2 := ss.one(t, "POST", pushSub, attempt(2))
	wantChild(t, "second POST", post2, process2)
	for i, p := range []tracetest.SpanStub{post1, post2} {
		wantStatus := []int{http.StatusServiceUnavailable, http.StatusNoContent}[i]
		if p.SpanKind != trace.SpanKindClient {
			t.Errorf("attempt %d: kind %v, want CLIENT", i+1, p.SpanKind)
		}
		if v, _ := attrValue(p, "http.response.status_code"); v.AsInt64() != int64(wantStatus) {
			t.Errorf("attempt %d: http.response.status_code %v, want %d", i+1, v.String(), wantStatus)
		}
		if v, _ := attrValue(p, "url.full"); v.AsString() != hook.URL() {
			t.Errorf("attempt %d: url.full %q, want %q", i+1, v.AsString(), hook.URL())
		}
		if got := reqs[i].Header.Get("traceparent"); got != traceparentOf(p) {
			t.Errorf("attempt %d: the endpoint received traceparent %q, want the POST span's %q", i+1, got, traceparentOf(p))
		}
	}
	if post1.Status.Code != codes.Error || post2.Status.Code == codes.Error {
		t.Errorf("attempt statuses %v, %v: want the 503 failed and the 204 not", post1.Status, post2.Status)
	}
	for _, s := range []tracetest.SpanStub{server, create, send1, process1, post1, send2, process2, post2} {
		if s.SpanContext.TraceID() != server.SpanContext.TraceID() {
			t.Errorf("%q is in trace %s, not the publish's", s.Name, s.SpanContext.TraceID())
		}
	}

	// The pull copy: sent under the create span; the pull that returned it
	// links to that send; its traceparent names the send.
	send := ss.one(t, "send room-{roomId}::subscription-{subscriptionId}", pullSub, attempt(1),
		attribute.String("messaging.destination.name", pullQueue))
	wantChild(t, "pull send", send, create)
	if msgs[0].Traceparent != traceparentOf(send) {
		t.Errorf("pulled traceparent %s, want the send's %s", msgs[0].Traceparent, traceparentOf(send))
	}
	var linked bool
	for _, p := range ss.find("POST /v1/rooms/:roomId/subscriptions/:subscriptionId/pull", pullSub) {
		for _, l := range p.Links {
			linked = linked || l.SpanContext.SpanID() == send.SpanContext.SpanID()
		}
	}
	if !linked {
		t.Error("no pull request span links to the pull copy's send span")
	}
}

// TestTracingOff: without the OTEL_* settings nothing makes a span (a
// provider installed globally records none), and the trace context is
// forwarded as without tracing: the caller's traceparent stored, each push
// attempt sending the caller's trace id under a span id of its own.
func TestTracingOff(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })

	c := apptest.StartService(t, map[string]string{"OUTBOX_POLL_INTERVAL": "100ms"})
	hook := apptest.SequenceHook(t, http.StatusServiceUnavailable, http.StatusNoContent)
	room := apptest.UniqueRoom("untraced")
	pushed := c.SetupPushRoom(room, `"deliveryDelay":50,"deliveryDelayMultiplier":1,"deliveryAttempts":3`, hook.URL())
	pub := publishTraced(t, c, room, callerTrace)
	reqs := hook.WaitFor(2, 30*time.Second)
	pushed.WaitStatuses(pub.EventID, 15*time.Second, "failed", "delivered")

	if pub.Traceparent != callerTrace {
		t.Errorf("publish answered traceparent %s, want the caller's %s", pub.Traceparent, callerTrace)
	}
	seen := map[string]bool{callerTrace[36:52]: true}
	for i, r := range reqs {
		tp := r.Header.Get("traceparent")
		if len(tp) != 55 || tp[3:35] != callerTrace[3:35] || seen[tp[36:52]] {
			t.Errorf("attempt %d sent traceparent %q: want the caller's trace id with a span id of its own", i+1, tp)
		}
		seen[tp[36:52]] = true
	}
	if got := exp.GetSpans(); len(got) != 0 {
		t.Errorf("%d spans recorded with tracing off, the first %q", len(got), got[0].Name)
	}
}

// collector is an OTLP/HTTP endpoint that keeps what it receives.
type collector struct {
	mu     sync.Mutex
	bodies [][]byte
	types  []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	if r.URL.Path == "/v1/traces" {
		c.bodies = append(c.bodies, body)
		c.types = append(c.types, r.Header.Get("Content-Type"))
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// received reports whether a body it received holds s.
func (c *collector) received(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bodies {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// TestTracingExportsOTLP: OTEL_EXPORTER_OTLP_ENDPOINT alone turns tracing
// on, and the service sends its spans there over OTLP/HTTP (protobuf) with
// the service name of OTEL_SERVICE_NAME; what is still buffered when the
// service stops is flushed. The access log line names the request's trace.
// The embedded broker and SQLite.
func TestTracingExportsOTLP(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	room := apptest.UniqueRoom("exported")
	// Registered before the service, so it runs after the service stopped.
	t.Cleanup(func() {
		col.mu.Lock()
		n, types := len(col.bodies), col.types
		col.mu.Unlock()
		if n == 0 {
			t.Fatal("the collector received no spans")
		}
		if types[0] != "application/x-protobuf" {
			t.Errorf("Content-Type %q, want application/x-protobuf", types[0])
		}
		for _, want := range []string{"create room-{roomId}", "POST /v1/rooms/:roomId/messages", "orders-api"} {
			if !col.received(want) {
				t.Errorf("the collector never received %q", want)
			}
		}
	})
	c, logs := apptest.StartServiceLogs(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_SERVICE_NAME": "orders-api", "LOG_LEVEL": "info",
	})
	c.Call("POST", "/v1/rooms", `{"identifier":"`+room+`","managerIdentifier":"m"}`, http.StatusCreated)
	c.Call("POST", "/v1/rooms/"+room+"/event-types", `{"identifier":"tick"}`, http.StatusCreated)
	c.Call("POST", "/v1/rooms/"+room+"/event-types/tick/versions", `{"schema":true}`, http.StatusCreated)
	pub := publishTraced(t, c, room, callerTrace)
	if pub.Traceparent[3:35] != callerTrace[3:35] || pub.Traceparent == callerTrace {
		t.Errorf("publish answered traceparent %s: want the caller's trace with the create span's id", pub.Traceparent)
	}
	apitest.Eventually(t, "the publish's access log line with its trace id", func() bool {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(line, "route=/v1/rooms/:roomId/messages") && strings.Contains(line, "trace_id="+callerTrace[3:35]) {
				return true
			}
		}
		return false
	})
}
