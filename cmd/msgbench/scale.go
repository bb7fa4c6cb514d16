package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/cmd/internal/promtext"
	"github.com/roomhub/messaging-api/message"
)

// The scale phase runs the service as several processes against the one
// broker and database: push drains with N dispatcher processes on one
// preloaded push queue, and publishes through M API processes (each with its
// outbox relay) behind a round robin in the load generator. The point on a
// small machine is that the work spreads without loss or duplication; the
// rates are bound by the shared cores. Every process count runs once per
// round, in the reverse order every other round, and each figure is a ratio
// to the 1-process run of the same round, so that the machine's noise hits
// every count alike.

// scaleConfig is the scale phase's settings.
type scaleConfig struct {
	rounds      int
	dispatchers []int // process counts of the push drains; 1 among them
	apis        []int // process counts of the publish runs; 1 among them
	messages    int   // preloaded per push drain, published in batches per publish run
	rate        float64
	duration    time.Duration
}

// scaleWait bounds every wait of the scale phase for the service to catch
// up; what has not arrived by then counts as lost.
const scaleWait = 3 * time.Minute

// watchInterval is how often the phase reads the processes' metrics while
// they drain, to see when each stopped.
const watchInterval = 200 * time.Millisecond

// The metrics the scale phase reads from each process's /metrics: push
// requests answered 2xx (counted as the answer comes, where the delivered
// outcome is counted once stored, a group commit later), and the relay's
// sends.
const (
	metricPushRequests = "messaging_push_request_duration_seconds_count"
	metricRelayed      = "messaging_outbox_relayed_total"
)

// LatencyRun is a run of single publishes offered open loop at a fixed rate.
type LatencyRun struct {
	Offered   float64 `json:"offered"`   // events/s
	Events    int     `json:"events"`    //
	Published float64 `json:"published"` // events/s the publishers achieved
	Delivered float64 `json:"delivered"` // events/s from the first intended publish to the last arrival
	P50       float64 `json:"p50Ms"`
	P99       float64 `json:"p99Ms"`
	Max       float64 `json:"maxMs"`
}

// PushRun is one push drain by N dispatcher processes, then a latency run
// through them.
type PushRun struct {
	Round     int `json:"round"`
	Processes int `json:"processes"`
	Preloaded int `json:"preloaded"`
	// Head is the deliveries made before every process was ready (the
	// first ones drain while the last ones start); Window those after: the
	// rate, the shares and the CPU count those.
	Head       int       `json:"head"`
	Window     int       `json:"window"`
	Rate       float64   `json:"rate"`       // deliveries/s over the window
	Shares     []float64 `json:"shares"`     // each process's part of the window (its metrics)
	HeadShares []float64 `json:"headShares"` // each process's part of the deliveries before the window
	// Elapsed is the window's length; Finished when each process was last
	// seen delivering (its metrics, polled), both in seconds from its start.
	Elapsed  float64   `json:"elapsedS"`
	Finished []float64 `json:"finishedS"`
	// CPU seconds per 1000 deliveries of the window: the dispatchers
	// summed, and the whole machine.
	DispatcherCPU float64    `json:"dispatcherCpuPer1000"`
	MachineCPU    float64    `json:"machineCpuPer1000"`
	CPUNote       string     `json:"cpuNote"`
	Latency       LatencyRun `json:"latency"`
	Duplicates    int        `json:"duplicates"` // at the sink, by event id, drain and latency run
	// Warnings are the WARN and ERROR log lines of the processes, by message.
	Warnings map[string]int `json:"warnings"`
}

