// Package apptest is the one harness of the HTTP tests: an API over a fresh
// database whose every answer is checked against openapi.yaml (New), and the
// whole service run as it is deployed (StartService, StartProcess). Feature
// packages test their routes through it, so a test exercises the same
// wiring, authentication and error mapping as production.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/netguard"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/push"
	"github.com/roomhub/messaging-api/seal"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
	"github.com/roomhub/messaging-api/subscriptions"
)

// RepoRoot is the directory of go.mod, found from the working directory
// (a test runs in its package's directory).
func RepoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("apptest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Spec is openapi.yaml, loaded once.
var Spec = sync.OnceValues(func() (routers.Router, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join(RepoRoot(), "openapi.yaml"))
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	doc.Servers = openapi3.Servers{{URL: "http://api.test"}}
	return gorillamux.NewRouter(doc)
})

// LoopbackCIDRs is PUSH_ALLOWED_CIDRS of tests: their webhook receivers
// listen on loopback, which the SSRF guard refuses unless allowed.
const LoopbackCIDRs = "127.0.0.0/8,::1/128"

// LoopbackTarget is the push target guard of tests: loopback allowed.
func LoopbackTarget() netguard.Guard {
	allow, err := netguard.ParseAllow(LoopbackCIDRs)
	if err != nil {
		panic(err)
	}
	return netguard.Guard{Allow: allow}
}

// Queues stands in for the broker where a test only needs the API: it
// records the queues the API asks for, and can be down.
type Queues struct {
	mu      sync.Mutex
	created []broker.Destination
	deleted []broker.Destination
	down    bool
}

// SetDown makes the broker unreachable (true) or reachable again.
func (f *Queues) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// Created is the queues created so far.
func (f *Queues) Created() []broker.Destination {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]broker.Destination(nil), f.created...)
}

// Deleted is the queues deleted so far.
func (f *Queues) Deleted() []broker.Destination {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]broker.Destination(nil), f.deleted...)
}

func (f *Queues) EnsureQueue(_ context.Context, d broker.Destination) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return broker.ErrClosed
	}
	f.created = append(f.created, d)
	return nil
}

func (f *Queues) DeleteQueue(_ context.Context, d broker.Destination) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, d)
	return nil
}

func (f *Queues) Subscribe(context.Context, broker.Destination, broker.SubscribeOptions) (broker.Subscription, error) {
	return nil, errors.New("the fake broker has no messages")
}

func (f *Queues) Connected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.down
}

// IdleRelay stands in for the outbox relay where a test sends nothing.
type IdleRelay struct{}

func (IdleRelay) Notify()                                {}
func (IdleRelay) Healthy() error                         { return nil }
func (IdleRelay) Reserve(int) (outbox.Lease, bool)       { return outbox.Lease{}, false }
func (IdleRelay) Unreserve(int)                          {}
func (IdleRelay) HandOff(outbox.Lease, []outbox.Pending) {}

// API is a running HTTP API over a fresh database whose every answer is
// checked against openapi.yaml.
type API struct {
	T      *testing.T
	URL    string
	Queues *Queues
	DB     *store.DB
}

// PushAuthKey is PUSH_AUTH_KEY of tests (made with openssl rand -base64 32).
const PushAuthKey = "3q0m1Xp6l2B1mJvZ4Qd3c8kq8m0yq2l2Xq7y0n3b9xU="

// Config is the API's configuration in tests: loopback push targets
// allowed, push credentials sealed with PushAuthKey, authentication off
// (tests of authorization turn it on) and the default limits.
func Config() app.Config {
	key, err := seal.ParseKey(PushAuthKey)
	if err != nil {
		panic(err)
	}
	return app.Config{
		HTTP:             app.HTTPConfig{BodyLimit: 64 << 10},
		PushQueue:        broker.Destination{Address: "messaging.push", Queue: "messaging.push"},
		Push:             push.DefaultConfig(broker.Destination{Address: "messaging.push", Queue: "messaging.push"}),
		PushAuth:         app.PushAuthConfig{Key: key},
		PushTestInterval: subscriptions.DefaultTestInterval,
		PushTarget:       LoopbackTarget(),
		Auth:             app.AuthConfig{Disabled: true},
		Limits:           app.LimitsConfig{MaxPayload: 256 << 10, MaxRoomSubscriptions: 1000},
		// As deployed: publishing reads rooms and subscriptions through the cache.
		CatalogCacheTTL: time.Second,
	}
}

