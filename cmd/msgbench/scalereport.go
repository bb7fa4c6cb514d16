package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// parseCounts parses process counts such as "1,2,4": each from 1 to 8, none
// twice, and 1 among them (the ratios are to the 1-process run), sorted.
func parseCounts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 8 {
			return nil, fmt.Errorf("%q is not a process count from 1 to 8", f)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("%d is named twice", n)
		}
		out = append(out, n)
	}
	if !slices.Contains(out, 1) {
		return nil, errors.New("must include 1: every figure is a ratio to the 1-process run")
	}
	slices.Sort(out)
	return out, nil
}

// shares is each process's part of the growth of a counter, after - before
// over the sum of those; all 0 when nothing grew.
func shares(before, after []float64) []float64 {
	out := make([]float64, len(after))
	sum := 0.0
	for i := range after {
		out[i] = after[i] - before[i]
		sum += out[i]
	}
	for i := range out {
		if sum > 0 {
			out[i] /= sum
		} else {
			out[i] = 0
		}
	}
	return out
}

// evenness is the smallest share times the number of processes: 1 when the
// work is split evenly, 0 when a process got none of it.
func evenness(sh []float64) float64 {
	if len(sh) == 0 {
		return 0
	}
	return slices.Min(sh) * float64(len(sh))
}

// percents shows shares as "51/49 %".
func percents(sh []float64) string {
	parts := make([]string, len(sh))
	for i, s := range sh {
		parts[i] = strconv.FormatFloat(s*100, 'f', 0, 64)
	}
	return strings.Join(parts, "/") + " %"
}

// seconds shows times in seconds as "4.8/5.0/5.2".
func seconds(ts []float64) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = strconv.FormatFloat(t, 'f', 1, 64)
	}
	return strings.Join(parts, "/")
}

// tally checks what arrived in a queue against what was accepted: every
// expected key must arrive; one that arrives again is a duplicate, one never
// expected an extra (a publish whose answer failed although it was stored).
type tally struct {
	mu     sync.Mutex
	want   map[string]bool // expected key → arrived
	arrive int             // expected keys arrived
	other  map[string]bool // unexpected keys arrived
	dups   int
	extra  int
}

func newTally() *tally { return &tally{want: map[string]bool{}, other: map[string]bool{}} }

// expect adds a key that must arrive.
func (t *tally) expect(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.want[key]; ok {
		return
	}
	if t.other[key] { // arrived before its publish was answered
		delete(t.other, key)
		t.extra--
		t.want[key], t.arrive = true, t.arrive+1
		return
	}
	t.want[key] = false
}

// saw counts an arrival of key.
func (t *tally) saw(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	arrived, expected := t.want[key]
	switch {
	case expected && arrived, !expected && t.other[key]:
		t.dups++
	case expected:
		t.want[key], t.arrive = true, t.arrive+1
	default:
		t.other[key] = true
		t.extra++
	}
}

// missing is how many expected keys have not arrived.
func (t *tally) missing() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.want) - t.arrive
}

// logWarnings counts the WARN and ERROR lines of a service log (slog's
// text format), by message.
func logWarnings(raw []byte) map[string]int {
	out := map[string]int{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if !strings.Contains(line, " level=WARN ") && !strings.Contains(line, " level=ERROR ") {
			continue
		}
		msg := line
		if _, rest, ok := strings.Cut(line, " msg="); ok {
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				msg, _ = strconv.Unquote(q)
			} else {
				msg, _, _ = strings.Cut(rest, " ")
			}
		}
		out[msg]++
	}
	return out
}

// spread is one figure over the rounds for one process count: the median
// and range of its values, and of its ratios to the 1-process run of the
// same round.
type spread struct {
	values, ratios  []float64 // by round
	median, lo, hi  float64
	ratio, rlo, rhi float64
}