// PublishRun is one run of M API processes: single POSTs closed loop, a
// backlog published in batches through the first process (more than its
// relay's hand-off takes, so that every relay's claims carry the rest), and
// a latency run through one dispatcher.
type PublishRun struct {
	Round     int `json:"round"`
	Processes int `json:"processes"`

	Events         int       `json:"events"` // single POSTs answered 202
	FailedRequests int       `json:"failedRequests"`
	Accepted       float64   `json:"accepted"`    // events/s
	Relayed        float64   `json:"relayed"`     // events/s until the outbox held none of them
	RelayShares    []float64 `json:"relayShares"` // each relay's part of the sends (its metrics)
	APICPU         float64   `json:"apiCpuPer1000"`

	Backlog         int       `json:"backlog"`         // events published in batches
	BacklogAccepted float64   `json:"backlogAccepted"` // events/s
	BacklogRelayed  float64   `json:"backlogRelayed"`  // events/s until the outbox held none of them
	Claimable       int       `json:"claimable"`       // outbox rows no relay held when the last batch was accepted
	ClaimShares     []float64 `json:"claimShares"`
	// BacklogElapsed is the time from the first batch until the outbox held
	// none of the backlog; BacklogFinished when each relay was last seen
	// sending, both in seconds from the first batch.
	BacklogElapsed  float64   `json:"backlogElapsedS"`
	BacklogFinished []float64 `json:"backlogFinishedS"`

	Latency    LatencyRun     `json:"latency"`
	Duplicates int            `json:"duplicates"` // in the PULL queues and at the sink
	Extra      int            `json:"extra"`      // events that arrived though their publish failed
	Warnings   map[string]int `json:"warnings"`   // WARN and ERROR log lines of the processes, by message
}

// ScaleResult is what the scale phase measured, round by round.
type ScaleResult struct {
	Skipped string       `json:"skipped,omitempty"`
	Push    []PushRun    `json:"push"`
	Publish []PublishRun `json:"publish"`
}

// scaler runs the scale phase on a schema of its own (its outboxes must
// hold only what its own relays owe) and two push queues of its own.
type scaler struct {
	b     *bench
	db    *benchDB
	pushQ broker.Destination // the push drains'
	e2eQ  broker.Destination // the publish runs' latency runs'
	hc    *http.Client       // reads /metrics
}

func (b *bench) scalePhase(ctx context.Context, _ baselineResult) error {
	res := &ScaleResult{}
	b.rep.Scale = res
	if b.cfg.embedded {
		res.Skipped = "the embedded broker lives inside each process: an api process relays to its own, which no dispatcher process reads"
		b.logf("scale: not run: %s", res.Skipped)
		return nil
	}
	db, err := openBenchDB(ctx, b.cfg, b.tmp, b.id+"_scale")
	if err != nil {
		return err
	}
	b.extraDBs = append(b.extraDBs, db)
	s := &scaler{b: b, db: db, pushQ: b.queue("scale-push"), e2eQ: b.queue("scale-e2e"), hc: &http.Client{Timeout: 10 * time.Second}}
	b.queues = append(b.queues, s.pushQ, s.e2eQ)
	cfg := b.cfg.scale
	for round := 1; round <= cfg.rounds; round++ {
		ds, as := slices.Clone(cfg.dispatchers), slices.Clone(cfg.apis)
		if round%2 == 0 {
			slices.Reverse(ds)
			slices.Reverse(as)
		}
		for _, n := range ds {
			run, err := s.pushDrain(ctx, round, n)
			if err != nil {
				return fmt.Errorf("round %d, %d dispatchers: %w", round, n, err)
			}
			res.Push = append(res.Push, run)
		}
		for _, m := range as {
			run, err := s.publishRun(ctx, round, m)
			if err != nil {
				return fmt.Errorf("round %d, %d API processes: %w", round, m, err)
			}
			res.Publish = append(res.Publish, run)
		}
	}
	b.rep.addScaleFigures(res, cfg, b.cfg.concurrency)
	return nil
}

// procSpec names a service process to start.
type procSpec struct {
	name, command string
	queue         broker.Destination
}

