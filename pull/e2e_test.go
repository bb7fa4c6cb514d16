package pull_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/app/apptest"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/pull"
	"github.com/roomhub/messaging-api/store/storetest"
)

// The tests of this file run the whole service (apptest.StartService) with
// the embedded broker and time what a consumer sees: redeliveries after a
// nack or a lapsed ack deadline, expiry, dead letters and replays.

// embeddedTolerance is how much later than planned a nacked message may be
// answered by a long poll with the embedded broker: the delay runs from the
// server's clock at the nack, and the gap is measured by the test from
// before it sends the nack to after the pull's answer, so it adds two HTTP
// round trips, the SQLite transaction, the relay's hand-off to the broker
// and the broker timer. Never early.
const embeddedTolerance = 150 * time.Millisecond

// reaperSlack is how late after its ack deadline a lease may be answered
// again: the reaper runs every 500 ms, then the outbox relay, the broker and
// the waiting long poll add a few ms.
const reaperSlack = 500*time.Millisecond + embeddedTolerance

// sub is a PULL subscription with the operations only these tests use.
type sub struct{ apptest.PullSub }

// setup is Client.SetupPull.
func setup(c apptest.Client, room, roomFields, subFields string) sub {
	c.T.Helper()
	return sub{c.SetupPull(room, roomFields, subFields)}
}

// on returns s as seen through another process of the service.
func (s sub) on(c apptest.Client) sub { s.C = c; return s }

// pullOne waits up to within for one message and returns it with the time
// its answer arrived.
func (s sub) pullOne(within time.Duration) (pull.Message, time.Time) {
	s.C.T.Helper()
	ms := s.Pull(1, int(within.Milliseconds()))
	at := time.Now()
	if len(ms) != 1 {
		s.C.T.Fatalf("no message within %v", within)
	}
	return ms[0], at
}

func (s sub) nack(ids ...string) []pull.Result { return s.Settle("nack", ids...) }

// modify sets the ack deadline of ids to ms from now.
func (s sub) modify(ms int64, ids ...string) []pull.Result {
	s.C.T.Helper()
	raw, _ := json.Marshal(map[string]any{"ackIds": ids, "ackDeadlineMs": ms})
	var out pull.ResultsResponse
	s.C.CallJSON("POST", s.Path()+"/modify-ack-deadline", string(raw), 200, &out)
	return out.Results
}

// ackBody is the body of an ack or nack.
func ackBody(ids ...string) string {
	raw, _ := json.Marshal(map[string][]string{"ackIds": ids})
	return string(raw)
}

// wantResults fails unless results answer ids in order with statuses.
func wantResults(t *testing.T, what string, got []pull.Result, ids []string, statuses ...string) {
	t.Helper()
	want := make([]pull.Result, len(ids))
	for i := range ids {
		want[i] = pull.Result{AckID: ids[i], Status: statuses[i]}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: results %+v, want %+v", what, got, want)
	}
}

// logRow is what a test expects of one row of a delivery log.
type logRow struct {
	status, err string
	delay       int64
}

// waitLog waits until the delivery log of event is rows (attempts 1, 2, …):
// a settled row is written in the same transaction as the settlement, but a
// "sent" may lag behind the broker by the relay's mark.
func (s sub) waitLog(event string, rows ...logRow) []delivery.DeliveryResponse {
	s.C.T.Helper()
	var got []delivery.DeliveryResponse
	match := func() bool {
		got = s.Deliveries(event)
		if len(got) != len(rows) {
			return false
		}
		for i, g := range got {
			if g.Attempt != i+1 || g.Status != rows[i].status || g.Error != rows[i].err || g.ScheduledDelay != rows[i].delay {
				return false
			}
		}
		return true
	}
	matched := false
	defer func() {
		if !matched {
			s.C.T.Logf("delivery log of %s:\n%+v\nwant %+v", event, got, rows)
		}
	}()
	apitest.EventuallyWithin(s.C.T, 5*time.Second, "the delivery log of "+event, match)
	matched = true
	return got
}

