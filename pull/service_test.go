package pull

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api"
	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/subscriptions"
)

// TestPullTakesWhatIsWaiting: a pull answers what is already queued, up to
// maxMessages, at once, and leases each message until the ack deadline. When
// the broker's window is smaller than maxMessages (Artemis counts it in
// bytes), a pull whose subscription is full leases and acks what it holds,
// which opens the window, and takes more until it has maxMessages.
func TestPullTakesWhatIsWaiting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		queued int
		window int // the broker's prefetch window; 0: as many as asked
		want   []int
	}{
		{"fewer than asked", 5, 0, []int{5}},
		{"more than asked", 25, 0, []int{10, 10, 5}},
		{"a window of 3", 25, 3, []int{10, 10, 5}},
		{"a window of 3, 3 queued", 3, 3, []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			h.consumer.window = tc.window
			published := map[string]bool{}
			for range tc.queued {
				published[h.publish(t, h.sub, 1, nil).ID.String()] = true
			}
			var got []int
			seen := map[string]bool{}
			for range tc.want {
				start := time.Now()
				// The wait only bounds a broken pull: one with messages
				// waiting answers at once.
				ms, err := h.svc.Pull(t.Context(), h.room.Identifier, h.sub.ID.String(), 10, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("a pull with messages waiting answered after %s, want at once", d)
				}
				got = append(got, len(ms))
				for _, m := range ms {
					if seen[m.EventID] || !published[m.EventID] {
						t.Errorf("event %s pulled twice or never published", m.EventID)
					}
					seen[m.EventID] = true
					l, ok := h.store.lease(uuid.MustParse(m.AckID))
					if !ok || l.Deadline != h.clock.Now().Add(h.sub.AckDeadline) || !m.AckDeadline.Equal(l.Deadline) || l.Event.ID.String() != m.EventID {
						t.Errorf("message %+v: lease %+v (stored %v), want one until now + the ack deadline", m, l, ok)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("pulls of 10 answered %v, want %v", got, tc.want)
			}
			if len(seen) != tc.queued {
				t.Errorf("%d of %d queued messages pulled", len(seen), tc.queued)
			}
		})
	}
}

// TestPullLeases: a lease carries the event as published, the copy's send id
// and attempt (at least 1), and the ack deadline; a copy whose event expired
// is never returned but settled as an expired dead letter, and acked on the
// broker all the same.
func TestPullLeases(t *testing.T) {
	t.Parallel()
	h := setup(t)
	now := h.clock.Now()
	first := h.publish(t, h.sub, 0, func(ev *message.Event) {
		ev.Trace = message.Trace{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", State: "k=v"}
	})
	second := h.publish(t, h.sub, 2, func(ev *message.Event) { ev.ExpiresAt = now.Add(time.Hour) })
	expired := h.publish(t, h.sub, 1, func(ev *message.Event) { ev.ExpiresAt = now })

	ms, err := h.svc.Pull(t.Context(), h.room.Identifier, h.sub.ID.String(), 10, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("%d messages, want 2 (the expired one never returned): %+v", len(ms), ms)
	}
	for i, tc := range []struct {
		ev      message.Event
		attempt int
	}{{first, 1}, {second, 2}} {
		m := ms[i]
		if m.EventID != tc.ev.ID.String() || m.CorrelationID != tc.ev.CorrelationID || m.EventType != "tick" || m.EventTypeVersion != 1 ||
			m.Attempt != tc.attempt || !m.PublishedAt.Equal(tc.ev.PublishedAt.Truncate(time.Microsecond)) || string(m.Payload) != `{"n":1}` ||
			m.Attributes["region"] != "eu" || m.Traceparent != tc.ev.Trace.Parent || m.Tracestate != tc.ev.Trace.State {
			t.Errorf("message %d: %+v, want event %+v at attempt %d", i, m, tc.ev, tc.attempt)
		}
		l, _ := h.store.lease(uuid.MustParse(m.AckID))
		if l.SendID == uuid.Nil || l.SubscriptionID != h.sub.ID || l.RoomID != h.room.ID || !l.LeasedAt.Equal(now) || l.Attempt != tc.attempt {
			t.Errorf("lease %d: %+v", i, l)
		}
	}
	st := h.store.settlements()
	if len(st) != 1 || st[0].SendID == uuid.Nil || st[0].Attempt.Status != message.StatusExpired || st[0].DeadLetter == nil ||
		st[0].DeadLetter.Reason != delivery.ReasonExpired || st[0].DeadLetter.Event.ID != expired.ID || st[0].DeadLetter.SubscriptionID != h.sub.ID {
		t.Errorf("settlements %+v, want the expired copy dead-lettered as expired", st)
	}
	if !slices.Equal(h.obs.outcomes, []string{"pull expired/1"}) {
		t.Errorf("observed %v, want the expired copy", h.obs.outcomes)
	}
	// Everything was acked on the broker: a new subscription with a window
	// of one would be full at once with any message left (the embedded
	// broker assigns what is queued when it subscribes).
	sub, err := h.broker.Subscribe(t.Context(), h.sub.Queue(), broker.SubscribeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if sub.Full() {
		t.Error("messages left unacked on the broker")
	}
}

// TestPullRefuses: only an ACTIVE PULL subscription can be pulled from, and
// a broker that cannot subscribe makes the service unavailable.
func TestPullRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		sub     func(*subscriptions.Subscription)
		brokerr error
		want    error
	}{
		{"push", func(s *subscriptions.Subscription) { s.Type = subscriptions.TypePush }, nil, ErrNotPull},
		{"paused", func(s *subscriptions.Subscription) { s.Status = subscriptions.StatusPaused }, nil, ErrNotActive},
		{"terminated", func(s *subscriptions.Subscription) { s.Status = subscriptions.StatusTerminated }, nil, ErrNotActive},
		{"broker down", func(*subscriptions.Subscription) {}, broker.ErrClosed, api.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			sub := h.addSub(tc.sub)
			h.consumer.err = tc.brokerr
			if _, err := h.svc.Pull(t.Context(), h.room.Identifier, sub.ID.String(), 10, time.Second); !errors.Is(err, tc.want) {
				t.Errorf("Pull: %v, want %v", err, tc.want)
			}
		})
	}
	h := setup(t)
	if _, err := h.svc.Pull(t.Context(), h.room.Identifier, uuid.NewString(), 10, time.Second); !api.IsNotFound(err) {
		t.Errorf("Pull of an unknown subscription: %v, want not found", err)
	}
}

