package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		want    config
		wantErr string
	}{
		{"full form", nil, full, ""},
		{"short form", []string{"-short"}, short, ""},
		{"short keeps what is given", []string{"-short", "-rate", "7", "-rounds", "3"},
			config{duration: short.duration, rate: 7, gap: short.gap, rounds: 3, drainTimeout: short.drainTimeout}, ""},
		{"rate out of range", []string{"-rate", "0"}, config{}, "-rate"},
		{"gap too short", []string{"-gap", "10ms"}, config{}, "-gap"},
		{"argument", []string{"extra"}, config{}, "unexpected argument"},
		{"unknown broker", []string{"-broker-kind", "rabbitmq"}, config{}, "-broker-kind"},
		{"ha form", []string{"-ha"}, haFull, ""},
		{"ha short form", []string{"-ha", "-short"}, haShort, ""},
		{"ha short keeps what is given", []string{"-short", "-ha", "-gap", "9s"},
			config{duration: haShort.duration, rate: haShort.rate, gap: 9 * time.Second, rounds: haShort.rounds, drainTimeout: haShort.drainTimeout}, ""},
		{"ha on Classic", []string{"-ha", "-broker-kind", "activemq"}, config{}, "-ha"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.brokerKind != kindArtemis {
				t.Errorf("broker kind %q, want artemis by default", got.brokerKind)
			}
			if got.duration != tt.want.duration || got.rate != tt.want.rate || got.gap != tt.want.gap ||
				got.rounds != tt.want.rounds || got.drainTimeout != tt.want.drainTimeout {
				t.Errorf("got duration %s rate %g gap %s rounds %d drain %s; want %s %g %s %d %s",
					got.duration, got.rate, got.gap, got.rounds, got.drainTimeout,
					tt.want.duration, tt.want.rate, tt.want.gap, tt.want.rounds, tt.want.drainTimeout)
			}
		})
	}
}

func TestParseFlagsBrokerKind(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{kindArtemis, kindActiveMQ} {
		cfg, err := parseFlags([]string{"-short", "-broker-kind", kind}, io.Discard)
		if err != nil || cfg.brokerKind != kind {
			t.Errorf("-broker-kind %s: kind %q, err %v", kind, cfg.brokerKind, err)
		}
	}
}

