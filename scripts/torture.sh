#!/usr/bin/env bash
# Fault testing: real faults against real redis-servers, several worker processes taking
# one lock, and a history checker on what they recorded (tests/src/bin/torture.rs,
# tests/src/bin/torture-worker.rs, tests/src/history.rs).
#
#   scripts/torture.sh [--quick|--long] [--keep] [scenario...]
#
# Prints one row per scenario x backend: sections, unsignalled overlaps, signalled
# overlaps, stale writes accepted / refused by the fenced resource, lost updates on an
# unfenced counter, token regressions, time. Exits non-zero on any unsignalled overlap or
# accepted stale write (scenarios marked "documented limit" excepted). --quick (the
# default; about 2 minutes) runs in scripts/test.sh; --long runs each scenario 60 s.
#
# Servers listen on 127.0.0.1:17300..17319, proxies on 17320..17339. Everything the run
# starts is in its own process group, killed on every way out of this script.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

die() {
    printf 'scripts/torture.sh: ERROR: %s\n' "$*" >&2
    exit 2
}

command -v redis-server >/dev/null 2>&1 ||
    die "redis-server not found (scripts/test.sh installs it with apt-get)"
command -v setsid >/dev/null 2>&1 || die "setsid (util-linux) not found"

busy=()
for port in $(seq 17300 17339); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then busy+=("$port"); fi
done
((${#busy[@]} == 0)) || die "ports in use (a previous run left servers?): ${busy[*]}"

cargo build -q -p distlock-tests --bin torture --bin torture-worker
target="${CARGO_TARGET_DIR:-$ROOT/target}/debug"

pid=
# shellcheck disable=SC2317 # invoked via trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n "$pid" ]]; then
        # The run's process group: the torture driver, its servers and workers.
        kill -KILL -- "-$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start=$(date +%s)
setsid "$target/torture" "$@" &
pid=$!
status=0
wait "$pid" || status=$?
pid_done=$pid
pid=
# Anything of the group still alive (it should not be) goes too.
kill -KILL -- "-$pid_done" 2>/dev/null || true
echo "torture.sh: $(($(date +%s) - start)) s, exit status $status"
exit "$status"
