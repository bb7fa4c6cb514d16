#!/usr/bin/env bash
# Runs Apache ActiveMQ Artemis for development and CI, without systemd: the
# binary distribution comes from Maven Central (mvn dependency:copy, checked
# against the SHA-512 pinned here and the one Maven Central serves beside it),
# unpacked under .local/; the broker instance (config, journal, log) lives in
# .local/artemis (gitignored). Only STOMP is opened, on 127.0.0.1, with a login.
# deploy/artemis/broker.properties is applied at every start with
# `artemis run --properties`, as docker-compose.yml does.
#
#   scripts/artemis.sh install      fetch and unpack the distribution, unless already there
#   scripts/artemis.sh installed    exit 0 when the distribution is unpacked, 1 otherwise
#   scripts/artemis.sh start        start in the background (installs and creates the
#                                   instance if needed); waits until STOMP answers a CONNECT
#   scripts/artemis.sh stop         graceful stop, killed after ARTEMIS_STOP_TIMEOUT
#   scripts/artemis.sh kill         kill -9 (for fault tests)
#   scripts/artemis.sh restart      stop, then start
#   scripts/artemis.sh status       exit 0 when running and answering STOMP
#   scripts/artemis.sh url          print the BROKER_URL that reaches this broker
#   scripts/artemis.sh foreground   run in the foreground (logs on the terminal)
#   scripts/artemis.sh logs         tail the log
#
# Environment:
#   ARTEMIS_VERSION         distribution version (default 2.40.0; others are checked
#                           against Maven Central's SHA-512 only)
#   ARTEMIS_STOMP_PORT      STOMP port (default 61613)
#   ARTEMIS_DIR             instance directory (default <repo>/.local/artemis)
#   ARTEMIS_HOME            where the distribution is unpacked
#                           (default <repo>/.local/apache-artemis-<version>)
#   ARTEMIS_USER, ARTEMIS_PASSWORD   the login (default artemis / artemis)
#   ARTEMIS_JAVA_MEMORY     -Xmx of the broker (default 1G)
#   ARTEMIS_PROPERTIES      broker properties applied at start
#                           (default <repo>/deploy/artemis/broker.properties)
#   ARTEMIS_START_TIMEOUT   seconds to wait for STOMP (default 90)
#   ARTEMIS_STOP_TIMEOUT    seconds to wait for a graceful stop (default 30)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${ARTEMIS_VERSION:-2.40.0}"
# SHA-512 of apache-artemis-2.40.0-bin.tar.gz as published on Maven Central.
PINNED_VERSION=2.40.0
PINNED_SHA512=270a00dc3028fb3b93c6aa09aa3e40fbe76015029e5308e0aac241589299a72dac9bb50a10e7e86ad66185e2d8bc7224626810df12f1ee05694322054ad32700
HOME_DIR="${ARTEMIS_HOME:-$ROOT/.local/apache-artemis-$VERSION}"
INSTANCE="${ARTEMIS_DIR:-$ROOT/.local/artemis}"
HOST=127.0.0.1
PORT="${ARTEMIS_STOMP_PORT:-61613}"
USER_NAME="${ARTEMIS_USER:-artemis}"
PASSWORD="${ARTEMIS_PASSWORD:-artemis}"
MEMORY="${ARTEMIS_JAVA_MEMORY:-1G}"
PROPERTIES="${ARTEMIS_PROPERTIES:-$ROOT/deploy/artemis/broker.properties}"
PIDFILE="$INSTANCE/artemis.pid"
LOG="$INSTANCE/log/console.log"
START_TIMEOUT="${ARTEMIS_START_TIMEOUT:-90}"
STOP_TIMEOUT="${ARTEMIS_STOP_TIMEOUT:-30}"

