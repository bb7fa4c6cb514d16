package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/roomhub/messaging-api/broker"
)

// bench is one run: its settings, what it started, and the report it fills.
type bench struct {
	cfg     config
	out     io.Writer
	started time.Time
	id      string // makes rooms, queues and the schema unique to this run
	rep     *Report

	tmp   string
	bin   string
	db    *benchDB
	sink  *sink
	raw   broker.Broker // the bench's own broker client
	serve *service      // the `serve` process every API call goes to
	// apiProc fills the split push queue that dispatcher processes drain.
	apiProc *service

	cpu      cpuWatch // the broker's and PostgreSQL's processes, for the CPU accounts
	flowRate float64  // end-to-end maximum, events/s
	pushRate float64  // push maximum, deliveries/s

	mu       sync.Mutex
	services []*service
	queues   []broker.Destination // drained at the end (real broker only)
	extraDBs []*benchDB           // closed after the services stop

	logMu sync.Mutex // processes start in parallel, and each start is logged
}

func newBench(cfg config, out io.Writer) *bench {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &bench{cfg: cfg, out: out, started: time.Now(), id: hex.EncodeToString(b)}
}

func (b *bench) logf(format string, args ...any) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	fmt.Fprintf(b.out, "msgbench [%6.1fs] %s\n", time.Since(b.started).Seconds(), fmt.Sprintf(format, args...))
}

// brokerURL is what the service and the bench's raw client connect to.
func (b *bench) brokerURL() string {
	if b.cfg.embedded {
		return "embedded"
	}
	return b.cfg.brokerURL
}

// queue names a queue of this run.
func (b *bench) queue(name string) broker.Destination {
	// Artemis queue names are broker-wide: a SEND to address::queue whose
	// queue belongs to another address is dropped (with a RECEIPT), so the
	// queue names carry the run's id too.
	return broker.Destination{Address: "msgbench-" + b.id, Queue: "msgbench-" + b.id + "-" + name}
}

// room names a room of this run.
func (b *bench) room(name string) string { return "msgbench-" + b.id + "-" + name }

func (b *bench) run(ctx context.Context) (*Report, error) {
	b.rep = newReport(b.cfg, b.brokerURL())
	var err error
	if b.tmp, err = os.MkdirTemp("", "msgbench-"); err != nil {
		return nil, err
	}
	b.logf("run %s, temp dir %s", b.id, b.tmp)
	if b.bin, err = b.buildService(ctx); err != nil {
		return nil, err
	}
	if b.db, err = openBenchDB(ctx, b.cfg, b.tmp, b.id); err != nil {
		return nil, err
	}
	b.logf("database: %s", b.db.redacted)
	if b.sink, err = startSink(ctx, b.cfg.pushTimeout); err != nil {
		return nil, err
	}
	if b.raw, err = broker.Open(ctx, b.brokerURL(), slog.New(slog.DiscardHandler)); err != nil {
		return nil, fmt.Errorf("raw broker client: %w", err)
	}
	b.cpu = findCPUWatch(b.cfg.brokerURL, b.cfg.dbURL, b.cfg.embedded)
	b.logf("CPU accounts: broker pid %s, PostgreSQL pid %s", pidText(b.cpu.broker), pidText(b.cpu.db))
	b.rep.Settings["cpuAccountsBrokerPID"], b.rep.Settings["cpuAccountsPostgresPID"] = b.cpu.broker, b.cpu.db

	base, err := b.baseline(ctx)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	pushQueue := b.queue("push-serve")
	b.queues = append(b.queues, pushQueue)
	if b.serve, err = b.startService(ctx, "serve", "serve", pushQueue); err != nil {
		return nil, err
	}
	phases := []struct {
		name string
		f    func(context.Context, baselineResult) error
	}{
		{"publish", b.publishPhases},
		{"pull", b.pullPhase},
		{"flow", b.flowPhase},
		{"push", b.pushPhase},
		{"latency", b.latencyPhase},
		{"retry", b.retryPhase},
		{"isolation", b.isolationPhase},
		{"scale", b.scalePhase},
	}
	for _, p := range phases {
		if !b.cfg.runs(p.name) {
			continue
		}
		if err := p.f(ctx, base); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	st, err := b.serve.stats()
	if err != nil {
		return nil, err
	}
	b.rep.add(Figure{Key: "service.rss_peak", Group: "8 resources", Name: "service peak RSS (VmHWM, serve process, whole run)",
		Value: float64(st.hwm) / (1 << 20), Unit: "MiB"})
	b.rep.evaluate()
	return b.rep, nil
}

func pidText(pid int) string {
	if pid == 0 {
		return "not found (counted as other; /proc/<pid>/fd of another user's process needs root)"
	}
	return strconv.Itoa(pid)
}

// logTails prints the end of the last few services' logs, to explain a
// failure (the scale phase starts dozens; -keep keeps every log).
func (b *bench) logTails(lines int) {
	const most = 8
	b.mu.Lock()
	defer b.mu.Unlock()
	services := b.services
	if len(services) > most {
		fmt.Fprintf(b.out, "(the logs of %d earlier service processes are left out)\n", len(services)-most)
		services = services[len(services)-most:]
	}
	for _, s := range services {
		fmt.Fprintln(b.out, s.logTail(lines))
	}
}

// cleanup stops every process the run started, drains the run's queues on a
// real broker, and removes the schema and temp dir unless -keep.
func (b *bench) cleanup() error {
	var errs []error
	b.mu.Lock()
	services := b.services
	b.mu.Unlock()
	for i := len(services) - 1; i >= 0; i-- {
		if err := services[i].stop(20 * time.Second); err != nil {
			errs = append(errs, err)
		}
		if b.cfg.verbose {
			services[i].dumpLog(b.out)
		}
	}
	if b.raw != nil {
		if !b.cfg.embedded && len(b.queues) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			n := 0
			for _, q := range b.queues {
				got, err := drainQueue(ctx, b.raw, q, 0, 3*time.Second)
				n += got
				if err != nil {
					errs = append(errs, fmt.Errorf("drain %s: %w", q, err))
				}
			}
			cancel()
			if n > 0 {
				b.logf("drained %d leftover messages from the run's queues", n)
			}
		}
		_ = b.raw.Close()
	}
	if b.sink != nil {
		b.sink.close()
	}
	for _, db := range b.extraDBs {
		if err := db.close(b.cfg.keep); err != nil {
			errs = append(errs, err)
		}
	}
	if b.db != nil {
		if err := b.db.close(b.cfg.keep); err != nil {
			errs = append(errs, err)
		}
	}
	if b.tmp != "" {
		if b.cfg.keep {
			b.logf("kept %s", b.tmp)
		} else {
			_ = os.RemoveAll(b.tmp)
		}
	}
	return errors.Join(errs...)
}
