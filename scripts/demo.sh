#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup() and stop_wait() run from the EXIT trap
# THE demo of distlock: the flash sale.
#
#   bash scripts/demo.sh             # two servers, one Redis, one SQLite file, a load run
#   bash scripts/demo.sh --unlocked  # the same without the lock: expect duplicate orders
#
# It starts a private redis-server on 127.0.0.1:17390 (installing redis-server with apt-get
# if it is missing), writes a distlock.toml for it, builds the examples, starts two
# flash-sale-server processes on 127.0.0.1:18081 and :18082 sharing one SQLite database,
# runs flash-sale-load against both (4000 orders from 400 users, 10 at once per user, for
# a stock of 300 vouchers), and prints its table: no user may have two orders and nothing
# may be oversold. Everything it starts is stopped on every exit path; each run starts
# from an empty database and an empty Redis. Exit status: the load driver's.
#
# Without redis-server (and no way to install it) it runs the `quickstart` example on the
# in-process memory backend instead, and says so.
#
# Environment: DEMO_REDIS_PORT (17390), DEMO_PORTS ("18081 18082"), DEMO_USERS (400),
# DEMO_PER_USER (10), DEMO_STOCK (300), DEMO_PROFILE (debug | release; debug: see below).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

REDIS_PORT="${DEMO_REDIS_PORT:-17390}"
read -r -a PORTS <<<"${DEMO_PORTS:-18081 18082}"
USERS="${DEMO_USERS:-400}"
PER_USER="${DEMO_PER_USER:-10}"
STOCK="${DEMO_STOCK:-300}"
# debug: measured on 2 cores, a cold build of the examples takes ~105 s in debug and ~155 s
# in release, and the load run ~2 s in debug and ~1 s in release: debug is faster overall
# (and shares its dependencies with `cargo test`).
PROFILE="${DEMO_PROFILE:-debug}"
UNLOCKED=()
for arg in "$@"; do
    case "$arg" in
    --unlocked) UNLOCKED=(--unlocked) ;;
    -h | --help)
        sed -n '3,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "scripts/demo.sh: unknown argument '$arg' (try --help)" >&2
        exit 2
        ;;
    esac
done

say() { printf '\n==> %s\n' "$*"; }
die() {
    printf 'scripts/demo.sh: ERROR: %s\n' "$*" >&2
    exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found in PATH (install Rust: https://rustup.rs)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/distlock-demo.XXXXXX")"
SERVER_PIDS=()
REDIS_PIDFILE="$WORK/redis.pid"

# Stop what this run started (servers by pid, then redis by its pidfile), on every exit.
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local pid
    for pid in "${SERVER_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${SERVER_PIDS[@]}"; do
        stop_wait "$pid"
    done
    if [[ -s "$REDIS_PIDFILE" ]]; then
        pid="$(cat "$REDIS_PIDFILE")"
        kill -TERM "$pid" 2>/dev/null || true
        stop_wait "$pid"
    fi
    rm -rf "$WORK"
    exit "$rc"
}
# stop_wait PID: wait up to 10 s for PID to exit after SIGTERM, then SIGKILL it.
stop_wait() {
    local pid="$1" i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "scripts/demo.sh: pid $pid did not stop on SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# port_open PORT: something accepts connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# redis_ping PORT: a Redis answers PING there.
redis_ping() {
    local reply
    reply="$(
        exec 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf 'PING\r\n' >&3
        read -r -t 2 line <&3 && printf '%s' "$line"
    )" || return 1
    [[ "$reply" == "+PONG"* ]]
}

# http_ok PORT PATH: a GET of PATH answers 200.
http_ok() {
    local status
    status="$(
        exec 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' "$2" >&3
        read -r -t 2 line <&3 && printf '%s' "$line"
    )" || return 1
    [[ "$status" == "HTTP/1.1 200"* ]]
}

install_redis() {
    command -v apt-get >/dev/null 2>&1 || return 1
    local sudo=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null 2>&1 || return 1
        # Never prompt without a terminal (CI); elsewhere sudo may ask for a password.
        if [[ -t 0 ]]; then sudo=(sudo); else sudo=(sudo -n); fi
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server
}

