package pull_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/metrics"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/pull"
	"github.com/roomhub/messaging-api/store"
	"github.com/roomhub/messaging-api/store/storetest"
	"github.com/roomhub/messaging-api/subscriptions"
)

// The tests of this file cover pulling through apptest, so that every
// answer is checked against openapi.yaml: a subscription's ackDeadline, the
// validation of pull, ack, nack and modify-ack-deadline, and what each does
// to leases stored straight in the database (apptest's broker cannot be
// consumed), to the message log and to dead letters. TestPullAPILive and
// TestPullLongPoll run the same API over the embedded broker, the outbox
// relay and the lease reaper, to check real pull answers against the spec
// too.

// roomBody is the room every test uses: retries after 200 ms, then 400,
// 800, ... without jitter, 3 attempts, no expiration.
const roomBody = `{"identifier":"pulls","managerIdentifier":"m","deliveryDelay":200,"deliveryDelayMultiplier":2,"deliveryAttempts":3,"deliveryJitter":0}`

// loggedEvent is a message of the room's log.
type loggedEvent struct{ publish.EventResponse }

// apiSub is a subscription of room "pulls".
type apiSub struct {
	a           *apptest.API
	room, id    uuid.UUID
	destination string
}

func (s apiSub) path() string { return "/v1/rooms/pulls/subscriptions/" + s.id.String() }

// apiSetup creates room "pulls" (roomBody) with event type "tick" and its
// version 1, which takes any JSON, and a PULL subscription to it with fields.
func apiSetup(t *testing.T, a *apptest.API, fields map[string]any) apiSub {
	t.Helper()
	apptest.Want(t, a.Do("POST", "/v1/rooms", roomBody), http.StatusCreated)
	apptest.Want(t, a.Do("POST", "/v1/rooms/pulls/event-types", `{"identifier":"tick"}`), http.StatusCreated)
	apptest.Want(t, a.Do("POST", "/v1/rooms/pulls/event-types/tick/versions", `{"schema":true}`), http.StatusCreated)
	return apiAddSub(t, a, "PULL", fields)
}

// apiAddSub creates another subscription of type typ to "tick" with fields.
func apiAddSub(t *testing.T, a *apptest.API, typ string, fields map[string]any) apiSub {
	t.Helper()
	body := map[string]any{"type": typ, "eventTypes": []any{map[string]any{"eventType": "tick"}}}
	if typ == "PUSH" {
		body["pushUrl"] = "https://receiver.example/hook"
	}
	for k, v := range fields {
		body[k] = v
	}
	r := a.Do("POST", "/v1/rooms/pulls/subscriptions", body)
	apptest.Want(t, r, http.StatusCreated)
	out := apptest.Decode[subscriptions.Response](t, r)
	s := apiSub{a: a, room: uuid.MustParse(out.RoomID), id: uuid.MustParse(out.ID)}
	if out.Destination != nil {
		s.destination = *out.Destination
	}
	return s
}

// apiPublish publishes a "tick" with payload {"n":n} and attribute seq=n
// and returns its event id.
func apiPublish(t *testing.T, a *apptest.API, n int) string {
	t.Helper()
	r := a.Do("POST", "/v1/rooms/pulls/messages", fmt.Sprintf(`{"eventType":"tick","payload":{"n":%d},"attributes":{"seq":"%d"}}`, n, n))
	apptest.Want(t, r, http.StatusAccepted)
	return apptest.Decode[publish.PublishResponse](t, r).EventID
}

// readLog reads an event of the message log.
func readLog(t *testing.T, a *apptest.API, eventID string) loggedEvent {
	t.Helper()
	r := a.Do("GET", "/v1/rooms/pulls/messages/"+eventID, nil)
	apptest.Want(t, r, http.StatusOK)
	return loggedEvent{apptest.Decode[publish.EventResponse](t, r)}
}

// attempts are the log's attempts of e to subscription s.
func (e loggedEvent) attempts(t *testing.T, s apiSub) []publish.AttemptResponse {
	t.Helper()
	for _, d := range e.Deliveries {
		if d.SubscriptionID == s.id.String() {
			if d.Destination != s.destination || d.SubscriptionType != "PULL" {
				t.Errorf("event %s goes to %s (%s), want %s (PULL)", e.EventID, d.Destination, d.SubscriptionType, s.destination)
			}
			return d.Attempts
		}
	}
	t.Fatalf("event %s has no delivery to %s: %+v", e.EventID, s.id, e.Deliveries)
	return nil
}

// lease stores a lease of event eventID's attempt for s, as a pull would
// have, on the log's copy of that attempt, and returns its ack id. mod, when
// not nil, changes the lease before it is stored.
func (s apiSub) lease(t *testing.T, eventID string, attempt int, deadline time.Time, mod func(*pull.Lease)) uuid.UUID {
	t.Helper()
	ev := readLog(t, s.a, eventID)
	var sendID uuid.UUID
	for _, at := range ev.attempts(t, s) {
		if at.Attempt == attempt {
			sendID = uuid.MustParse(at.ID)
		}
	}
	if sendID == uuid.Nil {
		t.Fatalf("event %s has no attempt %d to %s", eventID, attempt, s.id)
	}
	now := app.Clock()
	l := pull.Lease{
		AckID: uuid.Must(uuid.NewV7()), SubscriptionID: s.id, RoomID: s.room, SendID: sendID,
		Event: message.Event{
			ID: uuid.MustParse(ev.EventID), RoomID: s.room, CorrelationID: ev.CorrelationID,
			EventType: ev.EventType, Version: ev.EventTypeVersion, Payload: ev.Payload,
			Attributes: ev.Attributes, PublishedAt: ev.PublishedAt,
		},
		Attempt: attempt, Deadline: deadline, LeasedAt: now,
	}
	if ev.ExpiresAt != nil {
		l.Event.ExpiresAt = *ev.ExpiresAt
	}
	if mod != nil {
		mod(&l)
	}
	if err := s.a.DB.Leases().AddLeases(context.Background(), []pull.Lease{l}, nil); err != nil {
		t.Fatal(err)
	}
	return l.AckID
}

// leases reads the stored leases of s among ids, live or not, without
// changing them: it settles them in a transaction that it rolls back.
func (s apiSub) leases(t *testing.T, ids ...uuid.UUID) map[uuid.UUID]pull.Lease {
	t.Helper()
	errProbe := errors.New("probe only")
	out := map[uuid.UUID]pull.Lease{}
	_, err := s.a.DB.Leases().SettleLeases(context.Background(),
		pull.Selector{SubscriptionID: s.id, AckIDs: ids, Now: time.Time{}},
		func(ls []pull.Lease) ([]pull.Settlement, error) {
			for _, l := range ls {
				out[l.AckID] = l
			}
			return nil, errProbe
		})
	if err != nil && !errors.Is(err, errProbe) {
		t.Fatal(err)
	}
	return out
}

