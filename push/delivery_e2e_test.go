package push_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/publish"
)

// The tests of this file run the whole service (apptest.StartService: the
// embedded broker, SQLite) and watch what its dispatcher sends to webhook
// receivers of their own.

// pushEmbeddedTolerance is how much later than planned a retry may reach
// the receiver with the embedded broker: the planned delay runs from the end
// of the failed attempt and the gap is measured between the receiver's own
// arrival times, so it adds the failed response's round trip, the SQLite
// write of the outcome and the broker hand-off. Measured with -race on 2
// cores: +1 to +5 ms with the timing tests alone, up to +66 ms beside the
// heavy tests of this file, which is why they do not run in parallel with
// those. Never early.
const pushEmbeddedTolerance = 100 * time.Millisecond

// startService runs the service with the embedded broker and SQLite.
func startService(t *testing.T) apptest.Client {
	t.Helper()
	return apptest.StartService(t, map[string]string{"OUTBOX_POLL_INTERVAL": "100ms"})
}

// overwritten reports a log row that completed but says "sent": the outbox
// relay's MarkSent overwrote the dispatcher's outcome.
func overwritten(status string, completedAt *time.Time) bool {
	return status == "sent" && completedAt != nil
}

// timeline returns the attempts the message log shows for event's only
// delivery.
func timeline(c apptest.Client, room, event string) []publish.AttemptResponse {
	c.T.Helper()
	var ev publish.EventResponse
	c.CallJSON("GET", "/v1/rooms/"+room+"/messages/"+event, "", http.StatusOK, &ev)
	if len(ev.Deliveries) != 1 || ev.Deliveries[0].SubscriptionType != "PUSH" {
		c.T.Fatalf("event %s has deliveries %+v, want one PUSH delivery", event, ev.Deliveries)
	}
	return ev.Deliveries[0].Attempts
}

