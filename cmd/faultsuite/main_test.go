package main

import (
	"bytes"
	"io"
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