// settle posts body to s's op endpoint and returns its results.
func (s apiSub) settle(t *testing.T, op string, body any) []pull.Result {
	t.Helper()
	r := s.a.Do("POST", s.path()+"/"+op, body)
	apptest.Want(t, r, http.StatusOK)
	return apptest.Decode[pull.ResultsResponse](t, r).Results
}

// ackIDs are ack ids as the request strings.
func ackIDs(ids ...any) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprint(id)
	}
	return out
}

// ack, nack and modify settle ids and check each got status.
func (s apiSub) ack(t *testing.T, status string, ids ...any) {
	t.Helper()
	s.wantAll(t, "ack", map[string]any{"ackIds": ackIDs(ids...)}, status, ids)
}

func (s apiSub) nack(t *testing.T, status string, ids ...any) {
	t.Helper()
	s.wantAll(t, "nack", map[string]any{"ackIds": ackIDs(ids...)}, status, ids)
}

func (s apiSub) modify(t *testing.T, ms int64, status string, ids ...any) {
	t.Helper()
	s.wantAll(t, "modify-ack-deadline", map[string]any{"ackIds": ackIDs(ids...), "ackDeadlineMs": ms}, status, ids)
}

func (s apiSub) wantAll(t *testing.T, op string, body any, status string, ids []any) {
	t.Helper()
	statuses := make([]string, len(ids))
	for i := range statuses {
		statuses[i] = status
	}
	wantResults(t, op, s.settle(t, op, body), ackIDs(ids...), statuses...)
}

// wantAttempts fails unless the log's attempts have these attempt numbers,
// statuses, errors and scheduled delays.
func wantAttempts(t *testing.T, what string, got []publish.AttemptResponse, want ...publish.AttemptResponse) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d attempts, want %d: %+v", what, len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Attempt != w.Attempt || g.Status != w.Status || g.Error != w.Error || g.ScheduledDelay != w.ScheduledDelay {
			t.Errorf("%s: attempts[%d] = {attempt %d, %s, error %q, delay %d}, want {attempt %d, %s, error %q, delay %d}",
				what, i, g.Attempt, g.Status, g.Error, g.ScheduledDelay, w.Attempt, w.Status, w.Error, w.ScheduledDelay)
		}
		if done := g.Status != "pending" && g.Status != "sent"; done != (g.CompletedAt != nil) {
			t.Errorf("%s: attempts[%d] is %s with completedAt %v", what, i, g.Status, g.CompletedAt)
		}
	}
}

// deadLetters lists s's dead letters, oldest first.
func (s apiSub) deadLetters(t *testing.T) []delivery.DeadLetterResponse {
	t.Helper()
	r := s.a.Do("GET", s.path()+"/dead-letters", nil)
	apptest.Want(t, r, http.StatusOK)
	return apptest.Decode[api.List[delivery.DeadLetterResponse]](t, r).Items
}

// checkDeadLetter fails unless dl is event ev's dead letter of s with this
// reason, attempt count and last error.
func checkDeadLetter(t *testing.T, dl delivery.DeadLetterResponse, s apiSub, ev loggedEvent, reason string, attempts int, lastError string) {
	t.Helper()
	if dl.SubscriptionID != s.id.String() || dl.EventID != ev.EventID || dl.CorrelationID != ev.CorrelationID ||
		dl.EventType != "tick" || dl.EventTypeVersion != ev.EventTypeVersion || string(dl.Payload) != string(ev.Payload) ||
		fmt.Sprint(dl.Attributes) != fmt.Sprint(ev.Attributes) || dl.Reason != reason || dl.Attempts != attempts ||
		dl.LastStatusCode != nil || dl.LastError != lastError {
		t.Errorf("dead letter %+v, want event %s of %s, %s after %d attempts, last error %q", dl, ev.EventID, s.id, reason, attempts, lastError)
	}
}

// within fails unless got is in [from+d, to+d].
func within(t *testing.T, what string, got, from, to time.Time, d time.Duration) {
	t.Helper()
	if got.Before(from.Add(d)) || got.After(to.Add(d)) {
		t.Errorf("%s = %s, want from %s to %s", what, got, from.Add(d), to.Add(d))
	}
}

func TestPullAPIAckDeadline(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		ctx := context.Background()
		s := apiSetup(t, a, nil)
		read := func(r apptest.Response, status int) subscriptions.Response {
			t.Helper()
			apptest.Want(t, r, status)
			return apptest.Decode[subscriptions.Response](t, r)
		}
		ackDeadline := func(r apptest.Response) int64 {
			t.Helper()
			return read(r, http.StatusOK).AckDeadline
		}
		stored := func(s apiSub) time.Duration {
			t.Helper()
			sub, err := a.DB.Subscriptions().Subscription(ctx, s.room, s.id)
			if err != nil {
				t.Fatal(err)
			}
			return sub.AckDeadline
		}

		// The default: in the 201, GET, the list, and the store.
		r := a.Do("POST", "/v1/rooms/pulls/subscriptions", map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "tick"}}})
		if got := read(r, http.StatusCreated).AckDeadline; got != 30000 {
			t.Errorf("created with ackDeadline %v, want the default 30000", got)
		}
		if got := ackDeadline(a.Do("GET", s.path(), nil)); got != 30000 {
			t.Errorf("GET: ackDeadline %v, want 30000", got)
		}
		if got := stored(s); got != 30*time.Second {
			t.Errorf("stored ack deadline %s, want 30s", got)
		}
		// A PUSH subscription carries it too (and never uses it).
		push := apiAddSub(t, a, "PUSH", nil)
		if got := ackDeadline(a.Do("GET", push.path(), nil)); got != 30000 {
			t.Errorf("PUSH subscription: ackDeadline %v, want 30000", got)
		}

		// Set at creation, at both ends of its range.
		for _, ms := range []int64{1000, 600000, 45000} {
			r := a.Do("POST", "/v1/rooms/pulls/subscriptions", map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "tick"}}, "ackDeadline": ms})
			created := read(r, http.StatusCreated)
			if created.AckDeadline != ms {
				t.Errorf("created with ackDeadline %v, want %v", created.AckDeadline, ms)
			}
			if got := ackDeadline(a.Do("GET", "/v1/rooms/pulls/subscriptions/"+created.ID, nil)); got != ms {
				t.Errorf("read back ackDeadline %v, want %v", got, ms)
			}
		}
		r = a.Do("GET", "/v1/rooms/pulls/subscriptions?type=PULL", nil)
		apptest.Want(t, r, http.StatusOK)
		var list struct {
			Items []struct {
				AckDeadline *int64 `json:"ackDeadline"`
			} `json:"items"`
		}
		if err := json.Unmarshal(r.Body, &list); err != nil {
			t.Fatalf("%v: %s", err, r.Body)
		}
		var got []int64
		for _, it := range list.Items {
			if it.AckDeadline == nil {
				t.Fatalf("a listed subscription has no ackDeadline: %s", r.Body)
			}
			got = append(got, *it.AckDeadline)
		}
		if want := []int64{30000, 30000, 1000, 600000, 45000}; !slices.Equal(got, want) {
			t.Errorf("listed ackDeadlines %v, want %v", got, want)
		}

		// Out of range or not an integer: 422 naming it, at creation and in PATCH.
		for _, bad := range []any{999, 600001, 0, -1000, "30000", 1500.5, true} {
			body := map[string]any{"type": "PULL", "eventTypes": []any{map[string]any{"eventType": "tick"}}, "ackDeadline": bad}
			apptest.WantField(t, a.Do("POST", "/v1/rooms/pulls/subscriptions", body), "ackDeadline")
			apptest.WantField(t, a.Do("PATCH", s.path(), map[string]any{"ackDeadline": bad}), "ackDeadline")
		}
		if got := stored(s); got != 30*time.Second {
			t.Errorf("a refused PATCH changed the ack deadline to %s", got)
		}

		// PATCH sets it, leaves it alone when absent, and null brings the default back.
		if got := ackDeadline(a.Do("PATCH", s.path(), map[string]any{"ackDeadline": 120000})); got != 120000 {
			t.Errorf("PATCH answered ackDeadline %v, want 120000", got)
		}
		if got := stored(s); got != 2*time.Minute {
			t.Errorf("stored ack deadline %s after PATCH, want 2m", got)
		}
		if got := ackDeadline(a.Do("PATCH", s.path(), map[string]any{"deliveryAttempts": 5})); got != 120000 {
			t.Errorf("a PATCH without ackDeadline changed it to %v", got)
		}
		if got := ackDeadline(a.Do("PATCH", s.path(), `{"ackDeadline":null}`)); got != 30000 {
			t.Errorf("PATCH null answered ackDeadline %v, want the default 30000", got)
		}
		if got := ackDeadline(a.Do("GET", s.path(), nil)); got != 30000 {
			t.Errorf("after PATCH null, GET answers ackDeadline %v, want 30000", got)
		}
		if got := stored(s); got != 30*time.Second {
			t.Errorf("stored ack deadline %s after PATCH null, want 30s", got)
		}
		if got := ackDeadline(a.Do("PATCH", s.path(), map[string]any{"ackDeadline": 1000})); got != 1000 {
			t.Errorf("PATCH to the minimum answered %v", got)
		}
	})
}