// TestPullLeaseStoreFails: messages whose leases cannot be stored are not
// acked on the broker, so they come again; a pull that stored some rounds
// before the failure answers those.
func TestPullLeaseStoreFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		failAdd int // the AddLeases call that fails
		want    int // messages the failing pull answers; 0: an error
	}{
		{"the first round", 1, 0},
		{"the second round", 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			h.consumer.window = 3
			h.store.failAdds = map[int]bool{tc.failAdd: true}
			for range 6 {
				h.publish(t, h.sub, 1, nil)
			}
			ms, err := h.svc.Pull(t.Context(), h.room.Identifier, h.sub.ID.String(), 6, time.Second)
			if (err != nil) != (tc.want == 0) || len(ms) != tc.want {
				t.Fatalf("Pull: %d messages, error %v; want %d", len(ms), err, tc.want)
			}
			ms, err = h.svc.Pull(t.Context(), h.room.Identifier, h.sub.ID.String(), 6, time.Second)
			if err != nil || len(ms)+tc.want != 6 {
				t.Errorf("the next Pull: %d messages, error %v; want the %d not leased", len(ms), err, 6-tc.want)
			}
		})
	}
}

// TestSettle: an ack settles a live lease as delivered; a nack as failed,
// with a resend after the policy's delay for the attempt, or a dead letter
// past the last attempt or when the event would expire first; a nack on a
// terminated subscription drops the copy. Only nacks wake the relay.
func TestSettle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		nack       bool
		attempt    int
		expiresIn  time.Duration // 0: never
		terminated bool
		status     message.Status
		error      string
		resend     time.Duration // the resend's delay; -1: none
		deadLetter string        // its reason; "": none
		outcome    string
	}{
		{"ack", false, 1, 0, false, message.StatusDelivered, "", -1, "", "delivered"},
		{"ack of a later attempt", false, 3, 0, false, message.StatusDelivered, "", -1, "", "delivered"},
		{"nack of attempt 1", true, 1, 0, false, message.StatusFailed, "nacked", 400 * time.Millisecond, "", "retried"},
		{"nack of attempt 2", true, 2, 0, false, message.StatusFailed, "nacked", 800 * time.Millisecond, "", "retried"},
		{"nack of the last attempt", true, 3, 0, false, message.StatusDeadLettered, "nacked", -1, delivery.ReasonExhausted, "dead_lettered"},
		{"nack of a copy expiring before its retry", true, 1, 100 * time.Millisecond, false, message.StatusDeadLettered,
			"nacked; would expire before the next attempt", -1, delivery.ReasonExpired, "expired"},
		{"nack of a copy expiring after its retry", true, 1, time.Second, false, message.StatusFailed, "nacked", 400 * time.Millisecond, "", "retried"},
		{"nack on a terminated subscription", true, 1, 0, true, message.StatusDropped, "nacked; the subscription is terminated", -1, "", "dropped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			now := h.clock.Now()
			sub := h.sub
			if tc.terminated {
				sub = h.addSub(func(s *subscriptions.Subscription) { s.Status = subscriptions.StatusTerminated })
			}
			l := h.lease(sub, tc.attempt, now.Add(time.Minute), func(l *Lease) {
				if tc.expiresIn > 0 {
					l.Event.ExpiresAt = now.Add(tc.expiresIn)
				}
			})
			settle, want := h.svc.Ack, "acked"
			if tc.nack {
				settle, want = h.svc.Nack, "nacked"
			}
			res, err := settle(t.Context(), h.room.Identifier, sub.ID.String(), []string{l.AckID.String()})
			if err != nil || !slices.Equal(statuses(res), []string{want}) {
				t.Fatalf("results %v, error %v; want %s", res, err, want)
			}
			if _, ok := h.store.lease(l.AckID); ok {
				t.Error("the settled lease is still stored")
			}
			st := h.settlementOf(t, l.AckID)
			if st.SendID != l.SendID || st.Attempt.Status != tc.status || st.Attempt.Error != tc.error || !st.Attempt.At.Equal(now) {
				t.Errorf("attempt %+v, want %s %q at now", st.Attempt, tc.status, tc.error)
			}
			switch {
			case tc.resend < 0 && st.Resend != nil:
				t.Errorf("resend %+v, want none", st.Resend)
			case tc.resend >= 0 && (st.Resend == nil || st.Resend.Attempt != tc.attempt+1 || st.Resend.ScheduledDelay != tc.resend ||
				st.Resend.EventID != l.Event.ID || st.Resend.Destination != sub.Queue().FQQN() || st.Resend.Status != message.StatusPending ||
				!st.Attempt.NextAttemptAt.Equal(now.Add(tc.resend))):
				t.Errorf("resend %+v, next attempt at %v; want attempt %d after %s", st.Resend, st.Attempt.NextAttemptAt, tc.attempt+1, tc.resend)
			}
			switch {
			case tc.deadLetter == "" && st.DeadLetter != nil:
				t.Errorf("dead letter %+v, want none", st.DeadLetter)
			case tc.deadLetter != "" && (st.DeadLetter == nil || st.DeadLetter.Reason != tc.deadLetter || st.DeadLetter.Attempts != tc.attempt ||
				st.DeadLetter.LastError != tc.error || st.DeadLetter.Event.ID != l.Event.ID):
				t.Errorf("dead letter %+v, want reason %s after %d attempts", st.DeadLetter, tc.deadLetter, tc.attempt)
			}
			if n := h.relay.n.Load(); (n == 1) != tc.nack || n > 1 {
				t.Errorf("relay notified %d times; want once for a nack, never for an ack", n)
			}
			if want := []string{fmt.Sprintf("pull %s/%d", tc.outcome, tc.attempt)}; !slices.Equal(h.obs.outcomes, want) {
				t.Errorf("observed %v, want %v", h.obs.outcomes, want)
			}
		})
	}
}

