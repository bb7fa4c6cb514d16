package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/redact"
)

// Figure is one measured number.
type Figure struct {
	Key   string  `json:"key"`
	Group string  `json:"group"`
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Ratio is Value (or Basis, when set) divided by the baseline figure
	// named by Versus, measured in the same run.
	Ratio  float64 `json:"ratio,omitempty"`
	Versus string  `json:"versus,omitempty"`
	Note   string  `json:"note,omitempty"`
}

// Target is a goal a figure is held against.
type Target struct {
	Name  string  `json:"name"`
	Goal  string  `json:"goal"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	Met   bool    `json:"met"`
	// NotRun: a phase it needs was left out (-phases); Value and Met mean nothing.
	NotRun bool `json:"notRun,omitempty"`
	// Note puts the result beside what this machine allows at all.
	Note string `json:"note,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpuModel"`
	MemoryGiB string `json:"memoryGiB"`
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
}

// Report is the run's output, as a table and as JSON.
type Report struct {
	Machine    Machine        `json:"machine"`
	Command    string         `json:"command"`
	Broker     string         `json:"broker"`
	BrokerKind string         `json:"brokerKind"` // the broker product, or "embedded"
	Database   string         `json:"database"`
	Started    time.Time      `json:"started"`
	Elapsed    string         `json:"elapsed"`
	Settings   map[string]any `json:"settings"`
	Figures    []Figure       `json:"figures"`
	Targets    []Target       `json:"targets"`
	// Scale holds the scale phase's runs, round by round (when it ran).
	Scale *ScaleResult `json:"scale,omitempty"`
}

func newReport(cfg config, brokerURL string) *Report {
	db, kind := "postgres (fresh schema)", brokerNames[cfg.brokerKind]
	if cfg.embedded {
		db, kind = "sqlite (temp file)", "embedded"
	}
	return &Report{
		Machine:    machine(),
		Command:    strings.TrimSpace("go run ./cmd/msgbench " + maskedArgs(cfg.args)),
		Broker:     broker.Redact(brokerURL),
		BrokerKind: kind,
		Database:   db,
		Started:    time.Now().UTC().Truncate(time.Second),
		Settings: map[string]any{
			"duration": cfg.duration.String(), "warmup": cfg.warmup.String(), "concurrency": cfg.concurrency, "messages": cfg.messages,
			"pullers": cfg.pullers, "retriesPerDelay": cfg.retries, "retryDelays": delaysText(cfg.retryDelays),
			"pushTimeout": cfg.pushTimeout.String(), "hangShare": cfg.hangShare,
			"relayConcurrency": relayConcurrency, "dispatcherPrefetch": dispatcherPrefetch,
		},
	}
}

func (r *Report) add(f Figure) { r.Figures = append(r.Figures, f) }

func (r *Report) figure(key string) (Figure, bool) {
	for _, f := range r.Figures {
		if f.Key == key {
			return f, true
		}
	}
	return Figure{}, false
}

// addRatio adds f with its ratio to the baseline figure versus: value/base,
// or basis/base when basis is not zero (a fan-out counts broker sends).
func (r *Report) addRatio(f Figure, versus string, basis float64) {
	if base, ok := r.figure(versus); ok && base.Value > 0 {
		if basis == 0 {
			basis = f.Value
		}
		f.Ratio, f.Versus = basis/base.Value, versus
	}
	r.add(f)
}

// evaluate orders the figures by group and holds them against the targets
// of issue 8.
func (r *Report) evaluate() {
	slices.SortStableFunc(r.Figures, func(a, b Figure) int { return strings.Compare(a.Group, b.Group) })
	ratio := func(key string) float64 { f, _ := r.figure(key); return f.Ratio }
	value := func(key string) float64 { f, _ := r.figure(key); return f.Value }
	r.Targets = []Target{
		{Name: "push vs raw consume+ack", Goal: "≥ 0.80", Value: ratio("push.rate"), Unit: "×", Met: ratio("push.rate") >= 0.8},
		{Name: "publish fan-out 1 (accepted) vs raw durable send", Goal: "≥ 0.50", Value: ratio("publish.fanout1"), Unit: "×", Met: ratio("publish.fanout1") >= 0.5},
		{Name: "publish fan-out 1 (relayed to the broker) vs raw durable send", Goal: "≥ 0.50", Value: ratio("publish.fanout1_relayed"), Unit: "×", Met: ratio("publish.fanout1_relayed") >= 0.5},
		{Name: "end-to-end latency p99 at ½ push maximum", Goal: "< 50 ms", Value: value("e2e.p99"), Unit: "ms", Met: value("e2e.p99") < 50},
		{Name: "end-to-end latency p99 at ½ end-to-end maximum", Goal: "< 50 ms", Value: value("e2e_half_flow.p99"), Unit: "ms", Met: value("e2e_half_flow.p99") < 50},
	}
	beyond := value("retry.p99") - value("baseline.sched_p99")
	r.Targets = append(r.Targets,
		Target{Name: "retry error p99 beyond the broker's own scheduling p99", Goal: "< 100 ms", Value: beyond, Unit: "ms", Met: beyond < 100},
		Target{Name: "isolation: fast endpoint beside a hanging one vs push alone", Goal: "≥ 0.90", Value: ratio("isolation.rate"), Unit: "×", Met: ratio("isolation.rate") >= 0.9},
		Target{Name: "end-to-end throughput vs a webhook gateway's 190 events/s", Goal: "≥ 5× (950/s)", Value: value("e2e.max") / 190, Unit: "×", Met: value("e2e.max") >= 950},
	)
	// The push ceiling (no service: consume, POST, ack) bounds any
	// dispatcher here; a goal above it cannot be met on this machine.
	if c, ok := r.figure("baseline.consume_post"); ok && c.Ratio > 0 {
		r.Targets[0].Note = fmt.Sprintf("the push ceiling here is %.2f × raw consume + ack", c.Ratio)
		if p, ok := r.figure("push.rate"); ok && c.Value > 0 {
			r.Targets[0].Note += fmt.Sprintf("; push is %.2f × the ceiling", p.Value/c.Value)
		}
		if c.Ratio < 0.8 {
			r.Targets[0].Note += "; 0.80 is above this run's ceiling: out of reach for any dispatcher here"
		}
	}
	needs := [][]string{{"push.rate"}, {"publish.fanout1"}, {"publish.fanout1_relayed"}, {"e2e.p99"}, {"e2e_half_flow.p99"},
		{"retry.p99", "baseline.sched_p99"}, {"isolation.rate"}, {"e2e.max"}}
	for i, keys := range needs {
		for _, k := range keys {
			if _, ok := r.figure(k); !ok {
				r.Targets[i].NotRun, r.Targets[i].Met = true, false
			}
		}
	}
}

// requiredFigures are the figures every run must produce, each positive.
var requiredFigures = []string{
	"baseline.send", "baseline.consume", "baseline.consume_post", "baseline.sched_p50", "baseline.sched_p99",
	"publish.fanout1", "publish.fanout1_relayed", "publish.fanout10", "publish.fanout10_relayed",
	"publish.batch", "publish.batch_relayed",
	"push.rate",
	"e2e.max", "e2e.offered", "e2e.p50", "e2e.p95", "e2e.p99",
	"e2e_half_flow.offered", "e2e_half_flow.p50", "e2e_half_flow.p95", "e2e_half_flow.p99",
	"retry.p50", "retry.p99",
	"isolation.rate",
	"pull.rate",
	"service.rss_peak", "service.cpu_per_1000",
	"cpu.flow", "e2e.cpu", "e2e_half_flow.cpu",
}

// ratioFigures must also carry a positive ratio to their baseline.
var ratioFigures = []string{
	"baseline.consume_post",
	"publish.fanout1", "publish.fanout1_relayed", "publish.fanout10", "publish.fanout10_relayed",
	"publish.batch", "publish.batch_relayed", "push.rate", "isolation.rate", "pull.rate",
}

// check reports every required figure that is missing, not a finite
// positive number, or without its ratio.
func (r *Report) check() error {
	var errs []error
	for _, key := range requiredFigures {
		f, ok := r.figure(key)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("figure %s is missing", key))
		case math.IsNaN(f.Value) || math.IsInf(f.Value, 0) || f.Value <= 0:
			errs = append(errs, fmt.Errorf("figure %s = %v, want a positive number", key, f.Value))
		}
	}
	for _, key := range ratioFigures {
		if f, ok := r.figure(key); ok && (f.Versus == "" || !(f.Ratio > 0) || math.IsInf(f.Ratio, 0)) {
			errs = append(errs, fmt.Errorf("figure %s has no positive ratio to a baseline (ratio %v)", key, f.Ratio))
		}
	}
	if len(r.Targets) == 0 {
		errs = append(errs, errors.New("no targets evaluated"))
	}
	return errors.Join(errs...)
}

func (r *Report) print(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "\nmsgbench: %d CPUs (%s), %s GiB RAM, %s, broker %s (%s), database %s\n%s\n\n",
		m.CPUs, m.CPUModel, m.MemoryGiB, m.Go, r.BrokerKind, r.Broker, r.Database, r.Command)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tvalue\tunit\t× baseline\tnote")
	group := ""
	for _, f := range r.Figures {
		if f.Group != group {
			group = f.Group
			fmt.Fprintf(tw, "%s\t\t\t\t\n", strings.ToUpper(group))
		}
		ratio := ""
		if f.Versus != "" {
			ratio = fmt.Sprintf("%.2f", f.Ratio)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", f.Name, formatValue(f.Value), f.Unit, ratio, f.Note)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tgoal\tmeasured\tresult\tnote")
	for _, t := range r.Targets {
		res, measured := "NOT MET", formatValue(t.Value)+" "+t.Unit
		switch {
		case t.NotRun:
			res, measured = "not run", "—"
		case t.Met:
			res = "met"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Goal, measured, res, t.Note)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nelapsed %s\n", r.Elapsed)
}

func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func (r *Report) writeJSON(path string) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			var kb int64
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				m.MemoryGiB = fmt.Sprintf("%.1f", float64(kb)/(1<<20))
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	return m
}

// percentile is the nearest-rank p-th percentile of ds (0 for none).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// maskedArgs joins the command line with the passwords of its URLs masked.
func maskedArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.Contains(a, "://") {
			out[i] = redact.ConnString(a)
		}
	}
	return strings.Join(out, " ")
}