func TestPullAPIAck(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		s := apiSetup(t, a, nil)
		other := apiAddSub(t, a, "PULL", nil)
		e1, e2, e3 := apiPublish(t, a, 1), apiPublish(t, a, 2), apiPublish(t, a, 3)
		later := app.Clock().Add(time.Minute)
		a1 := s.lease(t, e1, 1, later, nil)
		a2 := s.lease(t, e2, 1, later, nil)
		b1 := other.lease(t, e1, 1, later, nil)
		past := s.lease(t, e3, 1, app.Clock().Add(-time.Second), nil)

		// One result per id, in order; a malformed one is invalid, another
		// subscription's, a made-up one and one past its deadline are unknown.
		// Ack ids are UUIDs in any case.
		ids := ackIDs(a1, "not-an-ack-id", b1, uuid.New(), past, strings.ToUpper(a2.String()))
		wantResults(t, "ack", s.settle(t, "ack", map[string]any{"ackIds": ids}), ids,
			"acked", "invalid", "unknown", "unknown", "unknown", "acked")

		// The acked leases are gone; the others are still stored.
		if got := s.leases(t, a1, a2, past); len(got) != 1 || got[past].AckID != past {
			t.Errorf("leases left after the ack: %v, want only the one past its deadline", got)
		}
		if got := other.leases(t, b1); len(got) != 1 {
			t.Errorf("the other subscription's lease is gone: %v", got)
		}

		// The log: the acked copies are delivered, the rest untouched.
		for _, e := range []string{e1, e2} {
			wantAttempts(t, "acked "+e, readLog(t, a, e).attempts(t, s), publish.AttemptResponse{Attempt: 1, Status: "delivered"})
		}
		wantAttempts(t, "not acked", readLog(t, a, e1).attempts(t, other), publish.AttemptResponse{Attempt: 1, Status: "pending"})
		wantAttempts(t, "past its deadline", readLog(t, a, e3).attempts(t, s), publish.AttemptResponse{Attempt: 1, Status: "pending"})
		r := a.Do("GET", s.path()+"/deliveries", nil)
		apptest.Want(t, r, http.StatusOK)
		deliveries := apptest.Decode[api.List[delivery.DeliveryResponse]](t, r)
		statuses := map[string]string{}
		for _, d := range deliveries.Items {
			statuses[d.EventID] = d.Status
			if d.NextAttemptAt != nil {
				t.Errorf("delivery of %s has nextAttemptAt %s", d.EventID, d.NextAttemptAt)
			}
		}
		if statuses[e1] != "delivered" || statuses[e2] != "delivered" || statuses[e3] != "pending" {
			t.Errorf("deliveries: %v", statuses)
		}

		// A settled lease is unknown to every operation.
		s.ack(t, "unknown", a1)
		s.nack(t, "unknown", a1, a2)
		s.modify(t, 60000, "unknown", a1)
		wantAttempts(t, "acked twice", readLog(t, a, e1).attempts(t, s), publish.AttemptResponse{Attempt: 1, Status: "delivered"})

		// An id given twice gets the same result twice.
		other.ack(t, "acked", b1, b1)

		// Acks are taken whatever the subscription's status.
		c := s.lease(t, e3, 1, later, nil)
		apptest.Want(t, a.Do("PATCH", s.path(), map[string]any{"status": "PAUSED"}), http.StatusOK)
		s.ack(t, "acked", c)
		d := s.lease(t, e2, 1, later, nil)
		apptest.Want(t, a.Do("PATCH", s.path(), map[string]any{"status": "TERMINATED"}), http.StatusOK)
		s.ack(t, "acked", d)

		// A PUSH subscription has no leases; a missing one is 404.
		push := apiAddSub(t, a, "PUSH", nil)
		push.ack(t, "unknown", past)
		body := map[string]any{"ackIds": ackIDs(past)}
		for _, op := range []string{"ack", "nack"} {
			apptest.Want(t, a.Do("POST", "/v1/rooms/pulls/subscriptions/"+uuid.NewString()+"/"+op, body), http.StatusNotFound)
			apptest.Want(t, a.Do("POST", "/v1/rooms/pulls/subscriptions/nope/"+op, body), http.StatusNotFound)
			apptest.Want(t, a.Do("POST", "/v1/rooms/nope/subscriptions/"+s.id.String()+"/"+op, body), http.StatusNotFound)
		}
		// The room's id names it as well as its identifier.
		r = a.Do("POST", "/v1/rooms/"+s.room.String()+"/subscriptions/"+s.id.String()+"/ack", body)
		apptest.Want(t, r, http.StatusOK)
	})
}