log() { echo "artemis.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

installed() { [[ -x "$HOME_DIR/bin/artemis" ]]; }

cmd_install() {
	if installed; then
		log "Artemis $VERSION is installed ($HOME_DIR)"
		return
	fi
	command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install maven) to fetch Artemis from Maven Central"
	command -v java >/dev/null || die "java not found: Artemis $VERSION needs Java 17 or newer"
	local tmp artifact="org.apache.activemq:apache-artemis:$VERSION"
	tmp="$(mktemp -d)"
	log "fetching $artifact:tar.gz:bin from Maven Central"
	local what
	for what in tar.gz tar.gz.sha512; do
		mvn -B dependency:copy -Dartifact="$artifact:$what:bin" -DoutputDirectory="$tmp" >"$tmp/mvn.log" 2>&1 || {
			tail -n 30 "$tmp/mvn.log" >&2
			die "mvn could not fetch $artifact:$what:bin"
		}
	done
	local tarball="$tmp/apache-artemis-$VERSION-bin.tar.gz" want got
	want="$(awk '{print $1; exit}' "$tarball.sha512")"
	got="$(sha512sum "$tarball" | awk '{print $1}')"
	[[ "$got" == "$want" ]] || die "SHA-512 mismatch for $tarball: got $got, Maven Central says $want"
	if [[ "$VERSION" == "$PINNED_VERSION" && "$got" != "$PINNED_SHA512" ]]; then
		die "SHA-512 of $tarball is $got, not the pinned $PINNED_SHA512"
	fi
	mkdir -p "$(dirname "$HOME_DIR")"
	local unpack="$HOME_DIR.partial"
	rm -rf "$unpack"
	mkdir -p "$unpack"
	tar -xzf "$tarball" -C "$unpack" --strip-components=1
	rm -rf "$HOME_DIR"
	mv "$unpack" "$HOME_DIR"
	rm -rf "$tmp"
	log "installed Artemis $VERSION in $HOME_DIR (SHA-512 checked)"
}

