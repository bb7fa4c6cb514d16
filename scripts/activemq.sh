#!/usr/bin/env bash
# Runs ActiveMQ Classic 5.17 (Debian package "activemq") for development and CI,
# without systemd and without root: config, KahaDB, scheduler store, pid file and
# log live in .local/activemq (gitignored). Only STOMP is opened, on 127.0.0.1.
#
#   scripts/activemq.sh install      apt-get install activemq, unless already installed
#   scripts/activemq.sh installed    exit 0 when ActiveMQ Classic is installed, 1 otherwise
#   scripts/activemq.sh start        start in the background (installs if needed); waits
#                                    until the STOMP port answers a CONNECT
#   scripts/activemq.sh stop         graceful stop, killed after ACTIVEMQ_STOP_TIMEOUT
#   scripts/activemq.sh restart      stop, then start
#   scripts/activemq.sh status       exit 0 when running and answering STOMP
#   scripts/activemq.sh foreground   run in the foreground (logs on the terminal)
#   scripts/activemq.sh logs         tail the log
#
# Environment:
#   ACTIVEMQ_STOMP_PORT     STOMP port (default 61623; the broker URL is
#                           stomp://127.0.0.1:61623?dialect=activemq)
#   ACTIVEMQ_DIR            state directory (default <repo>/.local/activemq)
#   ACTIVEMQ_JAVA_OPTS      JVM options (default -Xms64m -Xmx512m)
#   ACTIVEMQ_START_TIMEOUT  seconds to wait for STOMP (default 60)
#   ACTIVEMQ_STOP_TIMEOUT   seconds to wait for a graceful stop (default 30)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AMQ_HOME=/usr/share/activemq
AMQ_JAR="$AMQ_HOME/bin/activemq.jar"
TEMPLATES="$ROOT/scripts/activemq"
BASE="${ACTIVEMQ_DIR:-$ROOT/.local/activemq}"
HOST=127.0.0.1
PORT="${ACTIVEMQ_STOMP_PORT:-61623}"
PIDFILE="$BASE/activemq.pid"
LOG="$BASE/activemq.log"
START_TIMEOUT="${ACTIVEMQ_START_TIMEOUT:-60}"
STOP_TIMEOUT="${ACTIVEMQ_STOP_TIMEOUT:-30}"
read -r -a JAVA_OPTS <<<"${ACTIVEMQ_JAVA_OPTS:--Xms64m -Xmx512m}"