type timelineAttempt struct {
	Attempt        int    `json:"attempt"`
	ScheduledDelay int64  `json:"scheduledDelay"`
	Status         string `json:"status"`
	Error          string `json:"error"`
}

// timeline is the attempts of event's only delivery in the room's message log.
func (s sub) timeline(event string) []timelineAttempt {
	s.C.T.Helper()
	var ev struct {
		Deliveries []struct {
			SubscriptionID   string            `json:"subscriptionId"`
			SubscriptionType string            `json:"subscriptionType"`
			Attempts         []timelineAttempt `json:"attempts"`
		} `json:"deliveries"`
	}
	s.C.CallJSON("GET", "/v1/rooms/"+s.Room+"/messages/"+event, "", 200, &ev)
	if len(ev.Deliveries) != 1 || ev.Deliveries[0].SubscriptionType != "PULL" || ev.Deliveries[0].SubscriptionID != s.ID {
		s.C.T.Fatalf("event %s has deliveries %+v, want one PULL delivery to %s", event, ev.Deliveries, s.ID)
	}
	return ev.Deliveries[0].Attempts
}

// wantTimeline fails unless the message log of event lists rows.
func (s sub) wantTimeline(event string, rows ...logRow) {
	s.C.T.Helper()
	got := s.timeline(event)
	want := make([]timelineAttempt, len(rows))
	for i, r := range rows {
		want[i] = timelineAttempt{Attempt: i + 1, ScheduledDelay: r.delay, Status: r.status, Error: r.err}
	}
	if !slices.Equal(got, want) {
		s.C.T.Fatalf("timeline of %s:\n%+v\nwant %+v", event, got, want)
	}
}

// gap logs how far observed is from planned and fails unless it lies in
// [planned, planned+tolerance].
func gap(t *testing.T, what string, observed, planned, tolerance time.Duration) {
	t.Helper()
	t.Logf("%s: planned %v, observed %v (%+v)", what, planned, observed.Round(time.Millisecond), (observed - planned).Round(time.Millisecond))
	if observed < planned || observed > planned+tolerance {
		t.Errorf("%s: observed %v, want %v to %v", what, observed, planned, planned+tolerance)
	}
}

// service runs the service with the embedded broker and env (SQLite unless
// env names a DATABASE_URL).
func service(t *testing.T, env map[string]string) apptest.Client {
	t.Helper()
	full := map[string]string{"OUTBOX_POLL_INTERVAL": "100ms"}
	for k, v := range env {
		full[k] = v
	}
	return apptest.StartService(t, full)
}

