package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roomhub/messaging-api/store/storetest"
)

// TestSmoke runs the whole benchmark with tiny parameters: against the
// embedded broker and SQLite, or, when BROKER_TEST_URL is set, against that
// broker and the PostgreSQL of TEST_DATABASE_URL. Every figure must come out
// present and positive, and the JSON file must hold what the table shows.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the service and the whole benchmark (-short)")
	}
	jsonPath := filepath.Join(t.TempDir(), "bench.json")
	args := []string{
		"-json", jsonPath, "-duration", "1s", "-warmup", "2s", "-messages", "200", "-pullers", "2", "-concurrency", "4",
		"-retries", "2", "-retry-delays", "1s,2s", "-push-timeout", "1s", "-hang-share", "0.1", "-timeout", "8m",
		"-latency-rates", "50", "-publish-sends", "2000",
	}
	args, real := benchArgs(t, args)
	table, rep := runReport(t, args, jsonPath, 9*time.Minute)
	if err := rep.check(); err != nil {
		t.Errorf("figures:\n%v", err)
	}
	for _, f := range rep.Figures {
		if !strings.Contains(table, f.Name) {
			t.Errorf("figure %q is in the JSON but not in the table", f.Name)
		}
	}
	if real {
		// The CPU accounts found the broker and PostgreSQL by their ports:
		// always in CI (root); elsewhere /proc may hide another user's
		// PostgreSQL, and then its share is left in "other".
		found := map[string]bool{}
		for role, key := range map[string]string{"broker ": "cpuAccountsBrokerPID", "PostgreSQL ": "cpuAccountsPostgresPID"} {
			pid, _ := rep.Settings[key].(float64)
			found[role] = pid > 0
			if pid <= 0 && os.Getenv("CI") == "true" {
				t.Errorf("CPU accounts: %s= %v, want the pid of the process listening on its port", key, rep.Settings[key])
			}
		}
		keys := []string{"cpu.consume", "cpu.flow", "e2e.cpu"}
		// The push figures count from the dispatcher's start; in a run this
		// small it may have drained the queue by then.
		if _, ok := rep.figure("dispatcher.cpu_per_1000"); ok {
			keys = append(keys, "cpu.push")
			if f, _ := rep.figure("cpu.push"); !(f.Value > 0) || !(f.Ratio > 0) {
				t.Errorf("cpu.push = %+v, want a positive value and ratio", f)
			}
			if f, ok := rep.figure("isolation.cpu"); ok && (!(f.Ratio > 0) || f.Versus != "cpu.push") {
				t.Errorf("isolation.cpu = %+v, want its ratio to cpu.push", f)
			}
		}
		for _, key := range keys {
			f, _ := rep.figure(key)
			for role, ok := range found {
				if ok && !strings.Contains(f.Note, role) {
					t.Errorf("%s does not show the %sCPU: %q", key, role, f.Note)
				}
			}
		}
	}
	if rep.Machine.CPUs < 1 || rep.Command == "" {
		t.Errorf("machine or command missing: %+v %q", rep.Machine, rep.Command)
	}
}

// benchArgs adds the broker and database of the tests to args: those of
// BROKER_TEST_URL and TEST_DATABASE_URL (or the local PostgreSQL) when
// BROKER_TEST_URL is set, else the embedded broker and SQLite; real says which.
func benchArgs(t *testing.T, args []string) (_ []string, real bool) {
	t.Helper()
	u := os.Getenv("BROKER_TEST_URL")
	if u == "" {
		t.Log("BROKER_TEST_URL not set: embedded broker and SQLite")
		return append(args, "-embedded"), false
	}
	db := os.Getenv("TEST_DATABASE_URL")
	if db == "" {
		db = storetest.DefaultPostgresURL
	}
	t.Logf("real broker %s and PostgreSQL", u)
	return append(args, "-broker", u, "-db", db), true
}

// runReport runs the benchmark with args, which write the report to
// jsonPath, and returns the table it printed and the report.
func runReport(t *testing.T, args []string, jsonPath string, within time.Duration) (string, Report) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Logf("table:\n%s", stdout.String())
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("%s: %v", jsonPath, err)
	}
	return stdout.String(), rep
}