func TestPullAPINack(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		s := apiSetup(t, a, nil)
		later := app.Clock().Add(time.Minute)
		e1 := apiPublish(t, a, 1)

		// Each nack of attempt k resends attempt k+1 after the room's
		// 200 × 2^k ms; the copy nacked is failed, with its next attempt due then.
		for k, delay := range []int64{400, 800} {
			id := s.lease(t, e1, k+1, later, nil)
			before := app.Clock()
			s.nack(t, "nacked", id)
			after := app.Clock()
			if got := s.leases(t, id); len(got) != 0 {
				t.Errorf("the nacked lease is still stored: %v", got)
			}
			att := readLog(t, a, e1).attempts(t, s)
			wantAtt := []publish.AttemptResponse{}
			for j := range k + 1 {
				wantAtt = append(wantAtt, publish.AttemptResponse{Attempt: j + 1, Status: "failed", Error: "nacked", ScheduledDelay: []int64{0, 400}[j]})
			}
			wantAtt = append(wantAtt, publish.AttemptResponse{Attempt: k + 2, Status: "pending", ScheduledDelay: delay})
			wantAttempts(t, fmt.Sprintf("after nack %d", k+1), att, wantAtt...)

			r := a.Do("GET", s.path()+"/deliveries", nil)
			apptest.Want(t, r, http.StatusOK)
			deliveries := apptest.Decode[api.List[delivery.DeliveryResponse]](t, r)
			for _, d := range deliveries.Items {
				if d.ID == att[k].ID {
					if d.NextAttemptAt == nil {
						t.Fatalf("nacked attempt %d has no nextAttemptAt", d.Attempt)
					}
					within(t, fmt.Sprintf("nextAttemptAt of nacked attempt %d", d.Attempt), *d.NextAttemptAt, before, after, time.Duration(delay)*time.Millisecond)
				}
			}
			s.nack(t, "unknown", id)
		}

		// The last attempt nacked makes a dead letter; nothing is resent.
		id := s.lease(t, e1, 3, later, nil)
		s.nack(t, "nacked", id)
		ev := readLog(t, a, e1)
		wantAttempts(t, "after the last nack", ev.attempts(t, s),
			publish.AttemptResponse{Attempt: 1, Status: "failed", Error: "nacked"},
			publish.AttemptResponse{Attempt: 2, Status: "failed", Error: "nacked", ScheduledDelay: 400},
			publish.AttemptResponse{Attempt: 3, Status: "dead_lettered", Error: "nacked", ScheduledDelay: 800})
		dls := s.deadLetters(t)
		if len(dls) != 1 {
			t.Fatalf("%d dead letters, want 1: %+v", len(dls), dls)
		}
		checkDeadLetter(t, dls[0], s, ev, "attempts_exhausted", 3, "nacked")

		// deliveryAttempts 1: the first nack dead-letters. The dead letter
		// replays to the subscription's queue, from attempt 1.
		once := apiAddSub(t, a, "PULL", map[string]any{"deliveryAttempts": 1})
		e2 := apiPublish(t, a, 2)
		once.nack(t, "nacked", once.lease(t, e2, 1, later, nil))
		ev2 := readLog(t, a, e2)
		wantAttempts(t, "single attempt nacked", ev2.attempts(t, once), publish.AttemptResponse{Attempt: 1, Status: "dead_lettered", Error: "nacked"})
		wantAttempts(t, "the other subscription's copy", ev2.attempts(t, s), publish.AttemptResponse{Attempt: 1, Status: "pending"})
		dls = once.deadLetters(t)
		if len(dls) != 1 {
			t.Fatalf("%d dead letters, want 1: %+v", len(dls), dls)
		}
		checkDeadLetter(t, dls[0], once, ev2, "attempts_exhausted", 1, "nacked")
		r := a.Do("POST", once.path()+"/dead-letters/"+dls[0].ID+":replay", nil)
		apptest.Want(t, r, http.StatusAccepted)
		rep := apptest.Decode[delivery.ReplayResponse](t, r)
		if len(rep.Replayed) != 1 {
			t.Fatalf("replay answered %s, want one replayed event", r.Body)
		}
		replayed := rep.Replayed[0].EventID
		wantAttempts(t, "replayed", readLog(t, a, replayed).attempts(t, once), publish.AttemptResponse{Attempt: 1, Status: "pending"})
		if n := len(once.deadLetters(t)); n != 0 {
			t.Errorf("%d dead letters left after the replay", n)
		}

		// The subscription's own retry policy gives the delays: 1 retry at
		// once, then 1 after 1500 ms.
		policy := apiAddSub(t, a, "PULL", map[string]any{"retryPolicy": map[string]any{
			"retriesWithNoDelay": 1, "minimumDelayRetries": 1, "minimumDelay": 1500, "backoffRetries": 0, "maximumDelayRetries": 0,
		}})
		e3 := apiPublish(t, a, 3)
		policy.nack(t, "nacked", policy.lease(t, e3, 1, later, nil))
		policy.nack(t, "nacked", policy.lease(t, e3, 2, later, nil))
		policy.nack(t, "nacked", policy.lease(t, e3, 3, later, nil))
		ev3 := readLog(t, a, e3)
		wantAttempts(t, "retry policy", ev3.attempts(t, policy),
			publish.AttemptResponse{Attempt: 1, Status: "failed", Error: "nacked"},
			publish.AttemptResponse{Attempt: 2, Status: "failed", Error: "nacked", ScheduledDelay: 0},
			publish.AttemptResponse{Attempt: 3, Status: "dead_lettered", Error: "nacked", ScheduledDelay: 1500})
		if dls := policy.deadLetters(t); len(dls) != 1 {
			t.Errorf("%d dead letters, want 1", len(dls))
		} else {
			checkDeadLetter(t, dls[0], policy, ev3, "attempts_exhausted", 3, "nacked")
		}

		// A message that would expire before its next attempt is dead-lettered
		// as expired instead of resent.
		e4 := apiPublish(t, a, 4)
		expiring := s.lease(t, e4, 1, later, func(l *pull.Lease) { l.Event.ExpiresAt = app.Clock().Add(100 * time.Millisecond) })
		s.nack(t, "nacked", expiring)
		ev4 := readLog(t, a, e4)
		if att := ev4.attempts(t, s); len(att) != 1 || att[0].Status != "dead_lettered" || att[0].CompletedAt == nil {
			t.Errorf("the expiring copy: %+v, want only attempt 1, dead_lettered", att)
		}
		dls = s.deadLetters(t)
		if len(dls) != 2 {
			t.Fatalf("%d dead letters, want 2: %+v", len(dls), dls)
		}
		checkDeadLetter(t, dls[1], s, ev4, "expired", 1, "nacked; would expire before the next attempt")

		// Mixed: one live lease nacked, the rest not.
		e5 := apiPublish(t, a, 5)
		live := s.lease(t, e5, 1, later, nil)
		ids := ackIDs(live, "0190", uuid.New(), live)
		wantResults(t, "nack", s.settle(t, "nack", map[string]any{"ackIds": ids}), ids, "nacked", "invalid", "unknown", "nacked")
		wantAttempts(t, "nacked once though named twice", readLog(t, a, e5).attempts(t, s),
			publish.AttemptResponse{Attempt: 1, Status: "failed", Error: "nacked"},
			publish.AttemptResponse{Attempt: 2, Status: "pending", ScheduledDelay: 400})
	})
}