// TestPullAckAndResults: a pull answers every field of what was published,
// an ack settles each lease once and answers a status per id in request
// order (invalid, unknown, duplicate, another subscription's), and acked
// messages never come back.
func TestPullAckAndResults(t *testing.T) {
	t.Parallel()
	c := service(t, nil)
	room := apptest.UniqueRoom("pull-ack")
	sub := setup(c, room, "", `"ackDeadline":10000`)
	other := c.AddPullSub(room, "")
	var pubs []apptest.Tick
	for n := range 3 {
		pubs = append(pubs, c.PublishTick(room, n))
	}

	before := time.Now()
	got := sub.PullN(3, 5*time.Second)
	after := time.Now()
	byEvent := map[string]pull.Message{}
	for _, m := range got {
		byEvent[m.EventID] = m
	}
	for n, p := range pubs {
		m, ok := byEvent[p.EventID]
		switch {
		case !ok:
			t.Fatalf("event %s was not pulled: %+v", p.EventID, got)
		case m.CorrelationID != p.CorrelationID || m.EventType != "tick" || m.EventTypeVersion != 1 || m.Attempt != 1:
			t.Errorf("message %+v: want correlationId %s, tick v1, attempt 1", m, p.CorrelationID)
		case string(m.Payload) != p.Payload || m.Attributes["seq"] != fmt.Sprint(n) || len(m.Attributes) != 1:
			t.Errorf("message %s: payload %s attributes %v, want %s {seq:%d}", m.EventID, m.Payload, m.Attributes, p.Payload, n)
		case m.PublishedAt.Sub(p.PublishedAt).Abs() >= time.Millisecond:
			// Within 1 ms, not equal: the broker header x-published-at
			// carries epoch ms, while the publish answer has µs (a bug,
			// reported).
			t.Errorf("message %s: publishedAt %v, want %v", m.EventID, m.PublishedAt, p.PublishedAt)
		case m.AckDeadline.Before(before.Add(10*time.Second-time.Millisecond)) || m.AckDeadline.After(after.Add(10*time.Second)):
			t.Errorf("message %s: ackDeadline %v, want the pull's time + 10 s (%v … %v)", m.EventID, m.AckDeadline, before.Add(10*time.Second), after.Add(10*time.Second))
		}
		if _, err := uuid.Parse(m.AckID); err != nil {
			t.Errorf("ackId %q is not a UUID", m.AckID)
		}
	}
	m0, m1, m2 := got[0].AckID, got[1].AckID, got[2].AckID
	stranger := uuid.NewString()

	// Another subscription cannot settle this one's leases.
	wantResults(t, "ack through another subscription", other.Ack(m0), []string{m0}, "unknown")

	ids := []string{m0, "not-a-uuid", stranger, m1, m0, ""}
	wantResults(t, "first ack", sub.Ack(ids...), ids, "acked", "invalid", "unknown", "acked", "acked", "invalid")
	ids = []string{m0, m1, m2}
	wantResults(t, "second ack", sub.Ack(ids...), ids, "unknown", "unknown", "acked")
	wantResults(t, "nack of acked", sub.nack(m0, m2), []string{m0, m2}, "unknown", "unknown")
	wantResults(t, "modify of acked", sub.modify(5000, m1), []string{m1}, "unknown")

	start := time.Now()
	sub.PullNone(1500)
	if waited := time.Since(start); waited < 1500*time.Millisecond {
		t.Errorf("an empty pull with waitMs 1500 answered after %v", waited)
	}
	for _, p := range pubs {
		sub.waitLog(p.EventID, logRow{status: "delivered"})
	}
	// The other subscription still has its own copies.
	other.PullN(3, 5*time.Second)
}

// TestPullAckDeadlineRedelivers: a lease not acked within the
// subscription's ackDeadline is delivered again with attempt+1 (right after
// the deadline, within the reaper's period), and its old ack id is unknown.
func TestPullAckDeadlineRedelivers(t *testing.T) {
	c := service(t, nil)
	sub := setup(c, apptest.UniqueRoom("pull-deadline"), "", `"ackDeadline":1000`)
	p := c.PublishTick(sub.Room, 1)

	first, pulledAt := sub.pullOne(5 * time.Second)
	if first.Attempt != 1 || first.EventID != p.EventID {
		t.Fatalf("first pull: %+v", first)
	}
	if d := first.AckDeadline.Sub(pulledAt); d < 900*time.Millisecond || d > 1000*time.Millisecond {
		t.Errorf("ackDeadline is %v after the answer, want 1 s after the pull", d)
	}
	again, at := sub.pullOne(5 * time.Second)
	gap(t, "redelivery after the ack deadline", at.Sub(first.AckDeadline), 0, reaperSlack)
	if again.EventID != p.EventID || again.Attempt != 2 || again.AckID == first.AckID || again.CorrelationID != p.CorrelationID {
		t.Fatalf("redelivery %+v, want event %s attempt 2 with a new ack id", again, p.EventID)
	}
	wantResults(t, "ack after the deadline", sub.Ack(first.AckID), []string{first.AckID}, "unknown")
	wantResults(t, "ack of the redelivery", sub.Ack(again.AckID), []string{again.AckID}, "acked")
	log := sub.waitLog(p.EventID, logRow{status: "failed", err: "ack deadline exceeded"}, logRow{status: "delivered"})
	if log[0].NextAttemptAt == nil || log[0].NextAttemptAt.Before(first.AckDeadline) {
		t.Errorf("attempt 1 nextAttemptAt %v, want at or after the deadline %v", log[0].NextAttemptAt, first.AckDeadline)
	}
	sub.wantTimeline(p.EventID, logRow{status: "failed", err: "ack deadline exceeded"}, logRow{status: "delivered"})
	sub.PullNone(700)
}

