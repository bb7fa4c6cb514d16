package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/publish"
	"github.com/roomhub/messaging-api/push"
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
			if err := db.Push().Settle(ctx, push.Settlement{SendID: sends[1].ID,
				Attempt: push.Attempt{Status: publish.StatusFailed, StatusCode: 503, Latency: 40 * time.Millisecond, At: at}}); err != nil {
				t.Fatal(err)
			}
			err := db.Push().SettleAll(ctx, []push.Settlement{
				{SendID: sends[2].ID, Attempt: push.Attempt{Status: publish.StatusFailed, StatusCode: 500, Error: "first", At: at}},
				{SendID: sends[0].ID, Attempt: push.Attempt{Status: publish.StatusDelivered, StatusCode: 200, Latency: 12 * time.Millisecond, Body: "ok", At: at}},
				{SendID: sends[1].ID, Attempt: push.Attempt{Status: publish.StatusFailed, Error: "timeout", At: at, NextAttemptAt: next}},
				{SendID: sends[2].ID, Attempt: push.Attempt{Status: publish.StatusDelivered, StatusCode: 204, At: at}},
				{SendID: sends[3].ID, Attempt: push.Attempt{Status: publish.StatusFailed, StatusCode: 502, At: at, NextAttemptAt: next},
					Resend: &resend, Owner: "dispatcher-a", Until: time.Now().Add(time.Minute)},
			})
			if err != nil {
				t.Fatal(err)
			}
			ds, err := db.Push().Deliveries(ctx, sends[0].SubscriptionID, 10, uuid.Nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[uuid.UUID]push.Delivery{}
			for _, dl := range ds {
				got[dl.ID] = dl
			}
			type row struct {
				status  publish.Status
				code    int
				latency time.Duration
				body    string
				errText string
				done    time.Time
				next    time.Time
			}
			want := []row{
				{publish.StatusDelivered, 200, 12 * time.Millisecond, "ok", "", at, time.Time{}},
				{publish.StatusFailed, 503, 40 * time.Millisecond, "", "timeout", at, next}, // code and latency kept
				{publish.StatusDelivered, 204, 0, "", "", at, time.Time{}},                  // the later outcome
				{publish.StatusFailed, 502, 0, "", "", at, next},                            // with a resend
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
			if !ok || r.Status != publish.StatusPending || r.Attempt != 2 || r.ScheduledDelay != 3*time.Second || !r.CreatedAt.Equal(at) {
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
