package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/push"
)

// dispatcherWorkers is how many deliveries the push dispatcher runs at once.
var dispatcherWorkers = push.DefaultConfig(broker.Destination{}).Workers

// pushCeiling measures the most any push dispatcher could deliver on this
// machine: the raw broker client consumes a preloaded queue with the
// dispatcher's prefetch, dispatcherWorkers goroutines POST each body to the
// sink (answering 200 at once) and ack after the 2xx. No service, no
// database, no retry policy, no signing: what is left is the broker's
// consume + ack and the HTTP exchange, both of which every push delivery
// needs. Its rate divided by the raw consume + ack's is the highest push
// ratio this machine allows; the push figure is also shown against it.
func (b *bench) pushCeiling(ctx context.Context, base baselineResult) error {
	n := b.cfg.messages
	dest := b.queue("raw-post")
	b.queues = append(b.queues, dest)
	if _, _, err := rawSend(ctx, b.raw, dest, relayConcurrency, phaseTimeout, n); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	t := b.sink.add(b.room("raw-post"), answerOK, n)
	client := &http.Client{Timeout: b.cfg.pushTimeout, Transport: &http.Transport{
		// As the dispatcher's transport (push/deliver.go).
		MaxIdleConns: 512, MaxIdleConnsPerHost: dispatcherWorkers, IdleConnTimeout: 90 * time.Second,
	}}
	defer client.CloseIdleConnections()

	cpu0, err := b.cpu.sample(nil)
	if err != nil {
		return err
	}
	acked, err := consumePost(ctx, b.raw, dest, n, dispatcherPrefetch, dispatcherWorkers, client, b.sink.url(t), phaseTimeout)
	if err != nil {
		return err
	}
	cpu1, err := b.cpu.sample(nil)
	if err != nil {
		return err
	}
	first, last, dups, _, _, _ := t.snapshot()
	rate := perSecond(n-1, last.Sub(first))
	b.logf("push ceiling (raw consume + POST + ack): %d in %s = %.0f/s", acked, last.Sub(first).Round(time.Millisecond), rate)
	b.rep.addRatio(Figure{Key: "baseline.consume_post", Group: "1 baseline", Name: "raw consume + POST + ack (push ceiling)", Value: rate, Unit: "msg/s",
		Note: fmt.Sprintf("%d msgs; %d POSTs at once (dispatcher's Workers), prefetch %d, sink answering 200 at once, ack after the 2xx; no service, no database; first → last arrival; %d duplicates",
			n, dispatcherWorkers, dispatcherPrefetch, dups)}, "baseline.consume", 0)
	cost := spent(cpu0, cpu1, acked, [][2]string{{"broker", "broker"}, {"msgbench", "msgbench (consumer, POSTs, sink)"}, {"PostgreSQL", "PostgreSQL"}})
	b.rep.addRatio(Figure{Key: "cpu.consume_post", Group: "8 resources", Name: "machine CPU per 1000 raw consume + POST + acks",
		Value: cost.per1000, Unit: "CPU s", Note: cost.note() + "; ratio to a raw consume + ack's; 0.8 × raw consume + ack: " + cost.needs(0.8*base.consume)}, "cpu.consume", 0)
	return nil
}

// consumePost receives want messages from dest, POSTs each body to url from
// workers goroutines and acks it after a 2xx; it returns how many it acked.
// Any failure ends it: the sink answers 200, so one is a broken run.
func consumePost(ctx context.Context, b broker.Broker, dest broker.Destination, want, prefetch, workers int, client *http.Client, url string, within time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: prefetch})
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	var (
		jobs     = make(chan *broker.Delivery)
		wg       sync.WaitGroup
		mu       sync.Mutex
		acked    int
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	for range workers {
		wg.Go(func() {
			for d := range jobs {
				if err := postOne(ctx, client, url, d); err != nil {
					fail(err)
					continue
				}
				if err := d.Ack(ctx); err != nil {
					fail(fmt.Errorf("ack: %w", err))
					continue
				}
				mu.Lock()
				acked++
				mu.Unlock()
			}
		})
	}
	received := 0
read:
	for received < want {
		select {
		case d, ok := <-sub.C():
			if !ok {
				fail(errors.New("subscription closed"))
				break read
			}
			received++
			select {
			case jobs <- d:
			case <-ctx.Done():
				break read
			}
		case <-ctx.Done():
			fail(fmt.Errorf("%d of %d received: %w", received, want, ctx.Err()))
			break read
		}
	}
	close(jobs)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return acked, fmt.Errorf("raw consume + POST: %w", firstErr)
	}
	return acked, nil
}

// postOne POSTs a delivery's body as the dispatcher would (JSON, the event
// id the sink counts by) and drains the answer so that the connection is
// reused.
func postOne(ctx context.Context, client *http.Client, url string, d *broker.Delivery) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Event-Id", d.Headers[message.HeaderEventID])
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("sink answered %s", resp.Status)
	}
	return nil
}
