package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// report is the outcome of a run.
type report struct {
	Broker       string  `json:"broker"`
	Rate         float64 `json:"rate"`
	Rounds       int     `json:"rounds"`
	LoadSeconds  float64 `json:"loadSeconds"`
	DrainSeconds float64 `json:"drainSeconds"`
	Elapsed      float64 `json:"elapsedSeconds"`

	Published int `json:"published"` // publish requests sent
	Accepted  int `json:"accepted"`  // answered 202 (first try or retry)
	// UnknownFirst got no answer at first (the API died, or a timeout) and
	// were retried once with their Idempotency-Key; AcceptedOnRetry of them
	// were accepted then, Replayed of those as replays of the first request.
	UnknownFirst     int            `json:"unknownFirst"`
	AcceptedOnRetry  int            `json:"acceptedOnRetry"`
	Replayed         int            `json:"replayed"`
	Rejected         int            `json:"rejected"` // answered with another status
	RejectedByStatus map[string]int `json:"rejectedByStatus"`
	Refused          int            `json:"refused"` // connection refused: never reached a process
	Unknown          int            `json:"unknown"` // no answer, even to the retry
	Skipped          int            `json:"skipped"` // ticks not sent: -max-in-flight reached

	Push tally `json:"push"`
	Pull tally `json:"pull"`

	HA          bool           `json:"ha"` // an Artemis pair, failed over and back (-ha)
	Faults      []faultRecord  `json:"faults"`
	Outbox      map[string]int `json:"outbox"` // published_messages rows by status
	DeadLetters int            `json:"deadLetters"`
	PullErrors  int64          `json:"pullErrors"`
	Crashes     []string       `json:"crashes"`
	// BrokerRestarts (-ha) lists the nodes of the pair whose JVM exited by
	// itself at the end of a fail-back and that the suite started again.
	BrokerRestarts []string `json:"brokerRestarts,omitempty"`

	Pass    bool   `json:"pass"`
	Verdict string `json:"verdict"`
}

func (s *suite) report(ctx context.Context, results []result, skipped int, pub *publisher, pl *puller, loadTime, drainTime time.Duration, faultErr error) *report {
	r := &report{
		Broker: s.brokerName(), HA: s.cfg.ha, Rate: s.cfg.rate, Rounds: s.cfg.rounds, LoadSeconds: round1(loadTime.Seconds()), DrainSeconds: round1(drainTime.Seconds()),
		Published: len(results), Skipped: skipped, RejectedByStatus: map[string]int{}, PullErrors: pl.errs.Load(),
	}
	for _, res := range results {
		if res.retried {
			r.UnknownFirst++
		}
		switch res.out {
		case outAccepted:
			r.Accepted++
			if res.retried {
				r.AcceptedOnRetry++
				if res.replayed {
					r.Replayed++
				}
			}
		case outRejected:
			r.Rejected++
			r.RejectedByStatus[strconv.Itoa(res.status)]++
		case outRefused:
			r.Refused++
		default:
			r.Unknown++
		}
	}
	r.Push = s.sink.got.tally(pub.outcome, len(results))
	r.Pull = pl.got.tally(pub.outcome, len(results))
	s.mu.Lock()
	r.Faults = slices.Clone(s.faultLog)
	s.mu.Unlock()
	loadEnd := s.t0.Add(loadTime)
	var accepts []time.Time
	for _, res := range results {
		if res.out == outAccepted && !res.retried {
			accepts = append(accepts, res.at)
		}
	}
	sends := s.sends.snapshot()
	for i := range r.Faults {
		f := &r.Faults[i]
		from, to, dupsTo := s.t0.Add(seconds(f.At)), loadEnd, time.Now()
		if i+1 < len(r.Faults) {
			to = s.t0.Add(seconds(r.Faults[i+1].At))
			dupsTo = to
		}
		f.PushStall = round1(s.sink.got.longestGap(from, to).Seconds())
		f.PullStall = round1(pl.got.longestGap(from, to).Seconds())
		f.AcceptStall = round1(longestGap(accepts, from, to).Seconds())
		if sends != nil {
			f.SendStall = round1(longestGap(sends, from, to).Seconds())
		} else {
			f.SendStall = -1
		}
		f.PushDuplicates = s.sink.got.duplicatesIn(from, dupsTo)
		f.PullDuplicates = pl.got.duplicatesIn(from, dupsTo)
		f.BrokerGap = round1(f.BrokerGap)
	}
	for _, p := range s.procs() {
		r.Crashes = append(r.Crashes, p.unexpectedExits()...)
	}
	r.Outbox, r.DeadLetters = s.dbStats(ctx)
	if s.pair != nil {
		r.BrokerRestarts = slices.Clone(s.pair.restarts)
	}

	var fails []string
	if faultErr != nil {
		fails = append(fails, "a fault step failed: "+faultErr.Error())
	}
	for _, t := range []struct {
		name string
		t    tally
	}{{"push", r.Push}, {"pull", r.Pull}} {
		if t.t.Lost > 0 {
			fails = append(fails, fmt.Sprintf("%s lost %d accepted publishes (seq %v…)", t.name, t.t.Lost, t.t.LostSeqs))
		}
		if t.t.Delivered == 0 {
			fails = append(fails, t.name+" received nothing")
		}
		if t.t.DoublePublished > 0 {
			fails = append(fails, fmt.Sprintf("%s received %d publishes under two event ids (an Idempotency-Key retry published again)", t.name, t.t.DoublePublished))
		}
	}
	if r.Accepted == 0 {
		fails = append(fails, "nothing was accepted")
	}
	if len(r.Crashes) > 0 {
		fails = append(fails, fmt.Sprintf("%d process exit(s) nobody asked for", len(r.Crashes)))
	}
	r.Pass = len(fails) == 0
	r.Verdict = "PASS: every accepted publish was delivered"
	if !r.Pass {
		r.Verdict = strings.Join(fails, "; ")
	}
	return r
}