// startGroup starts the processes at once and waits until every one is
// ready. On an error the ones that started are in the result, to be stopped.
func (s *scaler) startGroup(ctx context.Context, specs []procSpec) ([]*service, error) {
	out := make([]*service, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, sp := range specs {
		wg.Go(func() { out[i], errs[i] = s.b.startServiceOn(ctx, s.db, sp.name, sp.command, sp.queue) })
	}
	wg.Wait()
	return slices.DeleteFunc(out, func(p *service) bool { return p == nil }), errors.Join(errs...)
}

// stopGroup stops the processes at once (SIGTERM, then their grace).
func (s *scaler) stopGroup(procs []*service) error {
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.stop(20 * time.Second) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// counters reads counter name, summed over the samples whose labels
// include want, from each process's /metrics (0 where it has none).
func (s *scaler) counters(ctx context.Context, procs []*service, name string, want map[string]string) ([]float64, error) {
	out := make([]float64, len(procs))
	for i, p := range procs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := s.hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s /metrics: %w", p.name, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s /metrics: status %d, %w", p.name, resp.StatusCode, err)
		}
		// A labelled series appears with its first observation: none is 0.
		out[i], _ = promtext.Value(body, name, want)
	}
	return out, nil
}

var pushDelivered = map[string]string{"result": "delivered"}