// code is a status code the API may leave out, 0 when it does.
func code(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// checkRetryGap fails unless got is within [planned-5ms, planned+tolerance].
func checkRetryGap(t *testing.T, what string, got, planned, tolerance time.Duration) {
	t.Helper()
	t.Logf("%s: planned %v, observed %v (%+v)", what, planned, got.Round(time.Millisecond), (got - planned).Round(time.Millisecond))
	if got < planned-5*time.Millisecond || got > planned+tolerance {
		t.Errorf("%s: observed %v, want %v (-5ms, +%v)", what, got, planned, tolerance)
	}
}

// verifiedSignatures counts the entries of a webhook-signature header that
// verify with secret, computed from the Standard Webhooks spec: base64
// HMAC-SHA256, keyed with the base64-decoded secret after "whsec_", over
// "${webhook-id}.${webhook-timestamp}.${body}".
func verifiedSignatures(t *testing.T, secret string, r apptest.PushRequest) int {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("secret: %v", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(r.Header.Get("Webhook-Id") + "." + r.Header.Get("Webhook-Timestamp") + "."))
	mac.Write(r.Body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	n := 0
	for _, sig := range strings.Fields(r.Header.Get("Webhook-Signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			n++
		}
	}
	return n
}

// TestPushRetryBackoff: a receiver failing twice then answering 200 gets the
// message three times, the retries spaced by deliveryDelay × multiplier^k,
// and the delivery log and the message timeline record each attempt.
func TestPushRetryBackoff(t *testing.T) {
	h := apptest.SequenceHook(t, 500, 500, 200)
	c := startService(t)
	sub := c.SetupPushRoom("backoff", `"deliveryDelay":100,"deliveryDelayMultiplier":2,"deliveryAttempts":5`, h.URL())

	ev := c.Publish("backoff", `{"eventType":"tick","payload":{"n":1}}`)
	reqs := h.WaitFor(3, 10*time.Second)
	checkRetryGap(t, "gap after attempt 1", reqs[1].At.Sub(reqs[0].At), 200*time.Millisecond, pushEmbeddedTolerance) // 100 × 2^1
	checkRetryGap(t, "gap after attempt 2", reqs[2].At.Sub(reqs[1].At), 400*time.Millisecond, pushEmbeddedTolerance) // 100 × 2^2

	ds := sub.WaitStatuses(ev.EventID, 5*time.Second, "failed", "failed", "delivered")
	wantCodes := []int{500, 500, 200}
	wantDelays := []int64{0, 200, 400}
	for i, d := range ds {
		if d.Attempt != i+1 || code(d.StatusCode) != wantCodes[i] || d.ScheduledDelay != wantDelays[i] {
			t.Errorf("delivery %d: attempt %d, status code %d, scheduled delay %d; want %d, %d, %d",
				i, d.Attempt, code(d.StatusCode), d.ScheduledDelay, i+1, wantCodes[i], wantDelays[i])
		}
		if d.CorrelationID != ev.CorrelationID {
			t.Errorf("delivery %d: correlation id %q, want %q", i, d.CorrelationID, ev.CorrelationID)
		}
		if d.CompletedAt == nil {
			t.Errorf("delivery %d has no completedAt", i)
		}
		switch {
		case d.Status == "failed" && d.NextAttemptAt == nil:
			t.Errorf("failed delivery %d has no nextAttemptAt", i)
		case d.Status == "failed" && d.CompletedAt != nil:
			// The next attempt is planned from the end of this one.
			if got, want := d.NextAttemptAt.Sub(*d.CompletedAt), time.Duration(ds[i+1].ScheduledDelay)*time.Millisecond; got != want {
				t.Errorf("delivery %d: nextAttemptAt is %v after completedAt, want %v", i, got, want)
			}
		case d.Status == "delivered" && d.NextAttemptAt != nil:
			t.Errorf("the delivered attempt has nextAttemptAt %v", d.NextAttemptAt)
		}
	}

	tl := timeline(c, "backoff", ev.EventID)
	if len(tl) != 3 {
		t.Fatalf("timeline has %d attempts, want 3: %+v", len(tl), tl)
	}
	for i, a := range tl {
		wantStatus := []string{"failed", "failed", "delivered"}[i]
		if a.Attempt != i+1 || string(a.Status) != wantStatus || code(a.StatusCode) != wantCodes[i] || a.ScheduledDelay != wantDelays[i] {
			t.Errorf("timeline attempt %d: %+v; want attempt %d %s %d after %d ms", i, a, i+1, wantStatus, wantCodes[i], wantDelays[i])
		}
	}
	if n := h.Count(); n != 3 {
		t.Errorf("the hook received %d requests, want 3", n)
	}
}

// TestPushAttemptsExhaustedAndReplay: a receiver that always fails gets
// exactly deliveryAttempts requests, then the message is a dead letter that
// can be replayed (one, all, or by id) and deleted.
func TestPushAttemptsExhaustedAndReplay(t *testing.T) {
	t.Parallel()
	h, hookStatus := apptest.StatusHook(t, 500)
	c := startService(t)
	sub := c.SetupPushRoom("exhaust", `"deliveryDelay":20,"deliveryDelayMultiplier":1,"deliveryAttempts":3`, h.URL())

	ev := c.Publish("exhaust", `{"eventType":"tick","payload":{"n":1},"correlationId":"exhaust-1","attributes":{"tenant":"acme"}}`)
	h.WaitFor(3, 10*time.Second)
	dl := sub.WaitDeadLetters(1, 5*time.Second)[0]
	if dl.Reason != "attempts_exhausted" || dl.Attempts != 3 || code(dl.LastStatusCode) != 500 {
		t.Errorf("dead letter: reason %q, attempts %d, last status %d; want attempts_exhausted, 3, 500", dl.Reason, dl.Attempts, code(dl.LastStatusCode))
	}
	if dl.EventID != ev.EventID || dl.CorrelationID != "exhaust-1" || dl.EventType != "tick" ||
		string(dl.Payload) != `{"n":1}` || dl.Attributes["tenant"] != "acme" {
		t.Errorf("dead letter does not carry the event: %+v", dl)
	}
	// The log ends in the dead letter: a 4th attempt would have been logged
	// before it was sent, so the hook has had every request it will get.
	sub.WaitStatuses(ev.EventID, 5*time.Second, "failed", "failed", "dead_lettered")
	if n := h.Count(); n != 3 {
		t.Fatalf("the hook received %d requests, want exactly 3", n)
	}
	c.CallJSON("GET", sub.Path()+"/dead-letters/"+dl.ID, "", 200, nil)

	// Replay one after the receiver is fixed: delivered as a new event.
	hookStatus.Store(200)
	var replay delivery.ReplayResponse
	c.CallJSON("POST", sub.Path()+"/dead-letters/"+dl.ID+":replay", "", 202, &replay)
	if len(replay.Replayed) != 1 || replay.Replayed[0].DeadLetterID != dl.ID || replay.Replayed[0].CorrelationID != "exhaust-1" {
		t.Fatalf("replay answered %+v", replay)
	}
	newID := replay.Replayed[0].EventID
	apitest.EventuallyWithin(t, 10*time.Second, "replayed delivery", func() bool { return len(h.WithID(newID)) == 1 })
	replayedReq := h.WithID(newID)[0]
	if got := replayedReq.Header.Get("X-Attempt"); got != "1" {
		t.Errorf("the replay is attempt %s, want 1", got)
	}
	if string(replayedReq.Body) != `{"n":1}` || replayedReq.Header.Get("X-Attr-Tenant") != "acme" {
		t.Errorf("the replay carries body %s and tenant %q, want the dead letter's", replayedReq.Body, replayedReq.Header.Get("X-Attr-Tenant"))
	}
	sub.WaitStatuses(newID, 5*time.Second, "delivered")
	c.CallJSON("GET", sub.Path()+"/dead-letters/"+dl.ID, "", 404, nil)
	c.CallJSON("POST", sub.Path()+"/dead-letters/"+dl.ID+":replay", "", 404, nil)
	if n := len(sub.DeadLetters()); n != 0 {
		t.Fatalf("%d dead letters left after the replay", n)
	}

	// deadLetterTwo makes two more dead letters.
	deadLetterTwo := func() []delivery.DeadLetterResponse {
		t.Helper()
		hookStatus.Store(500)
		before := h.Count()
		c.Publish("exhaust", `{"eventType":"tick","payload":{"n":2}}`)
		c.Publish("exhaust", `{"eventType":"tick","payload":{"n":3}}`)
		h.WaitFor(before+6, 10*time.Second)
		return sub.WaitDeadLetters(2, 5*time.Second)
	}

	// Bulk replay with {}: every dead letter.
	dls := deadLetterTwo()
	hookStatus.Store(200)
	c.CallJSON("POST", sub.Path()+"/dead-letters:replay", `{}`, 202, &replay)
	if len(replay.Replayed) != 2 {
		t.Fatalf("bulk replay replayed %d, want 2", len(replay.Replayed))
	}
	for _, r := range replay.Replayed {
		apitest.EventuallyWithin(t, 10*time.Second, "bulk-replayed delivery", func() bool { return len(h.WithID(r.EventID)) == 1 })
		sub.WaitStatuses(r.EventID, 5*time.Second, "delivered")
	}
	if n := len(sub.DeadLetters()); n != 0 {
		t.Fatalf("%d dead letters left after the bulk replay of %d", n, len(dls))
	}

	// Bulk replay by ids: only the one named.
	dls = deadLetterTwo()
	hookStatus.Store(200)
	c.CallJSON("POST", sub.Path()+"/dead-letters:replay", `{"ids":["`+dls[0].ID+`"]}`, 202, &replay)
	if len(replay.Replayed) != 1 || replay.Replayed[0].DeadLetterID != dls[0].ID {
		t.Fatalf("replay by id answered %+v, want only %s", replay, dls[0].ID)
	}
	apitest.EventuallyWithin(t, 10*time.Second, "replayed-by-id delivery", func() bool { return len(h.WithID(replay.Replayed[0].EventID)) == 1 })
	left := sub.DeadLetters()
	if len(left) != 1 || left[0].ID != dls[1].ID {
		t.Fatalf("dead letters left: %+v, want only %s", left, dls[1].ID)
	}
	// An id that is not a dead letter of this subscription is refused as a whole.
	c.CallJSON("POST", sub.Path()+"/dead-letters:replay", `{"ids":["`+dls[1].ID+`","`+dls[0].ID+`"]}`, 422, nil)

	// Delete: gone, and a second delete finds nothing.
	c.CallJSON("DELETE", sub.Path()+"/dead-letters/"+dls[1].ID, "", 204, nil)
	c.CallJSON("GET", sub.Path()+"/dead-letters/"+dls[1].ID, "", 404, nil)
	c.CallJSON("DELETE", sub.Path()+"/dead-letters/"+dls[1].ID, "", 404, nil)
	if n := len(sub.DeadLetters()); n != 0 {
		t.Fatalf("%d dead letters left after the delete", n)
	}
}

// TestPushPermanentFailure: a 4xx or a redirect dead-letters the message at
// once, without retrying and without following the redirect.
func TestPushPermanentFailure(t *testing.T) {
	t.Parallel()
	c := startService(t)
	tests := []struct {
		name   string
		status int
	}{
		{"unprocessable", http.StatusUnprocessableEntity},
		{"bad-request", http.StatusBadRequest},
		{"moved", http.StatusMovedPermanently},
		{"found", http.StatusFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := apptest.Client{T: t, Base: c.Base}
			target, _ := apptest.StatusHook(t, 200)
			h := apptest.NewHook(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				if tt.status >= 300 && tt.status < 400 {
					w.Header().Set("Location", target.URL())
				}
				w.WriteHeader(tt.status)
			})
			sub := c.SetupPushRoom("permanent-"+tt.name, `"deliveryDelay":20,"deliveryDelayMultiplier":1,"deliveryAttempts":5`, h.URL())
			ev := c.Publish(sub.Room, `{"eventType":"tick","payload":{}}`)
			dl := sub.WaitDeadLetters(1, 10*time.Second)[0]
			if dl.Reason != "permanent_failure" || dl.Attempts != 1 || code(dl.LastStatusCode) != tt.status || dl.EventID != ev.EventID {
				t.Errorf("dead letter: reason %q, attempts %d, last status %d; want permanent_failure, 1, %d",
					dl.Reason, dl.Attempts, code(dl.LastStatusCode), tt.status)
			}
			// Dead-lettered at once: no retry is logged, so none is coming.
			sub.WaitStatuses(ev.EventID, 5*time.Second, "dead_lettered")
			if n := h.Count(); n != 1 {
				t.Errorf("the hook received %d requests, want exactly 1", n)
			}
			if n := target.Count(); n != 0 {
				t.Errorf("the redirect target got %d requests", n)
			}
		})
	}
}