if ! command -v redis-server >/dev/null 2>&1; then
    say "redis-server is missing: installing it with apt-get"
    if ! install_redis || ! command -v redis-server >/dev/null 2>&1; then
        say "NOTE: redis-server could not be installed, so the flash-sale demo (which needs one Redis shared by two processes) cannot run."
        say "Running the quickstart example on the in-process memory backend instead"
        cargo run --quiet -p distlock-examples --bin quickstart
        exit $?
    fi
fi

say "tools"
redis-server --version
cargo --version

for port in "$REDIS_PORT" "${PORTS[@]}"; do
    if port_open "$port"; then
        die "port $port on 127.0.0.1 is already in use (a leftover of an interrupted demo? \
stop it, or choose other ports with DEMO_REDIS_PORT / DEMO_PORTS)"
    fi
done

say "building the examples ($PROFILE)"
build_start=$SECONDS
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
if [[ "$PROFILE" == release ]]; then
    cargo build --release -p distlock-examples --bins
    BIN="$TARGET/release"
else
    cargo build -p distlock-examples --bins
    BIN="$TARGET/debug"
fi
echo "built in $((SECONDS - build_start)) s"

say "starting redis-server on 127.0.0.1:$REDIS_PORT"
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
    --daemonize yes --pidfile "$REDIS_PIDFILE" --dir "$WORK" \
    --logfile "$WORK/redis.log" --protected-mode yes
for ((i = 0; i < 100; i++)); do
    redis_ping "$REDIS_PORT" && [[ -s "$REDIS_PIDFILE" ]] && break
    sleep 0.1
done
redis_ping "$REDIS_PORT" || {
    cat "$WORK/redis.log" >&2 || true
    die "redis-server did not answer on 127.0.0.1:$REDIS_PORT within 10 s"
}
echo "redis-server pid $(cat "$REDIS_PIDFILE") (empty: no persistence, started for this run)"

CONFIG="$WORK/distlock.toml"
cat >"$CONFIG" <<EOF
[defaults]
wait = "5s"
lease = "auto"
watchdog_timeout = "30s"
key_prefix = "demo:"

[backends.main]
mode = "single"
url = "redis://127.0.0.1:$REDIS_PORT/0"
EOF
DB="$WORK/flash-sale.db"

say "starting ${#PORTS[@]} flash-sale-server processes sharing $DB${UNLOCKED:+ (UNLOCKED)}"
for port in "${PORTS[@]}"; do
    "$BIN/flash-sale-server" --port "$port" --config "$CONFIG" --db "$DB" \
        --voucher 1 --stock "$STOCK" "${UNLOCKED[@]}" >"$WORK/server-$port.log" 2>&1 &
    SERVER_PIDS+=("$!")
done
servers=()
for ((n = 0; n < ${#PORTS[@]}; n++)); do
    port="${PORTS[$n]}"
    pid="${SERVER_PIDS[$n]}"
    for ((i = 0; i < 300; i++)); do
        http_ok "$port" /health && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if ! http_ok "$port" /health; then
        cat "$WORK/server-$port.log" >&2 || true
        if kill -0 "$pid" 2>/dev/null; then
            die "flash-sale-server on port $port did not answer within 30 s"
        fi
        die "flash-sale-server on port $port exited (its log is above)"
    fi
    echo "flash-sale-server pid $pid answers on http://127.0.0.1:$port"
    servers+=("127.0.0.1:$port")
done

say "load: $((USERS * PER_USER)) orders from $USERS users ($PER_USER at once per user) for a stock of $STOCK"
set +e
"$BIN/flash-sale-load" --servers "$(
    IFS=,
    echo "${servers[*]}"
)" --db "$DB" --users "$USERS" --per-user "$PER_USER" --voucher 1
status=$?
set -e

if ((status != 0)); then
    for port in "${PORTS[@]}"; do
        echo "--- server $port log (last 20 lines) ---" >&2
        tail -n 20 "$WORK/server-$port.log" >&2 || true
    done
fi
exit "$status"