# create_instance makes the broker instance once per version, then rewrites
# its acceptors (STOMP on HOST:PORT only) at every start, so that a changed
# port takes effect.
create_instance() {
	installed || cmd_install
	local stamp="$INSTANCE/.created-by"
	local want="$VERSION $USER_NAME $MEMORY"
	if [[ ! -x "$INSTANCE/bin/artemis" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
		log "creating the broker instance in $INSTANCE"
		"$HOME_DIR/bin/artemis" create "$INSTANCE" --silent --force \
			--user "$USER_NAME" --password "$PASSWORD" --require-login \
			--host "$HOST" --no-web --no-amqp-acceptor --no-mqtt-acceptor --no-hornetq-acceptor \
			--java-memory "$MEMORY" >"$INSTANCE.create.log" 2>&1 ||
			{
				cat "$INSTANCE.create.log" >&2
				die "artemis create failed"
			}
		rm -f "$INSTANCE.create.log"
		echo "$want" >"$stamp"
	fi
	local xml="$INSTANCE/etc/broker.xml"
	local acceptor="         <acceptor name=\"stomp\">tcp://$HOST:$PORT?protocols=STOMP;useEpoll=true;tcpSendBufferSize=1048576;tcpReceiveBufferSize=1048576</acceptor>"
	awk -v acceptor="$acceptor" '
		/<acceptors>/ { print; print acceptor; skip = 1; next }
		/<\/acceptors>/ { skip = 0 }
		skip { next }
		{ print }
	' "$xml" >"$xml.new"
	mv "$xml.new" "$xml"
	[[ -f "$PROPERTIES" ]] || die "broker properties $PROPERTIES not found"
	rm -f "$INSTANCE/etc/broker.properties" # applied with --properties instead
	mkdir -p "$INSTANCE/log"
}

# pid prints the pid of our broker, if it runs: the pid file must name a live
# java process of this instance (pids get reused).
pid() {
	[[ -f "$PIDFILE" ]] || return 1
	local p
	p="$(<"$PIDFILE")"
	[[ "$p" =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "-Dartemis.instance=$INSTANCE " || return 1
	echo "$p"
}

# stomp_ready succeeds when the port answers CONNECT with CONNECTED.
stomp_ready() {
	timeout 5 bash -c '
		exec 3<>"/dev/tcp/$0/$1" || exit 1
		printf "CONNECT\naccept-version:1.2\nhost:localhost\nlogin:%s\npasscode:%s\nheart-beat:0,0\n\n\0" "$2" "$3" >&3
		IFS= read -r -t 4 line <&3 || exit 1
		printf "DISCONNECT\n\n\0" >&3
		[[ "$line" == CONNECTED* ]]
	' "$HOST" "$PORT" "$USER_NAME" "$PASSWORD" 2>/dev/null
}

port_open() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$HOST" "$PORT" 2>/dev/null
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

# check_ports fails when the broker listens on anything but the STOMP port.
check_ports() {
	local p="$1" ports
	command -v ss >/dev/null || return 0
	ports="$(ss -Hltnp 2>/dev/null | awk -v pid="pid=$p," 'index($0, pid) { n = split($4, a, ":"); print a[n] }' | sort -u)"
	if [[ -n "$ports" && "$ports" != "$PORT" ]]; then
		die "the broker listens on unexpected ports: $(echo "$ports" | tr '\n' ' ')(only $PORT expected); check $INSTANCE/etc/broker.xml"
	fi
}

cmd_start() {
	local p
	if p="$(pid)"; then
		if stomp_ready; then
			log "already running (pid $p, $(cmd_url | sed 's/:[^:@]*@/:xxxxx@/'))"
			return
		fi
		log "already started (pid $p), waiting for STOMP"
	else
		if port_open; then
			die "port $HOST:$PORT is taken by another process; set ARTEMIS_STOMP_PORT"
		fi
		create_instance
		echo "=== $(date -Is) starting Artemis $VERSION, STOMP on $HOST:$PORT" >>"$LOG"
		# setsid: the broker must outlive the shell, and signals sent to the
		# caller's process group (go test, make) must not reach it.
		setsid "$INSTANCE/bin/artemis" run --properties "$PROPERTIES" </dev/null >>"$LOG" 2>&1 &
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
	log "running (pid $p, STOMP on $HOST:$PORT, instance $INSTANCE, log $LOG)"
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

cmd_kill() {
	local p
	if p="$(pid)"; then
		kill -KILL "$p"
		while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
		rm -f "$PIDFILE"
		log "killed (pid $p)"
	fi
}

cmd_status() {
	local p
	if p="$(pid)"; then
		if stomp_ready; then
			echo "running (pid $p, STOMP on $HOST:$PORT)"
			return 0
		fi
		echo "started (pid $p) but STOMP does not answer on $HOST:$PORT"
		return 1
	fi
	echo "stopped"
	return 3
}

# cmd_url prints the broker URL, the login percent-encoded.
cmd_url() {
	local enc
	enc() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1" 2>/dev/null || printf '%s' "$1"; }
	echo "stomp://$(enc "$USER_NAME"):$(enc "$PASSWORD")@$HOST:$PORT?dialect=artemis"
}

cmd_foreground() {
	local p
	if p="$(pid)"; then
		die "already running in the background (pid $p)"
	fi
	create_instance
	echo "$$" >"$PIDFILE"
	exec "$INSTANCE/bin/artemis" run --properties "$PROPERTIES"
}

case "${1:-}" in
install) cmd_install ;;
installed) installed ;;
start) cmd_start ;;
stop) cmd_stop ;;
kill) cmd_kill ;;
restart)
	cmd_stop
	cmd_start
	;;
status) cmd_status ;;
url) cmd_url ;;
foreground) cmd_foreground ;;
logs) exec tail -n 100 -F "$LOG" ;;
*)
	echo "usage: $0 install|installed|start|stop|kill|restart|status|url|foreground|logs" >&2
	exit 2
	;;
esac
