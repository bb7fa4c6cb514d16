package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/broker"
)

// TestConsumePost: the push ceiling POSTs every preloaded message once and
// acks it after the 2xx (the queue is empty afterwards); a sink that fails
// ends the run with an error and leaves the message unacked.
func TestConsumePost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := broker.NewEmbedded(slog.New(slog.DiscardHandler))
	defer b.Close()

	s, err := startSink(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	client := &http.Client{Timeout: 5 * time.Second}

	t.Run("delivers and acks each", func(t *testing.T) {
		dest := broker.Destination{Address: "ceiling", Queue: "ok"}
		const n = 57
		sent, _, err := rawSend(ctx, b, dest, 8, time.Minute, n)
		if err != nil || sent != n {
			t.Fatalf("rawSend with limit %d = %d, %v", n, sent, err)
		}
		target := s.add("ceiling-ok", answerOK, n)
		acked, err := consumePost(ctx, b, dest, n, 16, 4, client, s.url(target), 30*time.Second)
		if err != nil || acked != n {
			t.Fatalf("consumePost = %d, %v; want %d acked", acked, err, n)
		}
		if _, _, dups, _, _, _ := target.snapshot(); target.count() != n || dups != 0 {
			t.Errorf("sink saw %d distinct events and %d duplicates, want %d and 0", target.count(), dups, n)
		}
		if left, err := drainQueue(ctx, b, dest, 0, 200*time.Millisecond); err != nil || left != 0 {
			t.Errorf("%d messages left unacked (%v), want 0", left, err)
		}
	})

	t.Run("a failing sink is an error", func(t *testing.T) {
		dest := broker.Destination{Address: "ceiling", Queue: "fail"}
		if _, _, err := rawSend(ctx, b, dest, 1, time.Minute, 3); err != nil {
			t.Fatal(err)
		}
		failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer failing.Close()
		_, err := consumePost(ctx, b, dest, 3, 16, 1, client, failing.URL, 30*time.Second)
		if err == nil || !strings.Contains(err.Error(), "503") {
			t.Fatalf("consumePost against a 503 sink = %v, want an error naming the status", err)
		}
		if left, _ := drainQueue(ctx, b, dest, 0, 500*time.Millisecond); left == 0 {
			t.Error("the failed message was acked; want it left for redelivery")
		}
	})
}

// TestPushTargetNote: the push target says whether 0.8 is above the ceiling
// measured in the same run.
func TestPushTargetNote(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ceiling    float64
		outOfReach bool
	}{{0.68, true}, {0.85, false}} {
		r := &Report{}
		r.add(Figure{Key: "baseline.consume", Value: 1000})
		r.addRatio(Figure{Key: "baseline.consume_post", Value: 1000 * tt.ceiling}, "baseline.consume", 0)
		r.addRatio(Figure{Key: "push.rate", Value: 500}, "baseline.consume", 0)
		r.evaluate()
		note := r.Targets[0].Note
		if !strings.HasPrefix(r.Targets[0].Name, "push vs raw") || !strings.Contains(note, "ceiling here is") {
			t.Fatalf("target %q note %q, want the push target to name the ceiling", r.Targets[0].Name, note)
		}
		wantShare := fmt.Sprintf("push is %.2f × the ceiling", 500/(1000*tt.ceiling))
		if !strings.Contains(note, wantShare) {
			t.Errorf("ceiling %.2f: note %q, want %q", tt.ceiling, note, wantShare)
		}
		if got := strings.Contains(note, "out of reach"); got != tt.outOfReach {
			t.Errorf("ceiling %.2f: note %q says out of reach = %v, want %v", tt.ceiling, note, got, tt.outOfReach)
		}
	}
}