func TestPullAPIModifyAckDeadline(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		s := apiSetup(t, a, nil)
		other := apiAddSub(t, a, "PULL", nil)
		e1, e2 := apiPublish(t, a, 1), apiPublish(t, a, 2)
		later := app.Clock().Add(30 * time.Second)
		x := s.lease(t, e1, 1, later, nil)
		y := s.lease(t, e2, 1, later, nil)
		past := s.lease(t, e2, 1, app.Clock().Add(-time.Millisecond), nil)
		theirs := other.lease(t, e1, 1, later, nil)

		// Longer than the subscription's ackDeadline; results per id.
		before := app.Clock()
		ids := ackIDs(x, past, "nope", theirs, uuid.New())
		wantResults(t, "modify", s.settle(t, "modify-ack-deadline", map[string]any{"ackIds": ids, "ackDeadlineMs": 120000}), ids,
			"extended", "unknown", "invalid", "unknown", "unknown")
		after := app.Clock()
		got := s.leases(t, x, past)
		within(t, "extended deadline", got[x].Deadline, before, after, 2*time.Minute)
		if !got[past].Deadline.Before(before) {
			t.Errorf("the lease past its deadline was moved to %s", got[past].Deadline)
		}
		if l := other.leases(t, theirs)[theirs]; !l.Deadline.Equal(later) {
			t.Errorf("the other subscription's lease was moved to %s, want %s", l.Deadline, later)
		}

		// Shorter works too, up to 10 minutes.
		before = app.Clock()
		s.modify(t, 1000, "extended", x)
		after = app.Clock()
		within(t, "shortened deadline", s.leases(t, x)[x].Deadline, before, after, time.Second)
		s.modify(t, 600000, "extended", x)

		// 0 gives the lease up: its deadline is now, so it can no longer be
		// acked, nacked or moved, and it waits for the reaper. Nothing is
		// settled: the log is untouched.
		before = app.Clock()
		s.modify(t, 0, "extended", y)
		after = app.Clock()
		l, ok := s.leases(t, y)[y]
		if !ok {
			t.Fatalf("the lease given up is gone; the reaper redelivers it")
		}
		within(t, "deadline given up", l.Deadline, before, after, 0)
		s.ack(t, "unknown", y)
		s.nack(t, "unknown", y)
		s.modify(t, 60000, "unknown", y)
		wantAttempts(t, "given up", readLog(t, a, e2).attempts(t, s), publish.AttemptResponse{Attempt: 1, Status: "pending"})

		// The extended lease is still live.
		s.ack(t, "acked", x)
		other.modify(t, 0, "extended", theirs)
		other.ack(t, "unknown", theirs)

		apptest.Want(t, a.Do("POST", "/v1/rooms/pulls/subscriptions/"+uuid.NewString()+"/modify-ack-deadline",
			map[string]any{"ackIds": ackIDs(x), "ackDeadlineMs": 0}), http.StatusNotFound)
	})
}

func TestPullAPIPullRefused(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		s := apiSetup(t, a, nil)

		// The harness's broker cannot be consumed: an ACTIVE PULL
		// subscription gets 503 with Retry-After, at once even for a long poll.
		for _, body := range []any{nil, `{}`, map[string]any{"maxMessages": 100, "waitMs": 30000}, map[string]any{"maxMessages": 1, "waitMs": 0}} {
			start := time.Now()
			r := a.Do("POST", s.path()+"/pull", body)
			apptest.Want(t, r, http.StatusServiceUnavailable)
			if r.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("the 503 took %s", el)
			}
		}
		// By the room's id too.
		apptest.Want(t, a.Do("POST", "/v1/rooms/"+s.room.String()+"/subscriptions/"+s.id.String()+"/pull", nil), http.StatusServiceUnavailable)

		// Only an ACTIVE PULL subscription can be pulled from.
		push := apiAddSub(t, a, "PUSH", nil)
		apptest.Want(t, a.Do("POST", push.path()+"/pull", nil), http.StatusConflict)
		paused := apiAddSub(t, a, "PULL", map[string]any{"status": "PAUSED"})
		apptest.Want(t, a.Do("POST", paused.path()+"/pull", `{"maxMessages":5}`), http.StatusConflict)
		apptest.Want(t, a.Do("PATCH", paused.path(), map[string]any{"status": "ACTIVE"}), http.StatusOK)
		apptest.Want(t, a.Do("POST", paused.path()+"/pull", nil), http.StatusServiceUnavailable)
		apptest.Want(t, a.Do("PATCH", s.path(), map[string]any{"status": "PAUSED"}), http.StatusOK)
		apptest.Want(t, a.Do("POST", s.path()+"/pull", nil), http.StatusConflict)
		apptest.Want(t, a.Do("PATCH", s.path(), map[string]any{"status": "TERMINATED"}), http.StatusOK)
		apptest.Want(t, a.Do("POST", s.path()+"/pull", nil), http.StatusConflict)

		// Missing: the subscription, a subscription id that is no UUID, the room.
		apptest.Want(t, a.Do("POST", "/v1/rooms/pulls/subscriptions/"+uuid.NewString()+"/pull", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("POST", "/v1/rooms/pulls/subscriptions/nope/pull", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("POST", "/v1/rooms/nope/subscriptions/"+paused.id.String()+"/pull", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("DELETE", paused.path(), nil), http.StatusNoContent)
		apptest.Want(t, a.Do("POST", paused.path()+"/pull", nil), http.StatusNotFound)
		apptest.Want(t, a.Do("POST", paused.path()+"/ack", map[string]any{"ackIds": ackIDs(uuid.New())}), http.StatusNotFound)
		apptest.Want(t, a.Do("POST", paused.path()+"/modify-ack-deadline", map[string]any{"ackIds": ackIDs(uuid.New()), "ackDeadlineMs": 1}), http.StatusNotFound)
	})
}

