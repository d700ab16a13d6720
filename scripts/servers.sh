#!/usr/bin/env bash
# Start, stop and inspect the real redis-server topologies that distlock's
# test suite runs against. Everything listens on 127.0.0.1 only.
#
#   scripts/servers.sh start    wipe the state dir, start every topology, wait until ready
#   scripts/servers.sh stop     shut down every server of ours (idempotent)
#   scripts/servers.sh status   print which servers are up (exit 1 if any is down)
#   scripts/servers.sh env      print `export VAR=...` lines for the tests
#
# Topologies (ports are in distlock's own range; each can be moved with the variable
# named after it, e.g. to run a second set of servers next to the first):
#   single      17379                      DISTLOCK_SERVERS_SINGLE_PORT
#   cluster     17001..17006               DISTLOCK_SERVERS_CLUSTER_PORTS (6 ports: 3 masters
#               (cluster bus: port + 10000)  + 3 replicas)
#   sentinel    master 17100, replica 17101 DISTLOCK_SERVERS_SENTINEL_MASTER_PORT, _REPLICA_PORT
#               sentinels 17110 17111 17112 DISTLOCK_SERVERS_SENTINEL_PORTS (3 ports)
#   redlock     independent masters 17201..17205  DISTLOCK_SERVERS_REDLOCK_PORTS (5 ports)
# Port lists are separated by spaces or commas. `env` prints the URLs of the ports in use, so
# the tests follow a moved set when its variables are set for `env` too.
#
# State (configs, logs, pid files, data dirs) lives in
# ${DISTLOCK_SERVERS_DIR:-/tmp/distlock-servers}; a second set needs a directory of its own.
# The binaries are `redis-server`, `redis-sentinel` and `redis-cli` from PATH (put another
# server's first on PATH to run these topologies on it: scripts/servers-install.sh).
set -euo pipefail

DIR="${DISTLOCK_SERVERS_DIR:-/tmp/distlock-servers}"
HOST=127.0.0.1

log() { printf '[servers] %s\n' "$*" >&2; }
die() {
    printf '[servers] ERROR: %s\n' "$*" >&2
    exit 1
}

