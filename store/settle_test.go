package store_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/delivery"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/store/storetest"
)

// TestSettleAllRoundTrip: a group commit of plain outcomes (one statement on
// PostgreSQL, a transaction on SQLite) stores each field as Settle does: an
// attempt without a status code or latency keeps the row's earlier ones, and
// of two outcomes for one send the later counts.
func TestSettleAllRoundTrip(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			sends := outboxFixture(t, db.Events(), 4, false)
			at := time.Now().UTC().Truncate(time.Millisecond)
			next := at.Add(3 * time.Second)
			resend := sends[3]
			resend.ID, resend.Attempt, resend.ScheduledDelay, resend.CreatedAt = uuid.Must(uuid.NewV7()), 2, 3*time.Second, at
			if err := db.Push().Settle(ctx, delivery.Settlement{SendID: sends[1].ID,
				Attempt: delivery.Attempt{Status: message.StatusFailed, StatusCode: 503, Latency: 40 * time.Millisecond, At: at}}); err != nil {
				t.Fatal(err)
			}
			err := db.Push().SettleAll(ctx, []delivery.Settlement{
				{SendID: sends[2].ID, Attempt: delivery.Attempt{Status: message.StatusFailed, StatusCode: 500, Error: "first", At: at}},
				{SendID: sends[0].ID, Attempt: delivery.Attempt{Status: message.StatusDelivered, StatusCode: 200, Latency: 12 * time.Millisecond, Body: "ok", At: at}},
				{SendID: sends[1].ID, Attempt: delivery.Attempt{Status: message.StatusFailed, Error: "timeout", At: at, NextAttemptAt: next}},
				{SendID: sends[2].ID, Attempt: delivery.Attempt{Status: message.StatusDelivered, StatusCode: 204, At: at}},
				{SendID: sends[3].ID, Attempt: delivery.Attempt{Status: message.StatusFailed, StatusCode: 502, At: at, NextAttemptAt: next},
					Resend: &resend, Owner: "dispatcher-a", Until: time.Now().Add(time.Minute)},
			})
			if err != nil {
				t.Fatal(err)
			}
			ds, err := db.Push().Deliveries(ctx, sends[0].SubscriptionID, 10, uuid.Nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[uuid.UUID]delivery.Record{}
			for _, dl := range ds {
				got[dl.ID] = dl
			}
			type row struct {
				status  message.Status
				code    int
				latency time.Duration
				body    string
				errText string
				done    time.Time
				next    time.Time
			}
			want := []row{
				{message.StatusDelivered, 200, 12 * time.Millisecond, "ok", "", at, time.Time{}},
				{message.StatusFailed, 503, 40 * time.Millisecond, "", "timeout", at, next}, // code and latency kept
				{message.StatusDelivered, 204, 0, "", "", at, time.Time{}},                  // the later outcome
				{message.StatusFailed, 502, 0, "", "", at, next},                            // with a resend
			}
			for i, w := range want {
				g := got[sends[i].ID]
				have := row{g.Status, g.StatusCode, g.Latency, g.ResponseBody, g.Error, g.CompletedAt, g.NextAttemptAt}
				if have.status != w.status || have.code != w.code || have.latency != w.latency || have.body != w.body ||
					have.errText != w.errText || !have.done.Equal(w.done) || !have.next.Equal(w.next) {
					t.Errorf("send %d: %+v, want %+v", i, have, w)
				}
			}
			// The resend is logged, pending, in the outbox leased to the
			// dispatcher: no relay claims it, nor the settled sends.
			r, ok := got[resend.ID]
			if !ok || r.Status != message.StatusPending || r.Attempt != 2 || r.ScheduledDelay != 3*time.Second || !r.CreatedAt.Equal(at) {
				t.Errorf("resend logged as %+v (found %v); want pending attempt 2 after 3s", r, ok)
			}
			if n := backlog(t, db.Events()); n != 5 {
				t.Errorf("outbox holds %d rows, want 5 (the 4 unsent sends and the resend)", n)
			}
			if ids := claimIDs(t, db.Events(), "relay-b", time.Minute); len(ids) != 0 {
				t.Errorf("claimed %v: the resend is leased and the rest are settled", ids)
			}
		})
	}
}