func TestPullAPIValidation(t *testing.T) {
	t.Parallel()
	a := apptest.New(t, store.SQLite)
	s := apiSetup(t, a, nil)
	p := s.path()

	// pull: each field out of range or of the wrong type, named.
	for _, c := range []struct {
		body   string
		fields []string
	}{
		{`{"maxMessages":0}`, []string{"maxMessages"}},
		{`{"maxMessages":101}`, []string{"maxMessages"}},
		{`{"maxMessages":-1}`, []string{"maxMessages"}},
		{`{"maxMessages":"10"}`, []string{"maxMessages"}},
		{`{"maxMessages":2.5}`, []string{"maxMessages"}},
		{`{"waitMs":-1}`, []string{"waitMs"}},
		{`{"waitMs":30001}`, []string{"waitMs"}},
		{`{"waitMs":"1s"}`, []string{"waitMs"}},
		{`{"maxMessages":0,"waitMs":30001}`, []string{"maxMessages", "waitMs"}},
		{`{"max":10}`, []string{"max"}},
		{`{"ackIds":[]}`, []string{"ackIds"}},
	} {
		r := a.Do("POST", p+"/pull", c.body)
		apptest.Want(t, r, http.StatusUnprocessableEntity)
		if got := apptest.Fields(t, r); !slices.Equal(got, c.fields) {
			t.Errorf("pull %s: 422 names %v, want %v", c.body, got, c.fields)
		}
	}
	// Validation comes before the subscription is looked up.
	apptest.WantField(t, a.Do("POST", "/v1/rooms/pulls/subscriptions/"+uuid.NewString()+"/pull", `{"maxMessages":0}`), "maxMessages")
	apptest.Want(t, a.Do("POST", p+"/pull", `{"maxMessages":`), http.StatusBadRequest)
	apptest.Want(t, a.Do("POST", p+"/pull", `{"maxMessages":1} {}`), http.StatusBadRequest)
	// Good edge values get past validation (to the broker, which is down).
	for _, body := range []string{`{"maxMessages":1,"waitMs":0}`, `{"maxMessages":100,"waitMs":30000}`, ` `} {
		apptest.Want(t, a.Do("POST", p+"/pull", body), http.StatusServiceUnavailable)
	}

	// ack, nack and modify-ack-deadline: ackIds from 1 to 1000 strings.
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = uuid.NewString()
		}
		return out
	}
	for _, op := range []string{"ack", "nack", "modify-ack-deadline"} {
		with := func(m map[string]any) map[string]any {
			if op == "modify-ack-deadline" {
				m["ackDeadlineMs"] = 1000
			}
			return m
		}
		for _, bad := range []map[string]any{
			with(map[string]any{}),
			with(map[string]any{"ackIds": nil}),
			with(map[string]any{"ackIds": []string{}}),
			with(map[string]any{"ackIds": many(1001)}),
			with(map[string]any{"ackIds": "0190b5b1-0000-7000-8000-000000000001"}),
		} {
			r := a.Do("POST", p+"/"+op, bad)
			apptest.Want(t, r, http.StatusUnprocessableEntity)
			if got := apptest.Fields(t, r); !slices.Equal(got, []string{"ackIds"}) {
				t.Errorf("%s with ackIds %.60v: 422 names %v, want [ackIds]", op, bad["ackIds"], got)
			}
		}
		// encoding/json names the array, not the element.
		apptest.WantField(t, a.Do("POST", p+"/"+op, with(map[string]any{"ackIds": []any{"x", 1}})), "ackIds")
		apptest.WantField(t, a.Do("POST", p+"/"+op, with(map[string]any{"ackIds": many(1), "extra": true})), "extra")
		apptest.Want(t, a.Do("POST", p+"/"+op, nil), http.StatusBadRequest)
		apptest.Want(t, a.Do("POST", p+"/"+op, `{"ackIds":[`), http.StatusBadRequest)
		// Larger than the body limit (64 KiB here).
		apptest.Want(t, a.Do("POST", p+"/"+op, `{"ackIds":["`+strings.Repeat("x", 70<<10)+`"]}`), http.StatusRequestEntityTooLarge)

		// 1000 is the most: every one answered, in order.
		ids := many(1000)
		ids[500] = "not an id"
		res := s.settle(t, op, with(map[string]any{"ackIds": ids}))
		if len(res) != 1000 || res[0].AckID != ids[0] || res[999].AckID != ids[999] || res[0].Status != "unknown" ||
			res[500].Status != "invalid" || res[500].AckID != "not an id" {
			t.Errorf("%s of 1000 ids answered %d results, first %+v, 500th %+v", op, len(res), res[0], res[500])
		}
	}

	// ackDeadlineMs: required by modify-ack-deadline, from 0 to 600000, and
	// refused by ack and nack.
	ids := ackIDs(uuid.New())
	for _, bad := range []map[string]any{
		{"ackIds": ids},
		{"ackIds": ids, "ackDeadlineMs": nil},
		{"ackIds": ids, "ackDeadlineMs": -1},
		{"ackIds": ids, "ackDeadlineMs": 600001},
		{"ackIds": ids, "ackDeadlineMs": "1000"},
		{"ackIds": ids, "ackDeadlineMs": 1.5},
	} {
		r := a.Do("POST", p+"/modify-ack-deadline", bad)
		apptest.Want(t, r, http.StatusUnprocessableEntity)
		if got := apptest.Fields(t, r); !slices.Equal(got, []string{"ackDeadlineMs"}) {
			t.Errorf("modify-ack-deadline with ackDeadlineMs %v: 422 names %v, want [ackDeadlineMs]", bad["ackDeadlineMs"], got)
		}
	}
	r := a.Do("POST", p+"/modify-ack-deadline", map[string]any{"ackIds": []string{}})
	apptest.Want(t, r, http.StatusUnprocessableEntity)
	if got := apptest.Fields(t, r); !slices.Equal(got, []string{"ackIds", "ackDeadlineMs"}) {
		t.Errorf("modify-ack-deadline without ids nor deadline: 422 names %v", got)
	}
	for _, ms := range []int64{0, 600000} {
		s.modify(t, ms, "unknown", ids[0])
	}
	for _, op := range []string{"ack", "nack"} {
		for _, ms := range []int64{0, 1000} {
			r := a.Do("POST", p+"/"+op, map[string]any{"ackIds": ids, "ackDeadlineMs": ms})
			apptest.Want(t, r, http.StatusUnprocessableEntity)
			if got := apptest.Fields(t, r); !slices.Equal(got, []string{"ackDeadlineMs"}) {
				t.Errorf("%s with ackDeadlineMs %d: 422 names %v, want [ackDeadlineMs]", op, ms, got)
			}
		}
	}
}

// subscribeSignal is the embedded broker as the API sees it: it tells
// subscribed (when not nil, and without waiting) of each consumer it adds,
// so that a test knows a pull is waiting.
type subscribeSignal struct {
	*broker.Embedded
	subscribed chan<- struct{}
}

