package app

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestTuneGC: GOGC and GOMEMLIMIT from the environment win; without them the
// service runs with defaultGCPercent and 80 % of the cgroup's memory limit.
// Not parallel: the GC settings are process-wide.
func TestTuneGC(t *testing.T) {
	origGC := debug.SetGCPercent(123)
	origLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(origGC); debug.SetMemoryLimit(origLimit) })
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	limit := func(n int64, ok bool) func() (int64, bool) { return func() (int64, bool) { return n, ok } }

	TuneGC(env(map[string]string{"GOGC": "123", "GOMEMLIMIT": "1GiB"}), limit(1000<<20, true))
	if got := gcSettings(); got != "GOGC=123 GOMEMLIMIT=none" {
		t.Errorf("both set in the environment: %s, want both left alone", got)
	}
	TuneGC(env(nil), limit(0, false))
	if got := gcSettings(); got != "GOGC=400 GOMEMLIMIT=none" {
		t.Errorf("nothing set, no cgroup limit: %s", got)
	}
	debug.SetGCPercent(100)
	TuneGC(env(map[string]string{"GOGC": ""}), limit(1000<<20, true))
	if got := gcSettings(); got != "GOGC=400 GOMEMLIMIT=800MiB" {
		t.Errorf("empty GOGC, a 1000 MiB cgroup: %s, want GOGC=400 and 80 %% of the limit", got)
	}
	debug.SetGCPercent(-1)
	if got := gcSettings(); !strings.HasPrefix(got, "GOGC=off ") {
		t.Errorf("GC off shows as %s", got)
	}
}

// TestMemoryLimitIn reads cgroup v2 and v1 limits from a fake cgroupfs: the
// smallest of the cgroup and its ancestors, "max" and v1's near-2^63 being no
// limit.
func TestMemoryLimitIn(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kubepods/pod1/memory.max", "max")
	write("kubepods/memory.max", "2147483648")
	write("memory/docker/abc/memory.limit_in_bytes", "536870912")
	write("memory/memory.limit_in_bytes", "9223372036854771712")
	write("unified/svc/memory.max", "max")
	write("unified/hybrid/memory.max", "1073741824")

	tests := []struct {
		name, self string
		want       int64
		ok         bool
	}{
		{"v2: the parent's limit", "0::/kubepods/pod1\n", 2147483648, true},
		{"v1 memory controller", "4:memory:/docker/abc\n3:cpu:/docker/abc\n0::/\n", 536870912, true},
		{"v1 near 2^63 is no limit", "4:cpuacct,memory:/\n", 0, false},
		{"hybrid: v2 under unified, max", "0::/svc\n", 0, false},
		{"hybrid: v2 under unified", "0::/hybrid\n", 1073741824, true},
		{"v1: the host's path, missing in a container; the mount's root has none", "4:memory:/docker/gone\n", 0, false},
		{"no such cgroup", "0::/nowhere\n", 0, false},
	}
	for _, tt := range tests {
		got, ok := memoryLimitIn(root, []byte(tt.self))
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("%s: %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
