package push

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/api/apitest"
	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
)

// TestReleaseParkedGuards: a subscription's parked copies are released
// after a delivery under SlowAfter, and only while none of its other
// requests has run that long (outbox.Parking decides how often).
func TestReleaseParkedGuards(t *testing.T) {
	t.Parallel()
	clock := apitest.NewClock(time.Unix(1_000_000, 0))
	log := &settleRecorder{}
	p := New(Config{SlowAfter: 250 * time.Millisecond, DeferDelay: time.Second},
		Deps{Log: log, Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	sched := newScheduler(4, 8, 250*time.Millisecond, clock.Now)
	sub := uuid.New()
	newJob := func() *job {
		return &job{key: sub, d: &broker.Delivery{Message: broker.Message{Headers: map[string]string{message.HeaderHeld: "1"}}}}
	}
	ctx := context.Background()
	try := func(j *job, latency time.Duration, want int, why string) {
		t.Helper()
		p.releaseParked(ctx, sched, j, latency)
		p.parking.Wait()
		if got := len(log.releases()); got != want {
			t.Fatalf("%s: %d releases, want %d", why, got, want)
		}
	}

	hanging := newJob()
	sched.add(hanging)
	if sched.take() != hanging {
		t.Fatal("the scheduler did not hand out the job")
	}
	clock.Advance(300 * time.Millisecond)
	quick := newJob()
	try(quick, 10*time.Millisecond, 0, "a quick delivery while another request of the subscription runs past SlowAfter")
	sched.done(hanging)
	try(quick, 250*time.Millisecond, 0, "a delivery of SlowAfter")
	try(quick, 10*time.Millisecond, 1, "a quick delivery with none running long")
	if r := log.releases(); r[0] != sub {
		t.Errorf("released %v, want the subscription's copies", r)
	}

	off := New(Config{DeferDelay: time.Second}, Deps{Log: log, Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	clock.Advance(time.Second)
	off.releaseParked(ctx, sched, quick, 10*time.Millisecond)
	off.parking.Wait()
	if got := len(log.releases()); got != 1 {
		t.Errorf("%d releases by a dispatcher without SlowAfter, want none", got-1)
	}
}