// TestPullAckAfterDeadline: between the deadline and the reaper's next round
// the lease is still stored, but an ack is already refused (unknown), so a
// late ack never races the redelivery.
func TestPullAckAfterDeadline(t *testing.T) {
	t.Parallel()
	c := service(t, nil)
	sub := setup(c, apptest.UniqueRoom("pull-late"), "", `"ackDeadline":1000`)
	c.PublishTick(sub.Room, 1)
	m, _ := sub.pullOne(5 * time.Second)
	// A sleep, not a poll: any settlement sent before the deadline would
	// succeed and end the lease. The service reads this machine's clock.
	time.Sleep(time.Until(m.AckDeadline) + 5*time.Millisecond)
	wantResults(t, "late ack", sub.Ack(m.AckID), []string{m.AckID}, "unknown")
	wantResults(t, "late modify", sub.modify(60000, m.AckID), []string{m.AckID}, "unknown")
	wantResults(t, "late nack", sub.nack(m.AckID), []string{m.AckID}, "unknown")
	again, _ := sub.pullOne(5 * time.Second)
	if again.Attempt != 2 || again.EventID != m.EventID {
		t.Fatalf("redelivery %+v, want attempt 2 of %s", again, m.EventID)
	}
	sub.Ack(again.AckID)
}

// TestPullModifyAckDeadline: extending a lease keeps it from redelivery
// past its original deadline (and it stays ackable); 0 gives it up at once.
func TestPullModifyAckDeadline(t *testing.T) {
	t.Parallel()
	c := service(t, nil)
	sub := setup(c, apptest.UniqueRoom("pull-modify"), "", `"ackDeadline":1000`)
	c.PublishTick(sub.Room, 1)
	c.PublishTick(sub.Room, 2)
	got := sub.PullN(2, 5*time.Second)
	keep, release := got[0], got[1]

	ids := []string{keep.AckID, "nope", uuid.NewString()}
	wantResults(t, "extend", sub.modify(3000, ids...), ids, "extended", "invalid", "unknown")
	releasedAt := time.Now()
	wantResults(t, "release", sub.modify(0, release.AckID), []string{release.AckID}, "extended")

	back, at := sub.pullOne(3 * time.Second)
	gap(t, "redelivery after modify-ack-deadline 0", at.Sub(releasedAt), 0, reaperSlack)
	if back.EventID != release.EventID || back.Attempt != 2 {
		t.Fatalf("after release: %+v, want attempt 2 of %s", back, release.EventID)
	}
	wantResults(t, "ack of the released message's old lease", sub.Ack(release.AckID), []string{release.AckID}, "unknown")
	sub.Ack(back.AckID)

	// The extended lease outlives its original deadline (pull + 1 s) by far:
	// nothing comes back until 2.5 s after the extension, and it can still be
	// acked then.
	sub.PullNone(int(time.Until(keep.AckDeadline.Add(1500 * time.Millisecond)).Milliseconds()))
	wantResults(t, "ack of the extended lease", sub.Ack(keep.AckID), []string{keep.AckID}, "acked")
	sub.waitLog(keep.EventID, logRow{status: "delivered"})
	sub.waitLog(release.EventID, logRow{status: "failed", err: "ack deadline exceeded"}, logRow{status: "delivered"})
	sub.PullNone(600)
}

