package push

import (
	"context"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestResponseBody is how much of an endpoint's answer to a test event is
// read and shown.
const TestResponseBody = 1 << 10

// Tester sends the test events of POST …:test from the API process: at
// once, once, with the dispatcher's client (the SSRF guard, PUSH_TIMEOUT,
// no redirects) and its headers, signature and pushAuth, as the first
// attempt of an event of type messaging.test whose webhook-id is fresh and
// whose trace is new. Nothing is stored, logged as a delivery or retried.
type Tester struct {
	client *http.Client
	now    func() time.Time
	rand   func() uint64
}

var _ subscriptions.TestSender = (*Tester)(nil)

// NewTester returns a Tester sending with client (NewHTTPClient's).
func NewTester(client *http.Client, now func() time.Time) *Tester {
	return &Tester{client: client, now: now, rand: rand.Uint64}
}

// SendTest implements subscriptions.TestSender.
func (t *Tester) SendTest(ctx context.Context, sub subscriptions.Subscription, ev subscriptions.TestEvent) subscriptions.TestResult {
	id := ev.ID.String()
	r := newRequest(sub, pushEvent{
		ID: id, Type: subscriptions.TestEventType, Version: 1, CorrelationID: id, Attempt: 1,
		Trace: message.TraceFrom("", nil, t.rand),
	}, ev.Payload, ev.SentAt)
	out := post(ctx, t.client, r, TestResponseBody, t.now)
	return subscriptions.TestResult{Outcome: out.Result.String(), StatusCode: out.StatusCode, Latency: out.Latency, Body: out.Body, Error: out.Err}
}
