#!/usr/bin/env bash
# Fault testing: real faults against real redis-servers, several worker processes taking
# one lock, and a history checker on what they recorded (tests/src/bin/torture.rs,
# tests/src/bin/torture-worker.rs, tests/src/history.rs).
#
#   scripts/torture.sh [--quick|--long] [--keep] [--kind KIND]... [scenario...]
#
# Prints one row per scenario x backend x lock kind: sections, unsignalled overlaps,
# signalled overlaps, stale writes accepted / refused by the fenced resource, lost updates
# on an unfenced counter, token regressions, time; then the overlaps summed per kind.
# Exits non-zero on any unsignalled overlap or accepted stale write (scenarios marked
# "documented limit" excepted), and on a scenario without progress, a recovery after a
# fault past its bound, or a free lock refused (docs/fault-testing.md, "Liveness"). Kinds: reentrant, write, read-write (readers and writers
# by turns; readers may share), semaphore (1 permit), leader, redisson, redisson-rw (the
# Redisson format). --quick (the default; about 4 minutes) runs in scripts/test.sh, every
# kind on the pause and kill scenarios only; --long runs each scenario x kind 60 s.
#
# Servers listen on 127.0.0.1:17300..17319, proxies on 17320..17339. Everything the run
# starts is in its own process group, killed on every way out of this script; so are the
# network namespaces of partition-netns (dlt<PID>n<I>, with their veth pairs and iptables
# rules). Needs root, iproute2 and iptables for partition-netns, and cc (the C compiler
# Rust links with) for the redlock-clock scenarios' wall-clock shifter.
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
command -v ip >/dev/null 2>&1 || die "ip (iproute2) not found (scripts/test.sh installs it with apt-get)"
command -v iptables >/dev/null 2>&1 || die "iptables not found (scripts/test.sh installs it with apt-get)"
command -v cc >/dev/null 2>&1 || die "cc (a C compiler) not found: apt-get install -y gcc"

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
        remove_netns "$pid"
    fi
    exit "$rc"
}

# The namespaces (and veth host ends) of the torture process $1, if it left any.
remove_netns() {
    local ns link
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^dlt$1n" || true); do
        ip netns del "$ns" 2>/dev/null || true
    done
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^dlt$1h" || true); do
        ip link del "$link" 2>/dev/null || true
    done
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
remove_netns "$pid_done"
echo "torture.sh: $(($(date +%s) - start)) s, exit status $status"
exit "$status"
