package main

import (
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestScaleSmoke runs the scale phase with tiny parameters on the broker of
// BROKER_TEST_URL (and the PostgreSQL of TEST_DATABASE_URL): every figure
// comes out, a second process takes part of the work, and nothing is lost
// (a loss fails the run). Without BROKER_TEST_URL it runs on the embedded
// broker, where the phase is left out with the reason.
func TestScaleSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the service as several processes (-short)")
	}
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	args := []string{
		"-phases", "scale", "-json", jsonPath, "-duration", "1s", "-warmup", "0", "-messages", "200", "-concurrency", "4",
		"-retries", "2", "-retry-delays", "1s", "-timeout", "6m",
		"-scale-rounds", "1", "-scale-dispatchers", "1,2", "-scale-apis", "1,2", "-scale-messages", "2000",
		"-scale-rate", "100", "-scale-duration", "1s",
	}
	args, real := benchArgs(t, args)
	_, rep := runReport(t, args, jsonPath, 7*time.Minute)
	if rep.Scale == nil {
		t.Fatal("bench.json has no scale results")
	}
	if !real {
		if !strings.Contains(rep.Scale.Skipped, "embedded broker") || len(rep.Scale.Push) > 0 {
			t.Errorf("on the embedded broker: skipped %q with %d push runs, want the reason and none", rep.Scale.Skipped, len(rep.Scale.Push))
		}
		return
	}
	if len(rep.Scale.Push) != 2 || len(rep.Scale.Publish) != 2 {
		t.Fatalf("%d push and %d publish runs, want 2 and 2", len(rep.Scale.Push), len(rep.Scale.Publish))
	}
	positive := []string{
		"scale.push_d1", "scale.push_d2", "scale.push_d2.share", "scale.push_d2.cpu", "scale.push_d2.p50", "scale.push_d2.p99",
		"scale.publish_a1", "scale.publish_a2", "scale.publish_a2_relayed", "scale.publish_a2.backlog", "scale.publish_a2.p50",
	}
	for _, key := range positive {
		f, ok := rep.figure(key)
		switch {
		case !ok:
			t.Errorf("figure %s is missing", key)
		case !(f.Value > 0) || math.IsInf(f.Value, 0):
			t.Errorf("figure %s = %v, want a positive number", key, f.Value)
		case strings.HasSuffix(key, "share"):
		case !(f.Ratio > 0) || f.Versus == "":
			t.Errorf("figure %s has no ratio to the 1-process run (%v versus %q)", key, f.Ratio, f.Versus)
		}
	}
	for _, key := range []string{"scale.push_d2.dups", "scale.publish_a2.dups"} {
		if _, ok := rep.figure(key); !ok {
			t.Errorf("figure %s is missing", key)
		}
	}
	for _, p := range rep.Scale.Push {
		if p.Head+p.Window != p.Preloaded || len(p.Shares) != p.Processes || len(p.Finished) != p.Processes {
			t.Errorf("push run %+v: head and window do not add up to the preload, or a process's share or finish is missing", p)
		}
		// Each process takes a part once the window is long enough to show
		// one: more than the prefetch windows of both.
		if p.Processes == 2 && p.Window > 2*dispatcherPrefetch && slices.Min(p.Shares) == 0 {
			t.Errorf("2 dispatchers over %d deliveries: shares %v, want each to deliver some", p.Window, p.Shares)
		}
	}
	for _, p := range rep.Scale.Publish {
		if p.Processes == 2 && (len(p.RelayShares) != 2 || slices.Min(p.RelayShares) == 0) {
			t.Errorf("2 API processes, round robin: relay shares %v, want both to relay some", p.RelayShares)
		}
	}
}

