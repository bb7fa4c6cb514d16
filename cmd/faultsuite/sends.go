package main

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/roomhub/messaging-api/cmd/internal/promtext"
)

// sendPoll is how often the suite reads the API processes' count of
// confirmed sends: the precision of the send stall.
const sendPoll = 100 * time.Millisecond

// sendWatch records when the relays of the API processes had sends
// confirmed by the broker: each poll at which one's count rose. A
// published_messages.sent_at cannot say it: it is when a send began, and a
// send that waits out a failover began before it.
type sendWatch struct {
	mu    sync.Mutex
	times []time.Time
}

// watchSends polls the /metrics of apis (a restarted process keeps its
// address) every sendPoll until ctx ends.
func (s *suite) watchSends(ctx context.Context, apis []*service) *sendWatch {
	w := &sendWatch{}
	hc := &http.Client{Timeout: sendPoll}
	last := make([]float64, len(apis))
	go func() {
		t := time.NewTicker(sendPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				rose := false
				for i, a := range apis {
					v, ok := readSent(ctx, hc, a.base+"/metrics")
					if !ok {
						continue // down, or too slow to answer: the next poll reads it
					}
					if v > last[i] || (v < last[i] && v > 0) { // v < last: restarted since
						rose = true
					}
					last[i] = v
				}
				if rose {
					w.mu.Lock()
					w.times = append(w.times, now)
					w.mu.Unlock()
				}
			}
		}
	}()
	return w
}

// snapshot is a copy of the times recorded so far; nil without a watch.
func (w *sendWatch) snapshot() []time.Time {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time{}, w.times...)
}

// readSent reads an API process's count of sends the broker confirmed.
func readSent(ctx context.Context, hc *http.Client, url string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, false
	}
	return promtext.Value(body, "messaging_outbox_relayed_total", map[string]string{"result": "sent"})
}
