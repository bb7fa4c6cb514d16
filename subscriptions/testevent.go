package subscriptions

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
)

// TestEventType is the event type of the test events POST …:test sends.
const TestEventType = "messaging.test"

// DefaultTestInterval is how often one subscription may be sent a test
// event when Deps.TestInterval is 0.
const DefaultTestInterval = 5 * time.Second

// maxTestsInFlight bounds the test events one process sends at once, so
// that the API cannot be turned into a source of requests at any rate
// however many subscriptions a caller makes.
const maxTestsInFlight = 8

// ErrTestNotPush refuses a test event to a PULL subscription.
var ErrTestNotPush = fmt.Errorf("only PUSH subscriptions can be sent a test event: a PULL subscription's messages wait in its queue: %w", api.ErrInvalidState)

// TestEvent is one test event for a subscription: not an event of its
// room, never stored, logged as a delivery or retried.
type TestEvent struct {
	ID     uuid.UUID // the webhook-id, fresh for each test
	SentAt time.Time
	// Payload is the body: {"test": true, "subscriptionId": …, "roomId": …,
	// "sentAt": …}.
	Payload []byte
}

// TestResult is what became of a test event.
type TestResult struct {
	// Outcome is what a real push would make of the answer: "delivered",
	// "retryable" or "permanent".
	Outcome    string
	StatusCode int // 0 when no response came
	Latency    time.Duration
	Body       string // the start of the response body, credentials masked
	Error      string // why it was not delivered, credentials masked
}

// TestSender sends a test event to a PUSH subscription's endpoint as the
// dispatcher sends a message: signed, authenticated with its pushAuth,
// under the same target rules, timeout and response cap (push.Tester is
// one).
type TestSender interface {
	SendTest(ctx context.Context, s Subscription, ev TestEvent) TestResult
}

// testLimits bounds one process's test events: one per subscription per
// interval, and maxTestsInFlight at once.
type testLimits struct {
	interval time.Duration
	slots    chan struct{}

	mu   sync.Mutex
	last map[uuid.UUID]time.Time
}

func newTestLimits(interval time.Duration) *testLimits {
	if interval <= 0 {
		interval = DefaultTestInterval
	}
	return &testLimits{interval: interval, slots: make(chan struct{}, maxTestsInFlight), last: map[uuid.UUID]time.Time{}}
}

// take admits a test of subscription id at now, or says when to retry;
// release frees its slot once it is over.
func (l *testLimits) take(id uuid.UUID, now time.Time) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if wait := l.last[id].Add(l.interval).Sub(now); wait > 0 {
		return nil, &api.RateLimitedError{RetryAfter: wait, Detail: fmt.Sprintf(
			"a test event was sent to this subscription less than %s ago; retry after %s", l.interval, wait.Round(time.Millisecond))}
	}
	select {
	case l.slots <- struct{}{}:
	default:
		return nil, &api.RateLimitedError{RetryAfter: time.Second, Detail: fmt.Sprintf(
			"%d test events are being sent already, the most at once; retry in a second", maxTestsInFlight)}
	}
	if len(l.last) >= 10_000 {
		for k, t := range l.last {
			if now.Sub(t) >= l.interval {
				delete(l.last, k)
			}
		}
	}
	l.last[id] = now
	return func() { <-l.slots }, nil
}

// Test sends a test event to a PUSH subscription at once, from this
// process, and returns it with what came of it. It is limited to one per
// subscription per interval (a 429 otherwise); a PULL or TERMINATED
// subscription gets 409. A PAUSED one is sent it: its endpoint can be
// checked before it is resumed.
func (svc *Service) Test(ctx context.Context, roomRef, id string) (TestEvent, TestResult, error) {
	_, s, err := svc.Get(ctx, roomRef, id)
	if err != nil {
		return TestEvent{}, TestResult{}, err
	}
	switch {
	case s.Type != TypePush:
		return TestEvent{}, TestResult{}, ErrTestNotPush
	case s.Status == StatusTerminated:
		return TestEvent{}, TestResult{}, ErrTerminated
	case svc.tester == nil:
		return TestEvent{}, TestResult{}, fmt.Errorf("test events: %w: this process sends none", api.ErrUnavailable)
	}
	now := svc.now().UTC()
	release, err := svc.tests.take(s.ID, now)
	if err != nil {
		return TestEvent{}, TestResult{}, err
	}
	defer release()
	ev := TestEvent{ID: uuid.Must(uuid.NewV7()), SentAt: now}
	ev.Payload, _ = json.Marshal(struct {
		Test           bool      `json:"test"`
		SubscriptionID string    `json:"subscriptionId"`
		RoomID         string    `json:"roomId"`
		SentAt         time.Time `json:"sentAt"`
	}{true, s.ID.String(), s.RoomID.String(), now})
	return ev, svc.tester.SendTest(ctx, s, ev), nil
}