func (b subscribeSignal) Subscribe(ctx context.Context, dest broker.Destination, opts broker.SubscribeOptions) (broker.Subscription, error) {
	sub, err := b.Embedded.Subscribe(ctx, dest, opts)
	if err == nil && b.subscribed != nil {
		select {
		case b.subscribed <- struct{}{}:
		default:
		}
	}
	return sub, err
}

// liveAPI is apptest.New over the embedded broker with the outbox relay
// and the lease reaper running, so that pulls answer messages; subscribed,
// when not nil, hears of each pull's subscription to its queue.
func liveAPI(t *testing.T, d store.Dialect, subscribed chan<- struct{}) *apptest.API {
	t.Helper()
	db := storetest.Open(t, d)
	logger := slog.New(slog.DiscardHandler)
	b := broker.NewEmbedded(logger)
	t.Cleanup(func() { _ = b.Close() })
	cfg := outbox.DefaultConfig
	cfg.Poll = 50 * time.Millisecond
	relay := outbox.NewRelay(cfg, outbox.Deps{Store: db.Events(), Broker: b, Vacuum: db.Events(), Now: app.Clock, Logger: logger})
	h, pullSvc := app.NewHandler(apptest.Config(), logger, db, subscribeSignal{b, subscribed}, relay, true, metrics.New(metrics.Options{}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { relay.Run(ctx) })
	wg.Go(func() { pullSvc.RunReaper(ctx, 20*time.Millisecond) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &apptest.API{T: t, URL: srv.URL, Queues: &apptest.Queues{}, DB: db}
}

// pull makes one pull request with this body.
func (s apiSub) pull(t *testing.T, body any) []pull.Message {
	t.Helper()
	r := s.a.Do("POST", s.path()+"/pull", body)
	apptest.Want(t, r, http.StatusOK)
	out := apptest.Decode[pull.MessagesResponse](t, r)
	if out.Messages == nil {
		t.Fatalf("messages is not a list: %s", r.Body)
	}
	return out.Messages
}

// pullN pulls until it has n messages, failing after within.
func (s apiSub) pullN(t *testing.T, n int, limit time.Duration) []pull.Message {
	t.Helper()
	var got []pull.Message
	end := time.Now().Add(limit)
	for len(got) < n && time.Now().Before(end) {
		got = append(got, s.pull(t, map[string]any{"maxMessages": n - len(got), "waitMs": 1000})...)
	}
	if len(got) != n {
		t.Fatalf("pulled %d messages in %s, want %d: %+v", len(got), limit, n, got)
	}
	return got
}

// patCheckMessage fails unless m is event ev's attempt, leased between from
// and to for d.
func checkMessage(t *testing.T, m pull.Message, ev loggedEvent, attempt int, from, to time.Time, d time.Duration) {
	t.Helper()
	if _, err := uuid.Parse(m.AckID); err != nil {
		t.Errorf("ackId %q: %v", m.AckID, err)
	}
	if m.EventID != ev.EventID || m.CorrelationID != ev.CorrelationID || m.EventType != "tick" || m.EventTypeVersion != 1 ||
		m.Attempt != attempt || string(m.Payload) != string(ev.Payload) || fmt.Sprint(m.Attributes) != fmt.Sprint(ev.Attributes) ||
		!m.PublishedAt.Equal(ev.PublishedAt) {
		t.Errorf("pulled %+v, want attempt %d of %+v", m, attempt, ev)
	}
	within(t, "ackDeadline", m.AckDeadline, from, to, d)
}

func TestPullAPILive(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			a := liveAPI(t, d, nil)
			s := apiSetup(t, a, map[string]any{"ackDeadline": 2000})

			// Nothing yet: an empty list, at once or after waiting.
			if got := s.pull(t, nil); len(got) != 0 {
				t.Fatalf("pulled %+v from an empty queue", got)
			}
			start := time.Now()
			if got := s.pull(t, map[string]any{"waitMs": 200}); len(got) != 0 {
				t.Fatalf("pulled %+v from an empty queue", got)
			}
			if el := time.Since(start); el < 200*time.Millisecond {
				t.Errorf("a long poll of 200 ms answered after %s", el)
			}

			events := map[string]loggedEvent{}
			for n := range 3 {
				id := apiPublish(t, a, n)
				events[id] = readLog(t, a, id)
			}
			// maxMessages bounds the answer.
			before := app.Clock()
			first := s.pull(t, map[string]any{"maxMessages": 1, "waitMs": 5000})
			rest := s.pullN(t, 2, 5*time.Second)
			after := app.Clock()
			if len(first) != 1 {
				t.Fatalf("maxMessages 1 answered %d messages", len(first))
			}
			msgs := append(first, rest...)
			for _, m := range msgs {
				checkMessage(t, m, events[m.EventID], 1, before, after, 2*time.Second)
				// The relay records a send after the broker's receipt, so a
				// consumer may get the message a moment before the log says sent.
				var attempts []publish.AttemptResponse
				apitest.Eventually(t, "the log of "+m.EventID+" past pending", func() bool {
					attempts = readLog(t, a, m.EventID).attempts(t, s)
					return len(attempts) != 1 || attempts[0].Status != "pending"
				})
				wantAttempts(t, "pulled", attempts, publish.AttemptResponse{Attempt: 1, Status: "sent"})
			}
			acked, nacked, left := msgs[0], msgs[1], msgs[2]

			// Ack: delivered.
			s.ack(t, "acked", acked.AckID)
			wantAttempts(t, "acked", readLog(t, a, acked.EventID).attempts(t, s), publish.AttemptResponse{Attempt: 1, Status: "delivered"})

			// Nack: again after 400 ms, as attempt 2 with a new ack id.
			// Meanwhile the other lease, its deadline moved to 100 ms from
			// now, passes it, and the reaper redelivers it at once, as attempt
			// 2 too.
			nackedAt := time.Now()
			s.nack(t, "nacked", nacked.AckID)
			s.modify(t, 100, "extended", left.AckID)
			before = app.Clock()
			again := s.pullN(t, 2, 5*time.Second)
			after = app.Clock()
			s.modify(t, 60000, "extended", again[0].AckID, again[1].AckID)
			if time.Since(nackedAt) < 400*time.Millisecond {
				t.Errorf("the nacked message came again after %s, before its 400 ms", time.Since(nackedAt))
			}
			slices.SortFunc(again, func(x, y pull.Message) int {
				return slices.Index([]string{nacked.EventID, left.EventID}, x.EventID) - slices.Index([]string{nacked.EventID, left.EventID}, y.EventID)
			})
			for i, old := range []pull.Message{nacked, left} {
				m := again[i]
				if m.EventID != old.EventID || m.AckID == old.AckID {
					t.Fatalf("redelivered %+v, want event %s with a new ack id", m, old.EventID)
				}
				checkMessage(t, m, events[m.EventID], 2, before, after, 2*time.Second)
			}
			wantAttempts(t, "nacked and pulled again", readLog(t, a, nacked.EventID).attempts(t, s),
				publish.AttemptResponse{Attempt: 1, Status: "failed", Error: "nacked"},
				publish.AttemptResponse{Attempt: 2, Status: "sent", ScheduledDelay: 400})
			wantAttempts(t, "past its deadline and pulled again", readLog(t, a, left.EventID).attempts(t, s),
				publish.AttemptResponse{Attempt: 1, Status: "failed", Error: "ack deadline exceeded"},
				publish.AttemptResponse{Attempt: 2, Status: "sent"})
			s.ack(t, "unknown", left.AckID)

			// modify-ack-deadline 0: redelivered at once, as attempt 3; this
			// one is nacked at the last attempt and becomes a dead letter.
			s.ack(t, "acked", again[0].AckID)
			s.modify(t, 0, "extended", again[1].AckID)
			third := s.pullN(t, 1, 5*time.Second)[0]
			if third.EventID != left.EventID || third.Attempt != 3 {
				t.Fatalf("after giving it up, pulled %+v, want attempt 3 of %s", third, left.EventID)
			}
			s.modify(t, 60000, "extended", third.AckID)
			s.nack(t, "nacked", third.AckID)
			wantAttempts(t, "given up, then nacked at the last attempt", readLog(t, a, left.EventID).attempts(t, s),
				publish.AttemptResponse{Attempt: 1, Status: "failed", Error: "ack deadline exceeded"},
				publish.AttemptResponse{Attempt: 2, Status: "failed", Error: "ack deadline exceeded"},
				publish.AttemptResponse{Attempt: 3, Status: "dead_lettered", Error: "nacked"})
			dls := s.deadLetters(t)
			if len(dls) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dls))
			}
			checkDeadLetter(t, dls[0], s, events[left.EventID], "attempts_exhausted", 3, "nacked")
			if got := s.pull(t, map[string]any{"waitMs": 600}); len(got) != 0 {
				t.Errorf("pulled %+v after everything was settled", got)
			}

			// A lease of a subscription deleted meanwhile is dropped at its deadline.
			gone := apiAddSub(t, a, "PULL", map[string]any{"ackDeadline": 1000})
			id := apiPublish(t, a, 9)
			m := gone.pullN(t, 1, 5*time.Second)[0]
			apptest.Want(t, a.Do("DELETE", gone.path(), nil), http.StatusNoContent)
			apitest.EventuallyWithin(t, 5*time.Second, "the lease "+m.AckID+" of the deleted subscription dropped", func() bool {
				att := readLog(t, a, id).attempts(t, gone)
				return len(att) == 1 && att[0].Status == "dropped" && att[0].Error == "subscription deleted"
			})
		})
	}
}

