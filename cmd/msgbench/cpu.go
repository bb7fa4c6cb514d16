package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The CPU accounts tell where the machine's CPU went during a phase: all of
// it (/proc/stat) and the part of each process that takes part in it. On a
// small machine the broker, PostgreSQL, the service and the bench's own sink
// share the same cores, so a figure divided by its baseline is bounded by
// what each costs in CPU; the accounts measure that bound in the same run.

// cpuWatch names the processes a phase's CPU is split between besides the
// service's and the bench's own: the broker and PostgreSQL, each found as the
// process listening on its URL's loopback port. A pid is 0 when it was not
// found (embedded broker, SQLite, or another user's process /proc hides).
type cpuWatch struct {
	broker, db int
}

// findCPUWatch looks for the processes listening on the broker's and the
// database's ports.
func findCPUWatch(brokerURL, dbURL string, embedded bool) cpuWatch {
	if embedded {
		return cpuWatch{}
	}
	return cpuWatch{
		broker: listenerPID(urlPort(brokerURL, 61613)),
		db:     listenerPID(urlPort(dbURL, 5432)),
	}
}

func urlPort(raw string, dflt int) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	return dflt
}

// listenerPID returns the process that holds a listening TCP socket on port
// (any address), or 0. When forked children share the socket it returns the
// parent.
func listenerPID(port int) int {
	if port <= 0 {
		return 0
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, ino := range listeningInodes(raw, port) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	var holders []int
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(dir + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(dir + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				holders = append(holders, pid)
				break
			}
		}
	}
	for _, pid := range holders {
		if st, err := readCPU(pid); err == nil && !slices.Contains(holders, st.ppid) {
			return pid
		}
	}
	return 0
}

// listeningInodes parses /proc/net/tcp or tcp6: the socket inodes in state
// LISTEN (0A) on port.
func listeningInodes(table []byte, port int) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if p, err := strconv.ParseInt(hexPort, 16, 32); !ok || err != nil || int(p) != port {
			continue
		}
		out = append(out, f[9])
	}
	return out
}

// procCPU is a process's CPU from /proc/<pid>/stat.
type procCPU struct {
	ppid     int
	self     time.Duration // utime + stime
	children time.Duration // cutime + cstime: its children that exited and were waited for
}

func readCPU(pid int) (procCPU, error) {
	var st procCPU
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// After the command name (in parentheses, may hold spaces): state is field
	// 3, ppid 4, utime 14, stime 15, cutime 16, cstime 17 (proc(5)).
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return st, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 15 {
		return st, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var n [5]int64
	for k, idx := range []int{1, 11, 12, 13, 14} {
		if n[k], err = strconv.ParseInt(f[idx], 10, 64); err != nil {
			return st, fmt.Errorf("/proc/%d/stat: field %d: %w", pid, idx+3, err)
		}
	}
	st.ppid = int(n[0])
	st.self = ticks(n[1] + n[2])
	st.children = ticks(n[3] + n[4])
	return st, nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * (time.Second / clockTicks) }

// machineTimes is the first line of /proc/stat, summed over all CPUs. The
// kernel's interrupt work (most of the loopback network) is in it; with tick
// accounting (no CONFIG_IRQ_TIME_ACCOUNTING) it is also charged to the process
// it interrupted, otherwise it shows under "other".
type machineTimes struct {
	busy time.Duration // every state but idle, iowait and steal
	all  time.Duration // every state but steal
}

func machineCPU() (machineTimes, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTimes{}, err
	}
	return parseMachineCPU(raw)
}

func parseMachineCPU(raw []byte) (machineTimes, error) {
	line, _, _ := bytes.Cut(raw, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return machineTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice]; guest
	// time is already counted in user; steal is time the hypervisor gave to
	// another machine, neither busy nor idle here.
	var sum, idle int64
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return machineTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		switch i {
		case 3, 4:
			idle += v
		case 7:
			continue
		}
		sum += v
	}
	return machineTimes{busy: ticks(sum - idle), all: ticks(sum)}, nil
}

// cpuSample is the CPU used so far by the machine and by each role.
type cpuSample struct {
	at    time.Time
	m     machineTimes
	roles map[string]time.Duration
}

