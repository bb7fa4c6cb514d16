package push

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/rooms"
	"github.com/roomhub/messaging-api/subscriptions"
)

// oneSub is a Directory of one subscription in a room of 3 attempts.
type oneSub struct{ sub subscriptions.Subscription }

func (d oneSub) PushTarget(context.Context, uuid.UUID, uuid.UUID) (rooms.Room, subscriptions.Subscription, error) {
	return rooms.Room{DeliveryAttempts: 3}, d.sub, nil
}

// TestFailedAttemptsLogged: each failed attempt is one INFO line naming the
// message and what became of it, without the endpoint's credentials (which it
// echoes); a success is a DEBUG line; a burst of failures of one subscription
// is failureLines lines and, once the interval ends, one summary.
func TestFailedAttemptsLogged(t *testing.T) {
	t.Parallel()
	const token = "bearer-secret-9f2c"
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Fail") == "" && strings.Contains(r.URL.Path, "ok") {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(r.Header.Get("Authorization")))
	}))
	t.Cleanup(target.Close)
	queue := broker.Destination{Address: "push", Queue: "push"}
	clock := apitest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	rec := &apitest.LogRecorder{}
	setup := func(t *testing.T, url string) (*Dispatcher, func(attempt int) *job) {
		t.Helper()
		sub := subscriptions.Subscription{ID: uuid.New(), Type: subscriptions.TypePush, PushURL: url, Status: subscriptions.StatusActive,
			PushAuth: &subscriptions.PushAuth{Type: subscriptions.AuthBearer, Token: token}}
		p := New(DefaultConfig(queue), Deps{Directory: oneSub{sub}, Client: NewHTTPClient(5*time.Second, loopbackAllowed()), Now: clock.Now, Logger: slog.New(rec)})
		room := uuid.New()
		return p, func(attempt int) *job {
			ev := message.Event{ID: uuid.New(), RoomID: room, EventType: "tick", Version: 1, Payload: []byte(`{}`), PublishedAt: clock.Now()}
			s := message.Send{ID: uuid.New(), EventID: ev.ID, RoomID: room, CorrelationID: "corr-" + ev.ID.String(), SubscriptionID: sub.ID,
				Destination: queue.FQQN(), Attempt: attempt, CreatedAt: clock.Now()}
			return &job{key: sub.ID, d: &broker.Delivery{Message: message.Encode(s, ev, clock.Now())}}
		}
	}
	ctx := context.Background()

	t.Run("one line per attempt", func(t *testing.T) {
		p, newJob := setup(t, target.URL+"/fail")
		retried, dead := newJob(1), newJob(3)
		for _, j := range []*job{retried, dead} {
			if _, err := p.deliver(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		recs, attrs := rec.Lines("push: attempt failed")
		if len(recs) != 2 {
			t.Fatalf("%d failure lines, want 2:\n%s", len(recs), rec.Text())
		}
		for i, want := range []struct{ attempt, next string }{{"1", "retry"}, {"3", "dead-lettered"}} {
			a := attrs[i]
			if recs[i].Level != slog.LevelInfo || a["attempt"] != want.attempt || a["next"] != want.next {
				t.Errorf("line %d: %s %v, want INFO, attempt %s, next %s", i, recs[i].Level, a, want.attempt, want.next)
			}
			for _, k := range []string{"subscription_id", "room_id", "event_id", "correlation_id", "status_code", "error_class", "latency"} {
				if a[k] == "" {
					t.Errorf("line %d has no %s: %v", i, k, a)
				}
			}
			if a["status_code"] != "503" || a["error_class"] != "http_status" {
				t.Errorf("line %d: status_code %s, error_class %s", i, a["status_code"], a["error_class"])
			}
		}
		if attrs[0]["retry_in"] == "" || attrs[1]["reason"] != "attempts_exhausted" {
			t.Errorf("retry_in %q, reason %q", attrs[0]["retry_in"], attrs[1]["reason"])
		}
		if ev := message.Decode(retried.d); attrs[0]["correlation_id"] != retried.d.CorrelationID || attrs[0]["event_id"] != ev.ID.String() || attrs[0]["room_id"] != ev.RoomID.String() {
			t.Errorf("line %v is not about its message", attrs[0])
		}
	})

	t.Run("success at DEBUG", func(t *testing.T) {
		p, newJob := setup(t, target.URL+"/ok")
		j := newJob(1)
		if _, err := p.deliver(ctx, j); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(rec.Text(), "\n") {
			if strings.Contains(l, j.d.CorrelationID) && !strings.HasPrefix(l, "DEBUG push: delivered ") {
				t.Errorf("a delivery logged other than one DEBUG line: %s", l)
			}
		}
		if !strings.Contains(rec.Text(), "DEBUG push: delivered correlation_id="+j.d.CorrelationID) {
			t.Errorf("no DEBUG line for the delivery:\n%s", rec.Text())
		}
	})

	t.Run("a burst is rate limited", func(t *testing.T) {
		p, newJob := setup(t, target.URL+"/fail")
		sub := newJob(1).key
		count := func() (failed, summaries int) {
			_, attrs := rec.Lines("push: attempt failed")
			for _, a := range attrs {
				if a["subscription_id"] == sub.String() {
					failed++
				}
			}
			_, attrs = rec.Lines("push: more failed attempts not logged")
			for _, a := range attrs {
				if a["subscription_id"] == sub.String() {
					summaries++
					if a["not_logged"] != fmt.Sprint(1000-failureLines) {
						t.Errorf("summary %v, want %d not logged", a, 1000-failureLines)
					}
				}
			}
			return failed, summaries
		}
		for range 1000 {
			if _, err := p.deliver(ctx, newJob(1)); err != nil {
				t.Fatal(err)
			}
		}
		if f, s := count(); f != failureLines || s != 0 {
			t.Errorf("%d lines and %d summaries during the interval, want %d and none", f, s, failureLines)
		}
		p.failures.Sweep(clock.Now().Add(failureInterval))
		if f, s := count(); f+s > failureLines+1 || s != 1 {
			t.Errorf("%d lines and %d summaries, want at most %d lines and 1 summary", f, s, failureLines)
		}
	})

	if strings.Contains(rec.Text(), token) {
		t.Errorf("the push credential was logged:\n%s", rec.Text())
	}
}