// TestPullLongPoll: a waiting pull answers as soon as a message arrives,
// and an empty queue answers after waitMs (at once for waitMs 0).
func TestPullLongPoll(t *testing.T) {
	subscribed := make(chan struct{}, 1)
	a := liveAPI(t, store.SQLite, subscribed)
	s := apiSetup(t, a, nil)

	type answer struct {
		r   apptest.Response
		err error
		at  time.Time
	}
	const body = `{"maxMessages":10,"waitMs":5000}`
	done := make(chan answer, 1)
	go func() {
		// Not a.Do: t.Fatal must not run off the test's goroutine.
		resp, err := http.Post(a.URL+s.path()+"/pull", "application/json", strings.NewReader(body))
		if err != nil {
			done <- answer{err: err, at: time.Now()}
			return
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- answer{r: apptest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}, err: err, at: time.Now()}
	}()
	select {
	case <-subscribed:
	case <-time.After(apitest.EventuallyTimeout):
		t.Fatal("the long poll did not subscribe to the queue")
	}
	publishedAt := time.Now()
	id := apiPublish(t, a, 1)
	got := <-done
	if got.err != nil {
		t.Fatalf("long poll: %v", got.err)
	}
	a.CheckSpec("POST", s.path()+"/pull", []byte(body), got.r)
	apptest.Want(t, got.r, http.StatusOK)
	out := apptest.Decode[pull.MessagesResponse](t, got.r)
	took := got.at.Sub(publishedAt)
	t.Logf("a 5 s long poll answered %v after a publish", took.Round(time.Millisecond))
	if len(out.Messages) != 1 || out.Messages[0].EventID != id {
		t.Fatalf("long poll answered %+v, want %s", out.Messages, id)
	}
	if took > time.Second {
		t.Errorf("the long poll answered %v after the publish, want well under its 5 s (< 1 s)", took)
	}
	s.ack(t, "acked", out.Messages[0].AckID)

	for _, waitMs := range []int{800, 0} {
		start := time.Now()
		if got := s.pull(t, map[string]any{"waitMs": waitMs}); len(got) != 0 {
			t.Fatalf("pulled %+v from an empty queue", got)
		}
		took := time.Since(start)
		t.Logf("empty pull with waitMs %d answered after %v", waitMs, took.Round(time.Millisecond))
		if w := time.Duration(waitMs) * time.Millisecond; took < w || took > w+300*time.Millisecond {
			t.Errorf("empty pull with waitMs %d answered after %v, want %v … %v", waitMs, took, w, w+300*time.Millisecond)
		}
	}
	// No body at all is a pull with the defaults (10 messages, no wait).
	apptest.Want(t, a.Do("POST", s.path()+"/pull", nil), http.StatusOK)
}

// TestPullAPIUnstorableInput: what PostgreSQL cannot hold (a NUL character
// in text, an integer past its column) gets a 422 naming the field, alike on
// both databases; nothing answers 500.
func TestPullAPIUnstorableInput(t *testing.T) {
	t.Parallel()
	apptest.ForEachDialect(t, func(t *testing.T, a *apptest.API) {
		sub := apiSetup(t, a, nil).path()
		cases := []struct {
			name, path, body, field string
		}{
			// A NUL character in text.
			{"ack id", sub + "/ack", `{"ackIds":["\u0000"]}`, "ackIds[0]"},

			// Integers past their column (PostgreSQL INTEGER: 2147483647).
			{"pull max messages", sub + "/pull", `{"maxMessages":2147483648}`, "maxMessages"},
			{"pull wait", sub + "/pull", `{"waitMs":9223372036854775807}`, "waitMs"},
			{"ack deadline", sub + "/modify-ack-deadline", `{"ackIds":["x"],"ackDeadlineMs":9223372036854775807}`, "ackDeadlineMs"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				apptest.WantField(t, a.Do("POST", tc.path, tc.body), tc.field)
			})
		}
	})
}