// TestPushRetryAfter: Retry-After on 429 and 503 pushes the next attempt
// past the policy's delay; on other statuses it is ignored.
//
// Timing tests do not run in parallel with the heavier tests of this file.
func TestPushRetryAfter(t *testing.T) {
	c := startService(t)
	tests := []struct {
		name    string
		status  int
		planned time.Duration
	}{
		{"429", http.StatusTooManyRequests, time.Second},
		{"503", http.StatusServiceUnavailable, time.Second},
		{"500-ignored", http.StatusInternalServerError, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := apptest.Client{T: t, Base: c.Base}
			h := apptest.NewHook(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(tt.status)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			sub := c.SetupPushRoom("retry-after-"+tt.name, `"deliveryDelay":50,"deliveryDelayMultiplier":1,"deliveryAttempts":3`, h.URL())
			ev := c.Publish(sub.Room, `{"eventType":"tick","payload":{}}`)
			reqs := h.WaitFor(2, 10*time.Second)
			checkRetryGap(t, "gap after "+tt.name, reqs[1].At.Sub(reqs[0].At), tt.planned, pushEmbeddedTolerance)
			ds := sub.WaitStatuses(ev.EventID, 5*time.Second, "failed", "delivered")
			if ds[1].ScheduledDelay != tt.planned.Milliseconds() {
				t.Errorf("attempt 2 scheduled after %d ms, want %d", ds[1].ScheduledDelay, tt.planned.Milliseconds())
			}
		})
	}
}