// summarize groups value(run) by process count and round, and sums each
// count up as a spread; a round whose 1-process value is missing or 0 gives
// no ratio (NaN).
func summarize[R any](runs []R, key func(R) (count, round int), value func(R) float64) map[int]spread {
	byCount := map[int]map[int]float64{}
	for _, r := range runs {
		c, round := key(r)
		if byCount[c] == nil {
			byCount[c] = map[int]float64{}
		}
		byCount[c][round] = value(r)
	}
	out := map[int]spread{}
	for c, rounds := range byCount {
		var s spread
		keys := make([]int, 0, len(rounds))
		for round := range rounds {
			keys = append(keys, round)
		}
		slices.Sort(keys)
		for _, round := range keys {
			v := rounds[round]
			ratio := math.NaN()
			if base, ok := byCount[1][round]; ok && base != 0 {
				ratio = v / base
			}
			s.values, s.ratios = append(s.values, v), append(s.ratios, ratio)
		}
		s.median, s.lo, s.hi = medianRange(s.values)
		s.ratio, s.rlo, s.rhi = medianRange(s.ratios)
		out[c] = s
	}
	return out
}

// medianRange is the median, smallest and largest of vs, leaving NaNs out
// (NaN for none).
func medianRange(vs []float64) (median, lo, hi float64) {
	s := slices.DeleteFunc(slices.Clone(vs), math.IsNaN)
	if len(s) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	slices.Sort(s)
	m := len(s) / 2
	median = s[m]
	if len(s)%2 == 0 {
		median = (s[m-1] + s[m]) / 2
	}
	return median, s[0], s[len(s)-1]
}

// rounds shows a spread round by round: "7012 ×1.00, 6800 ×0.97".
func (s spread) rounds(format string) string {
	parts := make([]string, len(s.values))
	for i, v := range s.values {
		parts[i] = fmt.Sprintf(format, v)
		if !math.IsNaN(s.ratios[i]) {
			parts[i] += fmt.Sprintf(" ×%.2f", s.ratios[i])
		}
	}
	return "by round " + strings.Join(parts, ", ")
}

// figure is the spread as a figure: the median value, and the median ratio
// to the 1-process figure versus.
func (s spread) figure(key, name, unit, versus, note string) Figure {
	f := Figure{Key: key, Group: scaleGroup, Name: name, Value: s.median, Unit: unit, Note: note}
	if !math.IsNaN(s.ratio) {
		f.Ratio, f.Versus = s.ratio, versus
	}
	return f
}

const scaleGroup = "9 scale"

func processes(n int, what string) string {
	if n == 1 {
		return "1 " + what + " process"
	}
	return strconv.Itoa(n) + " " + what + " processes"
}