// TestSettleResults: each ack id gets its own result; a lease is settled
// once however often it is named, and only a live lease of the subscription
// named is settled.
func TestSettleResults(t *testing.T) {
	t.Parallel()
	h := setup(t)
	now := h.clock.Now()
	live := h.lease(h.sub, 1, now.Add(time.Minute), nil)
	lapsed := h.lease(h.sub, 1, now, nil) // the reaper's now
	other := h.addSub(func(*subscriptions.Subscription) {})
	others := h.lease(other, 1, now.Add(time.Minute), nil)
	ids := []string{live.AckID.String(), "0190", uuid.NewString(), live.AckID.String(), lapsed.AckID.String(), others.AckID.String()}
	want := []string{"acked", "invalid", "unknown", "acked", "unknown", "unknown"}

	res, err := h.svc.Ack(t.Context(), h.room.Identifier, h.sub.ID.String(), ids)
	if err != nil || !slices.Equal(statuses(res), want) {
		t.Fatalf("results %v, error %v; want %v", res, err, want)
	}
	for i, r := range res {
		if r.AckID != ids[i] {
			t.Errorf("result %d names %q, want %q", i, r.AckID, ids[i])
		}
	}
	if st := h.store.settlements(); len(st) != 1 || st[0].AckID != live.AckID {
		t.Errorf("settlements %+v, want only the live lease's", st)
	}
	for _, l := range []Lease{lapsed, others} {
		if _, ok := h.store.lease(l.AckID); !ok {
			t.Errorf("lease %s was settled by an ack of another subscription or after its deadline", l.AckID)
		}
	}
	if _, err := h.svc.Nack(t.Context(), h.room.Identifier, uuid.NewString(), ids); !api.IsNotFound(err) {
		t.Errorf("Nack on an unknown subscription: %v, want not found", err)
	}
}

