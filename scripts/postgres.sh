#!/usr/bin/env bash
# A private PostgreSQL server for the fencing tests (distlock::fence's SQL pattern).
#
#   scripts/postgres.sh start   initdb into a fresh temp dir, start on 127.0.0.1:$PORT, wait until ready
#   scripts/postgres.sh stop    stop it (fast shutdown, then SIGKILL) and remove the dir (idempotent)
#   scripts/postgres.sh env     print `export DISTLOCK_TEST_POSTGRES=...` for the tests
#
# Port ${DISTLOCK_PG_PORT:-17388}; data, socket and log in ${DISTLOCK_PG_DIR:-/tmp/distlock-pg}.
# Uses Debian's `postgresql` package (/usr/lib/postgresql/<version>/bin); scripts/test.sh
# installs it when missing. PostgreSQL refuses to run as root, so as root the server runs
# as the `postgres` user the package creates.
set -euo pipefail

PORT="${DISTLOCK_PG_PORT:-17388}"
DIR="${DISTLOCK_PG_DIR:-/tmp/distlock-pg}"
HOST=127.0.0.1
START_TIMEOUT=30

log() { printf '[postgres] %s\n' "$*" >&2; }
die() {
    printf '[postgres] ERROR: %s\n' "$*" >&2
    exit 1
}

bindir() {
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && {
            echo "$d"
            return 0
        }
    done
    command -v initdb >/dev/null 2>&1 && {
        dirname "$(command -v initdb)"
        return 0
    }
    return 1
}

as_owner() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

url() { echo "postgres://distlock@$HOST:$PORT/postgres"; }

stop() {
    local bin
    bin="$(bindir)" || true
    if [[ -n "$bin" && -f "$DIR/data/postmaster.pid" ]]; then
        as_owner "$bin/pg_ctl" -D "$DIR/data" -m fast -w -t 10 stop >/dev/null 2>&1 || true
    fi
    if [[ -f "$DIR/data/postmaster.pid" ]]; then
        local pid
        pid="$(head -n1 "$DIR/data/postmaster.pid" 2>/dev/null || true)"
        [[ "$pid" =~ ^[0-9]+$ ]] && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$DIR"
}

start() {
    local bin
    bin="$(bindir)" || die "PostgreSQL not found: apt-get install -y postgresql (scripts/test.sh does)"
    stop
    mkdir -p "$DIR"
    [[ "$(id -u)" == 0 ]] && chown postgres: "$DIR"
    as_owner "$bin/initdb" -D "$DIR/data" -U distlock --auth=trust -E UTF8 --no-sync >"$DIR/initdb.log" 2>&1 ||
        {
            cat "$DIR/initdb.log" >&2
            die "initdb failed"
        }
    as_owner "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t "$START_TIMEOUT" \
        -o "-c listen_addresses=$HOST -p $PORT -k $DIR -c fsync=off -c max_connections=50" start >/dev/null ||
        {
            tail -n 20 "$DIR/server.log" >&2 || true
            die "PostgreSQL did not start on $HOST:$PORT"
        }
    log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on $HOST:$PORT ($DIR)"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
env) echo "export DISTLOCK_TEST_POSTGRES=$(url)" ;;
*) die "usage: $0 start|stop|env" ;;
esac
