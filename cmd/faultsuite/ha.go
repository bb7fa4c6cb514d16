package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// artemisPair is the suite's own Artemis primary/backup pair with replication
// (-ha): scripts/artemis.sh pair foreground primary|backup, the instances
// under the temp dir, four free ports (STOMP and the cluster acceptor of each
// node). The pair runs as scripts/artemis.sh pair configures it: the primary
// checks for an active server with its node id when it starts, the backup
// allows fail-back and restarts as the passive node after it.
type artemisPair struct {
	nodes [2]*brokerProc // primary, backup
	url   string         // names both nodes: the client fails over by itself
	down  *brokerProc    // the node the last failover killed, until its fail-back
	// restarts lists the nodes the suite started again after their JVM
	// exited by itself at the end of a fail-back (see the fail-back step).
	restarts []string
}

// Artemis log lines (message codes) the suite waits for: a passive node is
// synchronized with the active one.
const artemisSynchronized = "AMQ221024"

// setupArtemisPair creates the pair's instances under tmp and starts both
// nodes at once: the backup waits for a primary to replicate, the primary
// finds no active node with its id and becomes active. It returns once the
// primary answers STOMP and the backup is synchronized.
func setupArtemisPair(ctx context.Context, tmp, script string) (*artemisPair, error) {
	if err := exec.CommandContext(ctx, "bash", script, "installed").Run(); err != nil {
		return nil, fmt.Errorf("the Artemis distribution is not installed: run `bash %s install` (it fetches it from Maven Central)", script)
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"ARTEMIS_PAIR_DIR="+filepath.Join(tmp, "artemis-pair"),
		fmt.Sprintf("ARTEMIS_PAIR_PORTS=%d,%d,%d,%d", ports[0], ports[1], ports[2], ports[3]),
		"ARTEMIS_USER="+artemisUser,
		"ARTEMIS_PASSWORD="+artemisPassword,
		"ARTEMIS_CLUSTER_USER="+artemisUser+"-cluster",
		"ARTEMIS_CLUSTER_PASSWORD="+artemisPassword+"-cluster",
		"ARTEMIS_JAVA_MEMORY="+envOr("ARTEMIS_JAVA_MEMORY", "512M"),
	)
	pair := &artemisPair{
		url: fmt.Sprintf("stomp://%s:%s@127.0.0.1:%d,127.0.0.1:%d?dialect=artemis", artemisUser, artemisPassword, ports[0], ports[2]),
	}
	for i, role := range []string{"primary", "backup"} {
		pair.nodes[i] = &brokerProc{
			name: "Artemis " + role,
			port: ports[2*i],
			url:  fmt.Sprintf("stomp://%s:%s@127.0.0.1:%d?dialect=artemis", artemisUser, artemisPassword, ports[2*i]),
			proc: &proc{name: "artemis-" + role, path: "bash", args: []string{script, "pair", "foreground", role}, env: env,
				logPath: filepath.Join(tmp, "artemis-"+role+".log")},
			login: artemisUser, passcode: artemisPassword,
		}
	}
	backup := pair.nodes[1]
	from := backup.proc.logSize()
	if err := backup.proc.start(); err != nil {
		return pair, err
	}
	if err := pair.nodes[0].start(ctx); err != nil {
		return pair, err
	}
	if _, err := backup.waitLog(ctx, from, artemisSynchronized, 120*time.Second); err != nil {
		return pair, err
	}
	if backup.ready() {
		return pair, errors.New("the backup answers STOMP: it should be the passive node")
	}
	return pair, nil
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	seen := map[int]bool{}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 10*n {
			return nil, errors.New("no distinct free ports")
		}
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// errNodeExited: a node of the pair exited while the suite waited for it.
var errNodeExited = errors.New("exited")

// waitLog waits until the process's log, from offset on, holds pattern, and
// returns when it did.
func (b *brokerProc) waitLog(ctx context.Context, offset int64, pattern string, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	for {
		if b.proc.logFrom(offset, pattern) {
			return time.Now(), nil
		}
		select {
		case <-b.proc.exited():
			return time.Time{}, fmt.Errorf("%s %w while the suite waited for %s in its log\n%s", b.name, errNodeExited, pattern, b.proc.logTail(30))
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: no %s in its log within %s\n%s", b.name, pattern, within, b.proc.logTail(30))
		}
	}
}

// ready is whether the node answers a STOMP CONNECT: the active node does, a
// passive one opens no acceptor.
func (b *brokerProc) ready() bool {
	return stompReady(b.port, b.login, b.passcode)
}

// active returns the node that answers STOMP and the other one.
func (p *artemisPair) active() (active, other *brokerProc, err error) {
	a, b := p.nodes[0].ready(), p.nodes[1].ready()
	switch {
	case a && !b:
		return p.nodes[0], p.nodes[1], nil
	case b && !a:
		return p.nodes[1], p.nodes[0], nil
	case a && b:
		return nil, nil, errors.New("both nodes of the pair answer STOMP (split brain)")
	}
	return nil, nil, errors.New("no node of the pair answers STOMP")
}

// haPoll is how often a failover step checks which node answers STOMP.
const haPoll = 50 * time.Millisecond

// haFaults is the round of -ha: a failover, then a fail-back.
func (s *suite) haFaults() []fault {
	return []fault{
		{"failover", func(ctx context.Context, _ int, rec *faultRecord) error {
			active, other, err := s.pair.active()
			if err != nil {
				return err
			}
			pid := active.proc.pid()
			killed := time.Now()
			if err := active.proc.kill(); err != nil {
				return err
			}
			s.pair.down = active
			deadline := killed.Add(120 * time.Second)
			for !other.ready() {
				if time.Now().After(deadline) {
					return fmt.Errorf("%s did not take over within 120s of the kill\n%s", other.name, other.proc.logTail(30))
				}
				if err := sleep(ctx, haPoll); err != nil {
					return err
				}
			}
			gap := time.Since(killed)
			rec.BrokerGap = gap.Seconds()
			rec.Detail = fmt.Sprintf("%s pid %d killed; %s answered STOMP %.1fs later", active.name, pid, other.name, gap.Seconds())
			return nil
		}},
		{"fail-back", func(ctx context.Context, _ int, rec *faultRecord) error {
			node := s.pair.down
			if node == nil {
				return errors.New("no node is down")
			}
			other := s.pair.nodes[0]
			if other == node {
				other = s.pair.nodes[1]
			}
			nodeFrom, otherFrom := node.proc.logSize(), other.proc.logSize()
			started := time.Now()
			if err := node.proc.start(); err != nil {
				return err
			}
			// The restarted node synchronizes as the passive one, then the
			// other stops serving and it takes over: the broker is away from
			// the other's last answer to the node's first. Both answering
			// twice running is a split brain (once may be the two probes
			// straddling the hand-over).
			lastOther := started
			deadline := started.Add(120 * time.Second)
			both := 0
			for {
				o, n := other.ready(), node.ready()
				if o && n {
					if both++; both == 2 {
						return fmt.Errorf("both %s and %s answer STOMP after the restart: split brain", node.name, other.name)
					}
				} else {
					both = 0
				}
				if o {
					lastOther = time.Now()
				} else if n {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%s did not take over within 120s of its start\n%s", node.name, node.proc.logTail(30))
				}
				select {
				case <-node.proc.exited():
					return fmt.Errorf("%s exited during its fail-back\n%s", node.name, node.proc.logTail(30))
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(haPoll):
				}
			}
			activeAt := time.Now()
			s.pair.down = nil
			synced := "?"
			if at, ok := node.proc.logTimeOf(nodeFrom, artemisSynchronized); ok {
				synced = fmt.Sprintf("%.1fs", at.Sub(started).Seconds())
			}
			// The next failover needs a synchronized passive node. The other
			// node stops serving and restarts as the passive one in the same
			// JVM (restart-backup); now and then Artemis 2.40 stops it for
			// good there instead, and the JVM exits (status 0) right after
			// moving its data aside. A supervisor (systemd Restart=always, a
			// Kubernetes pod) starts such a node again; so does the suite,
			// once per fail-back, and the report lists it.
			resynced, err := other.waitLog(ctx, otherFrom, artemisSynchronized, 120*time.Second)
			restarted := ""
			if errors.Is(err, errNodeExited) {
				exit := other.proc.excuseLastExit()
				s.pair.restarts = append(s.pair.restarts, exit+" after the fail-back instead of restarting as the passive node; the suite started it again")
				s.logf("fail-back: %s: starting it again", exit)
				otherFrom = other.proc.logSize()
				if err := other.proc.start(); err != nil {
					return err
				}
				resynced, err = other.waitLog(ctx, otherFrom, artemisSynchronized, 120*time.Second)
				restarted = " (its JVM had exited: started again)"
			}
			if err != nil {
				return err
			}
			gap := activeAt.Sub(lastOther)
			rec.BrokerGap = gap.Seconds()
			rec.Detail = fmt.Sprintf("%s restarted: synchronized after %s, active after %.1fs (no node answered for %.1fs); %s synchronized again after %.1fs%s",
				node.name, synced, activeAt.Sub(started).Seconds(), gap.Seconds(), other.name, resynced.Sub(started).Seconds(), restarted)
			return nil
		}},
	}
}

// logSize is the length of the process's log: where to look from for what a
// step is about to cause.
func (p *proc) logSize() int64 {
	fi, err := os.Stat(p.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince reads the process's log from offset.
func (p *proc) logSince(offset int64) []byte {
	f, err := os.Open(p.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	raw, _ := io.ReadAll(io.LimitReader(f, 64<<20))
	return raw
}

// logFrom is whether the log from offset holds pattern.
func (p *proc) logFrom(offset int64, pattern string) bool {
	return bytes.Contains(p.logSince(offset), []byte(pattern))
}

// logTimeOf is the time stamp of the first Artemis log line from offset that
// holds pattern ("2006-01-02 15:04:05,000" in local time, as Artemis writes it).
func (p *proc) logTimeOf(offset int64, pattern string) (time.Time, bool) {
	for line := range strings.SplitSeq(string(p.logSince(offset)), "\n") {
		if !strings.Contains(line, pattern) || len(line) < 23 {
			continue
		}
		t, err := time.ParseInLocation("2006-01-02 15:04:05,000", line[:23], time.Local)
		return t, err == nil
	}
	return time.Time{}, false
}
