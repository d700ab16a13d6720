#!/usr/bin/env bash
# The files one acquisition and release of a reentrant lock on a single server run through,
# measured rather than read: `lock-worker pairs` (1000 acquire + release pairs in sequence)
# runs under valgrind's callgrind against a private redis-server, and
# scripts/acquire-path.py lists the files of distlock/src called at least once per pair
# (what start-up alone calls, a few hundred times, stays below that),
# by folder, and the calls between files of different folders.
#
#   scripts/acquire-path.sh [CHECKOUT]     # CHECKOUT: another checkout of distlock
#
# ACQUIRE_PATH_KEEP=FILE keeps the callgrind output. Needs valgrind and redis-server. The server listens on 127.0.0.1:17390 and is stopped on
# exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TREE="$(cd "${1:-$ROOT}" && pwd)"
PAIRS=1000
PORT=17390

command -v valgrind >/dev/null || { echo "scripts/acquire-path.sh: valgrind is needed" >&2; exit 2; }
(cd "$TREE" && cargo build -q -p distlock-tests --bin lock-worker)
bin="${CARGO_TARGET_DIR:-$TREE/target}/debug/lock-worker"

dir="$(mktemp -d)"
cleanup() {
    redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --daemonize yes --logfile "$dir/log"
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

valgrind --tool=callgrind --callgrind-out-file="$dir/out" -q \
    "$bin" pairs "redis://127.0.0.1:$PORT" path "$PAIRS" >/dev/null
[[ -z "${ACQUIRE_PATH_KEEP:-}" ]] || cp "$dir/out" "$ACQUIRE_PATH_KEEP"
python3 "$ROOT/scripts/acquire-path.py" "$dir/out" "$PAIRS" "$TREE/distlock/tests/architecture.rs"
