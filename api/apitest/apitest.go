// Package apitest holds what tests of several features share: checks of
// HTTP answers, Eventually, the one way a test waits for something that
// happens in the background, and Clock, a fake clock.
package apitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/roomhub/messaging-api/api"
)

// CheckStatus fails t unless the answer's status is one of want and, for an
// error, the body is a problem document with that status whose field errors
// (required on a 422) each name a field and say what is wrong.
func CheckStatus(t testing.TB, rec *httptest.ResponseRecorder, want ...int) {
	t.Helper()
	if !slices.Contains(want, rec.Code) {
		t.Fatalf("status %d (want one of %v): %s", rec.Code, want, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	if ct := rec.Header().Get(echo.HeaderContentType); ct != api.ProblemContentType {
		t.Fatalf("status %d with Content-Type %q", rec.Code, ct)
	}
	if err := CheckProblem(rec.Code, rec.Body.Bytes()); err != nil {
		t.Fatal(err)
	}
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem %q: %v", rec.Body, err)
	}
	if rec.Code == http.StatusUnprocessableEntity && len(p.Errors) == 0 {
		t.Fatalf("422 names no field: %s", rec.Body)
	}
	for _, fe := range p.Errors {
		if fe.Field == "" || fe.Message == "" {
			t.Fatalf("field error without field or message: %s", rec.Body)
		}
	}
}

// CheckProblem says how body, the problem document of an answer with
// status, is not one of a kind of api.Kinds: its code a kind's, its type
// that kind's type URI, its status and title the kind's (nil when it is).
// Every harness runs it on every problem answer, so a problem of a kind
// outside the table (about:blank included) fails the test that met it.
func CheckProblem(status int, body []byte) error {
	var p api.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("problem %d is not JSON: %w: %s", status, err, body)
	}
	k := api.KindOf(p.Code)
	switch {
	case k == nil:
		return fmt.Errorf("problem %d has code %q, which is no kind of api.Kinds: %s", status, p.Code, body)
	case p.Type != k.Type() || p.Status != status || k.Status != status || p.Title != k.Title:
		return fmt.Errorf("problem %d: type %q, status %d, title %q; kind %s is type %q, status %d, title %q: %s",
			status, p.Type, p.Status, p.Title, k.Code, k.Type(), k.Status, k.Title, body)
	}
	return nil
}

// EventuallyTimeout bounds how long Eventually waits: long enough for a slow
// CI machine, short enough that a failure does not hang the run.
const EventuallyTimeout = 10 * time.Second

// Eventually polls cond until it holds and fails t, naming what, if it does
// not within EventuallyTimeout. It shows that something happens; to show that
// something does not, assert right after the synchronous call that would have
// done it, or drive an injected clock: a sleep proves nothing.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, EventuallyTimeout, what, cond)
}

// EventuallyWithin is Eventually with its own bound, for what takes longer
// by design (a retry schedule, a broker's redelivery).
func EventuallyWithin(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Clock is a fake clock the test moves; Now is its time function.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