func TestParseCounts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    []int
		wantErr string
	}{
		{"1,2,4", []int{1, 2, 4}, ""},
		{"4, 1 ,2", []int{1, 2, 4}, ""},
		{"1", []int{1}, ""},
		{"2,4", nil, "must include 1"},
		{"1,2,2", nil, "twice"},
		{"1,9", nil, "from 1 to 8"},
		{"1,0", nil, "from 1 to 8"},
		{"1,x", nil, "from 1 to 8"},
		{"", nil, "from 1 to 8"},
	} {
		got, err := parseCounts(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseCounts(%q) = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseCounts(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// TestScaleFlags: the scale phase runs only when -phases names it, and its
// flags are checked.
func TestScaleFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.runs("scale") || !cfg.runs("push") || !cfg.runs("isolation") {
		t.Errorf("by default: scale %v, push %v, isolation %v; want only scale left out", cfg.runs("scale"), cfg.runs("push"), cfg.runs("isolation"))
	}
	if !slices.Equal(cfg.scale.dispatchers, []int{1, 2, 4}) || !slices.Equal(cfg.scale.apis, []int{1, 2}) || cfg.scale.rounds != 2 {
		t.Errorf("scale defaults %+v", cfg.scale)
	}
	cfg, err = parseFlags([]string{"-phases", "scale"}, io.Discard)
	if err != nil || !cfg.runs("scale") || cfg.runs("push") {
		t.Errorf("-phases scale: scale %v, push %v, err %v; want scale alone", cfg.runs("scale"), cfg.runs("push"), err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-scale-dispatchers", "2,4"}, "-scale-dispatchers"},
		{[]string{"-scale-apis", "1,1"}, "-scale-apis"},
		{[]string{"-scale-rounds", "0"}, "-scale-rounds"},
		{[]string{"-scale-messages", "10"}, "-scale-messages"},
		{[]string{"-scale-rate", "0"}, "-scale-rate"},
		{[]string{"-scale-duration", "1ms"}, "-scale-duration"},
	} {
		if _, err := parseFlags(tt.args, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseFlags(%v) = %v, want an error naming %s", tt.args, err, tt.want)
		}
	}
}

func TestShares(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		before, after []float64
		want          []float64
		even          float64
		text          string
	}{
		{[]float64{0}, []float64{500}, []float64{1}, 1, "100 %"},
		{[]float64{10, 0}, []float64{60, 50}, []float64{0.5, 0.5}, 1, "50/50 %"},
		{[]float64{0, 0, 0, 0}, []float64{40, 30, 20, 10}, []float64{0.4, 0.3, 0.2, 0.1}, 0.4, "40/30/20/10 %"},
		{[]float64{0, 0}, []float64{100, 0}, []float64{1, 0}, 0, "100/0 %"},
		{[]float64{5, 5}, []float64{5, 5}, []float64{0, 0}, 0, "0/0 %"},
	} {
		got := shares(tt.before, tt.after)
		for i := range got {
			if math.Abs(got[i]-tt.want[i]) > 1e-9 {
				t.Errorf("shares(%v, %v) = %v, want %v", tt.before, tt.after, got, tt.want)
				break
			}
		}
		if e := evenness(got); math.Abs(e-tt.even) > 1e-9 {
			t.Errorf("evenness(%v) = %v, want %v", got, e, tt.even)
		}
		if p := percents(got); p != tt.text {
			t.Errorf("percents(%v) = %q, want %q", got, p, tt.text)
		}
	}
}

// TestTally: an accepted key that never arrives is missing, one that
// arrives twice a duplicate, one never accepted an extra; an arrival may
// come before its publish is answered.
func TestTally(t *testing.T) {
	t.Parallel()
	tl := newTally()
	for _, k := range []string{"o-1", "o-2", "o-3", "o-4"} {
		tl.expect(k)
	}
	tl.saw("o-5") // arrives before its 202
	tl.expect("o-5")
	for _, k := range []string{"o-1", "o-2", "o-2", "o-4", "o-9", "o-9", "o-5"} {
		tl.saw(k)
	}
	if tl.missing() != 1 || tl.dups != 3 || tl.extra != 1 {
		t.Errorf("missing %d dups %d extra %d; want 1 (o-3), 3 (o-2, o-9, o-5) and 1 (o-9)", tl.missing(), tl.dups, tl.extra)
	}
	tl.saw("o-3")
	if tl.missing() != 0 {
		t.Errorf("missing %d after the last arrival, want 0", tl.missing())
	}
	tl.expect("o-3") // a key expected twice is one key
	if tl.missing() != 0 {
		t.Errorf("missing %d after expecting o-3 again, want 0", tl.missing())
	}
}

func TestPayloadOrderID(t *testing.T) {
	t.Parallel()
	if got := payloadOrderID(appendPayload(nil, 1234, 99)); got != orderID(1234) {
		t.Errorf("payloadOrderID = %q, want %q", got, orderID(1234))
	}
	for _, body := range []string{"", `{"total":1}`, `{"orderId":"o-12`} {
		if got := payloadOrderID([]byte(body)); got != "" {
			t.Errorf("payloadOrderID(%q) = %q, want none", body, got)
		}
	}
}

func TestLogWarnings(t *testing.T) {
	t.Parallel()
	log := []byte(`time=2026-01-01T00:00:00Z level=INFO msg="http listening" addr=127.0.0.1:1
time=2026-01-01T00:00:00Z level=WARN msg="outbox relay round failed; retrying" error="deadlock" retry_in=100ms
time=2026-01-01T00:00:01Z level=WARN msg="outbox relay round failed; retrying" error="deadlock" retry_in=200ms
time=2026-01-01T00:00:02Z level=ERROR msg=boom
time=2026-01-01T00:00:03Z level=DEBUG msg="outbox relay round" claimed=200
`)
	got := logWarnings(log)
	want := map[string]int{"outbox relay round failed; retrying": 2, "boom": 1}
	if len(got) != len(want) || got["outbox relay round failed; retrying"] != 2 || got["boom"] != 1 {
		t.Errorf("logWarnings = %v, want %v", got, want)
	}
	if s := warningsText(got); !strings.HasPrefix(s, `2 × "outbox relay round failed; retrying", 1 × "boom"`) {
		t.Errorf("warningsText = %q", s)
	}
	if s := warningsText(nil); s != "none" {
		t.Errorf("warningsText(nil) = %q", s)
	}
}

// TestSummarize: each count's values by round, their median and range, and
// the ratios to the 1-process value of the same round.
func TestSummarize(t *testing.T) {
	t.Parallel()
	runs := []PushRun{
		{Round: 1, Processes: 1, Rate: 1000}, {Round: 1, Processes: 2, Rate: 1100}, {Round: 1, Processes: 4, Rate: 1200},
		{Round: 2, Processes: 4, Rate: 900}, {Round: 2, Processes: 2, Rate: 800}, {Round: 2, Processes: 1, Rate: 500},
		{Round: 3, Processes: 2, Rate: 700}, // no 1-process run in round 3: no ratio
	}
	s := summarize(runs, func(p PushRun) (int, int) { return p.Processes, p.Round }, func(p PushRun) float64 { return p.Rate })
	check := func(n int, values, ratios []float64, med, ratio float64) {
		t.Helper()
		got := s[n]
		sameRatios := slices.EqualFunc(got.ratios, ratios, func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) })
		if !slices.Equal(got.values, values) || !sameRatios || got.median != med || got.ratio != ratio {
			t.Errorf("%d processes: %+v; want values %v ratios %v median %v ratio %v", n, got, values, ratios, med, ratio)
		}
	}
	check(1, []float64{1000, 500}, []float64{1, 1}, 750, 1)
	check(2, []float64{1100, 800, 700}, []float64{1.1, 1.6, math.NaN()}, 800, 1.35)
	check(4, []float64{1200, 900}, []float64{1.2, 1.8}, 1050, 1.5)
	if s[2].lo != 700 || s[2].hi != 1100 || s[4].rlo != 1.2 || s[4].rhi != 1.8 {
		t.Errorf("ranges: %+v %+v", s[2], s[4])
	}
	if f := s[4].figure("k", "n", "u", "k1", ""); f.Value != 1050 || f.Ratio != 1.5 || f.Versus != "k1" {
		t.Errorf("figure = %+v", f)
	}
	if got := s[2].rounds("%.0f"); got != "by round 1100 ×1.10, 800 ×1.60, 700" {
		t.Errorf("rounds = %q", got)
	}
	if m, _, _ := medianRange(nil); !math.IsNaN(m) {
		t.Errorf("median of nothing = %v, want NaN", m)
	}
}

