package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/message"
	"github.com/roomhub/messaging-api/outbox"
	"github.com/roomhub/messaging-api/push"
)

// baselineResult is the physical limit the service's figures are divided by.
type baselineResult struct {
	send               float64 // durable sends with receipts per second
	consume            float64 // consumed and individually acked per second
	schedP50, schedP99 time.Duration
}

// relayConcurrency is how many sends the service's outbox relay has in flight.
var relayConcurrency = outbox.DefaultConfig.Concurrency

// dispatcherPrefetch is the push dispatcher's default consumer window.
var dispatcherPrefetch = push.DefaultConfig(broker.Destination{}).Prefetch

const headerSeq = "x-bench-seq"

// rawMessage is the message the relay would send for one event: the same
// headers, content type and payload size (message.Encode builds both).
func rawMessage(dest broker.Destination, seq int, now time.Time) broker.Message {
	p := outbox.Pending{
		Send: message.Send{
			ID: uuid.Must(uuid.NewV7()), EventID: uuid.Must(uuid.NewV7()), SubscriptionID: uuid.New(),
			SubscriptionType: "PULL", Destination: dest.FQQN(), Attempt: 1, CreatedAt: now,
			CorrelationID: uuid.NewString(), Status: message.StatusPending,
		},
		Event: message.Event{
			ID: uuid.Must(uuid.NewV7()), RoomID: uuid.New(), EventType: eventFast, Version: 1,
			Payload: appendPayload(nil, seq, 0), Attributes: map[string]string{}, PublishedAt: now,
		},
	}
	msg := message.Encode(p.Send, p.Event, now)
	msg.Headers[headerSeq] = strconv.Itoa(seq)
	return msg
}

// senders is the broker URL's senders option as the report shows it.
func senders(brokerURL string) string {
	if brokerURL == "embedded" {
		return "n/a (embedded)"
	}
	u, err := url.Parse(brokerURL)
	if err != nil || u.Query().Get("senders") == "" {
		return "the URL's default"
	}
	return u.Query().Get("senders")
}

func (b *bench) baseline(ctx context.Context) (baselineResult, error) {
	var res baselineResult
	if err := b.warmUp(ctx); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	dest := b.queue("raw")
	b.queues = append(b.queues, dest)

	cpuS0, err := b.cpu.sample(nil)
	if err != nil {
		return res, err
	}
	sent, elapsed, err := rawSend(ctx, b.raw, dest, relayConcurrency, b.cfg.duration, 0)
	if err != nil {
		return res, err
	}
	cpuS1, err := b.cpu.sample(nil)
	if err != nil {
		return res, err
	}
	res.send = float64(sent) / elapsed.Seconds()
	b.logf("raw durable send: %d in %s = %.0f/s", sent, elapsed.Round(time.Millisecond), res.send)
	b.rep.add(Figure{Key: "baseline.send", Group: "1 baseline", Name: "raw durable send with receipt",
		Value: res.send, Unit: "msg/s",
		Note: fmt.Sprintf("%d concurrent Sends (relay's Concurrency) over senders=%s, %d msgs", relayConcurrency, senders(b.brokerURL()), sent)})

	sendCost := spent(cpuS0, cpuS1, sent, [][2]string{{"broker", "broker"}, {"msgbench", "msgbench (senders)"}, {"PostgreSQL", "PostgreSQL"}})
	b.rep.add(Figure{Key: "cpu.send", Group: "8 resources", Name: "machine CPU per 1000 raw durable sends",
		Value: sendCost.per1000, Unit: "CPU s", Note: sendCost.note()})

	cpu0, err := b.cpu.sample(nil)
	if err != nil {
		return res, err
	}
	n, first, last, err := rawConsume(ctx, b.raw, dest, sent, dispatcherPrefetch, 3*time.Minute)
	if err != nil {
		return res, err
	}
	cpu1, err := b.cpu.sample(nil)
	if err != nil {
		return res, err
	}
	res.consume = float64(n-1) / last.Sub(first).Seconds()
	b.logf("raw consume+ack: %d in %s = %.0f/s", n, last.Sub(first).Round(time.Millisecond), res.consume)
	b.rep.add(Figure{Key: "baseline.consume", Group: "1 baseline", Name: "raw consume + individual ack",
		Value: res.consume, Unit: "msg/s", Note: fmt.Sprintf("1 consumer, prefetch %d (dispatcher's), %d msgs", dispatcherPrefetch, n)})
	cost := spent(cpu0, cpu1, n, [][2]string{{"broker", "broker"}, {"msgbench", "msgbench (consumer)"}, {"PostgreSQL", "PostgreSQL"}})
	b.rep.add(Figure{Key: "cpu.consume", Group: "8 resources", Name: "machine CPU per 1000 raw consume + acks",
		Value: cost.per1000, Unit: "CPU s", Note: cost.note()})

	if err := b.pushCeiling(ctx, res); err != nil {
		return res, fmt.Errorf("push ceiling: %w", err)
	}

	lateness, err := rawScheduled(ctx, b.raw, b.queue("raw-sched"), b.cfg.retryDelays, b.cfg.retries)
	b.queues = append(b.queues, b.queue("raw-sched"))
	if err != nil {
		return res, err
	}
	res.schedP50, res.schedP99 = percentile(lateness, 50), percentile(lateness, 99)
	b.logf("raw scheduled delivery lateness: p50 %s p99 %s (n=%d)", res.schedP50, res.schedP99, len(lateness))
	note := fmt.Sprintf("n=%d, delays %s, received − (send + delay)", len(lateness), delaysText(b.cfg.retryDelays))
	b.rep.add(Figure{Key: "baseline.sched_p50", Group: "1 baseline", Name: "broker scheduling lateness p50", Value: ms(res.schedP50), Unit: "ms", Note: note})
	b.rep.add(Figure{Key: "baseline.sched_p99", Group: "1 baseline", Name: "broker scheduling lateness p99", Value: ms(res.schedP99), Unit: "ms", Note: note})
	return res, nil
}