// TestPushExpiry: a retry that would come after the message expires is not
// scheduled; the message becomes a dead letter (expired) instead.
func TestPushExpiry(t *testing.T) {
	h, _ := apptest.StatusHook(t, 500)
	c := startService(t)
	// The seed example (expiration 400 ms, delay 150 ms) scaled by 2.5, so
	// that attempt 1 may come up to 400 ms after publishing (not 100 ms)
	// and attempt 2 still falls before the expiry on a loaded machine.
	sub := c.SetupPushRoom("expiry",
		`"messageExpiration":1000,"deliveryDelay":300,"deliveryDelayMultiplier":2,"deliveryAttempts":5`, h.URL())
	ev := c.Publish("expiry", `{"eventType":"tick","payload":{}}`)
	if ev.ExpiresAt == nil || ev.ExpiresAt.Sub(ev.PublishedAt) != time.Second {
		t.Fatalf("publish answered expiresAt %v for publishedAt %v, want 1 s later", ev.ExpiresAt, ev.PublishedAt)
	}
	// Attempt 1 at t0 fails; attempt 2 is planned 300 × 2 = 600 ms later,
	// before the expiry at 1000 ms; attempt 3 would come 300 × 2² = 1200 ms
	// after that, past it: attempt 2's failure dead-letters the message.
	reqs := h.WaitFor(2, 5*time.Second)
	t.Logf("attempt 1 came %v after publishing", reqs[0].At.Sub(ev.PublishedAt).Round(time.Millisecond))
	checkRetryGap(t, "gap after attempt 1", reqs[1].At.Sub(reqs[0].At), 600*time.Millisecond, pushEmbeddedTolerance)

	dl := sub.WaitDeadLetters(1, 5*time.Second)[0]
	if dl.Reason != "expired" || dl.Attempts != 2 || code(dl.LastStatusCode) != 500 {
		t.Errorf("dead letter: reason %q, attempts %d, last status %d; want expired, 2, 500", dl.Reason, dl.Attempts, code(dl.LastStatusCode))
	}
	ds := sub.WaitStatuses(ev.EventID, 5*time.Second, "failed", "dead_lettered")
	if !strings.Contains(ds[1].Error, "expire") {
		t.Errorf("attempt 2 error %q does not say the message would expire", ds[1].Error)
	}
	// Nothing after: attempt 3 is not planned (it would have been logged, with
	// a nextAttemptAt on attempt 2, before it was sent).
	if ds[1].NextAttemptAt != nil {
		t.Errorf("the dead-lettered attempt plans another at %v", ds[1].NextAttemptAt)
	}
	if n := h.Count(); n != 2 {
		t.Errorf("the hook received %d requests, want exactly 2", n)
	}
}

