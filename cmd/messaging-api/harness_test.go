package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
)

// spec is openapi.yaml, loaded once for every test.
var spec = sync.OnceValues(func() (routers.Router, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../openapi.yaml")
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	doc.Servers = openapi3.Servers{{URL: "http://api.test"}}
	return gorillamux.NewRouter(doc)
})

// fakeQueues records the queues the API asks for; up says whether the broker
// is reachable.
type fakeQueues struct {
	mu      sync.Mutex
	created []broker.Destination
	deleted []broker.Destination
	down    bool
}

func (f *fakeQueues) EnsureQueue(_ context.Context, d broker.Destination) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return broker.ErrClosed
	}
	f.created = append(f.created, d)
	return nil
}

func (f *fakeQueues) DeleteQueue(_ context.Context, d broker.Destination) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, d)
	return nil
}

func (f *fakeQueues) Subscribe(context.Context, broker.Destination, broker.SubscribeOptions) (broker.Subscription, error) {
	return nil, errors.New("the fake broker has no messages")
}

func (f *fakeQueues) Connected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.down
}

// idleRelay stands in for the outbox relay where a test sends nothing.
type idleRelay struct{}

func (idleRelay) Notify()                                {}
func (idleRelay) Healthy() error                         { return nil }
func (idleRelay) Reserve(int) (outbox.Lease, bool)       { return outbox.Lease{}, false }
func (idleRelay) Unreserve(int)                          {}
func (idleRelay) HandOff(outbox.Lease, []outbox.Pending) {}

// testAPI is a running server over a fresh database whose every response is
// checked against openapi.yaml.
type testAPI struct {
	t      *testing.T
	srv    *httptest.Server
	queues *fakeQueues
	db     *store.DB
}

// testConfig is the API's configuration in tests: loopback push targets
// allowed, authentication off (the authorization tests turn it on) and the
// default limits.
func testConfig() Config {
	return Config{
		HTTP:       HTTPConfig{BodyLimit: 64 << 10},
		PushQueue:  broker.Destination{Address: "messaging.push", Queue: "messaging.push"},
		PushTarget: loopbackTarget(),
		Auth:       AuthConfig{Disabled: true},
		Limits:     LimitsConfig{MaxPayload: 256 << 10, MaxRoomSubscriptions: 1000},
		// As deployed: publishing reads rooms and subscriptions through the cache.
		CatalogCacheTTL: time.Second,
	}
}

func newTestAPI(t *testing.T, d store.Dialect) *testAPI {
	t.Helper()
	return newTestAPIConfig(t, d, testConfig())
}

// newTestAPIConfig is newTestAPI with its own configuration.
func newTestAPIConfig(t *testing.T, d store.Dialect, cfg Config) *testAPI {
	t.Helper()
	db := storetest.Open(t, d)
	q := &fakeQueues{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(newServer(cfg, logger, db, q, idleRelay{}, true))
	t.Cleanup(srv.Close)
	return &testAPI{t: t, srv: srv, queues: q, db: db}
}

// forEachDialect runs f against SQLite and PostgreSQL.
func forEachDialect(t *testing.T, f func(t *testing.T, a *testAPI)) {
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			f(t, newTestAPI(t, d))
		})
	}
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r response) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, r.Body)
	}
	return m
}

// do sends a request (body: nil, a string sent as is, or a value encoded as
// JSON) and validates the response against the spec.
func (a *testAPI) do(method, path string, body any) response {
	a.t.Helper()
	return a.doHeaders(method, path, body, nil)
}

// doHeaders is do with extra request headers.
func (a *testAPI) doHeaders(method, path string, body any, headers map[string]string) response {
	a.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			a.t.Fatal(err)
		}
	}
	h := map[string]string{}
	if raw != nil {
		h["Content-Type"] = "application/json"
	}
	for k, v := range headers {
		h[k] = v
	}
	r := a.send(method, path, raw, h)
	a.checkSpec(method, path, raw, r)
	return r
}

// send sends body as it is with exactly headers, and checks nothing.
func (a *testAPI) send(method, path string, body []byte, headers map[string]string) response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: out}
}

// checkSpec fails the test when the response is not what openapi.yaml says
// the route answers: an undocumented status, or a body off its schema.
func (a *testAPI) checkSpec(method, path string, reqBody []byte, r response) {
	a.t.Helper()
	router, err := spec()
	if err != nil {
		a.t.Fatalf("openapi.yaml: %v", err)
	}
	// /readyz reports its checks as plain JSON on 503 too: probes read it.
	if r.Status >= 400 && path != "/readyz" && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
		a.t.Errorf("%s %s: error %d has Content-Type %q, want application/problem+json", method, path, r.Status, r.Header.Get("Content-Type"))
	}
	req, _ := http.NewRequest(method, "http://api.test"+path, bytes.NewReader(reqBody))
	if reqBody != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		if r.Status == http.StatusNotFound || r.Status == http.StatusMethodNotAllowed {
			return // a route the spec does not have either
		}
		a.t.Errorf("%s %s: not in openapi.yaml: %v", method, path, err)
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 r.Status,
		Header:                 r.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(r.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		a.t.Errorf("%s %s: response %d does not match openapi.yaml: %v\nbody: %s", method, path, r.Status, err, r.Body)
	}
}

// want fails unless r has status code.
func want(t *testing.T, r response, code int) {
	t.Helper()
	if r.Status != code {
		t.Fatalf("status %d, want %d; body: %s", r.Status, code, r.Body)
	}
}