// TestLongestGap: the stall after a fault counts from the fault's start to
// the first arrival, between arrivals, and from the last arrival to the end.
func TestLongestGap(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := newReceipts()
	r.times = []time.Time{at(900), at(100), at(1500), at(4000), at(4100)} // unordered, as pulls add them
	for _, tt := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 5000, 2500 * time.Millisecond},  // 1500 → 4000
		{200, 1600, 700 * time.Millisecond}, // 200 → 900
		{1000, 1200, 200 * time.Millisecond},
		{4100, 6000, 1900 * time.Millisecond}, // to the end: nothing came
	} {
		if got := r.longestGap(at(tt.from), at(tt.to)); got != tt.want {
			t.Errorf("longestGap(%d, %d) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
}

// TestTally: delivered, duplicated, lost, unconfirmed and double-published
// from a known set of receipts.
func TestTally(t *testing.T) {
	t.Parallel()
	const prefix = "fs-x-"
	r := newReceipts()
	r.add(prefix, "fs-x-0", "e0")
	r.add(prefix, "fs-x-0", "e0") // redelivery
	r.add(prefix, "fs-x-1", "e1")
	r.add(prefix, "fs-x-1", "e1b") // published twice
	r.add(prefix, "fs-x-3", "e3")  // not accepted: unknown outcome
	r.add(prefix, "other", "e9")
	outcomeOf := func(seq int) outcome { // 0, 1, 2 accepted; 2 never arrives
		if seq <= 2 {
			return outAccepted
		}
		return outUnknown
	}
	got := r.tally(outcomeOf, 4)
	want := tally{Delivered: 2, Duplicated: 2, Lost: 1, Unconfirmed: 1, DoublePublished: 1, Stray: 1, LostSeqs: []int{2}}
	if got.Delivered != want.Delivered || got.Duplicated != want.Duplicated || got.Lost != want.Lost ||
		got.Unconfirmed != want.Unconfirmed || got.DoublePublished != want.DoublePublished || got.Stray != want.Stray ||
		len(got.LostSeqs) != 1 || got.LostSeqs[0] != 2 || got.UnconfirmedBy["unknown"] != 1 {
		t.Errorf("tally = %+v, want %+v", got, want)
	}
}

// TestReportPrints: the table names every figure and the verdict.
func TestReportPrints(t *testing.T) {
	t.Parallel()
	r := &report{Broker: "Artemis", Rate: 40, Rounds: 1, Published: 10, Accepted: 9, Refused: 1, Push: tally{Delivered: 9}, Pull: tally{Delivered: 9},
		Faults: []faultRecord{{Name: "kill -9 broker", At: 5, Downtime: 9.5, Detail: "down 3s", PushStall: 8.2, PullStall: 8.9}},
		Pass:   true, Verdict: "PASS: every accepted publish was delivered", Elapsed: (70 * time.Second).Seconds()}
	var b bytes.Buffer
	r.print(&b)
	for _, s := range []string{"Artemis", "8.2s/ 8.9s", "published", "accepted", "rejected", "unknown", "delivered", "duplicated", "lost", "kill -9 broker", "PASS"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
}

// TestDuplicatesIn: a receipt of a publish already received counts in the
// window it arrived in; first receipts never do.
func TestDuplicatesIn(t *testing.T) {
	t.Parallel()
	const prefix = "fs-x-"
	r := newReceipts()
	r.add(prefix, "fs-x-0", "e0")
	r.add(prefix, "fs-x-1", "e1")
	r.add(prefix, "fs-x-0", "e0") // duplicate
	r.add(prefix, "fs-x-0", "e0") // another
	r.add(prefix, "fs-x-1", "e1") // duplicate
	if len(r.dups) != 3 {
		t.Fatalf("dups = %d, want 3", len(r.dups))
	}
	r.dups[0] = r.times[0].Add(time.Second) // place them: 1s, 2s and 3s after the first receipt
	r.dups[1] = r.times[0].Add(2 * time.Second)
	r.dups[2] = r.times[0].Add(3 * time.Second)
	t0 := r.times[0]
	for _, tt := range []struct {
		from, to time.Duration
		want     int
	}{
		{0, 10 * time.Second, 3},
		{1500 * time.Millisecond, 10 * time.Second, 2},
		{time.Second, 2 * time.Second, 1}, // from inclusive, to exclusive
		{4 * time.Second, 5 * time.Second, 0},
	} {
		if got := r.duplicatesIn(t0.Add(tt.from), t0.Add(tt.to)); got != tt.want {
			t.Errorf("duplicatesIn(%s, %s) = %d, want %d", tt.from, tt.to, got, tt.want)
		}
	}
}

// TestReportPrintsHA: an -ha report names each step with its broker gap,
// accept, send, push and pull stalls and duplicates.
func TestReportPrintsHA(t *testing.T) {
	t.Parallel()
	r := &report{Broker: "Artemis primary/backup pair (replication)", HA: true, Rate: 40, Rounds: 1, Published: 10, Accepted: 10,
		Push: tally{Delivered: 10}, Pull: tally{Delivered: 10},
		Faults: []faultRecord{
			{Name: "failover", At: 6, Downtime: 0.9, BrokerGap: 0.8, AcceptStall: 0.2, SendStall: 1.4, PushStall: 1.7, PullStall: 1.9, PushDuplicates: 3, PullDuplicates: 1, Detail: "primary killed"},
			{Name: "fail-back", At: 13, Downtime: 9.1, BrokerGap: 0.6, AcceptStall: 0.1, SendStall: -1, PushStall: 0.9, PullStall: 1.1, Detail: "primary restarted"},
		},
		Pass: true, Verdict: "PASS: every accepted publish was delivered"}
	var b bytes.Buffer
	r.print(&b)
	for _, s := range []string{"fault suite -ha", "failover", "fail-back", "0.8s", "1.4s", "1.7s", "1.9s", "3/1", "0/0", "     ?", "primary restarted", "PASS"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, b.String())
		}
	}
}

// TestLogTimeOf reads the time stamp of the first Artemis log line that holds
// a pattern, from an offset on.
func TestLogTimeOf(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/artemis.log"
	first := "2026-01-02 03:04:05,678 INFO  [org.apache.activemq.artemis.core.server] AMQ221024: Backup server is synchronized\n"
	second := "2026-01-02 03:04:09,001 INFO  [org.apache.activemq.artemis.core.server] AMQ221024: Backup server is synchronized\n"
	if err := os.WriteFile(path, []byte("=== start\n"+first+second), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &proc{logPath: path}
	want := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.Local)
	if got, ok := p.logTimeOf(0, "AMQ221024"); !ok || !got.Equal(want) {
		t.Errorf("logTimeOf(0) = %v, %v; want %v", got, ok, want)
	}
	from := int64(len("=== start\n" + first))
	if got, ok := p.logTimeOf(from, "AMQ221024"); !ok || got.Second() != 9 {
		t.Errorf("logTimeOf(after the first) = %v, %v; want 03:04:09", got, ok)
	}
	if !p.logFrom(from, "AMQ221024") || p.logFrom(p.logSize(), "AMQ221024") {
		t.Error("logFrom does not start at the offset")
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"stomp://u:secret@127.0.0.1:1,127.0.0.1:2?dialect=artemis": "stomp://u:xxxxx@127.0.0.1:1,127.0.0.1:2?dialect=artemis",
		"stomp://127.0.0.1:61623?dialect=activemq":                 "stomp://127.0.0.1:61623?dialect=activemq",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestExcuseLastExit: an exit nobody asked for is a crash until the caller
// takes it off the list to report it otherwise.
func TestExcuseLastExit(t *testing.T) {
	t.Parallel()
	p := &proc{name: "node", path: "/bin/sh", args: []string{"-c", "exit 0"}, logPath: t.TempDir() + "/node.log"}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited():
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not exit")
	}
	if got := p.unexpectedExits(); len(got) != 1 || !strings.Contains(got[0], "node (pid") {
		t.Fatalf("unexpected exits = %q, want the one exit", got)
	}
	if got := p.excuseLastExit(); !strings.Contains(got, "exited by itself") {
		t.Errorf("excuseLastExit = %q", got)
	}
	if got := p.unexpectedExits(); len(got) != 0 {
		t.Errorf("unexpected exits after the excuse = %q, want none", got)
	}
}