// TestPushPausedAndTerminated: a message in flight when its subscription is
// PAUSED is held (no request) until the subscription is ACTIVE again, then
// delivered; when it is TERMINATED or deleted, the message is dropped.
func TestPushPausedAndTerminated(t *testing.T) {
	t.Parallel()
	c := startService(t)
	// The retry after the first (failed) attempt comes 2.5 s later, past the
	// dispatcher's 2 s cache of subscriptions, so it sees the new status.
	const fields = `"deliveryDelay":2500,"deliveryDelayMultiplier":1,"deliveryAttempts":3`

	t.Run("paused", func(t *testing.T) {
		t.Parallel()
		c := apptest.Client{T: t, Base: c.Base}
		h := apptest.SequenceHook(t, 500, 200)
		sub := c.SetupPushRoom("paused", fields, h.URL())
		ev := c.Publish("paused", `{"eventType":"tick","payload":{}}`)
		h.WaitFor(1, 5*time.Second)
		c.Call("PATCH", sub.Path(), `{"status":"PAUSED"}`, 200)

		// The retry finds the subscription PAUSED: held (re-queued for the
		// 10 s PausedDelay), not sent, not counted as an attempt.
		ds := sub.WaitStatuses(ev.EventID, 10*time.Second, "failed", "deferred", "sent")
		if ds[1].Attempt != 2 || ds[2].Attempt != 2 || !strings.HasPrefix(ds[1].Error, "held") {
			t.Errorf("held delivery log: %+v", ds)
		}
		if n := h.Count(); n != 1 {
			t.Fatalf("the hook received %d requests while PAUSED, want 1", n)
		}
		c.Call("PATCH", sub.Path(), `{"status":"ACTIVE"}`, 200)
		reqs := h.WaitFor(2, 30*time.Second)
		if got := reqs[1].Header.Get("X-Attempt"); got != "2" {
			t.Errorf("the delivery after the hold is attempt %s, want 2", got)
		}
		if reqs[1].Header.Get("Webhook-Id") != ev.EventID {
			t.Errorf("webhook-id %s, want %s", reqs[1].Header.Get("Webhook-Id"), ev.EventID)
		}
		sub.WaitStatuses(ev.EventID, 5*time.Second, "failed", "deferred", "delivered")
	})

	for _, end := range []string{"terminated", "deleted"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			c := apptest.Client{T: t, Base: c.Base}
			h := apptest.SequenceHook(t, 500, 200)
			sub := c.SetupPushRoom(end, fields, h.URL())
			ev := c.Publish(end, `{"eventType":"tick","payload":{}}`)
			h.WaitFor(1, 5*time.Second)
			if end == "terminated" {
				c.Call("PATCH", sub.Path(), `{"status":"TERMINATED"}`, 200)
			} else {
				c.Call("DELETE", sub.Path(), "", 204)
			}
			var tl []publish.AttemptResponse
			apitest.EventuallyWithin(t, 10*time.Second, "dropped attempt in the message log", func() bool {
				tl = timeline(c, end, ev.EventID)
				return len(tl) == 2 && tl[1].Status == "dropped"
			})
			if tl[0].Status != "failed" || tl[1].Attempt != 2 {
				t.Errorf("timeline %+v, want attempt 1 failed, attempt 2 dropped", tl)
			}
			// Dropped is final: attempt 2 was never sent, and no attempt 3 is logged.
			if n := h.Count(); n != 1 {
				t.Errorf("the hook received %d requests, want exactly 1", n)
			}
		})
	}
}

