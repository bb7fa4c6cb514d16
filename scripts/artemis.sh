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
# A primary/backup pair with replication, on one machine (two instances under
# ARTEMIS_PAIR_DIR, the backup's ports offset from the primary's): each node
# opens STOMP and a CORE acceptor for the cluster connection and replication,
# both on 127.0.0.1. The primary checks for an active server with its node id
# when it starts (check-for-active-server), so a restarted primary rejoins as
# the passive node, synchronizes and takes over again; the backup allows that
# fail-back and restarts as the passive node after it (allow-failback,
# restart-backup). A passive node does not answer STOMP: the client finds the
# active one among the hosts of `pair url`. Two nodes and no quorum: see the
# split-brain limit in docs/deployment.md. Artemis now and then stops the
# former backup for good after a fail-back (its JVM exits): `pair start`
# starts it again.
#
#   scripts/artemis.sh pair start             start the primary (active), then the backup, and
#                                             wait until the backup is synchronized
#   scripts/artemis.sh pair stop              stop the passive node (once synchronized), then the
#                                             active one; if the backup is active, the primary
#                                             takes over first, so that it holds the newest journal
#   scripts/artemis.sh pair status            each node: active, passive (synchronized or not)
#                                             or stopped; exit 0 when one node is active
#   scripts/artemis.sh pair url               the BROKER_URL naming both nodes
#   scripts/artemis.sh pair kill NODE         kill -9 NODE (primary or backup)
#   scripts/artemis.sh pair start-node NODE   start NODE in the background; waits until it is
#                                             active or passive
#   scripts/artemis.sh pair stop-node NODE    graceful stop of NODE
#   scripts/artemis.sh pair foreground NODE   run NODE in the foreground (the fault suite)
#   scripts/artemis.sh pair logs NODE         tail NODE's log
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
#
# Environment of the pair (the login, memory, properties and timeouts above apply
# to both nodes):
#   ARTEMIS_PAIR_DIR        holds the instances primary/ and backup/
#                           (default <repo>/.local/artemis-pair)
#   ARTEMIS_PAIR_PORT       the primary's STOMP port (default 61913); its cluster
#                           acceptor is the next port
#   ARTEMIS_PAIR_OFFSET     what the backup adds to the primary's ports (default 10:
#                           STOMP 61923, cluster 61924)
#   ARTEMIS_PAIR_PORTS      instead of the two above, all four ports:
#                           primary-stomp,primary-cluster,backup-stomp,backup-cluster
#   ARTEMIS_CLUSTER_USER, ARTEMIS_CLUSTER_PASSWORD   what the nodes authenticate
#                           each other with (default artemis-cluster / artemis-cluster)
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
# Set by use_node for a node of the pair: its role, its cluster port and its
# peer's. Empty for the single instance.
ROLE=""
CLUSTER_PORT=""
PEER_CLUSTER_PORT=""

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

