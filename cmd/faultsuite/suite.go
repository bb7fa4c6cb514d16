package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// suite is one run: its infrastructure, processes and load.
type suite struct {
	cfg     config
	log     io.Writer
	started time.Time
	tmp     string
	t0      time.Time // when the load started

	mu          sync.Mutex
	pg          *postgres
	broker      *brokerProc  // the broker, unless -ha
	pair        *artemisPair // the broker with -ha
	apis        []*service
	dispatchers []*service
	sink        *sink
	pub         *publisher
	faultLog    []faultRecord
	sends       *sendWatch // the API processes' confirmed sends, from the load's start
}

func (s *suite) logf(format string, args ...any) {
	fmt.Fprintf(s.log, "faultsuite: %6.1fs %s\n", time.Since(s.started).Seconds(), fmt.Sprintf(format, args...))
}

// run brings everything up, runs the load and the faults, drains, and
// returns the report; an error means the suite could not run to the end.
func (s *suite) run(ctx context.Context) (*report, error) {
	tmp, err := os.MkdirTemp("", "faultsuite-")
	if err != nil {
		return nil, err
	}
	s.tmp = tmp
	// The postgres user must reach its cluster under the temp dir.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	s.logf("temp dir %s", tmp)

	// The JVM starts while the service builds and initdb runs.
	brokerErr := make(chan error, 1)
	go func() {
		if s.cfg.ha {
			p, err := setupArtemisPair(ctx, tmp, s.cfg.artemisScript)
			s.mu.Lock()
			s.pair = p
			s.mu.Unlock()
			brokerErr <- err
			return
		}
		b, err := setupBroker(ctx, tmp, s.cfg)
		s.mu.Lock()
		s.broker = b
		s.mu.Unlock()
		brokerErr <- err
	}()
	bin := s.cfg.serviceBin
	if bin == "" {
		if bin, err = buildService(ctx, tmp); err != nil {
			<-brokerErr
			return nil, err
		}
		s.logf("built the service")
	}
	pgBin, err := findPGBin(s.cfg.pgBin)
	if err != nil {
		<-brokerErr
		return nil, err
	}
	pg, err := setupPostgres(ctx, tmp, pgBin)
	s.mu.Lock()
	s.pg = pg
	s.mu.Unlock()
	if err != nil {
		<-brokerErr
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s.logf("PostgreSQL (%s) on 127.0.0.1:%d", pgBin, pg.port)
	if err := <-brokerErr; err != nil {
		return nil, fmt.Errorf("%s: %w", s.brokerName(), err)
	}
	s.logf("%s: %s", s.brokerName(), redactURL(s.brokerURL()))

	env := serviceEnv(pg.url, s.brokerURL())
	migrate := exec.CommandContext(ctx, bin, "migrate")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("migrate: %w\n%s", err, out)
	}
	for i := range 2 {
		d, err := newService(bin, "dispatcher", "dispatcher-"+strconv.Itoa(i+1), tmp, env)
		if err != nil {
			return nil, err
		}
		a, err := newService(bin, "api", "api-"+strconv.Itoa(i+1), tmp, env)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.dispatchers, s.apis = append(s.dispatchers, d), append(s.apis, a)
		s.mu.Unlock()
		for _, p := range []*service{d, a} {
			if err := p.startReady(ctx); err != nil {
				return nil, err
			}
		}
	}
	s.logf("2 api and 2 dispatcher processes ready")

	prefix := "fs-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	sk, err := startSink(ctx, prefix)
	if err != nil {
		return nil, err
	}
	s.sink = sk
	c := newAPIClient()
	pullSub, err := c.setupRoom(ctx, s.apis[0].base, sk.url)
	if err != nil {
		return nil, fmt.Errorf("set up the room: %w", err)
	}
	return s.load(ctx, c, prefix, pullSub)
}