// TestPushHeaders: every request carries the Standard Webhooks headers, the
// signature verifying with the secret returned at creation, and the
// message's metadata; after a rotation both secrets sign.
func TestPushHeaders(t *testing.T) {
	t.Parallel()
	h := apptest.SequenceHook(t, 500, 500, 200)
	c := startService(t)
	sub := c.SetupPushRoom("headers", `"deliveryDelay":50,"deliveryDelayMultiplier":1,"deliveryAttempts":3`, h.URL())
	ev := c.Publish("headers", `{"eventType":"tick","payload":{"orderId":"A-1"},"correlationId":"order-42",`+
		`"attributes":{"tenant":"acme","region.code":"eu-1","Shard_no":"7"}}`)
	if ev.CorrelationID != "order-42" {
		t.Fatalf("publish answered correlation id %q", ev.CorrelationID)
	}
	reqs := h.WaitFor(3, 10*time.Second)
	for i, r := range reqs {
		want := map[string]string{
			"Webhook-Id":         ev.EventID,
			"X-Attempt":          strconv.Itoa(i + 1),
			"X-Correlation-Id":   "order-42",
			"X-Event-Type":       "tick",
			"X-Event-Version":    "1",
			"X-Event-Id":         ev.EventID,
			"X-Subscription-Id":  sub.ID,
			"X-Attr-Tenant":      "acme",
			"X-Attr-Region.code": "eu-1",
			"X-Attr-Shard_no":    "7",
			"Content-Type":       "application/json",
		}
		for k, v := range want {
			if got := r.Header.Get(k); got != v {
				t.Errorf("request %d: %s = %q, want %q", i+1, k, got, v)
			}
		}
		if string(r.Body) != `{"orderId":"A-1"}` {
			t.Errorf("request %d: body %s", i+1, r.Body)
		}
		ts, err := strconv.ParseInt(r.Header.Get("Webhook-Timestamp"), 10, 64)
		if err != nil {
			t.Errorf("request %d: webhook-timestamp %q: %v", i+1, r.Header.Get("Webhook-Timestamp"), err)
		} else if d := r.At.Sub(time.Unix(ts, 0)); d < -time.Second || d > 2*time.Second {
			t.Errorf("request %d: webhook-timestamp is %v off its arrival", i+1, d)
		}
		if n := verifiedSignatures(t, sub.Secret, r); n != 1 || len(strings.Fields(r.Header.Get("Webhook-Signature"))) != 1 {
			t.Errorf("request %d: webhook-signature %q: %d verify with the subscription's secret, want the only one",
				i+1, r.Header.Get("Webhook-Signature"), n)
		}
	}

	// Rotation. A subscription that has had no delivery yet, so the
	// dispatcher's short cache of subscriptions cannot hold its old secret.
	rh, _ := apptest.StatusHook(t, 200)
	rsub := c.AddPushSub("headers", "rotated", rh.URL())
	var rotated struct {
		SigningSecret string `json:"signingSecret"`
	}
	c.CallJSON("POST", rsub.Path()+"/secret:rotate", "", 200, &rotated)
	if !strings.HasPrefix(rotated.SigningSecret, "whsec_") || rotated.SigningSecret == rsub.Secret {
		t.Fatalf("rotation answered secret %q, want a new whsec_ secret", rotated.SigningSecret)
	}
	c.Publish("headers", `{"eventType":"rotated","payload":{}}`)
	r := rh.WaitFor(1, 10*time.Second)[0]
	sigs := strings.Fields(r.Header.Get("Webhook-Signature"))
	if len(sigs) != 2 {
		t.Fatalf("webhook-signature %q has %d verifiedSignatures, want 2", r.Header.Get("Webhook-Signature"), len(sigs))
	}
	if verifiedSignatures(t, rotated.SigningSecret, r) != 1 || verifiedSignatures(t, rsub.Secret, r) != 1 {
		t.Errorf("webhook-signature %q: want one signature per secret", r.Header.Get("Webhook-Signature"))
	}
	first := r
	first.Header = first.Header.Clone()
	first.Header.Set("Webhook-Signature", sigs[0])
	if verifiedSignatures(t, rotated.SigningSecret, first) != 1 {
		t.Error("the first signature is not the new secret's")
	}
}