# create_instance makes the broker instance once per version (and role, for a
# node of the pair), then rewrites its acceptors (STOMP on HOST:PORT only; a
# node of the pair also its cluster acceptor), its connectors and its HA policy
# at every start, so that a changed port takes effect.
create_instance() {
	installed || cmd_install
	local stamp="$INSTANCE/.created-by"
	local want="$VERSION $USER_NAME $MEMORY" ha=()
	if [[ -n "$ROLE" ]]; then
		want+=" $ROLE $CLUSTER_USER"
		ha=(--replicated --clustered --cluster-user "$CLUSTER_USER" --cluster-password "$CLUSTER_PASSWORD"
			--staticCluster "tcp://$HOST:$PEER_CLUSTER_PORT" --default-port "$CLUSTER_PORT")
		[[ "$ROLE" == backup ]] && ha+=(--backup)
	fi
	if [[ ! -x "$INSTANCE/bin/artemis" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
		log "creating the broker instance in $INSTANCE"
		mkdir -p "$(dirname "$INSTANCE")"
		"$HOME_DIR/bin/artemis" create "$INSTANCE" --silent --force \
			--user "$USER_NAME" --password "$PASSWORD" --require-login \
			--host "$HOST" --no-web --no-amqp-acceptor --no-mqtt-acceptor --no-hornetq-acceptor \
			--java-memory "$MEMORY" "${ha[@]}" >"$INSTANCE.create.log" 2>&1 ||
			{
				cat "$INSTANCE.create.log" >&2
				die "artemis create failed"
			}
		rm -f "$INSTANCE.create.log"
		echo "$want" >"$stamp"
	fi
	local xml="$INSTANCE/etc/broker.xml" opts="useEpoll=true;tcpSendBufferSize=1048576;tcpReceiveBufferSize=1048576"
	local acceptors="         <acceptor name=\"stomp\">tcp://$HOST:$PORT?protocols=STOMP;$opts</acceptor>"
	if [[ -n "$ROLE" ]]; then
		# The cluster connection and replication speak CORE, on loopback too.
		acceptors+=$'\n'"         <acceptor name=\"artemis\">tcp://$HOST:$CLUSTER_PORT?protocols=CORE;$opts</acceptor>"
		replace_block "$xml" connectors \
			"         <connector name=\"artemis\">tcp://$HOST:$CLUSTER_PORT</connector>"$'\n'"         <connector name=\"node0\">tcp://$HOST:$PEER_CLUSTER_PORT</connector>"
		# No vote-on-replication-failure on the primary: a single pair has no
		# quorum to ask (see docs/deployment.md), and the primary would stop
		# when its backup dies.
		local policy
		if [[ "$ROLE" == primary ]]; then
			policy="         <replication><primary>"$'\n'"            <check-for-active-server>true</check-for-active-server>"$'\n'"         </primary></replication>"
		else
			policy="         <replication><backup>"$'\n'"            <allow-failback>true</allow-failback>"$'\n'"            <restart-backup>true</restart-backup>"$'\n'"         </backup></replication>"
		fi
		replace_block "$xml" ha-policy "$policy"
	fi
	replace_block "$xml" acceptors "$acceptors"
	[[ -f "$PROPERTIES" ]] || die "broker properties $PROPERTIES not found"
	rm -f "$INSTANCE/etc/broker.properties" # applied with --properties instead
	mkdir -p "$INSTANCE/log"
}

# replace_block replaces the lines between <tag> and </tag> (the first such
# block) of an XML file with content.
replace_block() {
	local xml="$1" tag="$2" content="$3"
	grep -q "<$tag>" "$xml" || die "$xml has no <$tag>"
	CONTENT="$content" awk -v start="<$tag>" -v end="</$tag>" '
		!done && index($0, start) { print; print ENVIRON["CONTENT"]; skip = 1; next }
		skip && index($0, end) { skip = 0; done = 1 }
		skip { next }
		{ print }
	' "$xml" >"$xml.new"
	mv "$xml.new" "$xml"
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

# check_ports fails when the broker listens on anything but the STOMP port
# (and, for a node of the pair, its cluster port).
check_ports() {
	local p="$1" ports want
	command -v ss >/dev/null || return 0
	want="$(printf '%s\n' "$PORT" $CLUSTER_PORT | sort -u)"
	ports="$(ss -Hltnp 2>/dev/null | awk -v pid="pid=$p," 'index($0, pid) { n = split($4, a, ":"); print a[n] }' | sort -u)"
	if [[ -n "$ports" && -n "$(comm -23 <(echo "$ports") <(echo "$want"))" ]]; then
		die "the broker listens on unexpected ports: $(echo "$ports" | tr '\n' ' ')(only $(echo "$want" | tr '\n' ' ')expected); check $INSTANCE/etc/broker.xml"
	fi
}

# launch creates the instance if needed and starts the broker in the
# background; its pid goes to PIDFILE.
launch() {
	create_instance
	local what="STOMP on $HOST:$PORT"
	[[ -n "$ROLE" ]] && what="the pair's $ROLE, $what, cluster on $HOST:$CLUSTER_PORT"
	echo "=== $(date -Is) starting Artemis $VERSION, $what" >>"$LOG"
	# setsid: the broker must outlive the shell, and signals sent to the
	# caller's process group (go test, make) must not reach it.
	setsid "$INSTANCE/bin/artemis" run --properties "$PROPERTIES" </dev/null >>"$LOG" 2>&1 &
	echo "$!" >"$PIDFILE"
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
		launch
		p="$(<"$PIDFILE")"
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

# ---- the primary/backup pair ----

PAIR_DIR="${ARTEMIS_PAIR_DIR:-$ROOT/.local/artemis-pair}"
CLUSTER_USER="${ARTEMIS_CLUSTER_USER:-artemis-cluster}"
CLUSTER_PASSWORD="${ARTEMIS_CLUSTER_PASSWORD:-artemis-cluster}"

# pair_ports sets the four ports of the pair from ARTEMIS_PAIR_PORTS, or from
# ARTEMIS_PAIR_PORT and ARTEMIS_PAIR_OFFSET.
pair_ports() {
	if [[ -n "${ARTEMIS_PAIR_PORTS:-}" ]]; then
		IFS=, read -r PRIMARY_STOMP PRIMARY_CLUSTER BACKUP_STOMP BACKUP_CLUSTER <<<"$ARTEMIS_PAIR_PORTS"
	else
		local base="${ARTEMIS_PAIR_PORT:-61913}" offset="${ARTEMIS_PAIR_OFFSET:-10}"
		[[ "$base" =~ ^[0-9]+$ && "$offset" =~ ^[0-9]+$ ]] || die "ARTEMIS_PAIR_PORT and ARTEMIS_PAIR_OFFSET must be numbers"
		((offset >= 2)) || die "ARTEMIS_PAIR_OFFSET must be 2 or more (each node takes two ports)"
		PRIMARY_STOMP=$base PRIMARY_CLUSTER=$((base + 1)) BACKUP_STOMP=$((base + offset)) BACKUP_CLUSTER=$((base + offset + 1))
	fi
	local p
	for p in "$PRIMARY_STOMP" "$PRIMARY_CLUSTER" "$BACKUP_STOMP" "$BACKUP_CLUSTER"; do
		[[ "$p" =~ ^[0-9]+$ ]] && ((p > 0 && p < 65536)) ||
			die "the pair's ports must be four port numbers (ARTEMIS_PAIR_PORTS=primary-stomp,primary-cluster,backup-stomp,backup-cluster), not '$p'"
	done
	[[ "$(printf '%s\n' "$PRIMARY_STOMP" "$PRIMARY_CLUSTER" "$BACKUP_STOMP" "$BACKUP_CLUSTER" | sort -u | wc -l)" == 4 ]] ||
		die "the pair's four ports must differ: $PRIMARY_STOMP,$PRIMARY_CLUSTER,$BACKUP_STOMP,$BACKUP_CLUSTER"
}

# use_node points the single-instance variables at a node of the pair.
use_node() {
	pair_ports
	case "${1:-}" in
	primary) PORT=$PRIMARY_STOMP CLUSTER_PORT=$PRIMARY_CLUSTER PEER_CLUSTER_PORT=$BACKUP_CLUSTER ;;
	backup) PORT=$BACKUP_STOMP CLUSTER_PORT=$BACKUP_CLUSTER PEER_CLUSTER_PORT=$PRIMARY_CLUSTER ;;
	*) die "a node of the pair is primary or backup, not '${1:-}'" ;;
	esac
	ROLE=$1
	INSTANCE="$PAIR_DIR/$ROLE"
	PIDFILE="$INSTANCE/artemis.pid"
	LOG="$INSTANCE/log/console.log"
}

# this_run prints the node's log since its latest start.
this_run() {
	[[ -f "$LOG" ]] || return 0
	tac "$LOG" | sed '/^=== .* starting Artemis/q' | tac
}

# node_state prints active (answers STOMP), passive (runs, does not answer)
# or stopped.
node_state() {
	if ! pid >/dev/null; then
		echo stopped
	elif stomp_ready; then
		echo active
	else
		echo passive
	fi
}

# node_start starts the node in the background and waits until it is active
# or has started as the passive node.
node_start() {
	local p
	if p="$(pid)"; then
		log "the $ROLE is already running (pid $p, $(node_state))"
		return
	fi
	local port
	for port in "$PORT" "$CLUSTER_PORT"; do
		timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$HOST" "$port" 2>/dev/null &&
			die "port $HOST:$port is taken by another process; set ARTEMIS_PAIR_PORT or ARTEMIS_PAIR_PORTS"
	done
	launch
	p="$(<"$PIDFILE")"
	local deadline=$((SECONDS + START_TIMEOUT))
	until stomp_ready || this_run | grep -q "$PASSIVE_STARTED"; do
		kill -0 "$p" 2>/dev/null || fail_start "the $ROLE exited during start-up"
		((SECONDS < deadline)) || fail_start "the $ROLE was neither active nor passive within ${START_TIMEOUT}s"
		sleep 0.2
	done
	check_ports "$p"
	log "the $ROLE runs, $(node_state) (pid $p, STOMP on $HOST:$PORT, cluster on $HOST:$CLUSTER_PORT, log $LOG)"
}

# Log lines of a node (Artemis message codes): started as the passive node,
# synchronized with the active one, now active, stopped.
PASSIVE_STARTED='AMQ221109'
SYNCHRONIZED='AMQ221024'
ROLE_EVENTS='AMQ221109|AMQ221024|AMQ221007|AMQ221002'

# node_describe prints the node's state, and for a passive node whether its
# latest role event says it is synchronized with the active one.
node_describe() {
	local state p
	state="$(node_state)"
	if [[ "$state" == passive ]]; then
		if this_run | grep -E "$ROLE_EVENTS" | tail -n 1 | grep -q "$SYNCHRONIZED"; then
			state+=", synchronized"
		else
			state+=", not synchronized"
		fi
	fi
	if p="$(pid)"; then
		state+=" (pid $p)"
	fi
	echo "$state"
}

# wait_for waits until the node's state (node_describe) starts with want.
wait_for() {
	local want="$1" deadline=$((SECONDS + START_TIMEOUT))
	until [[ "$(node_describe)" == "$want"* ]]; do
		((SECONDS < deadline)) || die "the $ROLE is $(node_describe), not $want, after ${START_TIMEOUT}s; see $LOG"
		sleep 0.2
	done
}

pair_start() {
	use_node backup
	if [[ "$(node_state)" == active ]]; then
		# The primary takes over when it starts (check-for-active-server).
		log "the backup is active: the primary starts as the passive node and takes over once synchronized"
		use_node primary
		node_start
		wait_for active
		use_node backup
	else
		use_node primary
		node_start
		use_node backup
		node_start
	fi
	wait_for "passive, synchronized"
	pair_status
}

# pair_stop stops the passive node, then the active one (stopping the active
# node first would make the other take over). When the backup is active, the
# primary takes over first, so that the node stopped last, whose journal is
# the newest, is the one `pair start` starts first. A passive node is stopped
# only once synchronized: the active node blocks its journal until the
# synchronization ends (initial-replication-sync-timeout, 30 s) and then stops
# itself when the passive node goes away in the middle of it.
pair_stop() {
	use_node backup
	if [[ "$(node_state)" == active ]]; then
		log "the backup is active: the primary takes over before the pair stops"
		use_node primary
		node_start
		wait_for active
	fi
	use_node primary
	if [[ "$(node_state)" == active ]]; then
		use_node backup
		[[ "$(node_state)" == passive ]] && wait_for "passive, synchronized"
	fi
	use_node backup
	cmd_stop
	use_node primary
	cmd_stop
}

# pair_status prints each node's state; exit 0 when one node is active, 1
# when none is or both are, 3 when both are stopped.
pair_status() {
	local node active=0 stopped=0 d
	for node in primary backup; do
		use_node "$node"
		d="$(node_describe)"
		printf '%-8s %s, STOMP on %s:%s, cluster on %s:%s\n' "$node" "$d" "$HOST" "$PORT" "$HOST" "$CLUSTER_PORT"
		[[ "$d" == active* ]] && active=$((active + 1))
		[[ "$d" == stopped* ]] && stopped=$((stopped + 1))
	done
	((stopped == 2)) && return 3
	((active == 1))
}

# pair_url prints the BROKER_URL naming both nodes, the login percent-encoded.
pair_url() {
	pair_ports
	local base
	base="$(cmd_url)"
	echo "${base%%@*}@$HOST:$PRIMARY_STOMP,$HOST:$BACKUP_STOMP?dialect=artemis"
}

cmd_pair() {
	local what="${1:-}" node="${2:-}"
	case "$what" in
	start) pair_start ;;
	stop) pair_stop ;;
	status) pair_status ;;
	url) pair_url ;;
	start-node) use_node "$node" && node_start ;;
	stop-node)
		use_node "$node"
		if [[ "$node" == backup && "$(node_state)" == active ]]; then
			use_node primary
			if [[ "$(node_state)" == stopped ]]; then
				log "warning: the backup is active and the primary is stopped: the backup's journal is the newest;" \
					"start the primary first (pair start-node primary) or the next start of the primary serves older data"
			fi
			use_node backup
		fi
		cmd_stop
		;;
	kill) use_node "$node" && cmd_kill ;;
	foreground) use_node "$node" && cmd_foreground ;;
	logs) use_node "$node" && exec tail -n 100 -F "$LOG" ;;
	*)
		echo "usage: $0 pair start|stop|status|url|kill NODE|start-node NODE|stop-node NODE|foreground NODE|logs NODE (NODE: primary or backup)" >&2
		exit 2
		;;
	esac
}

case "${1:-}" in
install) cmd_install ;;
pair)
	shift
	cmd_pair "$@"
	;;
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
	echo "usage: $0 install|installed|start|stop|kill|restart|status|url|foreground|logs|pair ..." >&2
	exit 2
	;;
esac