// TestModifyAckDeadline: the deadline of each live lease named moves to now
// + d; 0 hands the lease to the reaper at once.
func TestModifyAckDeadline(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{30 * time.Second, time.Second, 0} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			now := h.clock.Now()
			live := h.lease(h.sub, 1, now.Add(time.Minute), nil)
			lapsed := h.lease(h.sub, 1, now, nil)
			ids := []string{live.AckID.String(), lapsed.AckID.String(), "x"}
			res, err := h.svc.ModifyAckDeadline(t.Context(), h.room.Identifier, h.sub.ID.String(), ids, d)
			if want := []string{"extended", "unknown", "invalid"}; err != nil || !slices.Equal(statuses(res), want) {
				t.Fatalf("results %v, error %v; want %v", res, err, want)
			}
			if l, _ := h.store.lease(live.AckID); !l.Deadline.Equal(now.Add(d)) {
				t.Errorf("deadline %v, want now + %s", l.Deadline, d)
			}
			if l, _ := h.store.lease(lapsed.AckID); !l.Deadline.Equal(now) {
				t.Errorf("a lapsed lease's deadline moved to %v", l.Deadline)
			}
			n, err := h.svc.reapOnce(t.Context())
			if want := map[bool]int{true: 2, false: 1}[d == 0]; err != nil || n != want {
				t.Errorf("the reaper settled %d, error %v; want %d", n, err, want)
			}
		})
	}
}

// TestReaper: a lease past its deadline is delivered again at once (no
// delay), or dead-lettered past the last attempt; one of a deleted
// subscription is dropped; live leases stay. A directory that fails settles
// nothing.
func TestReaper(t *testing.T) {
	t.Parallel()
	h := setup(t)
	now := h.clock.Now()
	retried := h.lease(h.sub, 1, now.Add(-time.Second), nil)
	exhausted := h.lease(h.sub, 3, now, nil)
	live := h.lease(h.sub, 1, now.Add(time.Millisecond), nil)
	gone := h.addSub(func(*subscriptions.Subscription) {})
	orphan := h.lease(gone, 1, now.Add(-time.Second), nil)
	h.dir.mu.Lock()
	delete(h.dir.subs, gone.ID)
	h.dir.err = errors.New("database down")
	h.dir.mu.Unlock()

	if n, err := h.svc.reapOnce(t.Context()); err == nil || n != 0 || len(h.store.settlements()) != 0 || h.relay.n.Load() != 0 {
		t.Fatalf("with the directory down: %d settled, error %v, %d notified; want an error and nothing settled", n, err, h.relay.n.Load())
	}
	h.dir.mu.Lock()
	h.dir.err = nil
	h.dir.mu.Unlock()
	if n, err := h.svc.reapOnce(t.Context()); err != nil || n != 3 {
		t.Fatalf("reapOnce: %d, %v; want 3 settled", n, err)
	}
	if st := h.settlementOf(t, retried.AckID); st.Attempt.Status != message.StatusFailed || st.Attempt.Error != "ack deadline exceeded" ||
		st.Resend == nil || st.Resend.Attempt != 2 || st.Resend.ScheduledDelay != 0 || !st.Attempt.NextAttemptAt.Equal(now) {
		t.Errorf("lapsed lease: %+v (resend %+v), want attempt 2 at once", st.Attempt, st.Resend)
	}
	if st := h.settlementOf(t, exhausted.AckID); st.DeadLetter == nil || st.DeadLetter.Reason != delivery.ReasonExhausted || st.Resend != nil {
		t.Errorf("lapsed last attempt: %+v, want an attempts_exhausted dead letter", st)
	}
	if st := h.settlementOf(t, orphan.AckID); st.Attempt.Status != message.StatusDropped || st.Attempt.Error != "subscription deleted" || st.Resend != nil || st.DeadLetter != nil {
		t.Errorf("lease of a deleted subscription: %+v, want dropped", st)
	}
	if _, ok := h.store.lease(live.AckID); !ok {
		t.Error("a live lease was reaped")
	}
	if n := h.relay.n.Load(); n != 1 {
		t.Errorf("relay notified %d times, want once", n)
	}
	slices.Sort(h.obs.outcomes)
	if want := []string{"pull dead_lettered/3", "pull dropped/1", "pull retried/1"}; !slices.Equal(h.obs.outcomes, want) {
		t.Errorf("observed %v, want %v", h.obs.outcomes, want)
	}

	// RunReaper reaps on its ticker until its context ends.
	h.clock.Advance(time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { h.svc.RunReaper(ctx, time.Millisecond); close(done) }()
	apitest.Eventually(t, "the reaper to take the lease whose deadline passed", func() bool { _, ok := h.store.lease(live.AckID); return !ok })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("RunReaper did not return after its context ended")
	}
}