// TestPushSlowEndpointIsolation: an endpoint that hangs holds only its own
// subscription's messages; another subscription's are delivered meanwhile.
func TestPushSlowEndpointIsolation(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var slowDone atomic.Int32
	slow := apptest.NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		slowDone.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	fast, _ := apptest.StatusHook(t, 200)
	c := startService(t)
	t.Cleanup(func() { close(release) }) // before the service stops
	slowSub := c.SetupPushRoom("isolation", "", slow.URL())
	c.AddPushSub("isolation", "fast", fast.URL())

	start := time.Now()
	errs := make(chan error, 3)
	go func() { errs <- publishBatch(c, "isolation", "tick", 50) }()
	go func() { errs <- publishBatch(c, "isolation", "fast", 100) }()
	go func() { errs <- publishBatch(c, "isolation", "fast", 100) }()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	apitest.EventuallyWithin(t, 10*time.Second, "200 distinct deliveries to the fast endpoint", func() bool {
		ids := map[string]bool{}
		for _, r := range fast.Requests() {
			ids[r.Header.Get("Webhook-Id")] = true
		}
		return len(ids) == 200
	})
	t.Logf("200 fast deliveries in %v; the slow endpoint holds %d requests", time.Since(start).Round(time.Millisecond), slow.Count())
	if slowDone.Load() != 0 {
		t.Fatal("a slow request finished: the test no longer shows isolation")
	}
	if n := slow.Count(); n == 0 || n > 16 {
		t.Errorf("the slow endpoint has %d requests hanging, want 1 to 16 (the per-subscription bound)", n)
	}
	if ds := slowSub.Deliveries(""); len(ds) < 50 {
		t.Errorf("the slow subscription's log has %d rows, want its 50 messages", len(ds))
	}
}

// publishBatch publishes n events of eventType to room in one batch.
func publishBatch(c apptest.Client, room, eventType string, n int) error {
	var msgs []string
	for i := range n {
		msgs = append(msgs, fmt.Sprintf(`{"eventType":%q,"payload":{"n":%d}}`, eventType, i))
	}
	resp, err := http.Post(c.Base+"/v1/rooms/"+room+"/messages:batch", "application/json",
		bytes.NewReader([]byte(`{"messages":[`+strings.Join(msgs, ",")+`]}`)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		raw, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("batch publish: %d: %s", resp.StatusCode, raw)
	}
	return nil
}

// TestPushSlowDeferralsComeBack: the messages of an endpoint that hangs,
// beyond what its subscription may hold in memory, are deferred (their
// copies wait in the outbox, leased for the deferral); once the endpoint
// answers again the outbox relay sends them back and each is delivered,
// as the same attempt, deferrals not counted.
func TestPushSlowDeferralsComeBack(t *testing.T) {
	t.Parallel()
	apptest.Backends(t, testPushSlowDeferralsComeBack)
}

func testPushSlowDeferralsComeBack(t *testing.T, env map[string]string) {
	release := make(chan struct{})
	hook := apptest.NewHook(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		w.WriteHeader(http.StatusOK)
	})
	// The relay polls once a minute: a parked copy comes back within this
	// test only if the dispatcher releases it (the endpoint answers quickly
	// again) and wakes the relay, as it must.
	env = maps.Clone(env)
	env["OUTBOX_POLL_INTERVAL"] = "1m"
	c := apptest.StartService(t, env)
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the service stops
	sub := c.SetupPushRoom("deferrals", "", hook.URL())
	// 16 requests hang, 64 messages wait in memory: the other 40 are deferred.
	const n = 120
	for range 2 { // a batch holds up to 100
		if err := publishBatch(c, "deferrals", "tick", n/2); err != nil {
			t.Fatal(err)
		}
	}
	deferred := map[string]bool{}
	apitest.EventuallyWithin(t, 10*time.Second, "deferrals while the endpoint hangs", func() bool {
		for _, d := range sub.Deliveries("") {
			if d.Status == "deferred" {
				deferred[d.EventID] = true
			}
		}
		return len(deferred) >= n-80
	})
	// While it hangs the deferred copies wait in the outbox, not in the
	// broker: parked while their deferral lasts (1 s for the first), then
	// owed (the backlog) until a claim; with a poll of a minute nothing
	// claims them unless a publish or a release wakes the relay.
	apitest.EventuallyWithin(t, 5*time.Second, "deferred copies in the outbox", func() bool {
		m := apptest.Scrape(t, c.Base)
		return apptest.Sum(m, "messaging_outbox_parked")+apptest.Sum(m, "messaging_outbox_backlog") > 0
	})
	open()
	opened := time.Now()
	apitest.EventuallyWithin(t, 15*time.Second, fmt.Sprintf("%d distinct deliveries", n), func() bool {
		ids := map[string]bool{}
		for _, r := range hook.Requests() {
			ids[r.Header.Get("Webhook-Id")] = true
		}
		return len(ids) == n
	})
	requests := map[string]int{}
	for _, r := range hook.Requests() {
		if a := r.Header.Get("X-Attempt"); a != "1" {
			t.Fatalf("a request has X-Attempt %s: a deferral counted as an attempt", a)
		}
		requests[r.Header.Get("Webhook-Id")]++
	}
	// No fault here: a copy sent twice (by the dispatcher and the relay, or
	// by two relays) would show as a second request.
	for id, k := range requests {
		if k != 1 {
			t.Errorf("event %s requested %d times", id, k)
		}
	}
	// Each deferred event's log: one or more deferrals (a copy that came back
	// while the endpoint still hung is deferred again), then the copy
	// delivered, all as attempt 1.
	for event := range deferred {
		var ds []delivery.DeliveryResponse
		apitest.EventuallyWithin(t, 5*time.Second, "event "+event+" delivered after its deferrals", func() bool {
			ds = sub.Deliveries(event)
			if len(ds) < 2 || ds[len(ds)-1].Status != "delivered" {
				return false
			}
			for _, d := range ds[:len(ds)-1] {
				if d.Status != "deferred" {
					return false
				}
			}
			return true
		})
		for _, d := range ds {
			if d.Attempt != 1 {
				t.Errorf("event %s: a row of attempt %d (%s), want all attempt 1", event, d.Attempt, d.Status)
			}
		}
	}
	t.Logf("%d of %d events deferred while the endpoint hung; all delivered %v after it answered", len(deferred), n,
		time.Since(opened).Round(10*time.Millisecond))
}