// New is an API over a fresh database of dialect d with Config.
func New(t *testing.T, d store.Dialect) *API {
	t.Helper()
	return NewConfig(t, d, Config())
}

// NewConfig is New with its own configuration.
func NewConfig(t *testing.T, d store.Dialect, cfg app.Config) *API {
	t.Helper()
	return Serve(t, storetest.Open(t, d), &Queues{}, IdleRelay{}, cfg)
}

// Serve runs the API of cfg over db, q and relay.
func Serve(t *testing.T, db *store.DB, q *Queues, relay app.RelayState, cfg app.Config) *API {
	t.Helper()
	h, _ := app.NewHandler(cfg, slog.New(slog.DiscardHandler), db, q, relay, true, metrics.New(metrics.Options{RoomLabel: cfg.Metrics.RoomLabel}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &API{T: t, URL: srv.URL, Queues: q, DB: db}
}

// ForEachDialect runs f, in parallel, against an API over SQLite and one
// over PostgreSQL.
func ForEachDialect(t *testing.T, f func(t *testing.T, a *API)) {
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			f(t, New(t, d))
		})
	}
}

// Response is an HTTP answer, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, r.Body)
	}
	return m
}

// Decode decodes r's body into the response type T, failing on fields T does
// not have.
func Decode[T any](t testing.TB, r Response) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("response is not a %T: %v: %s", v, err, r.Body)
	}
	return v
}

// Do sends a request (body: nil, a string sent as is, or a value encoded as
// JSON) and checks the answer against the spec.
func (a *API) Do(method, path string, body any) Response {
	a.T.Helper()
	return a.DoHeaders(method, path, body, nil)
}

// DoHeaders is Do with extra request headers.
func (a *API) DoHeaders(method, path string, body any, headers map[string]string) Response {
	a.T.Helper()
	raw := encodeBody(a.T, body)
	h := map[string]string{}
	if raw != nil {
		h["Content-Type"] = "application/json"
	}
	for k, v := range headers {
		h[k] = v
	}
	r := a.Send(method, path, raw, h)
	a.CheckSpec(method, path, raw, r)
	return r
}

func encodeBody(t testing.TB, body any) []byte {
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return []byte(b)
	case []byte:
		return b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
}

// Send sends body as it is with exactly headers, and checks nothing.
func (a *API) Send(method, path string, body []byte, headers map[string]string) Response {
	a.T.Helper()
	return send(a.T, a.URL, method, path, body, headers)
}

func send(t testing.TB, base, method, path string, body []byte, headers map[string]string) Response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: out}
}

// CheckSpec fails the test when r is not what openapi.yaml says the route
// answers: an undocumented status, or a body off its schema.
func (a *API) CheckSpec(method, path string, reqBody []byte, r Response) {
	a.T.Helper()
	if err := CheckSpec(method, path, reqBody, r); err != nil {
		a.T.Error(err)
	}
}

// CheckSpec says how r differs from what openapi.yaml says the route
// answers (nil when it does not).
func CheckSpec(method, path string, reqBody []byte, r Response) error {
	router, err := Spec()
	if err != nil {
		return fmt.Errorf("openapi.yaml: %w", err)
	}
	// /readyz reports its checks as plain JSON on 503 too: probes read it.
	if r.Status >= 400 && path != "/readyz" && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
		return fmt.Errorf("%s %s: error %d has Content-Type %q, want application/problem+json", method, path, r.Status, r.Header.Get("Content-Type"))
	}
	if r.Status >= 400 && path != "/readyz" && method != http.MethodHead {
		if err := apitest.CheckProblem(r.Status, r.Body); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	req, _ := http.NewRequestWithContext(context.Background(), method, "http://api.test"+path, bytes.NewReader(reqBody))
	if reqBody != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		if r.Status == http.StatusNotFound || r.Status == http.StatusMethodNotAllowed {
			return nil // a route the spec does not have either
		}
		return fmt.Errorf("%s %s: not in openapi.yaml: %w", method, path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 r.Status,
		Header:                 r.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(r.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s: response %d does not match openapi.yaml: %w\nbody: %s", method, path, r.Status, err, r.Body)
	}
	return nil
}

// Want fails unless r has status code.
func Want(t testing.TB, r Response, code int) {
	t.Helper()
	if r.Status != code {
		t.Fatalf("status %d, want %d; body: %s", r.Status, code, r.Body)
	}
}