// warmUp sends and consumes raw messages in rounds of warmupRound, measuring
// nothing, until two rounds in a row agree on both rates within 15 %, or
// -warmup has passed. Both brokers run on a JVM: just after one starts, its send
// and dispatch paths run interpreted; on ActiveMQ Classic a baseline measured
// then came out at about half the next run's (1474 against 2389 sends/s, 4003 against 8508
// consumes/s after a 3 s warm-up), which doubled every ratio of that run.
func (b *bench) warmUp(ctx context.Context) error {
	if b.cfg.warmup <= 0 {
		return nil
	}
	dest := b.queue("warmup")
	b.queues = append(b.queues, dest)
	start := time.Now()
	var prevSend, prevConsume float64
	for round := 1; ; round++ {
		sent, elapsed, err := rawSend(ctx, b.raw, dest, relayConcurrency, min(warmupRound, b.cfg.warmup), 0)
		if err != nil {
			return err
		}
		n, first, last, err := rawConsume(ctx, b.raw, dest, sent, dispatcherPrefetch, time.Minute)
		if err != nil {
			return err
		}
		send, consume := float64(sent)/elapsed.Seconds(), float64(n-1)/last.Sub(first).Seconds()
		b.logf("warm-up round %d: %.0f sends/s, %.0f consumes/s", round, send, consume)
		if round > 1 && steady(prevSend, send) && steady(prevConsume, consume) {
			return nil
		}
		if time.Since(start) >= b.cfg.warmup {
			b.logf("warm-up: the broker's rates still moved after %s (-warmup); the baseline may be low", b.cfg.warmup)
			return nil
		}
		prevSend, prevConsume = send, consume
	}
}

// warmupRound is how long one warm-up round sends.
const warmupRound = 2 * time.Second

// steady says whether a rate is within 15 % of the one before it.
func steady(before, now float64) bool {
	return before > 0 && now > 0 && now/before > 0.85 && now/before < 1/0.85
}