// TestPushLogKeepsOutcome: every delivered message's log row says delivered.
// The row of a first send is written by two parties, the outbox relay (sent,
// after the broker's receipts for its whole batch) and the dispatcher (the
// outcome); the outcome must win whichever writes last. Three subscriptions
// of one batch make relay rounds of 200 rows, so that deliveries finish
// while the relay is still sending: a MarkSent that overwrites an outcome
// fails this most runs.
func TestPushLogKeepsOutcome(t *testing.T) {
	t.Parallel()
	h, _ := apptest.StatusHook(t, 200)
	c := startService(t)
	subs := []apptest.PushSub{c.SetupPushRoom("outcome", "", h.URL())}
	for range 2 {
		subs = append(subs, c.CreatePushSub("outcome", "tick", h.URL()))
	}
	var msgs []string
	for i := range 100 {
		msgs = append(msgs, fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d}}`, i))
	}
	c.CallJSON("POST", "/v1/rooms/outcome/messages:batch", `{"messages":[`+strings.Join(msgs, ",")+`]}`, 202, nil)
	h.WaitFor(300, 20*time.Second)

	var counts map[string]int
	over, settled := 0, false
	defer func() {
		if !settled { // EventuallyWithin failed the test: say why
			t.Logf("delivery log: %v; %d rows have a completedAt but say sent: "+
				"the relay's MarkSent overwrote the dispatcher's outcome (store/events.go MarkSent)", counts, over)
		}
	}()
	var rows []delivery.DeliveryResponse
	apitest.EventuallyWithin(t, 5*time.Second, "300 delivered rows in the delivery log", func() bool {
		counts, over, rows = map[string]int{}, 0, nil
		for _, sub := range subs {
			for _, d := range sub.Deliveries("") {
				counts[d.Status]++
				if overwritten(d.Status, d.CompletedAt) {
					over++
				}
				rows = append(rows, d)
			}
		}
		return counts["delivered"] == 300
	})
	settled = true
	// The times come in the order the API documents, although deliveries
	// finish while the relay is still recording its sends.
	for _, d := range rows {
		checkTimeOrder(t, d)
	}
}

// checkTimeOrder fails unless a settled row's times come in the documented
// order: createdAt, sentAt, requestStartedAt (none for a copy held back
// without a request), completedAt. A millisecond of slack covers the
// rounding of the latency to milliseconds and of stored times to
// microseconds.
func checkTimeOrder(t *testing.T, d delivery.DeliveryResponse) {
	t.Helper()
	if d.SentAt == nil || d.CompletedAt == nil || (d.Status == "delivered" && d.RequestStartedAt == nil) {
		t.Errorf("delivery %s (%s): sentAt %v, requestStartedAt %v, completedAt %v", d.ID, d.Status, d.SentAt, d.RequestStartedAt, d.CompletedAt)
		return
	}
	names := []string{"createdAt", "sentAt", "requestStartedAt", "completedAt"}
	times := []*time.Time{&d.CreatedAt, d.SentAt, d.RequestStartedAt, d.CompletedAt}
	var prev *time.Time
	prevName := ""
	for i, at := range times {
		if at == nil {
			continue
		}
		if prev != nil && at.Add(time.Millisecond).Before(*prev) {
			t.Errorf("delivery %s (%s): %s %s is before %s %s", d.ID, d.Status,
				names[i], at.Format(time.RFC3339Nano), prevName, prev.Format(time.RFC3339Nano))
		}
		prev, prevName = at, names[i]
	}
}
