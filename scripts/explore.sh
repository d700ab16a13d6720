#!/usr/bin/env bash
# The explorer: random schedules of lock operations and faults over several owners and
# tasks, run against its own private servers, every step checked against a model of what
# the locks promise; a violation prints its seed and the shrunk schedule (tests/src/explore,
# tests/src/bin/explore.rs; docs/fault-testing.md "The explorer").
#
#   scripts/explore.sh [--quick|--long] [--backend B] [--format F] [--seed S] [--schedules N]
#                      [--report FILE] [--failing]
#
# --quick (the default): the fixed seeds of tests/explore-seeds.txt marked `pass`, plus 120
#   random schedules on memory and 20 on single (their first seed is printed;
#   EXPLORE_QUICK_RANDOM_SINGLE=N changes the 20); a few minutes.
# --long: an hour (split over the backends asked for), random seeds; writes a report
#   (default target/explore-report.txt): schedules, operations, faults, violations.
# --backend: memory | single (default: both). --format: distlock (the Redisson format is
#   not explored yet: asking for it is an error). --seed S --schedules N: exactly those
#   schedules (`--seed S --schedules 1` replays a seed). --failing: the seeds of
#   tests/explore-seeds.txt marked `fail` (known violations awaiting their fix; none today).
# Exits 1 on a violation, 2 on bad usage. Servers: private redis-servers on 17400..17499
# and fault proxies on 17340..17379 (tests/src/lib.rs, tests/src/proxy.rs); the shared
# test servers are not touched.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

die() {
    printf 'scripts/explore.sh: ERROR: %s\n' "$*" >&2
    exit 2
}

mode=quick
backends=()
format=distlock
seed=
schedules=
report=
failing=
while (($#)); do
    case "$1" in
    --quick) mode=quick ;;
    --long) mode=long ;;
    --backend) backends+=("${2:?--backend needs a value}") && shift ;;
    --format) format="${2:?--format needs a value}" && shift ;;
    --seed) seed="${2:?--seed needs a value}" && shift ;;
    --schedules) schedules="${2:?--schedules needs a value}" && shift ;;
    --report) report="${2:?--report needs a value}" && shift ;;
    --failing) failing=1 ;;
    *) die "unknown argument $1 (see the head of scripts/explore.sh)" ;;
    esac
    shift
done
((${#backends[@]})) || backends=(memory single)
for b in "${backends[@]}"; do
    case "$b" in
    memory | single) ;;
    cluster | sentinel | redlock | multi) die "backend $b is not explored yet (memory, single)" ;;
    *) die "unknown backend $b (memory, single)" ;;
    esac
done
case "$format" in
distlock) ;;
redisson) die "the Redisson format is not explored yet (--format distlock)" ;;
*) die "unknown format $format (distlock)" ;;
esac
command -v redis-server >/dev/null 2>&1 ||
    die "redis-server not found (scripts/test.sh installs it with apt-get)"

cargo build -q -p distlock-tests --bin explore
bin="${CARGO_TARGET_DIR:-$ROOT/target}/debug/explore"
seeds_file="$ROOT/tests/explore-seeds.txt"
start=$(date +%s)
[[ -n "$seed" ]] || seed=$(date +%s)
[[ "$mode" == long && -z "$report" ]] && report="${CARGO_TARGET_DIR:-$ROOT/target}/explore-report.txt"
if [[ -n "$report" ]]; then
    printf 'explore %s run of %s, backends %s, first random seed %s\n' \
        "$mode" "$(date -u +%FT%TZ)" "${backends[*]}" "$seed" >>"$report"
fi

status=0
for b in "${backends[@]}"; do
    args=(--backend "$b")
    [[ -n "$report" ]] && args+=(--report "$report")
    if [[ -n "$failing" ]]; then
        args+=(--seeds-file "$seeds_file" --failing --schedules 0)
    elif [[ -n "$schedules" ]]; then
        args+=(--seed "$seed" --schedules "$schedules")
    elif [[ "$mode" == long ]]; then
        args+=(--seed "$seed" --schedules 1000000000 --duration $((3600 / ${#backends[@]})))
    else
        # A schedule on single takes about 1.6 s (faults, restarts): 20 of them there.
        case "$b" in
        memory) n=120 ;;
        *) n="${EXPLORE_QUICK_RANDOM_SINGLE:-20}" ;;
        esac
        args+=(--seeds-file "$seeds_file" --seed "$seed" --schedules "$n")
    fi
    echo "scripts/explore.sh: $bin ${args[*]}"
    "$bin" "${args[@]}" || status=$?
    ((status <= 1)) || exit "$status"
done
echo "scripts/explore.sh: $mode, $(($(date +%s) - start)) s, exit status $status"
exit "$status"
