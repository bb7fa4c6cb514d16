package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roomhub/messaging-api/broker"
	"github.com/roomhub/messaging-api/cmd/internal/svcproc"
)

// buildService builds the service into the temp dir, so that it runs as a
// process of its own whose /proc entry measures it alone.
func (b *bench) buildService(ctx context.Context) (string, error) {
	if b.cfg.serviceBin != "" {
		return b.cfg.serviceBin, nil
	}
	bin := filepath.Join(b.tmp, "messaging-api")
	start := time.Now()
	if err := svcproc.Build(ctx, bin); err != nil {
		return "", err
	}
	b.logf("built the service in %s", time.Since(start).Round(time.Millisecond))
	return bin, nil
}

// service is one subprocess of the service binary.
type service struct {
	name    string
	command string
	cmd     *exec.Cmd
	base    string // http://127.0.0.1:port
	logPath string
	done    chan struct{}
	waitErr error
}

// startService runs the service binary with command (serve, api, dispatcher)
// on a free loopback port, consuming or filling pushQueue, and waits until
// /readyz answers 200.
func (b *bench) startService(ctx context.Context, name, command string, pushQueue broker.Destination) (*service, error) {
	return b.startServiceOn(ctx, b.db, name, command, pushQueue)
}

// startServiceOn is startService on the database db.
func (b *bench) startServiceOn(ctx context.Context, db *benchDB, name, command string, pushQueue broker.Destination) (*service, error) {
	addr, err := freeLoopbackAddr(ctx)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(b.tmp, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	// Ending the run's context (its -timeout, or an interrupt) kills it.
	cmd := exec.CommandContext(ctx, b.bin, command)
	// The inherited environment may tune the service (PUSH_WORKERS, ...); what
	// isolates the run is set here and wins.
	cmd.Env = append(os.Environ(),
		"HTTP_ADDR="+addr,
		"DATABASE_URL="+db.serviceURL,
		"BROKER_URL="+b.brokerURL(),
		"PUSH_QUEUE="+pushQueue.FQQN(),
		"PUSH_TIMEOUT="+b.cfg.pushTimeout.String(),
		// The sink listens on loopback, which the SSRF guard refuses by default.
		"PUSH_ALLOWED_CIDRS=127.0.0.0/8,::1/128",
		// Authorization is measured in the API tests, not here.
		"AUTH_DISABLED=true",
		"LOG_FORMAT=text",
		"MIGRATE_ON_START=true",
	)
	if os.Getenv("LOG_LEVEL") == "" { // LOG_LEVEL=debug shows the relay's rounds (with -keep)
		cmd.Env = append(cmd.Env, "LOG_LEVEL=warn")
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The service must not outlive the benchmark, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &service{name: name, command: command, cmd: cmd, base: "http://" + addr, logPath: logPath, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	b.mu.Lock()
	b.services = append(b.services, s)
	b.mu.Unlock()

	start := time.Now()
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", name, err, s.logTail(40))
	}
	b.logf("started %s (%s, pid %d, %s, push queue %s) in %s", name, command, cmd.Process.Pid, s.base, pushQueue.FQQN(),
		time.Since(start).Round(time.Millisecond))
	return s, nil
}

func freeLoopbackAddr(ctx context.Context) (string, error) {
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr, nil
}

func (s *service) waitReady(ctx context.Context, within time.Duration) error {
	err := svcproc.WaitReady(ctx, s.base, within, s.done)
	if errors.Is(err, svcproc.ErrExited) {
		return fmt.Errorf("exited during start-up: %w", s.waitErr)
	}
	return err
}

func (s *service) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and kills the process if it has not exited within grace.
func (s *service) stop(grace time.Duration) error {
	if s.exited() {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(grace):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", s.name, grace)
	}
}

func (s *service) logTail(lines int) string {
	raw, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return s.name + " log (" + s.logPath + "):\n" + strings.Join(all, "\n")
}

func (s *service) dumpLog(w io.Writer) {
	fmt.Fprintln(w, s.logTail(200))
}

// procStats is what /proc says of a process.
type procStats struct {
	cpu time.Duration // utime + stime
	hwm int64         // peak resident set (VmHWM), bytes
	rss int64         // resident set now (VmRSS), bytes
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// 100 on every Linux architecture Go runs on.
const clockTicks = 100

func (s *service) stats() (procStats, error) {
	if s.exited() {
		return procStats{}, fmt.Errorf("%s has exited", s.name)
	}
	return readProcStats(s.cmd.Process.Pid)
}

func readProcStats(pid int) (procStats, error) {
	var st procStats
	c, err := readCPU(pid)
	if err != nil {
		return st, err
	}
	st.cpu = c.self

	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch key {
		case "VmHWM":
			dst = &st.hwm
		case "VmRSS":
			dst = &st.rss
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(val), "kB")), 10, 64)
		if err != nil {
			return st, fmt.Errorf("/proc/%d/status %s: %q", pid, key, val)
		}
		*dst = kb << 10
	}
	if st.hwm == 0 {
		return st, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
	}
	return st, nil
}
