package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roomhub/messaging-api/cmd/internal/svcproc"
)

// proc is one child process of the suite: a service process, the broker's JVM
// or the PostgreSQL postmaster. Each runs in a process group of its own (so
// that killing it reaches its children too, and a Ctrl-C on the terminal
// reaches only the suite, which then stops them in order) and dies with the
// suite (Pdeathsig) if the suite itself is killed.
type proc struct {
	name    string
	path    string
	args    []string
	dir     string // working directory (default: the suite's)
	env     []string
	cred    *syscall.Credential
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	expected bool // the suite stopped or killed it on purpose
	starts   int
	crashes  []string // exits the suite did not ask for
}

// start runs the process once more; its output is appended to logPath.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(logFile, "=== %s faultsuite: start #%d: %s %s\n", time.Now().Format(time.RFC3339Nano), p.starts, p.path, strings.Join(p.args, " "))
	// Not CommandContext: the suite ends its processes itself (signal, grace,
	// then SIGKILL of the group), in the order each fault needs.
	cmd := exec.Command(p.path, p.args...) //nolint:noctx // see above
	cmd.Env, cmd.Dir = p.env, p.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.waitErr, p.expected = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logFile, "=== %s faultsuite: exited: %v\n", time.Now().Format(time.RFC3339Nano), err)
		logFile.Close()
		p.mu.Lock()
		p.waitErr = err
		if !p.expected {
			p.crashes = append(p.crashes, fmt.Sprintf("%s (pid %d) exited by itself at %s: %v", p.name, cmd.Process.Pid, time.Now().Format("15:04:05.000"), err))
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func closed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pid is the running process's id, 0 when none runs.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// exited is closed when the current run ends.
func (p *proc) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

// excuseLastExit takes the last exit nobody asked for off the list of
// unexpected exits, for the caller to report otherwise, and returns it.
func (p *proc) excuseLastExit() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.crashes) == 0 {
		return p.name + " exited"
	}
	last := p.crashes[len(p.crashes)-1]
	p.crashes = p.crashes[:len(p.crashes)-1]
	return last
}

// unexpectedExits lists the runs that ended without the suite asking.
func (p *proc) unexpectedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.crashes)
}

// signal sends sig to the process group; expected marks the exit as asked for.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.done) {
		return errors.New(p.name + " is not running")
	}
	p.expected = true
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// kill sends SIGKILL to the process group and waits until the process is
// gone: no shutdown code runs.
func (p *proc) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.exited():
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s survived SIGKILL for 10s", p.name)
	}
}

// stop sends sig and waits up to grace for the exit, then kills the group.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) error {
	if p.pid() == 0 {
		return nil
	}
	if p.signal(sig) != nil {
		return nil //nolint:nilerr // it exited meanwhile: stopped all the same
	}
	select {
	case <-p.exited():
		return nil
	case <-time.After(grace):
	}
	_ = p.kill()
	return fmt.Errorf("%s did not stop within %s of %s; killed", p.name, grace, sig)
}

// stopGo stops a Go process: SIGTERM, and after grace SIGQUIT, on which the
// Go runtime writes every goroutine's stack to the log and exits, so that a
// shutdown that hangs says where.
func (p *proc) stopGo(grace time.Duration) error {
	if p.pid() == 0 {
		return nil
	}
	if p.signal(syscall.SIGTERM) != nil {
		return nil //nolint:nilerr // it exited meanwhile: stopped all the same
	}
	select {
	case <-p.exited():
		return nil
	case <-time.After(grace):
	}
	_ = p.signal(syscall.SIGQUIT)
	select {
	case <-p.exited():
	case <-time.After(5 * time.Second):
		_ = p.kill()
	}
	return fmt.Errorf("%s did not stop within %s of SIGTERM; its goroutines are in %s (SIGQUIT)", p.name, grace, p.logPath)
}

// logTail is the last lines of the process's log.
func (p *proc) logTail(lines int) string {
	raw, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return fmt.Sprintf("--- %s (%s), last %d lines:\n%s\n", p.name, p.logPath, len(all), strings.Join(all, "\n"))
}

// buildService builds the service binary into dir.
func buildService(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "messaging-api")
	return bin, svcproc.Build(ctx, bin)
}