// TestPullNackBackoff: a nacked message comes back after the delay its
// retry policy gives for that attempt: deliveryDelay × multiplier^k after
// attempt k (200 × 2¹ = 400 ms, then 200 × 2² = 800 ms), logged as a
// scheduled resend.
func TestPullNackBackoff(t *testing.T) {
	c := service(t, nil)
	sub := setup(c, apptest.UniqueRoom("pull-nack"), `"deliveryDelay":200,"deliveryDelayMultiplier":2,"deliveryAttempts":5`, "")
	p := c.PublishTick(sub.Room, 1)
	m, _ := sub.pullOne(5 * time.Second)
	for k, planned := range []time.Duration{400 * time.Millisecond, 800 * time.Millisecond} {
		if m.Attempt != k+1 || m.EventID != p.EventID {
			t.Fatalf("pulled %+v, want attempt %d of %s", m, k+1, p.EventID)
		}
		nackedAt := time.Now()
		wantResults(t, "nack", sub.nack(m.AckID), []string{m.AckID}, "nacked")
		var at time.Time
		m, at = sub.pullOne(5 * time.Second)
		gap(t, fmt.Sprintf("redelivery after nack of attempt %d", k+1), at.Sub(nackedAt), planned, embeddedTolerance)
	}
	if m.Attempt != 3 {
		t.Fatalf("third pull: attempt %d", m.Attempt)
	}
	sub.Ack(m.AckID)
	rows := []logRow{{status: "failed", err: "nacked"}, {status: "failed", err: "nacked", delay: 400}, {status: "delivered", delay: 800}}
	log := sub.waitLog(p.EventID, rows...)
	for i := range 2 {
		if log[i].NextAttemptAt == nil || log[i].CompletedAt == nil ||
			log[i].NextAttemptAt.Sub(*log[i].CompletedAt) != time.Duration(log[i+1].ScheduledDelay)*time.Millisecond {
			t.Errorf("attempt %d: completedAt %v nextAttemptAt %v, want %d ms apart", i+1, log[i].CompletedAt, log[i].NextAttemptAt, log[i+1].ScheduledDelay)
		}
	}
	sub.wantTimeline(p.EventID, rows...)
}

// TestPullDeadLetterAndReplay: past the last attempt (deliveryAttempts 2) a
// nacked message becomes a dead letter (attempts_exhausted) and is not
// delivered again; replaying it queues a new event from attempt 1.
func TestPullDeadLetterAndReplay(t *testing.T) {
	t.Parallel()
	c := service(t, nil)
	sub := setup(c, apptest.UniqueRoom("pull-dlq"), `"deliveryDelay":100,"deliveryDelayMultiplier":2,"deliveryAttempts":2`, "")
	p := c.PublishTick(sub.Room, 7)
	for attempt := 1; attempt <= 2; attempt++ {
		m, _ := sub.pullOne(5 * time.Second)
		if m.Attempt != attempt || m.EventID != p.EventID {
			t.Fatalf("pull: %+v, want attempt %d of %s", m, attempt, p.EventID)
		}
		wantResults(t, "nack", sub.nack(m.AckID), []string{m.AckID}, "nacked")
	}
	dls := sub.DeadLetters()
	if len(dls) != 1 {
		t.Fatalf("dead letters %+v, want 1", dls)
	}
	dl := dls[0]
	if dl.EventID != p.EventID || dl.CorrelationID != p.CorrelationID || dl.Reason != "attempts_exhausted" ||
		dl.Attempts != 2 || dl.LastError != "nacked" || string(dl.Payload) != p.Payload {
		t.Errorf("dead letter %+v, want event %s, attempts_exhausted after 2 attempts, last error nacked, payload %s", dl, p.EventID, p.Payload)
	}
	rows := []logRow{{status: "failed", err: "nacked"}, {status: "dead_lettered", err: "nacked", delay: 200}}
	sub.waitLog(p.EventID, rows...)
	sub.wantTimeline(p.EventID, rows...)
	sub.PullNone(800)

	var rep delivery.ReplayResponse
	c.CallJSON("POST", sub.Path()+"/dead-letters/"+dl.ID+":replay", "", 202, &rep)
	if len(rep.Replayed) != 1 || rep.Replayed[0].DeadLetterID != dl.ID || rep.Replayed[0].EventID == p.EventID {
		t.Fatalf("replay answered %+v", rep)
	}
	m, _ := sub.pullOne(5 * time.Second)
	if m.EventID != rep.Replayed[0].EventID || m.Attempt != 1 || m.CorrelationID != p.CorrelationID || string(m.Payload) != p.Payload || m.Attributes["seq"] != "7" {
		t.Fatalf("replayed message %+v, want event %s attempt 1 with correlation %s, payload %s and its attributes", m, rep.Replayed[0].EventID, p.CorrelationID, p.Payload)
	}
	wantResults(t, "ack of the replay", sub.Ack(m.AckID), []string{m.AckID}, "acked")
	if dls := sub.DeadLetters(); len(dls) != 0 {
		t.Errorf("dead letters after replay: %+v", dls)
	}
	sub.waitLog(m.EventID, logRow{status: "delivered"})
}

