package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomhub/messaging-api/broker"
)

// phaseTimeout bounds every wait of a phase for the service to catch up.
const phaseTimeout = 5 * time.Minute

func (b *bench) client(s *service) *apiClient {
	return newAPIClient(s.base, max(b.cfg.concurrency, b.cfg.pullers, 64)+8)
}

func destination(fqqn string) broker.Destination {
	addr, queue, ok := strings.Cut(fqqn, "::")
	if !ok {
		queue = addr
	}
	return broker.Destination{Address: addr, Queue: queue}
}

// publishPhases measures POST …/messages at fan-out 1 and 10 and
// messages:batch, each for -duration or until -publish-sends broker sends
// were accepted: events answered 202 per second, and per second until the
// relay had sent all of them to the broker.
func (b *bench) publishPhases(ctx context.Context, base baselineResult) error {
	c := b.client(b.serve)
	modes := []struct {
		key, name string
		fanout    int
		batch     bool
	}{
		{"publish.fanout1", "POST …/messages, fan-out 1", 1, false},
		{"publish.fanout10", "POST …/messages, fan-out 10", 10, false},
		{"publish.batch", "POST …/messages:batch ×100, fan-out 1", 1, true},
	}
	for _, m := range modes {
		room := b.room(strings.TrimPrefix(m.key, "publish."))
		roomID, err := c.setupRoom(ctx, room, nil)
		if err != nil {
			return err
		}
		var dests []broker.Destination
		for range m.fanout {
			sub, err := c.subscribe(ctx, room, "PULL", eventFast, nil)
			if err != nil {
				return err
			}
			dests = append(dests, destination(sub.Destination))
		}
		path := "/v1/rooms/" + room + "/messages"
		req := func(ctx context.Context, n int) (int, error) {
			return 1, c.call(ctx, "POST", path, appendEvent(nil, eventFast, n, b.sink.since()), http.StatusAccepted, nil)
		}
		if m.batch {
			req = func(ctx context.Context, n int) (int, error) {
				return 100, c.call(ctx, "POST", path+":batch", batchBody(n*100, 100, b.sink.since(), fastOnly), http.StatusAccepted, nil)
			}
		}
		perReq := m.fanout
		if m.batch {
			perReq *= 100
		}
		roles := map[string]*service{"serve": b.serve}
		cpu0, err := b.cpu.sample(roles)
		if err != nil {
			return err
		}
		res := load(ctx, b.cfg.concurrency, time.Now().Add(b.cfg.duration), max(1, b.cfg.maxSends/perReq), req)
		if res.accepted == 0 {
			return fmt.Errorf("%s: nothing accepted (%d failed requests; first: %w)", m.name, res.errors, res.firstErr)
		}
		relayedAt, err := b.db.waitRelayed(ctx, roomID, phaseTimeout)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		cpu1, err := b.cpu.sample(roles)
		if err != nil {
			return err
		}
		accepted := perSecond(res.accepted, res.elapsed)
		relayed := perSecond(res.accepted, relayedAt.Sub(res.started))
		b.logf("%s: %d events accepted in %s = %.0f/s; all relayed after %s = %.0f/s (%d failed requests)", m.name,
			res.accepted, res.elapsed.Round(time.Millisecond), accepted, relayedAt.Sub(res.started).Round(time.Millisecond), relayed, res.errors)
		note := fmt.Sprintf("%d clients, %d events", b.cfg.concurrency, res.accepted)
		if res.errors > 0 {
			note += fmt.Sprintf(", %d FAILED requests (first: %v)", res.errors, res.firstErr)
		}
		relayNote := "202 → every send confirmed by the broker"
		if m.fanout > 1 {
			note += fmt.Sprintf("; = %.0f broker sends/s (ratio counts sends)", accepted*float64(m.fanout))
			relayNote += fmt.Sprintf("; = %.0f sends/s (ratio counts sends)", relayed*float64(m.fanout))
		}
		b.rep.addRatio(Figure{Key: m.key, Group: "2 publish", Name: m.name + ": accepted", Value: accepted, Unit: "events/s", Note: note},
			"baseline.send", accepted*float64(m.fanout))
		b.rep.addRatio(Figure{Key: m.key + "_relayed", Group: "2 publish", Name: m.name + ": relayed", Value: relayed, Unit: "events/s", Note: relayNote},
			"baseline.send", relayed*float64(m.fanout))
		// Per broker send, so that fan-outs compare with the raw send.
		cost := spent(cpu0, cpu1, res.accepted*m.fanout, [][2]string{{"broker", "broker"}, {"serve", "serve"}, {"PostgreSQL", "PostgreSQL"}, {"msgbench", "msgbench (publishers)"}})
		b.rep.addRatio(Figure{Key: m.key + "_cpu", Group: "2 publish", Name: "  machine CPU per 1000 broker sends", Value: cost.per1000, Unit: "CPU s",
			Note: "202 → all relayed: " + cost.note() + "; ratio to a raw durable send's; ½ raw durable send: " + cost.needs(base.send/2)}, "cpu.send", 0)
		if err := b.drainAll(ctx, dests, res.accepted); err != nil {
			return err
		}
	}
	return nil
}

