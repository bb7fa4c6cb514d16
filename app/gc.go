package app

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
)

// defaultGCPercent is the garbage collector's GOGC when the environment sets
// none. The service's live heap is small (tens of MiB), so Go's default of 100
// collects very often; 400 trades about 10 % less CPU per delivery for
// 1.5–2.5 × the resident memory (docs/benchmarks.md#what-limits-each-figure).
const defaultGCPercent = 400

// memoryLimitShare is the part of a cgroup's memory limit the runtime's soft
// limit is set to when GOMEMLIMIT is not set: near it the collector runs as
// often as it must, whatever GOGC says, so a larger GOGC cannot by itself push
// the process over its container's limit.
const memoryLimitShare = 0.8

// TuneGC applies defaultGCPercent unless GOGC is set, and a soft memory limit
// of memoryLimitShare of the cgroup's limit unless GOMEMLIMIT is set or there
// is no such limit. An empty variable counts as not set.
func TuneGC(lookupEnv func(string) (string, bool), cgroupLimit func() (int64, bool)) {
	if v, _ := lookupEnv("GOGC"); v == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if v, _ := lookupEnv("GOMEMLIMIT"); v == "" {
		if limit, ok := cgroupLimit(); ok {
			debug.SetMemoryLimit(int64(float64(limit) * memoryLimitShare))
		}
	}
}

// gcSettings shows the GOGC and memory limit in effect, for the start-up log
// line, e.g. "GOGC=400 GOMEMLIMIT=none".
func gcSettings() string {
	s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	rtmetrics.Read(s)
	gogc, limit := "?", "?"
	if s[0].Value.Kind() == rtmetrics.KindUint64 {
		gogc = strconv.FormatUint(s[0].Value.Uint64(), 10)
		if s[0].Value.Uint64() > math.MaxInt32 {
			gogc = "off"
		}
	}
	if s[1].Value.Kind() == rtmetrics.KindUint64 {
		limit = strconv.FormatUint(s[1].Value.Uint64()>>20, 10) + "MiB"
		if s[1].Value.Uint64() >= math.MaxInt64 {
			limit = "none"
		}
	}
	return "GOGC=" + gogc + " GOMEMLIMIT=" + limit
}

// CgroupMemoryLimit is the smallest memory limit of this process's cgroup and
// its ancestors, cgroup v2 or v1.
func CgroupMemoryLimit() (int64, bool) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	return memoryLimitIn("/sys/fs/cgroup", self)
}

// memoryLimitIn reads the limits under root (where cgroupfs is mounted) for
// the cgroups that /proc/self/cgroup's content lists.
func memoryLimitIn(root string, self []byte) (int64, bool) {
	var (
		best  int64 = math.MaxInt64
		found bool
	)
	try := func(file string) {
		raw, err := os.ReadFile(file)
		if err != nil {
			return
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		// "max" (v2) fails to parse; v1 says "no limit" with a number near 2^63.
		if err != nil || v <= 0 || v >= 1<<60 {
			return
		}
		if v < best {
			best, found = v, true
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dirs []string // where this hierarchy may be mounted
		file := ""
		switch {
		case parts[0] == "0" && parts[1] == "":
			dirs, file = []string{root, path.Join(root, "unified")}, "memory.max"
		case strings.Contains(","+parts[1]+",", ",memory,"):
			dirs, file = []string{path.Join(root, "memory")}, "memory.limit_in_bytes"
		default:
			continue
		}
		for _, dir := range dirs {
			// The cgroup and each ancestor; inside a container the path may
			// be the host's while the container's own cgroup is the mount's
			// root, which the walk reaches last.
			for p := path.Clean("/" + parts[2]); ; p = path.Dir(p) {
				try(path.Join(dir, p, file))
				if p == "/" {
					break
				}
			}
		}
	}
	return best, found
}