// waitDelivered polls the dispatchers' metrics until they count total
// deliveries between them (a request is counted after the sink's answer).
func (s *scaler) waitDelivered(ctx context.Context, procs []*service, total int) ([]float64, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := s.counters(ctx, procs, metricPushRequests, pushDelivered)
		if err != nil {
			return nil, err
		}
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		if sum >= float64(total) {
			return v, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the dispatchers count %.0f deliveries, want %d", sum, total)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// watchGrowth polls counter name of each process every interval until stop
// is called, and stop returns when each one last grew (the zero time for one
// that never did): a process that stops early while the others still work
// (a starved dispatcher, a relay left without claims) shows there.
func (s *scaler) watchGrowth(ctx context.Context, procs []*service, name string, want map[string]string, interval time.Duration) (stop func() []time.Time) {
	ctx, cancel := context.WithCancel(ctx)
	last := make([]time.Time, len(procs))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var prev []float64
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if v, err := s.counters(ctx, procs, name, want); err == nil {
				now := time.Now()
				for i := range v {
					if prev != nil && v[i] > prev[i] {
						last[i] = now
					}
				}
				prev = v
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() []time.Time {
		cancel()
		<-done
		return last
	}
}

// since is each time's distance from t0 in seconds (0 for the zero time).
func since(t0 time.Time, ts []time.Time) []float64 {
	out := make([]float64, len(ts))
	for i, t := range ts {
		if !t.IsZero() {
			out[i] = t.Sub(t0).Seconds()
		}
	}
	return out
}

// processCPU is the CPU each process used so far.
func processCPU(procs []*service) ([]time.Duration, error) {
	out := make([]time.Duration, len(procs))
	for i, p := range procs {
		st, err := p.stats()
		if err != nil {
			return nil, err
		}
		out[i] = st.cpu
	}
	return out, nil
}

// cpuNow samples the CPU of the machine and of the roles (for the CPU
// accounts), and of each of procs.
func (s *scaler) cpuNow(roles map[string]*service, procs []*service) (cpuSample, []time.Duration, error) {
	sample, err := s.b.cpu.sample(roles)
	if err != nil {
		return sample, nil, err
	}
	each, err := processCPU(procs)
	return sample, each, err
}

// per1000 is the CPU spent between two readings per 1000 units.
func per1000(before, after []time.Duration, units int) float64 {
	var sum time.Duration
	for i := range after {
		sum += after[i] - before[i]
	}
	return sum.Seconds() / float64(max(units, 1)) * 1000
}

// pushDrain preloads the push queue through an api process, starts n
// dispatcher processes on it at once and measures their drain from the
// moment all were ready; then offers single publishes at the fixed rate
// through them.
func (s *scaler) pushDrain(ctx context.Context, round, n int) (PushRun, error) {
	b, cfg := s.b, s.b.cfg.scale
	run := PushRun{Round: round, Processes: n, Preloaded: cfg.messages}
	tag := fmt.Sprintf("scale-r%d-d%d", round, n)
	procs, err := s.startGroup(ctx, []procSpec{{tag + "-api", "api", s.pushQ}})
	defer func() { _ = s.stopGroup(procs) }()
	if err != nil {
		return run, err
	}
	api := procs[0]
	c := b.client(api)
	defer c.hc.CloseIdleConnections()

	drainRoom, latRoom := b.room(tag+"-drain"), b.room(tag+"-lat")
	drain := b.sink.add(drainRoom, answerOK, run.Preloaded)
	latN := max(20, int(cfg.rate*cfg.duration.Seconds()))
	lat := b.sink.add(latRoom, answerOK, latN)
	lat.latency = true
	drainID, err := s.pushRoom(ctx, c, drainRoom, drain)
	if err != nil {
		return run, err
	}
	if _, err := s.pushRoom(ctx, c, latRoom, lat); err != nil {
		return run, err
	}
	res, err := b.publishBatches(ctx, c, drainRoom, run.Preloaded, fastOnly)
	if err != nil {
		return run, err
	}
	if _, err := s.db.waitRelayed(ctx, drainID, phaseTimeout); err != nil {
		return run, err
	}
	b.logf("scale: preloaded %d events in %s", run.Preloaded, time.Since(res.started).Round(time.Millisecond))

	specs := make([]procSpec, n)
	for i := range specs {
		specs[i] = procSpec{fmt.Sprintf("%s-dispatcher%d", tag, i+1), "dispatcher", s.pushQ}
	}
	ds, err := s.startGroup(ctx, specs)
	procs = append(procs, ds...)
	if err != nil {
		return run, err
	}
	// The window opens once every dispatcher is ready: the first ones may
	// have drained part of the queue while the last ones started.
	before, err := s.counters(ctx, ds, metricPushRequests, pushDelivered)
	if err != nil {
		return run, err
	}
	t0 := time.Now()
	run.Head = drain.count()
	roles := map[string]*service{"api": api}
	labels := [][2]string{{"broker", "broker"}}
	for i, d := range ds {
		role := fmt.Sprintf("dispatcher%d", i+1)
		roles[role] = d
		labels = append(labels, [2]string{role, "dispatcher " + strconv.Itoa(i+1)})
	}
	labels = append(labels, [2]string{"api", "api (idle)"}, [2]string{"PostgreSQL", "PostgreSQL"}, [2]string{"msgbench", "msgbench (sink)"})
	cpu0, d0, err := s.cpuNow(roles, ds)
	if err != nil {
		return run, err
	}
	stopWatch := s.watchGrowth(ctx, ds, metricPushRequests, pushDelivered, watchInterval)
	if err := drain.wait(ctx, scaleWait); err != nil {
		stopWatch()
		return run, fmt.Errorf("push drain: events lost or stuck: %w", err)
	}
	finished := stopWatch()
	cpu1, d1, err := s.cpuNow(roles, ds)
	if err != nil {
		return run, err
	}
	after, err := s.waitDelivered(ctx, ds, run.Preloaded)
	if err != nil {
		return run, err
	}
	_, last, _, _, _, _ := drain.snapshot()
	run.Window = run.Preloaded - run.Head
	run.Rate = perSecond(run.Window, last.Sub(t0))
	run.Elapsed, run.Finished = last.Sub(t0).Seconds(), since(t0, finished)
	run.Shares = shares(before, after)
	run.HeadShares = shares(make([]float64, n), before)
	headNote := ""
	if run.Head > 0 {
		headNote = fmt.Sprintf(" (%d before: %s)", run.Head, percents(run.HeadShares))
	}
	run.DispatcherCPU = per1000(d0, d1, run.Window)
	cost := spent(cpu0, cpu1, run.Window, labels)
	run.MachineCPU, run.CPUNote = cost.per1000, cost.note()
	b.logf("scale: %s: %d of %d deliveries after all were ready, in %s = %.0f/s; shares %s%s, each last seen delivering at %s s; dispatchers %.3f, machine %.3f CPU s per 1000",
		processes(n, "dispatcher"), run.Window, run.Preloaded, last.Sub(t0).Round(time.Millisecond), run.Rate, percents(run.Shares), headNote,
		seconds(run.Finished), run.DispatcherCPU, run.MachineCPU)
	if run.Window < run.Preloaded/4 {
		b.logf("scale: only %d of %d deliveries came after every dispatcher was ready; raise -scale-messages", run.Window, run.Preloaded)
	}

	if run.Latency, err = b.measureLatency(ctx, []*apiClient{c}, latRoom, lat, cfg.rate, latN); err != nil {
		return run, err
	}
	b.logf("scale: %s: latency at %.0f/s offered: p50 %.1f ms, p99 %.1f ms", processes(n, "dispatcher"), cfg.rate, run.Latency.P50, run.Latency.P99)
	// Stopped first, so that a late redelivery shows among the duplicates.
	if err := s.stopGroup(procs); err != nil {
		return run, err
	}
	_, _, dd, _, _, _ := drain.snapshot()
	_, _, ld, _, _, _ := lat.snapshot()
	run.Duplicates = dd + ld
	run.Warnings, err = warningsOf(procs)
	return run, err
}

// warningsOf counts the WARN and ERROR lines of the processes' logs by
// message, but for the one AUTH_DISABLED causes (the bench sets it).
func warningsOf(procs []*service) (map[string]int, error) {
	out := map[string]int{}
	for _, p := range procs {
		raw, err := os.ReadFile(p.logPath)
		if err != nil {
			return nil, err
		}
		for msg, k := range logWarnings(raw) {
			if !strings.HasPrefix(msg, "authentication is disabled") {
				out[msg] += k
			}
		}
	}
	return out, nil
}

// pushRoom creates a room with one PUSH subscription to t and returns its id.
func (s *scaler) pushRoom(ctx context.Context, c *apiClient, room string, t *target) (string, error) {
	id, err := c.setupRoom(ctx, room, nil)
	if err != nil {
		return "", err
	}
	_, err = c.subscribe(ctx, room, "PUSH", eventFast, map[string]any{"pushUrl": s.b.sink.url(t)})
	return id, err
}

// pullRoom creates a room with one PULL subscription and returns its id and
// the subscription's queue.
func (s *scaler) pullRoom(ctx context.Context, c *apiClient, room string) (string, broker.Destination, error) {
	id, err := c.setupRoom(ctx, room, nil)
	if err != nil {
		return "", broker.Destination{}, err
	}
	sub, err := c.subscribe(ctx, room, "PULL", eventFast, nil)
	return id, destination(sub.Destination), err
}

// publishRun starts m API processes and one dispatcher, and measures single
// POSTs spread over the API processes in turn, a backlog of batches through
// the first one (which every relay claims from), and the latency at the
// fixed rate through them in turn; every accepted event must reach its
// queue.
func (s *scaler) publishRun(ctx context.Context, round, m int) (PublishRun, error) {
	b, cfg := s.b, s.b.cfg.scale
	run := PublishRun{Round: round, Processes: m}
	tag := fmt.Sprintf("scale-r%d-a%d", round, m)
	specs := make([]procSpec, 0, m+1)
	for i := range m {
		specs = append(specs, procSpec{fmt.Sprintf("%s-api%d", tag, i+1), "api", s.e2eQ})
	}
	specs = append(specs, procSpec{tag + "-dispatcher", "dispatcher", s.e2eQ})
	procs, err := s.startGroup(ctx, specs)
	defer func() { _ = s.stopGroup(procs) }()
	if err != nil {
		return run, err
	}
	apis := procs[:m]
	clients := make([]*apiClient, m)
	for i, p := range apis {
		clients[i] = b.client(p)
		defer clients[i].hc.CloseIdleConnections()
	}
	c := clients[0]
	singleRoom, backlogRoom, latRoom := b.room(tag+"-single"), b.room(tag+"-backlog"), b.room(tag+"-lat")
	singleID, singleQ, err := s.pullRoom(ctx, c, singleRoom)
	if err != nil {
		return run, err
	}
	backlogID, backlogQ, err := s.pullRoom(ctx, c, backlogRoom)
	if err != nil {
		return run, err
	}
	latN := max(20, int(cfg.rate*cfg.duration.Seconds()))
	lat := b.sink.add(latRoom, answerOK, latN)
	lat.latency = true
	if _, err := s.pushRoom(ctx, c, latRoom, lat); err != nil {
		return run, err
	}
	accepted := newTally()

	// Single POSTs, closed loop, request k to API process k mod m.
	sent0, err := s.counters(ctx, apis, metricRelayed, map[string]string{"result": "sent"})
	if err != nil {
		return run, err
	}
	cpu0, err := processCPU(apis)
	if err != nil {
		return run, err
	}
	path := "/v1/rooms/" + singleRoom + "/messages"
	res := load(ctx, b.cfg.concurrency, time.Now().Add(cfg.duration), b.cfg.maxSends, func(ctx context.Context, k int) (int, error) {
		if err := clients[k%m].call(ctx, "POST", path, appendEvent(nil, eventFast, k, b.sink.since()), http.StatusAccepted, nil); err != nil {
			return 0, err
		}
		accepted.expect(orderID(k))
		return 1, nil
	})
	if res.accepted == 0 {
		return run, fmt.Errorf("single POSTs: nothing accepted (%d failed requests; first: %w)", res.errors, res.firstErr)
	}
	relayedAt, err := s.db.waitRelayed(ctx, singleID, phaseTimeout)
	if err != nil {
		return run, err
	}
	sent1, err := s.counters(ctx, apis, metricRelayed, map[string]string{"result": "sent"})
	if err != nil {
		return run, err
	}
	cpu1, err := processCPU(apis)
	if err != nil {
		return run, err
	}
	run.Events, run.FailedRequests = res.accepted, res.errors
	run.Accepted = perSecond(res.accepted, res.elapsed)
	run.Relayed = perSecond(res.accepted, relayedAt.Sub(res.started))
	run.RelayShares = shares(sent0, sent1)
	run.APICPU = per1000(cpu0, cpu1, res.accepted)
	b.logf("scale: %s: %d single POSTs at %.0f/s accepted, %.0f/s relayed (%d failed); relay shares %s; API CPU %.3f s per 1000",
		processes(m, "API"), res.accepted, run.Accepted, run.Relayed, res.errors, percents(run.RelayShares), run.APICPU)

	// A backlog in batches of 100, all through the first process: more than
	// its hand-off holds, so its publishes are stored unclaimed and every
	// process's relay claims from them; the other relays' shares are claims
	// alone.
	backlog := newTally()
	sent0 = sent1
	per := 100
	reqs := (cfg.messages + per - 1) / per
	batchPath := "/v1/rooms/" + backlogRoom + "/messages:batch"
	resB := load(ctx, b.cfg.concurrency, time.Time{}, reqs, func(ctx context.Context, k int) (int, error) {
		n := min(per, cfg.messages-k*per)
		if err := c.call(ctx, "POST", batchPath, batchBody(k*per, n, b.sink.since(), fastOnly), http.StatusAccepted, nil); err != nil {
			return 0, err
		}
		for i := range n {
			backlog.expect(orderID(k*per + i))
		}
		return n, nil
	})
	if resB.accepted != cfg.messages {
		return run, fmt.Errorf("backlog: %d of %d events accepted (%d failed requests; first: %w)", resB.accepted, cfg.messages, resB.errors, resB.firstErr)
	}
	if run.Claimable, err = s.db.claimable(ctx); err != nil {
		return run, err
	}
	stopWatch := s.watchGrowth(ctx, apis, metricRelayed, map[string]string{"result": "sent"}, watchInterval)
	relayedAt, err = s.db.waitRelayed(ctx, backlogID, phaseTimeout)
	finished := stopWatch()
	if err != nil {
		return run, err
	}
	sent1, err = s.counters(ctx, apis, metricRelayed, map[string]string{"result": "sent"})
	if err != nil {
		return run, err
	}
	run.Backlog = resB.accepted
	run.BacklogAccepted = perSecond(resB.accepted, resB.elapsed)
	run.BacklogRelayed = perSecond(resB.accepted, relayedAt.Sub(resB.started))
	run.ClaimShares = shares(sent0, sent1)
	run.BacklogElapsed, run.BacklogFinished = relayedAt.Sub(resB.started).Seconds(), since(resB.started, finished)
	b.logf("scale: %s: backlog of %d at %.0f/s accepted, %.0f/s relayed (%.1f s); %d rows waiting for a claim at the end of publishing; relay shares %s, each last seen sending at %s s",
		processes(m, "API"), resB.accepted, run.BacklogAccepted, run.BacklogRelayed, run.BacklogElapsed, run.Claimable, percents(run.ClaimShares), seconds(run.BacklogFinished))

	// Every accepted event is in its queue, once.
	for _, q := range []struct {
		dest broker.Destination
		t    *tally
	}{{singleQ, accepted}, {backlogQ, backlog}} {
		if err := collectQueue(ctx, b.raw, q.dest, q.t, 10*time.Second); err != nil {
			b.queues = append(b.queues, q.dest) // drained at the end
			return run, err
		}
		if miss := q.t.missing(); miss > 0 {
			b.queues = append(b.queues, q.dest)
			return run, fmt.Errorf("%s: %d accepted events never reached the queue (LOST)", q.dest.FQQN(), miss)
		}
		run.Duplicates += q.t.dups
		run.Extra += q.t.extra
	}

	if run.Latency, err = b.measureLatency(ctx, clients, latRoom, lat, cfg.rate, latN); err != nil {
		return run, err
	}
	b.logf("scale: %s: latency at %.0f/s offered: p50 %.1f ms, p99 %.1f ms", processes(m, "API"), cfg.rate, run.Latency.P50, run.Latency.P99)
	if err := s.stopGroup(procs); err != nil {
		return run, err
	}
	_, _, ld, _, _, _ := lat.snapshot()
	run.Duplicates += ld
	run.Warnings, err = warningsOf(procs)
	return run, err
}

// orderID is the payload's orderId of the event with sequence number seq.
func orderID(seq int) string { return "o-" + strconv.Itoa(seq) }

// payloadOrderID reads orderId out of a payload appendPayload wrote.
func payloadOrderID(body []byte) string {
	const key = `"orderId":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return ""
	}
	rest := body[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// collectQueue acks every message of dest, tallying each by its payload's
// orderId, until the tally has every expected key and then nothing more came
// for a moment (a duplicate would), or nothing came for idle.
func collectQueue(ctx context.Context, b broker.Broker, dest broker.Destination, t *tally, idle time.Duration) error {
	sub, err := b.Subscribe(ctx, dest, broker.SubscribeOptions{Prefetch: 500})
	if err != nil {
		return err
	}
	defer sub.Close()
	const linger = 500 * time.Millisecond
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case d, ok := <-sub.C():
			if !ok {
				return errors.New("collect: subscription closed")
			}
			if err := d.Ack(ctx); err != nil {
				return fmt.Errorf("collect: ack: %w", err)
			}
			id := payloadOrderID(d.Body)
			if id == "" {
				id = "event " + d.Headers[message.HeaderEventID]
			}
			t.saw(id)
			wait := idle
			if t.missing() == 0 {
				wait = linger
			}
			timer.Reset(wait)
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// measureLatency offers n single publishes to room at rate through clients
// in turn, and reads their latency at the sink's target t.
func (b *bench) measureLatency(ctx context.Context, clients []*apiClient, room string, t *target, rate float64, n int) (LatencyRun, error) {
	run := LatencyRun{Offered: rate, Events: n}
	start, lastAns, err := b.offerOpenLoop(ctx, clients, room, rate, n)
	if err != nil {
		return run, err
	}
	if err := t.wait(ctx, scaleWait); err != nil {
		return run, fmt.Errorf("latency run: events lost or stuck: %w", err)
	}
	_, last, _, lat, _, _ := t.snapshot()
	run.Published = perSecond(n, lastAns.Sub(start))
	run.Delivered = perSecond(n, last.Sub(start))
	run.P50, run.P99, run.Max = ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 100))
	return run, nil
}