// addScaleFigures sums the scale phase's rounds up as figures: medians over
// the rounds, each with the median of its ratios to the 1-process run of the
// same round, and the rounds themselves in the note.
func (r *Report) addScaleFigures(res *ScaleResult, cfg scaleConfig, clients int) {
	pk := func(p PushRun) (int, int) { return p.Processes, p.Round }
	rate := summarize(res.Push, pk, func(p PushRun) float64 { return p.Rate })
	dcpu := summarize(res.Push, pk, func(p PushRun) float64 { return p.DispatcherCPU })
	mcpu := summarize(res.Push, pk, func(p PushRun) float64 { return p.MachineCPU })
	p50 := summarize(res.Push, pk, func(p PushRun) float64 { return p.Latency.P50 })
	p99 := summarize(res.Push, pk, func(p PushRun) float64 { return p.Latency.P99 })
	for _, n := range cfg.dispatchers {
		runs := slices.DeleteFunc(slices.Clone(res.Push), func(p PushRun) bool { return p.Processes != n })
		if len(runs) == 0 {
			continue
		}
		key := fmt.Sprintf("scale.push_d%d", n)
		var windows, shareText, headText, finishText []string
		even, dups := math.Inf(1), 0
		published, delivered := []float64{}, []float64{}
		warnings := map[string]int{}
		for _, p := range runs {
			windows = append(windows, strconv.Itoa(p.Window))
			shareText = append(shareText, percents(p.Shares))
			finishText = append(finishText, fmt.Sprintf("%s of %.1f s", seconds(p.Finished), p.Elapsed))
			if p.Head > 0 {
				headText = append(headText, fmt.Sprintf("%d (%s)", p.Head, percents(p.HeadShares)))
			} else {
				headText = append(headText, "0")
			}
			even = math.Min(even, evenness(p.Shares))
			dups += p.Duplicates
			published = append(published, p.Latency.Published)
			delivered = append(delivered, p.Latency.Delivered)
			for msg, k := range p.Warnings {
				warnings[msg] += k
			}
		}
		r.add(rate[n].figure(key, "push drain, "+processes(n, "dispatcher"), "deliveries/s", "scale.push_d1",
			fmt.Sprintf("%s; ratio: the median of each round's to 1 process; counted after every process was ready: %s of %d preloaded",
				rate[n].rounds("%.0f"), strings.Join(windows, ", "), runs[0].Preloaded)))
		r.add(Figure{Key: key + ".share", Group: scaleGroup, Name: "  each process's share of those deliveries", Value: even, Unit: "× even",
			Note: fmt.Sprintf("smallest share × processes (1: even, 0: one starved); by round %s (their /metrics); each last seen delivering at %s; deliveries before all were ready: %s",
				strings.Join(shareText, ", "), strings.Join(finishText, ", "), strings.Join(headText, ", "))})
		r.add(dcpu[n].figure(key+".cpu", "  dispatcher CPU per 1000 deliveries, summed over the processes", "CPU s", "scale.push_d1.cpu",
			fmt.Sprintf("%s; machine CPU per 1000: %.3f (%.3f–%.3f, ×%.2f); ratio above 1: more CPU than 1 process", dcpu[n].rounds("%.3f"),
				mcpu[n].median, mcpu[n].lo, mcpu[n].hi, mcpu[n].ratio)))
		latNote := fmt.Sprintf("%.0f/s offered (single POSTs, 1 API process), published %.0f/s, delivered %.0f/s (medians); ", cfg.rate, median(published), median(delivered))
		r.add(p50[n].figure(key+".p50", fmt.Sprintf("  latency p50 at %.0f events/s", cfg.rate), "ms", "scale.push_d1.p50", latNote+p50[n].rounds("%.1f")))
		r.add(p99[n].figure(key+".p99", fmt.Sprintf("  latency p99 at %.0f events/s", cfg.rate), "ms", "scale.push_d1.p99", p99[n].rounds("%.1f")))
		r.add(Figure{Key: key + ".dups", Group: scaleGroup, Name: "  duplicates at the sink (by event id)", Value: float64(dups), Unit: "events",
			Note: fmt.Sprintf("over %d rounds, drains and latency runs; lost: none (a loss fails the run); log warnings: %s", len(runs), warningsText(warnings))})
	}

	ak := func(p PublishRun) (int, int) { return p.Processes, p.Round }
	acc := summarize(res.Publish, ak, func(p PublishRun) float64 { return p.Accepted })
	rel := summarize(res.Publish, ak, func(p PublishRun) float64 { return p.Relayed })
	back := summarize(res.Publish, ak, func(p PublishRun) float64 { return p.BacklogRelayed })
	acpu := summarize(res.Publish, ak, func(p PublishRun) float64 { return p.APICPU })
	e50 := summarize(res.Publish, ak, func(p PublishRun) float64 { return p.Latency.P50 })
	e99 := summarize(res.Publish, ak, func(p PublishRun) float64 { return p.Latency.P99 })
	for _, m := range cfg.apis {
		runs := slices.DeleteFunc(slices.Clone(res.Publish), func(p PublishRun) bool { return p.Processes != m })
		if len(runs) == 0 {
			continue
		}
		key := fmt.Sprintf("scale.publish_a%d", m)
		var relayText, claimText, claimable, finishText []string
		relayEven, claimEven := math.Inf(1), math.Inf(1)
		dups, extra, failed := 0, 0, 0
		warnings := map[string]int{}
		for _, p := range runs {
			relayText = append(relayText, percents(p.RelayShares))
			claimText = append(claimText, percents(p.ClaimShares))
			finishText = append(finishText, fmt.Sprintf("%s of %.1f s", seconds(p.BacklogFinished), p.BacklogElapsed))
			claimable = append(claimable, strconv.Itoa(p.Claimable))
			relayEven, claimEven = math.Min(relayEven, evenness(p.RelayShares)), math.Min(claimEven, evenness(p.ClaimShares))
			dups, extra, failed = dups+p.Duplicates, extra+p.Extra, failed+p.FailedRequests
			for msg, k := range p.Warnings {
				warnings[msg] += k
			}
		}
		what := processes(m, "API")
		r.add(acc[m].figure(key, "publish through "+what+", single POSTs: accepted", "events/s", "scale.publish_a1",
			fmt.Sprintf("%s; ratio: the median of each round's to 1 process; %d clients, round robin over the processes; %d failed requests",
				acc[m].rounds("%.0f"), clients, failed)))
		r.add(rel[m].figure(key+"_relayed", "  relayed to the broker", "events/s", "scale.publish_a1_relayed", rel[m].rounds("%.0f")))
		r.add(Figure{Key: key + ".relay_share", Group: scaleGroup, Name: "  each relay's share of those sends", Value: relayEven, Unit: "× even",
			Note: fmt.Sprintf("by round %s (outbox_relayed_total); API CPU per 1000 events, summed: %.3f CPU s (×%.2f)", strings.Join(relayText, ", "), acpu[m].median, acpu[m].ratio)})
		r.add(back[m].figure(key+".backlog", fmt.Sprintf("  a backlog of %d events in batches through one process: relayed", cfg.messages), "events/s", "scale.publish_a1.backlog",
			fmt.Sprintf("%s; rows waiting for a claim when the last batch was accepted: %s", back[m].rounds("%.0f"), strings.Join(claimable, ", "))))
		r.add(Figure{Key: key + ".claim_share", Group: scaleGroup, Name: "  each relay's share of the backlog (the others' by claims alone)", Value: claimEven, Unit: "× even",
			Note: fmt.Sprintf("by round %s; each relay last seen sending at %s", strings.Join(claimText, ", "), strings.Join(finishText, ", "))})
		r.add(e50[m].figure(key+".p50", fmt.Sprintf("  latency p50 at %.0f events/s (1 dispatcher)", cfg.rate), "ms", "scale.publish_a1.p50", e50[m].rounds("%.1f")))
		r.add(e99[m].figure(key+".p99", fmt.Sprintf("  latency p99 at %.0f events/s (1 dispatcher)", cfg.rate), "ms", "scale.publish_a1.p99", e99[m].rounds("%.1f")))
		r.add(Figure{Key: key + ".dups", Group: scaleGroup, Name: "  duplicates in the queues and at the sink", Value: float64(dups), Unit: "events",
			Note: fmt.Sprintf("by the payload's orderId in the PULL queues, by event id at the sink; lost: none (a loss fails the run); %d arrived although their publish failed; log warnings: %s",
				extra, warningsText(warnings))})
	}
}

// median is the median of vs.
func median(vs []float64) float64 {
	m, _, _ := medianRange(vs)
	return m
}

// warningsText shows the most frequent log warnings: "none", or
// `3 × "outbox relay round failed; retrying", …`.
func warningsText(w map[string]int) string {
	if len(w) == 0 {
		return "none"
	}
	msgs := make([]string, 0, len(w))
	for m := range w {
		msgs = append(msgs, m)
	}
	slices.SortFunc(msgs, func(a, b string) int { return w[b] - w[a] })
	parts := make([]string, 0, 3)
	for _, m := range msgs[:min(3, len(msgs))] {
		parts = append(parts, fmt.Sprintf("%d × %q", w[m], m))
	}
	if len(msgs) > 3 {
		parts = append(parts, fmt.Sprintf("%d more kinds", len(msgs)-3))
	}
	return strings.Join(parts, ", ")
}