// dbStats reads the outbox log and the dead letters, best effort.
func (s *suite) dbStats(ctx context.Context) (map[string]int, int) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := map[string]int{}
	rows, err := s.pg.db.QueryContext(ctx, "SELECT status, count(*) FROM published_messages GROUP BY status")
	if err != nil {
		return nil, -1
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		var n int
		if rows.Scan(&st, &n) == nil {
			out[st] = n
		}
	}
	dead := -1
	_ = s.pg.db.QueryRowContext(ctx, "SELECT count(*) FROM dead_letters").Scan(&dead)
	return out, dead
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func (r *report) print(w io.Writer) {
	if r.HA {
		r.printHA(w)
	} else {
		fmt.Fprintf(w, "\nfault suite: 2 api + 2 dispatcher processes, %s, PostgreSQL; %g publishes/s, %d round(s) of faults\n\n", r.Broker, r.Rate, r.Rounds)
		fmt.Fprintln(w, "faults (at: seconds since the load started; took: until ready again; stall: the longest time")
		fmt.Fprintln(w, "without a push / pull delivery from the fault to the next one):")
		fmt.Fprintf(w, "  %7s  %-24s %6s  %-11s  %s\n", "at", "fault", "took", "stall", "detail")
		for _, f := range r.Faults {
			line := fmt.Sprintf("  %6.1fs  %-24s %5.1fs  %4.1fs/%4.1fs  %s", f.At, f.Name, f.Downtime, f.PushStall, f.PullStall, f.Detail)
			if f.Err != "" {
				line += "  ERROR: " + f.Err
			}
			fmt.Fprintln(w, line)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, v any, note string) { fmt.Fprintf(tw, "%s\t%v\t  %s\t\n", name, v, note) }
	row("published", r.Published, fmt.Sprintf("publish requests sent in %.1fs", r.LoadSeconds))
	row("accepted", r.Accepted, fmt.Sprintf("202; %d of them on an Idempotency-Key retry after an unknown outcome (%d replayed)", r.AcceptedOnRetry, r.Replayed))
	row("rejected", r.Rejected, "answered with another status "+statuses(r.RejectedByStatus))
	row("refused", r.Refused, "connection refused (the API process was down): never reached it")
	row("unknown", r.Unknown, fmt.Sprintf("no answer, even to the retry (%d had no answer at first)", r.UnknownFirst))
	if r.Skipped > 0 {
		row("skipped", r.Skipped, "not sent: -max-in-flight requests were waiting")
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tpush\tpull\t\n")
	for _, c := range []struct {
		name       string
		push, pull int
		note       string
	}{
		{"delivered", r.Push.Delivered, r.Pull.Delivered, "accepted publishes received"},
		{"duplicated", r.Push.Duplicated, r.Pull.Duplicated, "receipts beyond the first (at least once)"},
		{"lost", r.Push.Lost, r.Pull.Lost, "accepted, never received: must be 0"},
		{"unconfirmed", r.Push.Unconfirmed, r.Pull.Unconfirmed, "received, but not answered 202 (allowed)"},
		{"double-published", r.Push.DoublePublished, r.Pull.DoublePublished, "one publish under two event ids: must be 0"},
	} {
		fmt.Fprintf(tw, "%s\t%d\t%d\t  %s\t\n", c.name, c.push, c.pull, c.note)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\ndrain %.1fs; outbox %s; dead letters %d; pull request errors %d; elapsed %.0fs\n",
		r.DrainSeconds, statuses(r.Outbox), r.DeadLetters, r.PullErrors, r.Elapsed)
	for _, t := range []struct {
		name string
		t    tally
	}{{"push", r.Push}, {"pull", r.Pull}} {
		if t.t.Unconfirmed > 0 {
			fmt.Fprintf(w, "%s: received %d publishes not answered 202: %s\n", t.name, t.t.Unconfirmed, statuses(t.t.UnconfirmedBy))
		}
	}
	for _, c := range r.BrokerRestarts {
		fmt.Fprintln(w, "broker node restarted:", c)
	}
	for _, c := range r.Crashes {
		fmt.Fprintln(w, "crash:", c)
	}
	if r.Pass {
		fmt.Fprintln(w, r.Verdict)
	} else {
		fmt.Fprintln(w, "FAIL:", r.Verdict)
	}
}

// printHA prints the header and the failovers and fail-backs of an -ha run.
func (r *report) printHA(w io.Writer) {
	fmt.Fprintf(w, "\nfault suite -ha: 2 api + 2 dispatcher processes, %s, PostgreSQL; %g publishes/s, %d round(s) of failover and fail-back\n\n", r.Broker, r.Rate, r.Rounds)
	fmt.Fprintln(w, "failovers and fail-backs (at: seconds since the load started; took: the step, until the pair is")
	fmt.Fprintln(w, "synchronized again; broker: no node answered STOMP; then the longest time without a 202 to a")
	fmt.Fprintln(w, "publish (accept), a relay's send to the broker (send), a push / pull delivery, from the step to the")
	fmt.Fprintln(w, "next one; dups: push / pull duplicates that arrived meanwhile):")
	fmt.Fprintf(w, "  %7s  %-9s %6s %7s %7s %6s %6s %6s  %-7s  %s\n", "at", "step", "took", "broker", "accept", "send", "push", "pull", "dups", "detail")
	for _, f := range r.Faults {
		send := fmt.Sprintf("%5.1fs", f.SendStall)
		if f.SendStall < 0 {
			send = "     ?"
		}
		line := fmt.Sprintf("  %6.1fs  %-9s %5.1fs %6.1fs %6.1fs %s %5.1fs %5.1fs  %-7s  %s", f.At, f.Name, f.Downtime, f.BrokerGap,
			f.AcceptStall, send, f.PushStall, f.PullStall, fmt.Sprintf("%d/%d", f.PushDuplicates, f.PullDuplicates), f.Detail)
		if f.Err != "" {
			line += "  ERROR: " + f.Err
		}
		fmt.Fprintln(w, line)
	}
}

func statuses(m map[string]int) string {
	if len(m) == 0 {
		return "(none)"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, m[k])
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func (r *report) writeJSON(path string) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}
