#!/usr/bin/env bash
# The explorer: random schedules of lock operations and faults over several owners and
# tasks, run against its own private servers, every step checked against a model of what
# the locks promise; a violation prints its seed and the shrunk schedule (tests/src/explore,
# tests/src/bin/explore.rs; docs/fault-testing.md "The explorer").
#
#   scripts/explore.sh [--quick|--long] [--backend B] [--format F] [--seed S] [--schedules N]
#                      [--extended|--focused] [--holders] [--siblings] [--resets] [--report FILE]
#                      [--failing]
#
# --quick (the default): the fixed seeds of tests/explore-seeds.txt marked `pass` for each
#   backend and format asked for, plus random schedules: 600 on memory (16 at once), 20 on single
#   (EXPLORE_QUICK_RANDOM_SINGLE=N changes the 20), none on the other backends (their
#   schedules take several seconds each), and as many again from the same first seed in
#   the extended generator: 150 on memory, 4 on single, and in the focused generator: 150
#   on memory, 20 on single; the first seed is printed. Without --backend
#   (any mode): memory, single, cluster, sentinel, redlock, multi, then single and cluster
#   in Redisson's format; --quick takes about four minutes.
# --long: an hour (split over the backends asked for, and each backend's share over the
#   plain, the extended and the focused generator), random seeds; writes a report (default
#   target/explore-report.txt): schedules, operations, faults, violations.
# --backend: memory | single | cluster | sentinel | redlock | multi (repeatable).
#   --format: distlock (default) | redisson (single, cluster, sentinel; the seeds file
#   names them `single/redisson`). --seed S --schedules N: exactly those schedules
#   (`--seed S --schedules 1` replays a seed). --extended: the extended generator
#   (multi-key locks, leader elections, run-once jobs, fenced increments; the seeds file
#   marks its seeds `extended`) for --seed/--schedules and --long. --focused: the focused
#   generator (one name, no faults, so every step is judged: nested acquisitions of one
#   name across kinds in one task, tasks of one owner waiting for a lock another of its
#   tasks holds, force_unlock and try_acquire in between; the seeds file marks its seeds
#   `focused`) for --seed/--schedules and --long. --holders: faults also pause a holder in
#   a process of its own (SIGSTOP past its lease; the seeds file marks such seeds
#   `holders`) for --seed/--schedules; --quick and --long draw them in their random
#   schedules on every backend but memory. --siblings: `join!` siblings too (two
#   acquisitions by one task at once; seeds marked `siblings`) for --seed/--schedules;
#   --quick and --long draw them in their random schedules. --resets: an owner's
#   connections reset through its fault proxies, or the next reply of each server lost
#   (single, redlock, multi; seeds marked `resets`) for --seed/--schedules; --quick and
#   --long draw them in their random schedules. --failing: the seeds of
#   tests/explore-seeds.txt marked `fail` (known violations awaiting their fix).
# Exits 1 on a violation, 2 on bad usage or when the run's own servers failed twice (--long:
# at its end, the other runs done). Servers: private redis-servers, clusters and
# sentinel groups on 17400..17499 (cluster buses on 27400..27499) and fault proxies on
# 17340..17378 (tests/src/lib.rs, tests/src/topology.rs, tests/src/proxy.rs); the shared
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
format=
seed=
schedules=
report=
failing=
extended=
focused=
holders=
siblings=
resets=
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
    --extended) extended=1 ;;
    --focused) focused=1 ;;
    --holders) holders=1 ;;
    --siblings) siblings=1 ;;
    --resets) resets=1 ;;
    *) die "unknown argument $1 (see the head of scripts/explore.sh)" ;;
    esac
    shift
done
# Runs: BACKEND or BACKEND/redisson.
runs=()
if ((${#backends[@]})); then
    for b in "${backends[@]}"; do
        case "$b" in
        memory | single | cluster | sentinel | redlock | multi) ;;
        *) die "unknown backend $b (memory, single, cluster, sentinel, redlock, multi)" ;;
        esac
        case "${format:-distlock}" in
        distlock) runs+=("$b") ;;
        redisson)
            case "$b" in
            single | cluster | sentinel) runs+=("$b/redisson") ;;
            *) die "--format redisson needs --backend single, cluster or sentinel (not $b)" ;;
            esac
            ;;
        *) die "unknown format $format (distlock, redisson)" ;;
        esac
    done
elif [[ -n "$format" && "$format" != distlock ]]; then
    [[ "$format" == redisson ]] || die "unknown format $format (distlock, redisson)"
    runs=(single/redisson cluster/redisson)