// TestPullExpired: an expired message is never returned: not from the
// queue, and not as a redelivery (a nack or deadline that would redeliver
// it past its expiry dead-letters it as expired instead).
func TestPullExpired(t *testing.T) {
	t.Parallel()
	c := service(t, nil)
	sub := setup(c, apptest.UniqueRoom("pull-expired"), `"messageExpiration":300,"deliveryDelay":400,"deliveryDelayMultiplier":1,"deliveryAttempts":5`, "")

	stale := c.PublishTick(sub.Room, 1)
	apitest.Eventually(t, "the stale copy in the queue", func() bool {
		ds := sub.Deliveries(stale.EventID)
		return len(ds) == 1 && ds[0].Status == "sent"
	})
	// A sleep until the expiry: the service reads this machine's clock, and
	// nothing tells of an expiry before a pull meets it.
	time.Sleep(time.Until(stale.PublishedAt.Add(300*time.Millisecond)) + 5*time.Millisecond)
	sub.PullNone(500)
	// Expired in the queue: never returned, but not silently gone either.
	sub.waitLog(stale.EventID, logRow{status: "expired", err: "expired before it was pulled"})

	// Pulled in time, nacked: the next attempt (400 ms later) would come
	// after the expiry (300 ms), so it is a dead letter, not a redelivery.
	fresh := c.PublishTick(sub.Room, 2)
	m, _ := sub.pullOne(250 * time.Millisecond)
	if m.EventID != fresh.EventID {
		t.Fatalf("pulled %+v, want %s", m, fresh.EventID)
	}
	wantResults(t, "nack", sub.nack(m.AckID), []string{m.AckID}, "nacked")
	sub.PullNone(700)
	dls := sub.DeadLetters()
	if len(dls) != 2 || dls[0].EventID != stale.EventID || dls[0].Reason != "expired" || dls[0].LastError != "expired before it was pulled" ||
		dls[1].EventID != fresh.EventID || dls[1].Reason != "expired" || dls[1].Attempts != 1 ||
		dls[1].LastError != "nacked; would expire before the next attempt" {
		t.Fatalf("dead letters %+v, want %s expired in the queue and %s expired after 1 attempt", dls, stale.EventID, fresh.EventID)
	}
	sub.waitLog(fresh.EventID, logRow{status: "dead_lettered", err: "nacked; would expire before the next attempt"})
}