// drainAll empties the PULL queues a publish phase filled (a real broker
// keeps them on disk otherwise), all at once and outside any timing.
func (b *bench) drainAll(ctx context.Context, dests []broker.Destination, each int) error {
	if b.cfg.embedded {
		return nil // in the service's memory; gone when it stops
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		errs  []error
	)
	for _, d := range dests {
		wg.Go(func() {
			n, err := drainQueue(ctx, b.raw, d, each, 10*time.Second)
			mu.Lock()
			defer mu.Unlock()
			total += n
			if err != nil {
				errs = append(errs, err)
			} else if n < each {
				b.queues = append(b.queues, d)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("drain: %w", errs[0])
	}
	return nil
}

// pullPhase preloads a PULL subscription with -messages events, then pulls
// (maxMessages 100) and acks them with -pullers clients.
func (b *bench) pullPhase(ctx context.Context, _ baselineResult) error {
	c := b.client(b.serve)
	room := b.room("pull")
	roomID, err := c.setupRoom(ctx, room, nil)
	if err != nil {
		return err
	}
	sub, err := c.subscribe(ctx, room, "PULL", eventFast, nil)
	if err != nil {
		return err
	}
	n := b.cfg.messages
	if _, err := b.publishBatches(ctx, c, room, n, fastOnly); err != nil {
		return err
	}
	if _, err := b.db.waitRelayed(ctx, roomID, phaseTimeout); err != nil {
		return err
	}
	b.logf("pull: preloaded %d events into %s", n, sub.Destination)
	base := "/v1/rooms/" + room + "/subscriptions/" + sub.ID
	var (
		acked, pulls, failed atomic.Int64
		doneOnce             sync.Once
		doneAt               time.Time
		mu                   sync.Mutex
		firstErr             error
		wg                   sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(phaseTimeout)
	for range b.cfg.pullers {
		wg.Go(func() {
			for acked.Load() < int64(n) && time.Now().Before(deadline) && ctx.Err() == nil {
				var got struct {
					Messages []struct {
						AckID string `json:"ackId"`
					} `json:"messages"`
				}
				err := c.call(ctx, "POST", base+"/pull", map[string]any{"maxMessages": 100, "waitMs": 1000}, http.StatusOK, &got)
				if err == nil && len(got.Messages) > 0 {
					ids := make([]string, len(got.Messages))
					for i, m := range got.Messages {
						ids[i] = m.AckID
					}
					var res struct {
						Results []struct {
							Status string `json:"status"`
						} `json:"results"`
					}
					if err = c.call(ctx, "POST", base+"/ack", map[string]any{"ackIds": ids}, http.StatusOK, &res); err == nil {
						k := 0
						for _, r := range res.Results {
							if r.Status == "acked" {
								k++
							}
						}
						if acked.Add(int64(k)) >= int64(n) {
							doneOnce.Do(func() { doneAt = time.Now() })
						}
					}
				}
				pulls.Add(1)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if acked.Load() < int64(n) {
		return fmt.Errorf("pulled and acked %d of %d (%d failed calls; first: %w)", acked.Load(), n, failed.Load(), firstErr)
	}
	rate := perSecond(n, doneAt.Sub(start))
	b.logf("pull+ack: %d in %s = %.0f/s (%d pulls, %d failed calls)", n, doneAt.Sub(start).Round(time.Millisecond), rate, pulls.Load(), failed.Load())
	note := fmt.Sprintf("%d clients, %d msgs, %d pulls", b.cfg.pullers, n, pulls.Load())
	if failed.Load() > 0 {
		note += fmt.Sprintf(", %d FAILED calls (first: %v)", failed.Load(), firstErr)
	}
	b.rep.addRatio(Figure{Key: "pull.rate", Group: "7 pull", Name: "pull (maxMessages 100) + ack", Value: rate, Unit: "msg/s", Note: note},
		"baseline.consume", 0)
	return nil
}

// flowPhase is the end-to-end maximum: -messages events published in
// batches to a room with one PUSH subscription, through the serve process
// (publish, relay, dispatcher), until the sink has them all. It also gives
// the service's CPU per delivery.
func (b *bench) flowPhase(ctx context.Context, _ baselineResult) error {
	c := b.client(b.serve)
	room := b.room("flow")
	n := b.cfg.messages
	roomID, err := c.setupRoom(ctx, room, nil)
	if err != nil {
		return err
	}
	t := b.sink.add(room, answerOK, n)
	if _, err := c.subscribe(ctx, room, "PUSH", eventFast, map[string]any{"pushUrl": b.sink.url(t)}); err != nil {
		return err
	}
	before, err := b.serve.stats()
	if err != nil {
		return err
	}
	roles := map[string]*service{"serve": b.serve}
	cpu0, err := b.cpu.sample(roles)
	if err != nil {
		return err
	}
	res, err := b.publishBatches(ctx, c, room, n, fastOnly)
	if err != nil {
		return err
	}
	if err := t.wait(ctx, phaseTimeout); err != nil {
		return err
	}
	after, err := b.serve.stats()
	if err != nil {
		return err
	}
	cpu1, err := b.cpu.sample(roles)
	if err != nil {
		return err
	}
	_, last, dups, _, _, _ := t.snapshot()
	deferred, _ := b.db.withStatus(ctx, roomID, "deferred")
	b.flowRate = perSecond(n, last.Sub(res.started))
	cpu := (after.cpu - before.cpu).Seconds()
	b.logf("end-to-end maximum: %d events published in %s, all pushed after %s = %.0f/s; serve CPU %.2fs",
		n, res.elapsed.Round(time.Millisecond), last.Sub(res.started).Round(time.Millisecond), b.flowRate, cpu)
	b.rep.add(Figure{Key: "e2e.max", Group: "4 end to end", Name: "end-to-end maximum: publish → relay → push", Value: b.flowRate, Unit: "events/s",
		Note: fmt.Sprintf("serve process; %d events in batches of 100, %d clients; first publish → last delivery; %d deferrals, %d duplicates", n, b.cfg.concurrency, deferred, dups)})
	b.rep.add(Figure{Key: "service.cpu_per_1000", Group: "8 resources", Name: "service CPU per 1000 deliveries (serve: publish+relay+push)",
		Value: cpu / float64(n) * 1000, Unit: "CPU s", Note: fmt.Sprintf("utime+stime over the end-to-end maximum run, %d deliveries", n)})
	cost := spent(cpu0, cpu1, n, [][2]string{{"broker", "broker"}, {"serve", "serve"}, {"PostgreSQL", "PostgreSQL"}, {"msgbench", "msgbench (publishers, sink)"}})
	b.rep.add(Figure{Key: "cpu.flow", Group: "8 resources", Name: "machine CPU per 1000 events end to end",
		Value: cost.per1000, Unit: "CPU s", Note: "end-to-end maximum run: " + cost.note()})
	return nil
}

// pushPhase measures the dispatcher alone: an api process fills a push
// queue nobody consumes, then a dispatcher process drains it into the sink.
// The embedded broker lives inside one process, so there the end-to-end
// maximum stands in.
func (b *bench) pushPhase(ctx context.Context, base baselineResult) error {
	if b.cfg.embedded {
		b.pushRate = b.flowRate
		b.rep.addRatio(Figure{Key: "push.rate", Group: "3 push", Name: "push to a sink answering 200 at once", Value: b.pushRate, Unit: "deliveries/s",
			Note: "embedded broker: cannot be preloaded by another process, so this is the end-to-end maximum (a lower bound)"}, "baseline.consume", 0)
		return nil
	}
	n := b.cfg.messages
	var (
		room = b.room("push")
		t    = b.sink.add(room, answerOK, n)
	)
	d, roomID, err := b.preloadPush(ctx, "dispatcher-push", room, n, func(c *apiClient) error {
		_, err := c.subscribe(ctx, room, "PUSH", eventFast, map[string]any{"pushUrl": b.sink.url(t)})
		return err
	}, fastOnly)
	if err != nil {
		return err
	}
	defer func() {
		if err := d.stop(20 * time.Second); err != nil {
			b.logf("%v", err)
		}
	}()
	// CPU is counted from here, over the deliveries that follow.
	before, err := d.stats()
	if err != nil {
		return err
	}
	n0 := t.count()
	roles := map[string]*service{"dispatcher": d}
	cpu0, err := b.cpu.sample(roles)
	if err != nil {
		return err
	}
	if err := t.wait(ctx, phaseTimeout); err != nil {
		return err
	}
	after, err := d.stats()
	if err != nil {
		return err
	}
	cpu1, err := b.cpu.sample(roles)
	if err != nil {
		return err
	}
	first, last, dups, _, _, _ := t.snapshot()
	deferred, _ := b.db.withStatus(ctx, roomID, "deferred")
	b.pushRate = perSecond(n-1, last.Sub(first))
	b.logf("push: %d deliveries in %s = %.0f/s (%d deferrals)", n, last.Sub(first).Round(time.Millisecond), b.pushRate, deferred)
	note := fmt.Sprintf("dispatcher process draining %d preloaded msgs, first → last delivery; %d deferrals, %d duplicates", n, deferred, dups)
	if c, ok := b.rep.figure("baseline.consume_post"); ok && c.Value > 0 {
		note += fmt.Sprintf("; %.2f × the push ceiling", b.pushRate/c.Value)
	}
	b.rep.addRatio(Figure{Key: "push.rate", Group: "3 push", Name: "push to a sink answering 200 at once", Value: b.pushRate, Unit: "deliveries/s",
		Note: note}, "baseline.consume", 0)
	if n > n0 {
		b.rep.add(Figure{Key: "dispatcher.cpu_per_1000", Group: "8 resources", Name: "dispatcher CPU per 1000 deliveries (push only)",
			Value: (after.cpu - before.cpu).Seconds() / float64(n-n0) * 1000, Unit: "CPU s", Note: fmt.Sprintf("%d deliveries", n-n0)})
	}
	if n > n0 {
		cost := spent(cpu0, cpu1, n-n0, [][2]string{{"broker", "broker"}, {"dispatcher", "dispatcher"}, {"PostgreSQL", "PostgreSQL"}, {"msgbench", "msgbench (sink)"}})
		b.rep.addRatio(Figure{Key: "cpu.push", Group: "8 resources", Name: "machine CPU per 1000 push deliveries",
			Value: cost.per1000, Unit: "CPU s", Note: cost.note() + "; ratio to a raw consume + ack's; 0.8 × raw consume + ack: " + cost.needs(0.8*base.consume)}, "cpu.consume", 0)
	}
	b.rep.add(Figure{Key: "dispatcher.rss_peak", Group: "8 resources", Name: "dispatcher peak RSS (VmHWM)", Value: float64(after.hwm) / (1 << 20), Unit: "MiB"})
	return nil
}

// preloadPush fills the run's split push queue with total events of room
// through the api process (started on first use), waits until the relay has
// sent them all, and starts a dispatcher process on that queue.
func (b *bench) preloadPush(ctx context.Context, name, room string, total int, subscribe func(*apiClient) error, eventType func(int) string) (*service, string, error) {
	queue := b.queue("push-split")
	if b.apiProc == nil {
		b.queues = append(b.queues, queue)
		s, err := b.startService(ctx, "api", "api", queue)
		if err != nil {
			return nil, "", err
		}
		b.apiProc = s
	}
	c := b.client(b.apiProc)
	roomID, err := c.setupRoom(ctx, room, nil, eventFast, eventSlow)
	if err != nil {
		return nil, "", err
	}
	if err := subscribe(c); err != nil {
		return nil, "", err
	}
	res, err := b.publishBatches(ctx, c, room, total, eventType)
	if err != nil {
		return nil, "", err
	}
	if _, err := b.db.waitRelayed(ctx, roomID, phaseTimeout); err != nil {
		return nil, "", err
	}
	b.logf("preloaded %d events into %s in %s", total, queue.FQQN(), time.Since(res.started).Round(time.Millisecond))
	d, err := b.startService(ctx, name, "dispatcher", queue)
	return d, roomID, err
}

// latencyPhase measures publish → push latency at fixed offered rates: any
// given with -latency-rates, half the end-to-end maximum (what the serve
// process sustains with publishing and relaying in it too), and half the push
// maximum (the dispatcher's capacity; on a small machine more than the serve
// process sustains, so it runs last, not to leave a backlog to the others).
func (b *bench) latencyPhase(ctx context.Context, _ baselineResult) error {
	if b.pushRate <= 0 || b.flowRate <= 0 {
		return fmt.Errorf("needs the push and end-to-end maximum phases first")
	}
	type run struct {
		key, what string
		rate      float64
	}
	var runs []run
	for _, r := range b.cfg.fixedRates {
		runs = append(runs, run{fmt.Sprintf("e2e_fixed_%.0f", r), "fixed", r})
	}
	runs = append(runs,
		run{"e2e_half_flow", "½ end-to-end maximum", b.flowRate / 2},
		run{"e2e", "½ push maximum", b.pushRate / 2},
	)
	for _, r := range runs {
		if err := b.latencyRun(ctx, r.key, r.what, r.rate); err != nil {
			return err
		}
	}
	return nil
}

// latencyRun offers single publishes open loop at rate for -duration; each
// event's latency runs from its intended publish time to its arrival at the
// sink, so a publisher that falls behind cannot hide delay.
func (b *bench) latencyRun(ctx context.Context, key, what string, rate float64) error {
	c := b.client(b.serve)
	n := max(20, int(rate*b.cfg.duration.Seconds()))
	room := b.room(strings.ReplaceAll(key, "_", "-"))
	roomID, err := c.setupRoom(ctx, room, nil)
	if err != nil {
		return err
	}
	t := b.sink.add(room, answerOK, n)
	t.latency = true
	if _, err := c.subscribe(ctx, room, "PUSH", eventFast, map[string]any{"pushUrl": b.sink.url(t)}); err != nil {
		return err
	}
	roles := map[string]*service{"serve": b.serve}
	cpu0, err := b.cpu.sample(roles)
	if err != nil {
		return err
	}
	start, lastAns, err := b.offerOpenLoop(ctx, []*apiClient{c}, room, rate, n)
	if err != nil {
		return err
	}
	if err := t.wait(ctx, phaseTimeout); err != nil {
		return err
	}
	cpu1, err := b.cpu.sample(roles)
	if err != nil {
		return err
	}
	_, last, dups, lat, _, _ := t.snapshot()
	deferred, _ := b.db.withStatus(ctx, roomID, "deferred")
	achieved := perSecond(n, lastAns.Sub(start))
	delivered := perSecond(n, last.Sub(start))
	p50, p95, p99 := percentile(lat, 50), percentile(lat, 95), percentile(lat, 99)
	b.logf("latency at %.0f/s offered (%s; %.0f/s published, %.0f/s delivered, %d deferrals): p50 %s p95 %s p99 %s max %s",
		rate, what, achieved, delivered, deferred, p50.Round(time.Microsecond), p95.Round(time.Microsecond), p99.Round(time.Microsecond), percentile(lat, 100).Round(time.Microsecond))
	b.rep.add(Figure{Key: key + ".offered", Group: "4 end to end", Name: "latency run: offered rate (" + what + ")", Value: rate, Unit: "events/s",
		Note: fmt.Sprintf("single POSTs, open loop, %d events; published %.0f/s, delivered %.0f/s; %d deferrals, %d duplicates", n, achieved, delivered, deferred, dups)})
	note := fmt.Sprintf("intended publish time → arrival at the sink; max %.1f ms", ms(percentile(lat, 100)))
	b.rep.add(Figure{Key: key + ".p50", Group: "4 end to end", Name: "  latency p50", Value: ms(p50), Unit: "ms", Note: note})
	b.rep.add(Figure{Key: key + ".p95", Group: "4 end to end", Name: "  latency p95", Value: ms(p95), Unit: "ms"})
	b.rep.add(Figure{Key: key + ".p99", Group: "4 end to end", Name: "  latency p99", Value: ms(p99), Unit: "ms"})
	cost := spent(cpu0, cpu1, n, [][2]string{{"broker", "broker"}, {"serve", "serve"}, {"PostgreSQL", "PostgreSQL"}, {"msgbench", "msgbench (publishers, sink)"}})
	b.rep.add(Figure{Key: key + ".cpu", Group: "4 end to end", Name: "  machine CPU per 1000 events", Value: cost.per1000, Unit: "CPU s",
		Note: cost.note() + "; " + cost.needs(rate)})
	return nil
}

// retryPhase: one PUSH subscription per delay, each retrying once after that
// delay (multiplier 1) to a sink that fails the first attempt; events are
// spread over time so that retries fall at every phase of the scheduler.
func (b *bench) retryPhase(ctx context.Context, _ baselineResult) error {
	c := b.client(b.serve)
	room := b.room("retry")
	if _, err := c.setupRoom(ctx, room, nil); err != nil {
		return err
	}
	r := b.cfg.retries
	var targets []*target
	maxDelay := time.Duration(0)
	for _, d := range b.cfg.retryDelays {
		t := b.sink.add(fmt.Sprintf("%s-%dms", room, d.Milliseconds()), answerFailFirst, r)
		t.retryDelay = d
		targets = append(targets, t)
		maxDelay = max(maxDelay, d)
		if _, err := c.subscribe(ctx, room, "PUSH", eventFast, map[string]any{
			"pushUrl": b.sink.url(t), "deliveryDelay": d.Milliseconds(), "deliveryDelayMultiplier": 1.0, "deliveryAttempts": 3,
			// Every first attempt fails, which would open the circuit.
			"circuitBreaker": map[string]any{"enabled": false},
		}); err != nil {
			return err
		}
	}
	const spacing = 113 * time.Millisecond
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i := range r {
		wg.Go(func() {
			if err := c.call(ctx, "POST", "/v1/rooms/"+room+"/messages", appendEvent(nil, eventFast, i, b.sink.since()), http.StatusAccepted, nil); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
		time.Sleep(spacing)
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	var errs []time.Duration
	for _, t := range targets {
		if err := t.wait(ctx, maxDelay+time.Minute); err != nil {
			return err
		}
		_, _, _, _, e, _ := t.snapshot()
		errs = append(errs, e...)
	}
	if len(errs) == 0 {
		return fmt.Errorf("no retry was timed")
	}
	p50, p99 := percentile(errs, 50), percentile(errs, 99)
	b.logf("retry timing: error p50 %s p99 %s max %s (n=%d)", p50, p99, percentile(errs, 100), len(errs))
	note := fmt.Sprintf("n=%d, delays %s; attempt 2 arrival − (attempt 1's 500 + delay); max %.0f ms", len(errs), delaysText(b.cfg.retryDelays), ms(percentile(errs, 100)))
	b.rep.add(Figure{Key: "retry.p50", Group: "5 retry timing", Name: "retry error p50 (planned → observed attempt)", Value: ms(p50), Unit: "ms", Note: note})
	b.rep.add(Figure{Key: "retry.p99", Group: "5 retry timing", Name: "retry error p99", Value: ms(p99), Unit: "ms",
		Note: "compare with the broker's own lateness p99 (baseline)"})
	return nil
}

// isolationPhase: like the push phase, but every 1/hang-share-th event goes
// to a second subscription whose endpoint hangs until PUSH_TIMEOUT (one
// attempt, then a dead letter). The figure is the fast endpoint's rate.
func (b *bench) isolationPhase(ctx context.Context, _ baselineResult) error {
	n := b.cfg.messages
	h := max(1, int(float64(n)*b.cfg.hangShare+0.5))
	total := n + h
	room := b.room("isolation")
	fast := b.sink.add(room+"-fast", answerOK, n)
	hang := b.sink.add(room+"-hang", answerHang, 0)
	// Spread the hanging endpoint's events evenly among the fast ones.
	mix := func(seq int) string {
		if (seq+1)*h/total > seq*h/total {
			return eventSlow
		}
		return eventFast
	}
	subscribe := func(c *apiClient) error {
		if _, err := c.subscribe(ctx, room, "PUSH", eventFast, map[string]any{"pushUrl": b.sink.url(fast)}); err != nil {
			return err
		}
		// The breaker off: this measures the deferral of a hanging endpoint's
		// messages, which an open circuit would hold instead.
		_, err := c.subscribe(ctx, room, "PUSH", eventSlow, map[string]any{"pushUrl": b.sink.url(hang), "deliveryAttempts": 1,
			"circuitBreaker": map[string]any{"enabled": false}})
		return err
	}
	var (
		rate   float64
		roomID string
		method string
	)
	if b.cfg.embedded {
		c := b.client(b.serve)
		var err error
		if roomID, err = c.setupRoom(ctx, room, nil, eventFast, eventSlow); err != nil {
			return err
		}
		if err := subscribe(c); err != nil {
			return err
		}
		res, err := b.publishBatches(ctx, c, room, total, mix)
		if err != nil {
			return err
		}
		if err := fast.wait(ctx, phaseTimeout); err != nil {
			return err
		}
		_, last, _, _, _, _ := fast.snapshot()
		rate = perSecond(n, last.Sub(res.started))
		method = "serve process, live (as the push figure)"
	} else {
		d, id, err := b.preloadPush(ctx, "dispatcher-isolation", room, total, subscribe, mix)
		if err != nil {
			return err
		}
		// A hanging delivery holds its worker for PUSH_TIMEOUT; what is left
		// of the run's hanging messages is drained at the end.
		defer func() { _ = d.cmd.Process.Kill() }()
		n0 := fast.count()
		roles := map[string]*service{"dispatcher": d}
		cpu0, err := b.cpu.sample(roles)
		if err != nil {
			return err
		}
		if err := fast.wait(ctx, phaseTimeout); err != nil {
			return err
		}
		cpu1, err := b.cpu.sample(roles)
		if err != nil {
			return err
		}
		first, last, _, _, _, _ := fast.snapshot()
		rate = perSecond(n-1, last.Sub(first))
		if n > n0 {
			// Per fast delivery: what the hanging endpoint's deferrals add shows
			// against the push run's cost (added after the rate, below).
			cost := spent(cpu0, cpu1, n-n0, [][2]string{{"broker", "broker"}, {"dispatcher", "dispatcher"}, {"PostgreSQL", "PostgreSQL"}, {"msgbench", "msgbench (sinks)"}})
			note := cost.note()
			if _, ok := b.rep.figure("cpu.push"); ok {
				note += "; ratio to the push run's"
			}
			if b.pushRate > 0 {
				note += "; push alone's rate: " + cost.needs(b.pushRate)
			}
			defer b.rep.addRatio(Figure{Key: "isolation.cpu", Group: "6 isolation", Name: "  machine CPU per 1000 fast deliveries", Value: cost.per1000, Unit: "CPU s", Note: note}, "cpu.push", 0)
		}
		roomID, method = id, "dispatcher process draining a preloaded queue (as the push figure)"
	}
	deferred, _ := b.db.withStatus(ctx, roomID, "deferred")
	_, _, _, _, _, hung := hang.snapshot()
	b.logf("isolation: fast endpoint %.0f/s beside a hanging one (%d hanging requests, %d deferrals)", rate, hung, deferred)
	b.rep.addRatio(Figure{Key: "isolation.rate", Group: "6 isolation", Name: "push to a fast endpoint while another hangs", Value: rate, Unit: "deliveries/s",
		Note: fmt.Sprintf("ratio to push alone; %s; %d fast + %d hanging events, PUSH_TIMEOUT %s; %d requests hung, %d deferrals",
			method, n, h, b.cfg.pushTimeout, hung, deferred)}, "push.rate", 0)
	return nil
}

// offerOpenLoop publishes n single events to room at rate, open loop: event
// i is due at start + i/rate whether or not the ones before it were
// answered, and its payload carries that intended time, from which the sink
// computes its latency. Event i goes to clients[i mod len(clients)]. It
// returns the start and the time of the last answer.
func (b *bench) offerOpenLoop(ctx context.Context, clients []*apiClient, room string, rate float64, n int) (start, lastAns time.Time, err error) {
	path := "/v1/rooms/" + room + "/messages"
	interval := float64(time.Second) / rate
	start = time.Now().Add(50 * time.Millisecond)
	jobs := make(chan int, n)
	go func() {
		defer close(jobs)
		for i := range n {
			if d := time.Until(start.Add(time.Duration(float64(i) * interval))); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			jobs <- i
		}
	}()
	var (
		failed   int
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for range max(64, b.cfg.concurrency) {
		wg.Go(func() {
			for i := range jobs {
				intended := start.Add(time.Duration(float64(i) * interval))
				body := appendEvent(nil, eventFast, i, int64(intended.Sub(b.sink.t0)))
				err := clients[i%len(clients)].call(ctx, "POST", path, body, http.StatusAccepted, nil)
				mu.Lock()
				lastAns = time.Now()
				if err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed > 0 {
		return start, lastAns, fmt.Errorf("latency run: %d publishes failed (first: %w)", failed, firstErr)
	}
	return start, lastAns, nil
}