else
    runs=(memory single cluster sentinel redlock multi single/redisson cluster/redisson)
fi
[[ -n "$extended" && -n "$focused" ]] && die "--extended and --focused are two generators: one at a time"
command -v redis-server >/dev/null 2>&1 ||
    die "redis-server not found (scripts/test.sh installs it with apt-get)"

cargo build -q -p distlock-tests --bin explore --bin lock-worker
bin="${CARGO_TARGET_DIR:-$ROOT/target}/debug/explore"
seeds_file="$ROOT/tests/explore-seeds.txt"
start=$(date +%s)
[[ -n "$seed" ]] || seed=$(date +%s)
[[ "$mode" == long && -z "$report" ]] && report="${CARGO_TARGET_DIR:-$ROOT/target}/explore-report.txt"
if [[ -n "$report" ]]; then
    printf 'explore %s run of %s, backends %s, first random seed %s\n' \
        "$mode" "$(date -u +%FT%TZ)" "${runs[*]}" "$seed" >>"$report"
fi

status=0
aborted=0
# One run of the explorer. A violation (exit 1) is kept for the exit status. A run whose
# own servers failed twice (exit 2) stops a quick run at once; a long run notes it and goes
# on with the next generator and backend (an hour is not lost to one cluster that would
# not settle).
explore_run() {
    local rc=0
    "$bin" "$@" || rc=$?
    case "$rc" in
    0) ;;
    1) status=1 ;;
    2) if [[ "$mode" == long ]]; then aborted=1; else exit $((status == 1 ? 1 : 2)); fi ;;
    *) exit "$rc" ;;
    esac
}
for run in "${runs[@]}"; do
    b="${run%%/*}"
    args=(--backend "$b")
    [[ "$run" == */redisson ]] && args+=(--format redisson)
    [[ -n "$report" ]] && args+=(--report "$report")
    [[ -n "$extended" ]] && args+=(--extended)
    [[ -n "$focused" ]] && args+=(--focused)
    # Random schedules (--quick's and --long's) draw the extra faults and steps; a listed
    # seed says itself what it was drawn with.
    random=
    if [[ "$mode" == long || -z "$schedules$failing" ]]; then random=1; fi
    if [[ -n "$holders" || -n "$random" && "$b" != memory ]]; then
        args+=(--holders)
    fi
    if [[ -n "$siblings" || -n "$random" ]]; then
        args+=(--siblings)
    fi
    if [[ -n "$resets" || -n "$random" && "$b" != memory ]]; then
        args+=(--resets)
    fi
    if [[ -n "$failing" ]]; then
        args+=(--seeds-file "$seeds_file" --failing --schedules 0)
    elif [[ -n "$schedules" ]]; then
        args+=(--seed "$seed" --schedules "$schedules")
    elif [[ "$mode" == long ]]; then
        # A third of each backend's share for each generator (all of it for the extended
        # or the focused one when --extended or --focused asks for it alone).
        share=$((3600 / ${#runs[@]}))
        if [[ -z "$extended" && -z "$focused" ]]; then
            share=$((share / 3))
            for generator in --extended --focused; do
                echo "scripts/explore.sh: $bin ${args[*]} $generator --seed $seed --schedules 1000000000 --duration $share"
                explore_run "${args[@]}" "$generator" --seed "$seed" --schedules 1000000000 --duration "$share"
            done
        fi
        args+=(--seed "$seed" --schedules 1000000000 --duration "$share")
    else
        # A schedule on single takes about 1.6 s (faults, restarts): 20 of them there; on
        # the other topologies several seconds (failovers settle): their fixed seeds only.
        # The extended generator's random schedules: fewer (its seeds are listed too); the
        # focused generator's (no faults: about 0.5 s each, on memory as on single) too.
        case "$run" in
        # Memory: 16 at once, not 32 (--long's): the checks' timing bounds assume a
        # runtime that is not starved, and the test command must not fail on load.
        memory) n=600 x=150 f=150 args+=(--jobs 16) ;;
        single) n="${EXPLORE_QUICK_RANDOM_SINGLE:-20}" x=4 f=20 ;;
        *) n=0 x=0 f=0 ;;
        esac
        args+=(--seeds-file "$seeds_file" --seed "$seed" --schedules "$n" --extended-schedules "$x")
        args+=(--focused-schedules "$f")
    fi
    echo "scripts/explore.sh: $bin ${args[*]}"
    explore_run "${args[@]}"
done
((status == 0 && aborted)) && status=2
echo "scripts/explore.sh: $mode, $(($(date +%s) - start)) s, exit status $status"
exit "$status"