// load runs the publisher, the puller and the faults, then drains.
func (s *suite) load(ctx context.Context, c *apiClient, prefix, pullSub string) (*report, error) {
	pub := newPublisher(s.apis, prefix, s.cfg.rate, s.cfg.maxInFlight)
	s.pub = pub
	pl := &puller{apis: s.apis, c: c, sub: pullSub, prefix: prefix, got: newReceipts()}
	pullCtx, stopPull := context.WithCancel(ctx)
	defer stopPull()
	pullDone := make(chan struct{})
	go func() { pl.run(pullCtx); close(pullDone) }()

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	watchCtx, stopWatch := context.WithCancel(ctx) // until the report is made
	defer stopWatch()
	s.sends = s.watchSends(watchCtx, s.apis)
	pubDone := make(chan struct{})
	t0 := time.Now()
	s.t0 = t0
	go func() { pub.run(loadCtx); close(pubDone) }()
	s.logf("load: %g publishes/s for at least %s; %d round(s) of faults, %s apart", s.cfg.rate, s.cfg.duration, s.cfg.rounds, s.cfg.gap)

	faultErr := s.runFaults(ctx, t0)
	if faultErr == nil {
		end := max(time.Until(t0.Add(s.cfg.duration)), s.cfg.gap)
		_ = sleep(ctx, end)
	}
	stopLoad()
	<-pubDone
	loadTime := time.Since(t0)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	results, _ := pub.snapshot()
	s.logf("load stopped after %.1fs: %d published", loadTime.Seconds(), len(results))

	retried := pub.retryUnknown(ctx)
	if retried > 0 {
		s.logf("retried %d publishes of unknown outcome with their Idempotency-Key", retried)
	}

	// Drain: until both subscriptions have every accepted publish, or the
	// timeout.
	drainStart := time.Now()
	results, skipped := pub.snapshot()
	missing := func() (push, pull int) {
		for seq, r := range results {
			if r.out != outAccepted {
				continue
			}
			if !s.sink.got.has(seq) {
				push++
			}
			if !pl.got.has(seq) {
				pull++
			}
		}
		return push, pull
	}
	lastLog := time.Now()
	for {
		mp, ml := missing()
		if mp == 0 && ml == 0 {
			break
		}
		if time.Since(drainStart) > s.cfg.drainTimeout || ctx.Err() != nil {
			s.logf("drain: gave up after %s with %d (push) and %d (pull) accepted publishes missing", s.cfg.drainTimeout, mp, ml)
			break
		}
		if time.Since(lastLog) > 5*time.Second {
			s.logf("drain: waiting for %d (push) and %d (pull) accepted publishes", mp, ml)
			lastLog = time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
	if ctx.Err() != nil { // interrupted: what was missing says nothing
		return nil, ctx.Err()
	}
	drainTime := time.Since(drainStart)
	// Duplicates still on their way count too: a short grace.
	_ = sleep(ctx, time.Second)
	stopPull()
	<-pullDone
	s.logf("drain done in %.1fs", drainTime.Seconds())

	rep := s.report(ctx, results, skipped, pub, pl, loadTime, drainTime, faultErr)
	return rep, nil
}

// cleanup stops every child (services first, so they do not log a storm of
// reconnects) and removes the temp dir unless keep.
func (s *suite) cleanup(keep bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	services := append(append([]*service(nil), s.apis...), s.dispatchers...)
	errs := make([]error, len(services), len(services)+3)
	var wg sync.WaitGroup
	for i, p := range services {
		wg.Go(func() { errs[i] = p.stopGo(15 * time.Second) })
	}
	wg.Wait()
	if s.sink != nil {
		s.sink.close()
	}
	for _, b := range s.brokersLocked() {
		_ = b.proc.stop(syscall.SIGKILL, 10*time.Second)
	}
	if s.pg != nil {
		if s.pg.db != nil {
			_ = s.pg.db.Close()
		}
		if err := s.pg.proc.stop(syscall.SIGINT, 20*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if s.tmp != "" {
		if keep {
			fmt.Fprintf(s.log, "faultsuite: kept %s (logs: *.log)\n", s.tmp)
		} else if err := os.RemoveAll(s.tmp); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// procs lists every child, for logs and crash checks.
func (s *suite) procs() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ps []*proc
	for _, a := range s.apis {
		ps = append(ps, a.proc)
	}
	for _, d := range s.dispatchers {
		ps = append(ps, d.proc)
	}
	for _, b := range s.brokersLocked() {
		ps = append(ps, b.proc)
	}
	if s.pg != nil {
		ps = append(ps, s.pg.proc)
	}
	return ps
}

// brokersLocked lists the broker processes (the broker, or both nodes of the
// pair); s.mu is held.
func (s *suite) brokersLocked() []*brokerProc {
	switch {
	case s.pair != nil:
		return s.pair.nodes[:]
	case s.broker != nil:
		return []*brokerProc{s.broker}
	}
	return nil
}

// brokerName names the broker in logs and the report.
func (s *suite) brokerName() string {
	switch {
	case s.cfg.ha:
		return "Artemis primary/backup pair (replication)"
	case s.cfg.brokerKind == kindActiveMQ:
		return "ActiveMQ Classic"
	}
	return "Artemis"
}

// brokerURL is the service's BROKER_URL: with -ha it names both nodes.
func (s *suite) brokerURL() string {
	if s.pair != nil {
		return s.pair.url
	}
	return s.broker.url
}

// redactURL hides the password of a broker URL.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return u
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
}

func (s *suite) logTails(w io.Writer, lines int) {
	for _, p := range s.procs() {
		fmt.Fprint(w, p.logTail(lines))
	}
}
