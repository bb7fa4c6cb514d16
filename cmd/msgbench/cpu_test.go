package main

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestListeningInodes(t *testing.T) {
	t.Parallel()
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:F0DF 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 00000000:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000   108        0 5151 1 0000000000000000 100 0 0 10 0
   2: 0100007F:F0DF 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 6161 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:1539 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7171 1 0000000000000000 100 0 0 10 0
`
	table6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:F0DF 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 8181 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1538 00000000000000000000000001000000:C350 01 00000000:00000000 00:00000000 00000000     0        0 9191 1 0000000000000000 20 4 30 10 -1
`
	if got := strings.Join(listeningInodes([]byte(table6), 61663), ","); got != "8181" {
		t.Errorf("tcp6: port 61663: inodes %q, want 8181", got)
	}
	if got := listeningInodes([]byte(table6), 5432); len(got) != 0 {
		t.Errorf("tcp6: port 5432 has only an established socket, got listeners %q", got)
	}
	for port, want := range map[int]string{61663: "4242", 5432: "5151", 5433: "7171", 80: ""} {
		got := strings.Join(listeningInodes([]byte(table), port), ",")
		if got != want {
			t.Errorf("port %d: inodes %q, want %q (an established socket on the port is not a listener)", port, got, want)
		}
	}
}

// TestListenerPID finds this test process behind a socket it listens on, on
// IPv4 and IPv6 loopback.
func TestListenerPID(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v", addr, err)
			continue
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if got := listenerPID(port); got != os.Getpid() {
			t.Errorf("%s: listenerPID(%d) = %d, want this process %d", addr, port, got, os.Getpid())
		}
		ln.Close()
		if got := listenerPID(port); got != 0 {
			t.Errorf("%s: closed listener still found: pid %d", addr, got)
		}
	}
	if got := urlPort("stomp://127.0.0.1:61623?dialect=activemq", 61613); got != 61623 {
		t.Errorf("urlPort = %d", got)
	}
	if got := urlPort("postgres://postgres@localhost/test", 5432); got != 5432 {
		t.Errorf("urlPort without a port = %d, want the default", got)
	}
}

// TestReadCPU reads this process's parent, and the CPU of a child it waited
// for in its children's time.
func TestReadCPU(t *testing.T) {
	t.Parallel()
	before, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.ppid != os.Getppid() {
		t.Errorf("ppid %d, want %d", before.ppid, os.Getppid())
	}
	// A child that spins for about 300 ms of CPU, then is waited for.
	cmd := exec.Command("sh", "-c", `end=$(( $(date +%s%N) + 300000000 )); while [ "$(date +%s%N)" -lt "$end" ]; do :; done`)
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run sh: %v", err)
	}
	after, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The child's own account, as wait4 reported it, rounded to ticks.
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if got := after.children - before.children; child >= 50*time.Millisecond && got < child-2*time.Second/clockTicks {
		t.Errorf("children's CPU grew by %v; the child used %v", got, child)
	}
}

func TestParseMachineCPU(t *testing.T) {
	t.Parallel()
	// user nice system idle iowait irq softirq steal guest guest_nice
	m, err := parseMachineCPU([]byte("cpu  1000 10 300 5000 200 5 40 5 700 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := ticks(1000 + 10 + 300 + 5 + 40); m.busy != want {
		t.Errorf("busy %v, want %v (guest time is inside user; steal is not ours)", m.busy, want)
	}
	if want := ticks(1000 + 10 + 300 + 5000 + 200 + 5 + 40); m.all != want {
		t.Errorf("all %v, want %v", m.all, want)
	}
	if _, err := parseMachineCPU([]byte("intr 1 2 3\n")); err == nil {
		t.Error("a file without the cpu line parsed")
	}
}

func TestSpent(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	before := cpuSample{at: t0, m: machineTimes{busy: 10 * time.Second, all: 40 * time.Second}, roles: map[string]time.Duration{
		"broker": time.Second, "dispatcher": 2 * time.Second, "msgbench": 0}}
	after := cpuSample{at: t0.Add(2 * time.Second), m: machineTimes{busy: 13 * time.Second, all: 44 * time.Second}, roles: map[string]time.Duration{
		"broker": 2200 * time.Millisecond, "dispatcher": 3 * time.Second, "msgbench": 300 * time.Millisecond}}
	c := spent(before, after, 2000, [][2]string{{"broker", "broker"}, {"dispatcher", "dispatcher"}, {"PostgreSQL", "PostgreSQL"}, {"msgbench", "msgbench (sink)"}})
	if c.per1000 != 1.5 {
		t.Errorf("per1000 = %v, want 1.5 (3 s over 2000 units)", c.per1000)
	}
	if c.busy != 0.75 {
		t.Errorf("busy = %v, want 0.75", c.busy)
	}
	want := "broker 0.600, dispatcher 0.500, msgbench (sink) 0.150, other 0.250 CPU s; not read (in other): PostgreSQL; machine 75 % busy over 2.0 s"
	if got := c.note(); got != want {
		t.Errorf("note = %q\n want %q (a role not sampled is named and left in other, the rest)", got, want)
	}
	if got := c.needs(4000); !strings.HasPrefix(got, "4000/s at this cost needs 6.00 of ") {
		t.Errorf("needs = %q", got)
	}
	// Roles that add up to more than the machine (samples a few ticks
	// apart) show as a negative other rather than being hidden.
	after.roles["broker"] = 4 * time.Second
	if got := spent(before, after, 2000, [][2]string{{"broker", "broker"}, {"dispatcher", "dispatcher"}}).note(); !strings.Contains(got, "other -0.500") {
		t.Errorf("note = %q, want other -0.500", got)
	}
	if n := machineCPUs(); n < 1 {
		t.Errorf("machineCPUs = %d", n)
	}
}