ports_from() {
    # ports_from VAR COUNT DEFAULT...: the ports listed in $VAR (spaces or commas), or the
    # defaults; exactly COUNT ports, each a number in 1..55535 (its cluster bus, +10000,
    # must be a port too). Prints them space-separated.
    local var="$1" count="$2" p
    shift 2
    local -a ports
    if [[ -n "${!var:-}" ]]; then
        read -r -a ports <<<"${!var//,/ }"
    else
        ports=("$@")
    fi
    ((${#ports[@]} == count)) || die "$var must list $count port(s), got '${!var:-}'"
    for p in "${ports[@]}"; do
        [[ "$p" =~ ^[0-9]+$ ]] && ((p >= 1 && p <= 55535)) ||
            die "$var: '$p' is not a port in 1..55535"
    done
    echo "${ports[*]}"
}

# (Assigned to a plain variable first: a failing $(...) inside a here-string would not stop
# the script.)
SINGLE_PORT="$(ports_from DISTLOCK_SERVERS_SINGLE_PORT 1 17379)"
ports="$(ports_from DISTLOCK_SERVERS_CLUSTER_PORTS 6 17001 17002 17003 17004 17005 17006)"
read -r -a CLUSTER_PORTS <<<"$ports"
SENTINEL_MASTER_PORT="$(ports_from DISTLOCK_SERVERS_SENTINEL_MASTER_PORT 1 17100)"
SENTINEL_REPLICA_PORT="$(ports_from DISTLOCK_SERVERS_SENTINEL_REPLICA_PORT 1 17101)"
ports="$(ports_from DISTLOCK_SERVERS_SENTINEL_PORTS 3 17110 17111 17112)"
read -r -a SENTINEL_PORTS <<<"$ports"
SENTINEL_MASTER_NAME=distlock-master
ports="$(ports_from DISTLOCK_SERVERS_REDLOCK_PORTS 5 17201 17202 17203 17204 17205)"
read -r -a REDLOCK_PORTS <<<"$ports"

# Every redis-server (not sentinel) port, and every port at all; no port twice, counting the
# cluster bus ports (cluster port + 10000).
REDIS_PORTS=("$SINGLE_PORT" "${CLUSTER_PORTS[@]}" "$SENTINEL_MASTER_PORT" "$SENTINEL_REPLICA_PORT" "${REDLOCK_PORTS[@]}")
ALL_PORTS=("${REDIS_PORTS[@]}" "${SENTINEL_PORTS[@]}")
declare -A seen=()
for port in "${ALL_PORTS[@]}" $(for p in "${CLUSTER_PORTS[@]}"; do echo $((p + 10000)); done); do
    [[ -z "${seen[$port]:-}" ]] || die "port $port is used twice (a cluster node's bus port is its port + 10000)"
    seen[$port]=1
done
unset seen port ports

# Bounded waits, in seconds.
PING_TIMEOUT="${DISTLOCK_PING_TIMEOUT:-15}"
CLUSTER_TIMEOUT="${DISTLOCK_CLUSTER_TIMEOUT:-30}"
SENTINEL_TIMEOUT="${DISTLOCK_SENTINEL_TIMEOUT:-30}"

cli() {
    # cli PORT ARGS...: one command, short timeout, no retries.
    local port="$1"
    shift
    timeout 5 redis-cli -h "$HOST" -p "$port" "$@" 2>/dev/null
}

pings() { [[ "$(cli "$1" PING || true)" == "PONG" ]]; }

port_open() {
    # True if something accepts TCP connections on 127.0.0.1:$1.
    (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# Seconds since the epoch with sub-second precision, for deadlines.
now() { date +%s.%N; }
before() { awk -v a="$(now)" -v b="$1" 'BEGIN { exit !(a < b) }'; }
deadline() { awk -v a="$(now)" -v s="$1" 'BEGIN { printf "%.3f", a + s }'; }

log_tail() {
    local f="$DIR/redis-$1.log"
    [[ -f "$f" ]] || f="$DIR/sentinel-$1.log"
    if [[ -f "$f" ]]; then
        printf -- '--- last lines of %s ---\n' "$f" >&2
        tail -n 15 "$f" >&2 || true
    fi
}

require_tools() {
    local t
    for t in redis-server redis-sentinel redis-cli timeout awk; do
        command -v "$t" >/dev/null 2>&1 || die "'$t' not found in PATH (scripts/test.sh installs redis with apt-get)"
    done
}

# ---------------------------------------------------------------- stop

alive() {
    # True if pid $1 exists and is not a zombie. Daemonized servers are
    # reparented to pid 1, which in containers may reap them late, so a
    # plain `kill -0` would see an exited server as alive for seconds.
    local stat
    [[ "$1" =~ ^[0-9]+$ ]] || return 1
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { kill -0 "$1" 2>/dev/null; return; }
    stat="${stat##*) }"
    [[ "${stat%% *}" != Z ]]
}

is_redis_pid() {
    # True if $1 is a live redis-server / redis-sentinel process
    # (guards against a recycled pid in a stale pid file).
    local pid="$1" comm
    alive "$pid" || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
    [[ -z "$comm" || "$comm" == redis* ]]
}

stop_all() {
    [[ -d "$DIR" ]] || return 0
    local pidfile pid port
    local -a pids=()
    shopt -s nullglob
    # Ask politely first: SHUTDOWN NOSAVE to every server whose pid file is ours.
    for pidfile in "$DIR"/*.pid; do
        pid="$(cat "$pidfile" 2>/dev/null || true)"
        is_redis_pid "$pid" || continue
        pids+=("$pid")
        port="$(basename "$pidfile" .pid)"
        port="${port##*-}"
        if [[ "$port" =~ ^[0-9]+$ ]]; then
            cli "$port" SHUTDOWN NOSAVE >/dev/null &
        fi
    done
    shopt -u nullglob
    wait || true
    ((${#pids[@]})) || return 0
    # Then wait briefly, and SIGKILL whatever is still alive.
    local end
    end="$(deadline 3)"
    while before "$end"; do
        local alive=0
        for pid in "${pids[@]}"; do
            if is_redis_pid "$pid"; then alive=1; fi
        done
        ((alive)) || break
        sleep 0.05
    done
    for pid in "${pids[@]}"; do
        if is_redis_pid "$pid"; then
            log "pid $pid did not shut down; killing it"
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
    for pid in "${pids[@]}"; do
        end="$(deadline 3)"
        while alive "$pid" && before "$end"; do sleep 0.05; done
    done
    log "stopped ${#pids[@]} server(s) from $DIR"
}

# ---------------------------------------------------------------- start

MARKER=.distlock-servers

wipe_dir() {
    # Only ever delete a directory this script created (it holds $MARKER),
    # so a mistyped DISTLOCK_SERVERS_DIR cannot wipe anything else.
    case "$DIR" in
    "" | / | "$HOME" | "$HOME/") die "refusing to use '$DIR' as DISTLOCK_SERVERS_DIR" ;;
    esac
    if [[ -d "$DIR" && -n "$(ls -A "$DIR")" && ! -e "$DIR/$MARKER" ]]; then
        die "$DIR exists, is not empty and was not created by scripts/servers.sh; remove it or set DISTLOCK_SERVERS_DIR"
    fi
    rm -rf "$DIR"
    mkdir -p "$DIR"
    echo "state dir of distlock's scripts/servers.sh; wiped on every start" >"$DIR/$MARKER"
}

# repl-diskless-sync-delay 0: a replica's full sync starts at once instead of
# after the default 5 s (this alone saves ~10 s on start, and speeds up tests
# that restart replicas).
COMMON_ARGS=(--bind "$HOST" --protected-mode no --save '' --appendonly no --daemonize yes
    --repl-diskless-sync-delay 0)

start_redis() {
    # start_redis PORT [extra redis-server args...]
    local port="$1"
    shift
    mkdir -p "$DIR/data-$port"
    redis-server --port "$port" "${COMMON_ARGS[@]}" \
        --pidfile "$DIR/redis-$port.pid" \
        --logfile "$DIR/redis-$port.log" \
        --dir "$DIR/data-$port" \
        "$@" >>"$DIR/launch.log" 2>&1 ||
        { log_tail "$port"; die "redis-server on port $port failed to launch"; }
}

start_sentinel() {
    local port="$1" conf="$DIR/sentinel-$1.conf"
    mkdir -p "$DIR/data-$port"
    cat >"$conf" <<EOF
port $port
bind $HOST
protected-mode no
daemonize yes
pidfile "$DIR/sentinel-$port.pid"
logfile "$DIR/sentinel-$port.log"
dir "$DIR/data-$port"
sentinel resolve-hostnames no
sentinel monitor $SENTINEL_MASTER_NAME $HOST $SENTINEL_MASTER_PORT 2
sentinel down-after-milliseconds $SENTINEL_MASTER_NAME 1000
sentinel failover-timeout $SENTINEL_MASTER_NAME 3000
sentinel parallel-syncs $SENTINEL_MASTER_NAME 1
EOF
    redis-sentinel "$conf" >>"$DIR/launch.log" 2>&1 ||
        { log_tail "$port"; die "redis-sentinel on port $port failed to launch"; }
}

wait_ping() {
    local end port pending
    end="$(deadline "$PING_TIMEOUT")"
    while :; do
        pending=()
        for port in "$@"; do
            pings "$port" || pending+=("$port")
        done
        ((${#pending[@]})) || return 0
        if ! before "$end"; then
            for port in "${pending[@]}"; do log_tail "$port"; done
            die "no PONG within ${PING_TIMEOUT}s from port(s): ${pending[*]} (logs in $DIR)"
        fi
        sleep 0.05
    done
}

info_field() {
    # info_field PORT SECTION FIELD -> value (empty if absent)
    cli "$1" INFO "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f { print $2 }'
}

cluster_ready() {
    # Every node: cluster_state:ok and 6 known nodes; 3 masters, each with one
    # replica whose link is up.
    local port masters=0 replicas=0 n
    for port in "${CLUSTER_PORTS[@]}"; do
        n="$(cli "$port" CLUSTER INFO | tr -d '\r')" || return 1
        grep -qx 'cluster_state:ok' <<<"$n" || return 1
        grep -qx "cluster_known_nodes:${#CLUSTER_PORTS[@]}" <<<"$n" || return 1
        case "$(info_field "$port" replication role)" in
        master)
            [[ "$(info_field "$port" replication connected_slaves)" == 1 ]] || return 1
            masters=$((masters + 1))
            ;;
        slave)
            [[ "$(info_field "$port" replication master_link_status)" == up ]] || return 1
            replicas=$((replicas + 1))
            ;;
        *) return 1 ;;
        esac
    done
    ((masters == 3 && replicas == 3))
}

start_cluster() {
    local port addrs=()
    for port in "${CLUSTER_PORTS[@]}"; do addrs+=("$HOST:$port"); done
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
        >"$DIR/cluster-create.log" 2>&1 ||
        { cat "$DIR/cluster-create.log" >&2; die "redis-cli --cluster create failed"; }
    local end
    end="$(deadline "$CLUSTER_TIMEOUT")"
    until cluster_ready; do
        if ! before "$end"; then
            for port in "${CLUSTER_PORTS[@]}"; do
                printf -- '--- %s: %s, role %s, link %s\n' "$port" \
                    "$(cli "$port" CLUSTER INFO | tr -d '\r' | grep cluster_state || true)" \
                    "$(info_field "$port" replication role || true)" \
                    "$(info_field "$port" replication master_link_status || true)" >&2
            done
            die "cluster on ${CLUSTER_PORTS[*]} not ready (cluster_state:ok + 3 masters with a replica each) within ${CLUSTER_TIMEOUT}s"
        fi
        sleep 0.1
    done
}

sentinel_field() {
    # sentinel_field PORT FIELD -> value from SENTINEL MASTER <name> (flat field/value lines)
    cli "$1" SENTINEL MASTER "$SENTINEL_MASTER_NAME" | tr -d '\r' |
        awk -v f="$2" 'NR % 2 == 1 && $0 == f { getline v; print v; exit }'
}

sentinel_ready() {
    local port
    for port in "${SENTINEL_PORTS[@]}"; do
        [[ "$(sentinel_field "$port" num-other-sentinels)" == $((${#SENTINEL_PORTS[@]} - 1)) ]] || return 1
        [[ "$(sentinel_field "$port" num-slaves)" == 1 ]] || return 1
    done
}

wait_replica_link() {
    local port="$1" end
    end="$(deadline "$SENTINEL_TIMEOUT")"
    until [[ "$(info_field "$port" replication master_link_status)" == up ]]; do
        before "$end" || { log_tail "$port"; die "replica $port: master_link_status not up within ${SENTINEL_TIMEOUT}s"; }
        sleep 0.05
    done
}

wait_sentinels() {
    local end port
    end="$(deadline "$SENTINEL_TIMEOUT")"
    until sentinel_ready; do
        if ! before "$end"; then
            for port in "${SENTINEL_PORTS[@]}"; do
                printf -- '--- sentinel %s: num-other-sentinels=%s num-slaves=%s\n' "$port" \
                    "$(sentinel_field "$port" num-other-sentinels || true)" \
                    "$(sentinel_field "$port" num-slaves || true)" >&2
            done
            die "sentinels ${SENTINEL_PORTS[*]} did not see 2 other sentinels and 1 replica of $SENTINEL_MASTER_NAME within ${SENTINEL_TIMEOUT}s"
        fi
        sleep 0.1
    done
}

start_all() {
    require_tools
    local t0 port
    t0="$(now)"
    stop_all
    # After stopping ours, nothing may listen on our ports: a foreign server
    # there would answer PING and silently take our place.
    local busy=()
    for port in "${ALL_PORTS[@]}"; do
        if port_open "$port"; then busy+=("$port"); fi
    done
    ((${#busy[@]} == 0)) ||
        die "port(s) ${busy[*]} on $HOST are already in use by a process not started from $DIR (another DISTLOCK_SERVERS_DIR or another program); stop it first"

    wipe_dir

    # Launch every redis-server at once (they daemonize immediately) ...
    start_redis "$SINGLE_PORT"
    for port in "${CLUSTER_PORTS[@]}"; do
        start_redis "$port" --cluster-enabled yes --cluster-node-timeout 1000 \
            --cluster-config-file "$DIR/nodes-$port.conf" \
            --cluster-replica-validity-factor 0
    done
    start_redis "$SENTINEL_MASTER_PORT"
    start_redis "$SENTINEL_REPLICA_PORT" --replicaof "$HOST" "$SENTINEL_MASTER_PORT"
    for port in "${REDLOCK_PORTS[@]}"; do start_redis "$port"; done
    # ... then wait for all of them together.
    wait_ping "${REDIS_PORTS[@]}"

    # The replica must be attached before the sentinels look at the master,
    # so that their first INFO already lists it.
    wait_replica_link "$SENTINEL_REPLICA_PORT"
    for port in "${SENTINEL_PORTS[@]}"; do start_sentinel "$port"; done

    start_cluster
    wait_ping "${SENTINEL_PORTS[@]}"
    wait_sentinels

    local elapsed
    elapsed="$(awk -v a="$(now)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')"
    printf 'distlock test servers up in %ss (dir %s): single %s; cluster %s-%s; sentinel master %s replica %s sentinels %s; redlock %s-%s\n' \
        "$elapsed" "$DIR" "$SINGLE_PORT" "${CLUSTER_PORTS[0]}" "${CLUSTER_PORTS[-1]}" \
        "$SENTINEL_MASTER_PORT" "$SENTINEL_REPLICA_PORT" "$(IFS=,; echo "${SENTINEL_PORTS[*]}")" \
        "${REDLOCK_PORTS[0]}" "${REDLOCK_PORTS[-1]}"
}

# ---------------------------------------------------------------- status / env

status_all() {
    local port down=0 role
    show() {
        # show GROUP PORT
        if pings "$2"; then
            role="$(info_field "$2" replication role || true)"
            [[ "$1" == sentinel ]] && role=sentinel
            printf '%-10s %s:%s  up    (%s)\n' "$1" "$HOST" "$2" "${role:-?}"
        else
            printf '%-10s %s:%s  DOWN\n' "$1" "$HOST" "$2"
            down=$((down + 1))
        fi
    }
    show single "$SINGLE_PORT"
    for port in "${CLUSTER_PORTS[@]}"; do show cluster "$port"; done
    show sentinel-m "$SENTINEL_MASTER_PORT"
    show sentinel-r "$SENTINEL_REPLICA_PORT"
    for port in "${SENTINEL_PORTS[@]}"; do show sentinel "$port"; done
    for port in "${REDLOCK_PORTS[@]}"; do show redlock "$port"; done
    if ((down)); then
        printf '%d of %d servers down (start them with scripts/servers.sh start)\n' "$down" "${#ALL_PORTS[@]}"
        return 1
    fi
    printf 'all %d servers up\n' "${#ALL_PORTS[@]}"
}

urls() {
    local out="" port
    for port in "$@"; do out+="${out:+,}redis://$HOST:$port"; done
    printf '%s' "$out"
}

export_line() {
    # export_line NAME VALUE: single-quoted, safe for eval and for sh.
    printf "export %s='%s'\n" "$1" "${2//\'/\'\\\'\'}"
}

print_env() {
    export_line DISTLOCK_TEST_SINGLE "$(urls "$SINGLE_PORT")"
    export_line DISTLOCK_TEST_CLUSTER "$(urls "${CLUSTER_PORTS[@]}")"
    export_line DISTLOCK_TEST_SENTINELS "$(urls "${SENTINEL_PORTS[@]}")"
    export_line DISTLOCK_TEST_SENTINEL_MASTER "$SENTINEL_MASTER_NAME"
    export_line DISTLOCK_TEST_REDLOCK "$(urls "${REDLOCK_PORTS[@]}")"
    export_line DISTLOCK_SERVERS_DIR "$DIR"
}

usage() {
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
}

case "${1:-}" in
start) start_all ;;
stop) stop_all ;;
status) status_all ;;
env) print_env ;;
*) usage ;;
esac