// rawSend sends from workers goroutines until d has passed, or limit
// messages were sent (0: no limit), and returns how many the broker
// confirmed and how long it took.
func rawSend(ctx context.Context, b broker.Broker, dest broker.Destination, workers int, d time.Duration, limit int) (int, time.Duration, error) {
	var (
		seq, ok  atomic.Int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	until := start.Add(d)
	for range workers {
		wg.Go(func() {
			for time.Now().Before(until) && ctx.Err() == nil {
				k := int(seq.Add(1))
				if limit > 0 && k > limit {
					return
				}
				msg := rawMessage(dest, k, time.Now())
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := b.Send(sctx, msg)
				cancel()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, fmt.Errorf("raw send: %w", firstErr)
	}
	return int(ok.Load()), time.Since(start), nil
}

// rawConsume receives want messages from dest with one subscription and acks
// each one individually, and returns when the first and the last arrived.
func rawConsume(ctx context.Context, b broker.Broker, dest broker.Destination, want, prefetch int, within time.Duration) (int, time.Time, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: prefetch})
	if err != nil {
		return 0, time.Time{}, time.Time{}, err
	}
	defer sub.Close()
	var first, last time.Time
	n := 0
	for n < want {
		select {
		case d, ok := <-sub.C():
			if !ok {
				return n, first, last, errors.New("raw consume: subscription closed")
			}
			if err := d.Ack(ctx); err != nil {
				return n, first, last, fmt.Errorf("raw consume: ack: %w", err)
			}
			last = time.Now()
			if n == 0 {
				first = last
			}
			n++
		case <-ctx.Done():
			return n, first, last, fmt.Errorf("raw consume: %d of %d received: %w", n, want, ctx.Err())
		}
	}
	if n < 2 {
		return n, first, last, errors.New("raw consume: too few messages to time")
	}
	return n, first, last, nil
}

// rawScheduled sends perDelay messages for each delay, spread over time so
// that they land at every phase of the broker's scheduler, and returns how
// late each arrived: received − (send started + delay).
func rawScheduled(ctx context.Context, b broker.Broker, dest broker.Destination, delays []time.Duration, perDelay int) ([]time.Duration, error) {
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: dispatcherPrefetch})
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	const spacing = 113 * time.Millisecond // not a divisor of the scheduler's period
	total := perDelay * len(delays)
	var (
		mu       sync.Mutex
		planned  = make(map[int]time.Time, total)
		firstErr error
		wg       sync.WaitGroup
	)
	go func() {
		seq := 0
		for range perDelay {
			for _, d := range delays {
				msg := rawMessage(dest, seq, time.Now())
				msg.Delay = d
				k := seq
				seq++
				mu.Lock()
				planned[k] = time.Now().Add(d)
				mu.Unlock()
				wg.Go(func() {
					if err := b.Send(ctx, msg); err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
				})
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(spacing):
			}
		}
	}()
	maxDelay := delays[0]
	for _, d := range delays {
		maxDelay = max(maxDelay, d)
	}
	timer := time.NewTimer(maxDelay + time.Duration(perDelay)*spacing + 30*time.Second)
	defer timer.Stop()
	var late []time.Duration
	for len(late) < total {
		select {
		case d, ok := <-sub.C():
			if !ok {
				return late, errors.New("scheduled: subscription closed")
			}
			at := time.Now()
			_ = d.Ack(ctx)
			seq, err := strconv.Atoi(d.Headers[headerSeq])
			mu.Lock()
			p, known := planned[seq]
			delete(planned, seq)
			mu.Unlock()
			if err == nil && known {
				late = append(late, at.Sub(p))
			}
		case <-timer.C:
			mu.Lock()
			err := firstErr
			mu.Unlock()
			return late, fmt.Errorf("scheduled: %d of %d arrived in time (send error: %w)", len(late), total, err)
		case <-ctx.Done():
			return late, ctx.Err()
		}
	}
	wg.Wait()
	return late, nil
}

// drainQueue acks what dest holds: want messages, or (want 0) until none
// came for idle.
func drainQueue(ctx context.Context, b broker.Broker, dest broker.Destination, want int, idle time.Duration) (int, error) {
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: 500})
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	n := 0
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for want == 0 || n < want {
		select {
		case d, ok := <-sub.C():
			if !ok {
				return n, errors.New("subscription closed")
			}
			_ = d.Ack(ctx)
			n++
			timer.Reset(idle)
		case <-timer.C:
			return n, nil
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
	return n, nil
}

func delaysText(ds []time.Duration) string {
	if len(ds) == 0 {
		return ""
	}
	if len(ds) == 1 {
		return ds[0].String()
	}
	return ds[0].String() + "…" + ds[len(ds)-1].String()
}