// TestPullConflicts: only an ACTIVE PULL subscription can be pulled from.
func TestPullConflicts(t *testing.T) {
	t.Parallel()
	c := service(t, nil)
	sub := setup(c, apptest.UniqueRoom("pull-409"), "", "")
	var push struct {
		ID string `json:"id"`
	}
	c.CallJSON("POST", "/v1/rooms/"+sub.Room+"/subscriptions", `{"type":"PUSH","pushUrl":"http://127.0.0.1:9/hook","eventTypes":[{"eventType":"tick"}]}`, 201, &push)
	pushPath := "/v1/rooms/" + sub.Room + "/subscriptions/" + push.ID

	c.CallJSON("POST", pushPath+"/pull", `{"waitMs":0}`, 409, nil)
	c.CallJSON("PATCH", sub.Path(), `{"status":"PAUSED"}`, 200, nil)
	c.CallJSON("POST", sub.Path()+"/pull", `{"waitMs":0}`, 409, nil)
	c.CallJSON("PATCH", sub.Path(), `{"status":"ACTIVE"}`, 200, nil)
	sub.PullNone(0)
	c.CallJSON("PATCH", sub.Path(), `{"status":"TERMINATED"}`, 200, nil)
	c.CallJSON("POST", sub.Path()+"/pull", `{"waitMs":0}`, 409, nil)

	var prob struct {
		Status int `json:"status"`
	}
	c.CallJSON("POST", pushPath+"/pull", `{}`, 409, &prob)
	if prob.Status != 409 {
		t.Errorf("pull from PUSH: a problem with status %d, want 409", prob.Status)
	}
	c.CallJSON("POST", "/v1/rooms/"+sub.Room+"/subscriptions/"+uuid.NewString()+"/pull", `{}`, 404, nil)
	c.CallJSON("POST", "/v1/rooms/no-such-room-"+uuid.NewString()[:8]+"/subscriptions/"+sub.ID+"/ack", ackBody(uuid.NewString()), 404, nil)
}

// TestPullValidation: out-of-range and malformed fields are 422 problems
// naming the field.
func TestPullValidation(t *testing.T) {
	t.Parallel()
	c := service(t, nil)
	sub := setup(c, apptest.UniqueRoom("pull-422"), "", "")
	many := make([]string, 1001)
	for i := range many {
		many[i] = uuid.NewString()
	}
	id := uuid.NewString()
	for _, tc := range []struct {
		op, body, field string
	}{
		{"pull", `{"maxMessages":0}`, "maxMessages"},
		{"pull", `{"maxMessages":101}`, "maxMessages"},
		{"pull", `{"maxMessages":-1}`, "maxMessages"},
		{"pull", `{"maxMessages":"10"}`, "maxMessages"},
		{"pull", `{"waitMs":-1}`, "waitMs"},
		{"pull", `{"waitMs":30001}`, "waitMs"},
		{"pull", `{"waitMs":1.5}`, "waitMs"},
		{"ack", `{}`, "ackIds"},
		{"ack", `{"ackIds":[]}`, "ackIds"},
		{"ack", `{"ackIds":null}`, "ackIds"},
		{"ack", ackBody(many...), "ackIds"},
		{"ack", `{"ackIds":[1]}`, "ackIds"},
		{"ack", `{"ackIds":["` + id + `"],"ackDeadlineMs":1000}`, "ackDeadlineMs"},
		{"nack", `{"ackIds":[]}`, "ackIds"},
		{"nack", ackBody(many...), "ackIds"},
		{"modify-ack-deadline", `{"ackIds":["` + id + `"]}`, "ackDeadlineMs"},
		{"modify-ack-deadline", `{"ackIds":["` + id + `"],"ackDeadlineMs":-1}`, "ackDeadlineMs"},
		{"modify-ack-deadline", `{"ackIds":["` + id + `"],"ackDeadlineMs":600001}`, "ackDeadlineMs"},
		{"modify-ack-deadline", `{"ackIds":["` + id + `"],"ackDeadlineMs":null}`, "ackDeadlineMs"},
		{"modify-ack-deadline", `{"ackIds":[],"ackDeadlineMs":1000}`, "ackIds"},
	} {
		status, raw := c.Send("POST", sub.Path()+"/"+tc.op, tc.body)
		var prob struct {
			Status int `json:"status"`
			Errors []struct {
				Field string `json:"field"`
			} `json:"errors"`
		}
		_ = json.Unmarshal(raw, &prob)
		named := slices.ContainsFunc(prob.Errors, func(e struct {
			Field string `json:"field"`
		}) bool {
			return e.Field == tc.field
		})
		if status != 422 || prob.Status != 422 || !named {
			body := tc.body
			if len(body) > 80 {
				body = body[:80] + "…"
			}
			t.Errorf("%s %s: %d %s, want 422 naming %s", tc.op, body, status, raw, tc.field)
		}
	}
	// The limits themselves are accepted.
	c.CallJSON("POST", sub.Path()+"/pull", `{"maxMessages":100,"waitMs":0}`, 200, nil)
	c.CallJSON("POST", sub.Path()+"/pull", `{"maxMessages":1}`, 200, nil)
	c.CallJSON("POST", sub.Path()+"/ack", ackBody(many[:1000]...), 200, nil)
	c.CallJSON("POST", sub.Path()+"/modify-ack-deadline", `{"ackIds":["`+id+`"],"ackDeadlineMs":600000}`, 200, nil)
	c.CallJSON("POST", sub.Path()+"/modify-ack-deadline", `{"ackIds":["`+id+`"],"ackDeadlineMs":0}`, 200, nil)
}