// TestScaleFigures: the report's scale figures carry each count's median
// and its ratio to the 1-process run, the evenness of the split, and the
// duplicates.
func TestScaleFigures(t *testing.T) {
	t.Parallel()
	res := &ScaleResult{
		Push: []PushRun{
			{Round: 1, Processes: 1, Preloaded: 100, Window: 100, Rate: 1000, Shares: []float64{1}, DispatcherCPU: 0.1, MachineCPU: 0.5,
				Latency: LatencyRun{P50: 4, P99: 20}},
			{Round: 1, Processes: 2, Preloaded: 100, Head: 10, Window: 90, Rate: 1200, Shares: []float64{0.4, 0.6}, HeadShares: []float64{1, 0},
				DispatcherCPU: 0.12, MachineCPU: 0.45, Latency: LatencyRun{P50: 2, P99: 30}, Duplicates: 2},
		},
		Publish: []PublishRun{
			{Round: 1, Processes: 1, Accepted: 2000, Relayed: 1900, RelayShares: []float64{1}, BacklogRelayed: 3000, ClaimShares: []float64{1}},
			{Round: 1, Processes: 2, Accepted: 2200, Relayed: 2100, RelayShares: []float64{0.5, 0.5}, BacklogRelayed: 4500,
				ClaimShares: []float64{0.3, 0.7}, Warnings: map[string]int{"outbox relay round failed; retrying": 1}},
		},
	}
	r := &Report{}
	r.addScaleFigures(res, scaleConfig{dispatchers: []int{1, 2}, apis: []int{1, 2}, rate: 300, messages: 100}, 16)
	for key, want := range map[string][2]float64{
		"scale.push_d1":                {1000, 1},
		"scale.push_d2":                {1200, 1.2},
		"scale.push_d2.share":          {0.8, 0},
		"scale.push_d2.cpu":            {0.12, 1.2},
		"scale.push_d2.p99":            {30, 1.5},
		"scale.push_d2.dups":           {2, 0},
		"scale.publish_a2":             {2200, 1.1},
		"scale.publish_a2.backlog":     {4500, 1.5},
		"scale.publish_a2.claim_share": {0.6, 0},
	} {
		f, ok := r.figure(key)
		if !ok || math.Abs(f.Value-want[0]) > 1e-9 || math.Abs(f.Ratio-want[1]) > 1e-9 {
			t.Errorf("%s = %+v (found %v), want value %v ratio %v", key, f, ok, want[0], want[1])
		}
	}
	if f, _ := r.figure("scale.publish_a2.dups"); !strings.Contains(f.Note, "outbox relay round failed") {
		t.Errorf("the publish duplicates' note does not show the log warning: %q", f.Note)
	}
	if f, _ := r.figure("scale.push_d2.share"); !strings.Contains(f.Note, "40/60 %") || !strings.Contains(f.Note, "10 (100/0 %)") {
		t.Errorf("the share's note does not show the split and the head: %q", f.Note)
	}
}