// sample reads the machine's CPU and each role's: the broker, PostgreSQL
// (the postmaster, its live backends and those that exited), msgbench itself,
// and the service processes given by role name.
func (w cpuWatch) sample(services map[string]*service) (cpuSample, error) {
	s := cpuSample{at: time.Now(), roles: map[string]time.Duration{}}
	var err error
	if s.m, err = machineCPU(); err != nil {
		return s, err
	}
	self, err := readCPU(os.Getpid())
	if err != nil {
		return s, err
	}
	s.roles["msgbench"] = self.self
	for role, svc := range services {
		st, err := readCPU(svc.cmd.Process.Pid)
		if err != nil {
			return s, fmt.Errorf("%s: %w", svc.name, err)
		}
		s.roles[role] = st.self
	}
	if w.broker != 0 {
		if st, err := readCPU(w.broker); err == nil {
			s.roles["broker"] = st.self
		}
	}
	if w.db != 0 {
		if cpu, ok := treeCPU(w.db); ok {
			s.roles["PostgreSQL"] = cpu
		}
	}
	return s, nil
}

// treeCPU is the CPU of a process and its children, live or exited. A child
// that exits and is waited for while its siblings are read would be in
// neither the live children nor the parent's exited-children time, so the
// parent is read before and after, and the read repeated if that time moved.
func treeCPU(pid int) (time.Duration, bool) {
	for range 5 {
		before, err := readCPU(pid)
		if err != nil {
			return 0, false
		}
		live := childrenCPU(pid)
		after, err := readCPU(pid)
		if err != nil {
			return 0, false
		}
		if after.children == before.children {
			return after.self + after.children + live, true
		}
	}
	return 0, false
}

// childrenCPU sums the CPU of parent's live children and of the children
// they waited for.
func childrenCPU(parent int) time.Duration {
	var sum time.Duration
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		if st, err := readCPU(pid); err == nil && st.ppid == parent {
			sum += st.self + st.children
		}
	}
	return sum
}

// cpuCost is what a phase cost the machine per 1000 units (messages,
// deliveries, events), in CPU seconds, all told and by role.
type cpuCost struct {
	per1000 float64
	roles   []roleCost    // in the order given to spent, then "other"
	busy    float64       // share of the machine's CPU time that was busy
	window  time.Duration // between the samples
	unread  []string      // roles asked for but missing from a sample: in "other"
}

type roleCost struct {
	label   string
	per1000 float64
}

// spent is the CPU between two samples per 1000 units; roles lists the
// roles to show, each with its label; what no role accounts for is "other".
func spent(before, after cpuSample, units int, roles [][2]string) cpuCost {
	per := func(d time.Duration) float64 { return d.Seconds() / float64(max(units, 1)) * 1000 }
	busy := after.m.busy - before.m.busy
	c := cpuCost{per1000: per(busy), window: after.at.Sub(before.at)}
	if all := after.m.all - before.m.all; all > 0 {
		c.busy = float64(busy) / float64(all)
	}
	rest := busy
	for _, r := range roles {
		a, ok1 := after.roles[r[0]]
		b, ok2 := before.roles[r[0]]
		if !ok1 || !ok2 {
			c.unread = append(c.unread, r[1])
			continue
		}
		c.roles = append(c.roles, roleCost{label: r[1], per1000: per(a - b)})
		rest -= a - b
	}
	// Negative when the roles add up to more than the machine: the samples
	// read /proc one file after the other, so a few ticks may fall between.
	c.roles = append(c.roles, roleCost{label: "other", per1000: per(rest)})
	return c
}

// note shows the split, e.g. "broker 0.100, dispatcher 0.110, … CPU s;
// machine 95 % busy over 3.2 s", naming the roles that could not be read
// (their CPU is in "other").
func (c cpuCost) note() string {
	parts := make([]string, len(c.roles))
	for i, r := range c.roles {
		parts[i] = fmt.Sprintf("%s %.3f", r.label, r.per1000)
	}
	unread := ""
	if len(c.unread) > 0 {
		// Not "PostgreSQL " with a space: TestSmoke looks for that.
		unread = "; not read (in other): " + strings.Join(c.unread, ", ")
	}
	return fmt.Sprintf("%s CPU s%s; machine %.0f %% busy over %.1f s", strings.Join(parts, ", "), unread, c.busy*100, c.window.Seconds())
}

// needs says how much of the machine keeping up with rate units per second
// would take at this cost, e.g. "7908/s at this cost needs 2.61 of 2 CPUs".
// The cost falls as load rises (batches fill), so for a run that kept up
// this is an upper bound.
func (c cpuCost) needs(rate float64) string {
	return fmt.Sprintf("%.0f/s at this cost needs %.2f of %d CPUs", rate, rate*c.per1000/1000, machineCPUs())
}

// machineCPUs counts the CPUs /proc/stat sums over (runtime.NumCPU counts
// only those this process may run on).
func machineCPUs() int {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for line := range strings.SplitSeq(string(raw), "\n") {
		if len(line) > 3 && strings.HasPrefix(line, "cpu") && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return max(n, 1)
}