// TestPullLifecycle walks one message through every kind of settlement on
// each database: extended past its deadline, then let lapse (redelivered at
// once), nacked (redelivered after 200 × 2² ms), acked; the deliveries and
// the message timeline list every attempt.
func TestPullLifecycle(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			if db == "postgres" {
				env["DATABASE_URL"] = storetest.PostgresSchemaURL(t)
			}
			c := service(t, env)
			sub := setup(c, apptest.UniqueRoom("pull-life"), `"deliveryDelay":200,"deliveryDelayMultiplier":2,"deliveryAttempts":4`, `"ackDeadline":1000`)
			p := c.PublishTick(sub.Room, 1)

			m1, _ := sub.pullOne(5 * time.Second)
			extendedAt := time.Now() // no later than the server's clock at the extension
			wantResults(t, "extend", sub.modify(2000, m1.AckID), []string{m1.AckID}, "extended")
			sub.PullNone(1500) // past the original deadline, inside the extension
			m2, at := sub.pullOne(5 * time.Second)
			if m2.EventID != p.EventID || m2.Attempt != 2 {
				t.Fatalf("after the extension lapsed: %+v", m2)
			}
			if d := at.Sub(extendedAt); d < 2*time.Second {
				t.Errorf("redelivered %v after a 2 s extension", d)
			}
			wantResults(t, "nack", sub.nack(m2.AckID), []string{m2.AckID}, "nacked")
			m3, _ := sub.pullOne(5 * time.Second)
			if m3.EventID != p.EventID || m3.Attempt != 3 {
				t.Fatalf("after the nack: %+v", m3)
			}
			wantResults(t, "ack", sub.Ack(m3.AckID, m2.AckID, m1.AckID), []string{m3.AckID, m2.AckID, m1.AckID}, "acked", "unknown", "unknown")
			rows := []logRow{
				{status: "failed", err: "ack deadline exceeded"},
				{status: "failed", err: "nacked"},
				{status: "delivered", delay: 800},
			}
			sub.waitLog(p.EventID, rows...)
			sub.wantTimeline(p.EventID, rows...)
			sub.PullNone(1200) // longer than the ack deadline: nothing lapses
			if dls := sub.DeadLetters(); len(dls) != 0 {
				t.Errorf("dead letters: %+v", dls)
			}
		})
	}
}
