package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// postgres is the suite's own PostgreSQL cluster: initdb in the temp dir, a
// postmaster on a free loopback port, trust authentication. The machine's
// shared PostgreSQL is never touched.
type postgres struct {
	proc    *proc
	dataDir string
	port    int
	url     string
	db      *sql.DB // the suite's own reads (outbox, dead letters)
}

// findPGBin is the directory holding initdb and postgres: dir when given, else
// the newest /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
func findPGBin(dir string) (string, error) {
	has := func(d string) bool {
		for _, f := range []string{"initdb", "postgres"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				return false
			}
		}
		return true
	}
	if dir != "" {
		if !has(dir) {
			return "", fmt.Errorf("-pg-bin %s holds no initdb and postgres", dir)
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return pgMajor(b) - pgMajor(a) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, postgres) in /usr/lib/postgresql/*/bin or on PATH; install the postgresql package or pass -pg-bin")
}

// pgMajor is the version in /usr/lib/postgresql/<version>/bin.
func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// pgCredential is who runs initdb and postgres: PostgreSQL refuses to run as
// root, so as root the cluster belongs to the postgres user.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres user to run PostgreSQL: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("postgres user: uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// setupPostgres creates a cluster under tmp and starts it.
func setupPostgres(ctx context.Context, tmp, binDir string) (*postgres, error) {
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(tmp, "pgdata")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dataDir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"-D", dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	initdb.Dir = dataDir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	pg := &postgres{
		dataDir: dataDir, port: port,
		url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		proc: &proc{
			name: "postgres", path: filepath.Join(binDir, "postgres"), dir: dataDir, cred: cred,
			logPath: filepath.Join(tmp, "postgres.log"),
			args: []string{"-D", dataDir, "-p", strconv.Itoa(port),
				"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
				"-c", "shared_buffers=32MB", "-c", "max_connections=200"},
			env: []string{"PATH=" + os.Getenv("PATH"), "LANG=C"},
		},
	}
	if pg.db, err = sql.Open("pgx", pg.url); err != nil {
		return nil, err
	}
	pg.db.SetMaxOpenConns(2)
	pg.db.SetConnMaxIdleTime(time.Second)
	if err := pg.start(ctx); err != nil {
		return pg, err
	}
	return pg, nil
}

// start runs the postmaster and waits until it accepts queries.
func (pg *postgres) start(ctx context.Context) error {
	if err := pg.proc.start(); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := pg.db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-pg.proc.exited():
			return fmt.Errorf("postgres exited during start-up\n%s", pg.proc.logTail(20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready within 60s: %w", err)
		}
	}
}

// restart is what `pg_ctl restart -m fast` does: SIGINT (fast shutdown: open
// transactions are rolled back, clients disconnected, a checkpoint written),
// wait for the postmaster to exit, start it again.
func (pg *postgres) restart(ctx context.Context, pause time.Duration) error {
	if err := pg.proc.stop(syscall.SIGINT, 30*time.Second); err != nil {
		return err
	}
	if err := sleep(ctx, pause); err != nil {
		return err
	}
	return pg.start(ctx)
}

// The brokers -broker-kind chooses from.
const (
	kindArtemis  = "artemis"
	kindActiveMQ = "activemq"
)

// brokerProc is the suite's own broker: scripts/artemis.sh or
// scripts/activemq.sh foreground with its instance (or state) directory under
// the temp dir and a free STOMP port. The foreground command execs the JVM, so
// the child process is the broker itself: SIGKILL reaches it directly, and it
// dies with the suite.
type brokerProc struct {
	name            string // as the report shows it
	proc            *proc
	port            int
	url             string
	login, passcode string // for the readiness CONNECT (Artemis requires a login)
}

// setupBroker starts the broker of the kind cfg names.
func setupBroker(ctx context.Context, tmp string, cfg config) (*brokerProc, error) {
	if cfg.brokerKind == kindActiveMQ {
		return setupActiveMQ(ctx, tmp, cfg.amqScript)
	}
	return setupArtemis(ctx, tmp, cfg.artemisScript)
}

func setupActiveMQ(ctx context.Context, tmp, script string) (*brokerProc, error) {
	if _, err := os.Stat("/usr/share/activemq/bin/activemq.jar"); err != nil {
		return nil, errors.New("ActiveMQ Classic is not installed: run `bash scripts/activemq.sh install` (or make broker-install)")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(tmp, "activemq")
	env := append(os.Environ(),
		"ACTIVEMQ_DIR="+dir,
		"ACTIVEMQ_STOMP_PORT="+strconv.Itoa(port),
		"ACTIVEMQ_JAVA_OPTS="+envOr("ACTIVEMQ_JAVA_OPTS", "-Xms64m -Xmx384m"),
	)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b := &brokerProc{
		name: "ActiveMQ Classic",
		port: port,
		url:  fmt.Sprintf("stomp://127.0.0.1:%d?dialect=activemq", port),
		proc: &proc{name: "activemq", path: "bash", args: []string{script, "foreground"}, env: env,
			logPath: filepath.Join(tmp, "activemq.log")},
	}
	return b, b.start(ctx)
}

// The suite's Artemis login; the broker is on loopback and lives as long as
// the run.
const (
	artemisUser     = "faultsuite"
	artemisPassword = "faultsuite"
)

// setupArtemis creates an Artemis instance under tmp from the distribution
// scripts/artemis.sh installed, and starts it. The instance is created on the
// first start (artemis create, a few seconds more); restarts reuse it, journal
// and all.
func setupArtemis(ctx context.Context, tmp, script string) (*brokerProc, error) {
	if err := exec.CommandContext(ctx, "bash", script, "installed").Run(); err != nil {
		return nil, fmt.Errorf("the Artemis distribution is not installed: run `bash %s install` (it fetches it from Maven Central)", script)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"ARTEMIS_DIR="+filepath.Join(tmp, "artemis"),
		"ARTEMIS_STOMP_PORT="+strconv.Itoa(port),
		"ARTEMIS_USER="+artemisUser,
		"ARTEMIS_PASSWORD="+artemisPassword,
		"ARTEMIS_JAVA_MEMORY="+envOr("ARTEMIS_JAVA_MEMORY", "512M"),
	)
	b := &brokerProc{
		name: "Artemis",
		port: port,
		url:  fmt.Sprintf("stomp://%s:%s@127.0.0.1:%d?dialect=artemis", artemisUser, artemisPassword, port),
		proc: &proc{name: "artemis", path: "bash", args: []string{script, "foreground"}, env: env,
			logPath: filepath.Join(tmp, "artemis.log")},
		login: artemisUser, passcode: artemisPassword,
	}
	return b, b.start(ctx)
}

// start runs the broker and waits until STOMP answers a CONNECT.
func (b *brokerProc) start(ctx context.Context) error {
	if err := b.proc.start(); err != nil {
		return err
	}
	const within = 120 * time.Second
	deadline := time.Now().Add(within)
	for !stompReady(b.port, b.login, b.passcode) {
		select {
		case <-b.proc.exited():
			return fmt.Errorf("%s exited during start-up\n%s", b.proc.name, b.proc.logTail(30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: STOMP did not answer on port %d within %s\n%s", b.proc.name, b.port, within, b.proc.logTail(30))
		}
	}
	return nil
}

// stompReady succeeds when the port answers CONNECT (with the login, when
// one is given) with CONNECTED.
func stompReady(port int, login, passcode string) bool {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	frame := "CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:0,0\n"
	if login != "" {
		frame += "login:" + login + "\npasscode:" + passcode + "\n"
	}
	if _, err := c.Write([]byte(frame + "\n\x00")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "CONNECTED") {
		return false
	}
	_, _ = c.Write([]byte("DISCONNECT\n\n\x00"))
	return true
}

func freePort() (int, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
