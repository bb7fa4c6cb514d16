// Package svcproc builds the messaging-api binary and waits for a process of
// it to become ready: what the benchmark (cmd/msgbench) and the fault suite
// (cmd/faultsuite) both do with the service they run as subprocesses.
package svcproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
)

// Package is the service's main package; go build resolves it from the
// module (ModuleDir).
const Package = "github.com/roomhub/messaging-api/cmd/messaging-api"

// Build builds the service into the file bin.
func Build(ctx context.Context, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, Package)
	cmd.Dir = ModuleDir()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", Package, err, out)
	}
	return nil
}

// ModuleDir is the module root this file was compiled from, when it is still
// there (a binary built from a checkout and run elsewhere), else "": the
// current directory, which go build resolves from.
func ModuleDir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Join(filepath.Dir(file), "..", "..", "..")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
	}
	return ""
}

// ErrExited is WaitReady's answer when the process ended before it was ready.
var ErrExited = errors.New("exited during start-up")

// WaitReady polls base+"/readyz" until it answers 200, the process exits
// (exited is closed: ErrExited), ctx ends or within passes (the error then
// carries the last answer).
func WaitReady(ctx context.Context, base string, within time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(within)
	hc := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("readyz %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s (%s)", within, last)
		}
	}
}