// TestCheckCatchesBadFigures: the smoke test's check fails on a missing, a
// zero, a negative, a NaN figure and a missing ratio, and passes a complete
// report.
func TestCheckCatchesBadFigures(t *testing.T) {
	t.Parallel()
	complete := func() *Report {
		r := &Report{}
		for _, k := range requiredFigures {
			r.add(Figure{Key: k, Value: 1})
		}
		for i := range r.Figures {
			for _, k := range ratioFigures {
				if r.Figures[i].Key == k {
					r.Figures[i].Ratio, r.Figures[i].Versus = 0.5, "baseline.send"
				}
			}
		}
		r.evaluate()
		return r
	}
	if err := complete().check(); err != nil {
		t.Fatalf("a complete report fails: %v", err)
	}
	tests := []struct {
		name  string
		spoil func(r *Report)
		want  string
	}{
		{"missing", func(r *Report) { r.Figures = r.Figures[1:] }, "is missing"},
		{"zero", func(r *Report) { r.Figures[0].Value = 0 }, "want a positive number"},
		{"negative", func(r *Report) { r.Figures[0].Value = -3 }, "want a positive number"},
		{"NaN", func(r *Report) { r.Figures[0].Value = math.NaN() }, "want a positive number"},
		{"no ratio", func(r *Report) {
			for i := range r.Figures {
				if r.Figures[i].Key == "push.rate" {
					r.Figures[i].Versus = ""
				}
			}
		}, "no positive ratio"},
		{"no targets", func(r *Report) { r.Targets = nil }, "no targets"},
	}
	t.Run("a phase left out", func(t *testing.T) {
		t.Parallel()
		r := complete()
		r.Figures = slices.DeleteFunc(r.Figures, func(f Figure) bool { return f.Key == "retry.p99" })
		r.evaluate()
		notRun := 0
		for _, tg := range r.Targets {
			if tg.NotRun {
				notRun++
				if !strings.HasPrefix(tg.Name, "retry error") || tg.Met {
					t.Errorf("target %q not run (met %v); only the retry target should be", tg.Name, tg.Met)
				}
			}
		}
		var out strings.Builder
		r.print(&out)
		if notRun != 1 || !strings.Contains(out.String(), "not run") {
			t.Errorf("%d targets not run, want 1; printed:\n%s", notRun, out.String())
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := complete()
			tt.spoil(r)
			err := r.check()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("check() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := percentile(ds, tt.p); got != tt.want {
			t.Errorf("percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile of nothing = %v", got)
	}
}

func TestRequireLoopback(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{
		"stomp://127.0.0.1:61623?dialect=activemq":       true,
		"postgres://postgres@localhost:5432/test":        true,
		"stomp://[::1]:61613":                            true,
		"stomp://127.3.2.1:61613":                        true,
		"stomp://10.0.0.5:61613":                         false,
		"postgres://u@db.example.com:5432/x":             false,
		"stomp://192.168.1.2:61613?dialect=artemis":      false,
		"postgres://postgres@0.0.0.0:5432/test?ssl=true": false,
	} {
		if err := requireLoopback(raw); (err == nil) != ok {
			t.Errorf("requireLoopback(%q) = %v, want ok=%v", raw, err, ok)
		}
	}
}

// TestChooseBroker: -broker-kind picks the default URL, a URL's dialect
// names the kind, and the two must agree.
func TestChooseBroker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantKind string
		wantURL  string
		wantErr  string
	}{
		{"default", nil, kindArtemis, DefaultArtemisURL, ""},
		{"artemis", []string{"-broker-kind", "artemis"}, kindArtemis, DefaultArtemisURL, ""},
		{"activemq", []string{"-broker-kind", "activemq"}, kindActiveMQ, DefaultActiveMQURL, ""},
		{"kind from the URL", []string{"-broker", "stomp://127.0.0.1:61700?dialect=activemq"}, kindActiveMQ, "stomp://127.0.0.1:61700?dialect=activemq", ""},
		{"URL without dialect", []string{"-broker", "stomp://u:p@127.0.0.1:61710"}, kindArtemis, "stomp://u:p@127.0.0.1:61710", ""},
		{"both agree", []string{"-broker-kind", "artemis", "-broker", "stomp://u:p@127.0.0.1:61710?dialect=artemis"}, kindArtemis, "stomp://u:p@127.0.0.1:61710?dialect=artemis", ""},
		{"both disagree", []string{"-broker-kind", "artemis", "-broker", DefaultActiveMQURL}, "", "", "dialect is activemq"},
		{"unknown kind", []string{"-broker-kind", "rabbitmq"}, "", "", "-broker-kind"},
		{"unknown dialect", []string{"-broker", "stomp://127.0.0.1:61613?dialect=kafka"}, "", "", "dialect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.brokerKind != tt.wantKind || cfg.brokerURL != tt.wantURL {
				t.Errorf("kind %q url %q, want %q %q", cfg.brokerKind, cfg.brokerURL, tt.wantKind, tt.wantURL)
			}
		})
	}
}

func TestReadProcStats(t *testing.T) {
	t.Parallel()
	st, err := readProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.hwm <= 0 || st.rss <= 0 || st.hwm < st.rss {
		t.Errorf("stats of this process: %+v", st)
	}
}

func TestSteady(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		before, now float64
		want        bool
	}{
		{1000, 1000, true}, {1000, 1140, true}, {1000, 870, true},
		{1000, 1200, false}, {1000, 800, false}, {0, 1000, false}, {1000, 0, false},
	} {
		if got := steady(tt.before, tt.now); got != tt.want {
			t.Errorf("steady(%v, %v) = %v, want %v", tt.before, tt.now, got, tt.want)
		}
	}
}

func TestMaskedArgs(t *testing.T) {
	got := maskedArgs([]string{"-broker", "stomp://artemis:s3cret@127.0.0.1:61613?dialect=artemis", "-db", "postgres://postgres:s3cret@127.0.0.1:5432/test", "-messages", "10"})
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "-messages 10") || !strings.Contains(got, "127.0.0.1:5432/test") {
		t.Errorf("maskedArgs = %q", got)
	}
}