// TestDeferredCopyWaitsOutItsLease: the copy of a deferred push message is
// stored leased until its deferral ends, with its deferral count; no claim
// takes it before, and the relay that claims it after builds the message
// with that count as x-held and no delay left. Both ways a settlement is
// stored: alone (Settle) and in a group commit (SettleAll).
func TestDeferredCopyWaitsOutItsLease(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			sends := outboxFixture(t, db.Events(), 3, false)
			// The fixture's own sends are relayed already: only the copies count.
			if ids := claimIDs(t, db.Events(), "relay-a", time.Hour); len(ids) != 3 {
				t.Fatalf("claimed %d fixture sends, want 3", len(ids))
			}
			now := time.Now().UTC().Truncate(time.Millisecond)
			const delay = 700 * time.Millisecond
			deferral := func(i, held int) delivery.Settlement {
				c := sends[i]
				c.ID, c.Held, c.ScheduledDelay, c.CreatedAt = uuid.Must(uuid.NewV7()), held, delay, now
				return delivery.Settlement{SendID: sends[i].ID, Resend: &c, Owner: "dispatcher-a", Until: now.Add(delay),
					Attempt: delivery.Attempt{Status: delivery.StatusDeferred, Error: "deferred", At: now, NextAttemptAt: now.Add(delay)}}
			}
			alone, grouped := deferral(0, 1), []delivery.Settlement{deferral(1, 2), deferral(2, 3)}
			if err := db.Push().Settle(ctx, alone); err != nil {
				t.Fatal(err)
			}
			if err := db.Push().SettleAll(ctx, grouped); err != nil {
				t.Fatal(err)
			}
			clock := apitest.NewClock(now)
			db.SetClock(clock.Now)
			clock.Advance(delay - time.Millisecond)
			if ids := claimIDs(t, db.Events(), "relay-b", time.Minute); len(ids) != 0 {
				t.Fatalf("claimed %v during the deferral", ids)
			}
			clock.Advance(2 * time.Millisecond)
			ps, err := db.Events().ClaimPending(ctx, "relay-b", time.Now().Add(time.Minute), 10)
			if err != nil {
				t.Fatal(err)
			}
			want := map[uuid.UUID]int{alone.Resend.ID: 1, grouped[0].Resend.ID: 2, grouped[1].Resend.ID: 3}
			if len(ps) != len(want) {
				t.Fatalf("claimed %d copies after the deferral, want %d", len(ps), len(want))
			}
			for _, p := range ps {
				msg := message.Encode(p.Send, p.Event, clock.Now())
				if held, ok := want[p.ID]; !ok || p.Held != held || msg.Headers[message.HeaderHeld] != strconv.Itoa(held) || msg.Delay != 0 {
					t.Errorf("copy %s: held %d, x-held %q, delay %s; want held %d (found %v) and no delay",
						p.ID, p.Held, msg.Headers[message.HeaderHeld], msg.Delay, held, ok)
				}
			}
		})
	}
}

// TestParkedCopiesRelease: parked copies (leased to outbox.ParkedOwner) are
// not in the outbox backlog until their deferral ends but are counted as
// parked; releasing one subscription's makes exactly those claimable at
// once, with no delay left, and leaves alone a copy a relay has claimed
// since.
func TestParkedCopiesRelease(t *testing.T) {
	t.Parallel()
	for _, d := range storetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := storetest.Open(t, d)
			ev := db.Events()
			sends := outboxFixture(t, ev, 3, false)
			if ids := claimIDs(t, ev, "relay-a", time.Hour); len(ids) != 3 {
				t.Fatalf("claimed %d fixture sends, want 3", len(ids))
			}
			counts := func() (int, int) {
				t.Helper()
				owed, _, err := ev.OutboxBacklog(ctx)
				if err != nil {
					t.Fatal(err)
				}
				parked, err := ev.ParkedCopies(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return owed, parked
			}
			now := time.Now().UTC()
			subA, subB := uuid.New(), uuid.New()
			park := func(i int, sub uuid.UUID) delivery.Settlement {
				c := sends[i]
				c.ID, c.Held, c.ScheduledDelay, c.CreatedAt = uuid.Must(uuid.NewV7()), 1, time.Hour, now
				return delivery.Settlement{SendID: sends[i].ID, Resend: &c, Owner: outbox.ParkedOwner(sub), Until: now.Add(time.Hour),
					Attempt: delivery.Attempt{Status: delivery.StatusDeferred, Error: "deferred", At: now, NextAttemptAt: now.Add(time.Hour)}}
			}
			a0, a1, b := park(0, subA), park(1, subA), park(2, subB)
			if err := db.Push().SettleAll(ctx, []delivery.Settlement{a0, a1, b}); err != nil {
				t.Fatal(err)
			}
			if owed, parked := counts(); owed != 3 || parked != 3 {
				t.Fatalf("backlog %d, parked %d; want the 3 fixture sends owed and 3 copies parked", owed, parked)
			}
			if ids := claimIDs(t, ev, "relay-b", time.Minute); len(ids) != 0 {
				t.Fatalf("claimed %v while parked", ids)
			}
			releasedAt := time.Now().UTC()
			if n, err := db.Push().ReleaseParked(ctx, subA, releasedAt); err != nil || n != 2 {
				t.Fatalf("released %d, %v; want subscription A's 2 copies", n, err)
			}
			if owed, parked := counts(); owed != 5 || parked != 1 {
				t.Errorf("after the release: backlog %d, parked %d; want 5 and 1", owed, parked)
			}
			ps, err := ev.ClaimPending(ctx, "relay-b", time.Now().Add(time.Minute), 100)
			if err != nil {
				t.Fatal(err)
			}
			got, want := make([]uuid.UUID, len(ps)), []uuid.UUID{a0.Resend.ID, a1.Resend.ID} // in id order
			for i, p := range ps {
				got[i] = p.ID
				// Sent at once, its delay what it waited: not the hour planned.
				if waited := releasedAt.Sub(now); p.ScheduledDelay > waited+time.Millisecond || message.Encode(p.Send, p.Event, time.Now()).Delay != 0 {
					t.Errorf("released copy %s: scheduled delay %s (waited %s), sent with delay %s; want no delay left",
						p.ID, p.ScheduledDelay, waited, message.Encode(p.Send, p.Event, time.Now()).Delay)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("claimed %v after the release, want A's copies %v", got, want)
			}
			// Claimed by relay-b now: a second release must not free them.
			if n, err := db.Push().ReleaseParked(ctx, subA, time.Now()); err != nil || n != 0 {
				t.Errorf("second release: %d, %v; want 0 (the relay holds them)", n, err)
			}
			if ids := claimIDs(t, ev, "relay-c", time.Minute); len(ids) != 0 {
				t.Errorf("relay-c claimed %v: copies a relay holds were released", ids)
			}
		})
	}
}