log() { echo "activemq.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

cmd_install() {
	if [[ -f "$AMQ_JAR" ]]; then
		log "ActiveMQ Classic is installed ($AMQ_JAR)"
		return
	fi
	log "installing the Debian package activemq"
	local sudo=()
	if [[ "$(id -u)" != 0 ]]; then
		command -v sudo >/dev/null || die "not root and no sudo: run 'apt-get install -y activemq' as root"
		sudo=(sudo)
	fi
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends activemq
	[[ -f "$AMQ_JAR" ]] || die "apt-get install activemq did not provide $AMQ_JAR"
}

# pid prints the pid of our broker, if it runs: the pid file must name a live
# java process started with this state directory (pids get reused).
pid() {
	[[ -f "$PIDFILE" ]] || return 1
	local p
	p="$(<"$PIDFILE")"
	[[ "$p" =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "-Dactivemq.base=$BASE " || return 1
	echo "$p"
}

# stomp_ready succeeds when the port answers CONNECT with CONNECTED.
stomp_ready() {
	timeout 5 bash -c '
		exec 3<>"/dev/tcp/$0/$1" || exit 1
		printf "CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:0,0\n\n\0" >&3
		IFS= read -r -t 4 line <&3 || exit 1
		printf "DISCONNECT\n\n\0" >&3
		[[ "$line" == CONNECTED* ]]
	' "$HOST" "$PORT" 2>/dev/null
}

port_open() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$HOST" "$PORT" 2>/dev/null
}

write_config() {
	mkdir -p "$BASE/conf" "$BASE/data" "$BASE/tmp"
	cp "$TEMPLATES/activemq.xml" "$BASE/conf/activemq.xml"
	cp "$TEMPLATES/log4j.properties" "$BASE/conf/log4j.properties"
}

# java_cmd is the broker command line. Not /usr/bin/activemq: as root it switches
# to the activemq user and forces its own base directory.
java_cmd() {
	local java=java
	[[ -n "${JAVA_HOME:-}" ]] && java="$JAVA_HOME/bin/java"
	JAVA_CMD=("$java" "${JAVA_OPTS[@]}"
		-Djava.awt.headless=true
		"-Djava.io.tmpdir=$BASE/tmp"
		"-Dactivemq.home=$AMQ_HOME"
		"-Dactivemq.base=$BASE"
		"-Dactivemq.conf=$BASE/conf"
		"-Dactivemq.data=$BASE/data"
		"-Dstomp.port=$PORT"
		"-Dlog4j.configuration=file:$BASE/conf/log4j.properties"
		-jar "$AMQ_JAR" start "xbean:file:$BASE/conf/activemq.xml")
}

# check_ports fails when the broker listens on anything but the STOMP port
# (OpenWire 61616, web console 8161 or JMX 1099 could clash with other brokers).
check_ports() {
	local p="$1" ports
	command -v ss >/dev/null || {
		log "ss not found; not checking the broker's listening ports"
		return
	}
	ports="$(ss -Hltnp 2>/dev/null | awk -v pid="pid=$p," 'index($0, pid) { n = split($4, a, ":"); print a[n] }' | sort -u)"
	if [[ -n "$ports" && "$ports" != "$PORT" ]]; then
		die "the broker listens on unexpected ports: $(echo "$ports" | tr '\n' ' ')(only $PORT expected); check $BASE/conf/activemq.xml"
	fi
}

fail_start() {
	log "$1; last lines of $LOG:"
	tail -n 40 "$LOG" >&2 || true
	local p
	if p="$(pid)"; then
		kill -KILL "$p" 2>/dev/null || true
	fi
	rm -f "$PIDFILE"
	exit 1
}

cmd_start() {
	[[ -f "$AMQ_JAR" ]] || cmd_install
	local p
	if p="$(pid)"; then
		if stomp_ready; then
			log "already running (pid $p, stomp://$HOST:$PORT)"
			return
		fi
		log "already started (pid $p), waiting for STOMP"
	else
		if port_open; then
			die "port $HOST:$PORT is taken by another process; set ACTIVEMQ_STOMP_PORT"
		fi
		write_config
		java_cmd
		{
			echo "=== $(date -Is) starting: ${JAVA_CMD[*]}"
		} >>"$LOG"
		# setsid: the broker must outlive the shell, and signals sent to the
		# caller's process group (go test, make) must not reach it. Every stream is
		# redirected so that callers reading our output do not wait for the broker.
		setsid "${JAVA_CMD[@]}" </dev/null >>"$LOG" 2>&1 &
		p=$!
		echo "$p" >"$PIDFILE"
	fi
	local deadline=$((SECONDS + START_TIMEOUT))
	until stomp_ready; do
		kill -0 "$p" 2>/dev/null || fail_start "the broker exited during start-up"
		((SECONDS < deadline)) || fail_start "STOMP did not answer on $HOST:$PORT within ${START_TIMEOUT}s"
		sleep 0.2
	done
	check_ports "$p"
	log "running (pid $p, stomp://$HOST:$PORT?dialect=activemq, data in $BASE/data, log $LOG)"
}

cmd_stop() {
	local p
	if ! p="$(pid)"; then
		rm -f "$PIDFILE"
		log "not running"
		return
	fi
	kill -TERM "$p"
	local deadline=$((SECONDS + STOP_TIMEOUT))
	while kill -0 "$p" 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			log "no graceful stop within ${STOP_TIMEOUT}s; killing pid $p"
			kill -KILL "$p" 2>/dev/null || true
			sleep 0.5
			break
		fi
		sleep 0.1
	done
	rm -f "$PIDFILE"
	log "stopped (pid $p)"
}

cmd_status() {
	local p
	if p="$(pid)"; then
		if stomp_ready; then
			echo "running (pid $p, stomp://$HOST:$PORT?dialect=activemq)"
			return 0
		fi
		echo "started (pid $p) but STOMP does not answer on $HOST:$PORT"
		return 1
	fi
	echo "stopped"
	return 3
}

cmd_foreground() {
	[[ -f "$AMQ_JAR" ]] || cmd_install
	if p="$(pid)"; then
		die "already running in the background (pid $p)"
	fi
	write_config
	java_cmd
	echo "$$" >"$PIDFILE"
	exec "${JAVA_CMD[@]}"
}

case "${1:-}" in
install) cmd_install ;;
installed) [[ -f "$AMQ_JAR" ]] ;;
start) cmd_start ;;
stop) cmd_stop ;;
restart)
	cmd_stop
	cmd_start
	;;
status) cmd_status ;;
foreground) cmd_foreground ;;
logs) exec tail -n 100 -F "$LOG" ;;
*)
	echo "usage: $0 install|installed|start|stop|restart|status|foreground|logs" >&2
	exit 2
	;;
esac
