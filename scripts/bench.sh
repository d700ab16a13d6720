#!/usr/bin/env bash
# Benchmarks on the shared loopback servers (started here, stopped on exit).
#
#   scripts/bench.sh          the performance targets: one table, every row a ratio
#                             measured in this run (tests/benches/targets.rs)
#   scripts/bench.sh --all    also the detailed tables: distlock vs its own-script floor and
#                             rslock (locks), every topology (topologies), redlock/multi
#                             (quorum)
#   scripts/bench.sh --plot   also the charts (SVG, plotters) into docs/bench/: hand-off
#                             latency per topology, throughput against tasks
#   (--all and --plot combine; arguments after them go to the benches, e.g.
#   `scripts/bench.sh -- handoff` runs only that row group)
#   scripts/bench.sh peers    distlock against node-redlock, redis-semaphore, redis-py and a
#                             floor without a library (installed here under target/peers:
#                             npm, pip in a venv) on six workloads (two across processes), on
#                             ONE private redis-server (port 17400-17449, started here,
#                             stopped on exit) pinned to a CPU, every client pinned on the
#                             server's CPU and on the other; two runs in alternating order;
#                             prints the tables and writes docs/bench/peers.{md,json,svg}.
#                             Arguments after `peers` go to bench/peers/run.py (e.g.
#                             `--runs 1`, `--only distlock semaphore-tuned`, `--out ''`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ "${1:-}" == "peers" ]]; then
  shift
  exec bash scripts/bench-peers.sh "$@"
fi
benches=(--bench targets)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --all) benches+=(--bench locks --bench topologies --bench quorum --bench fair_semaphore); shift ;;
    --plot) export DISTLOCK_BENCH_PLOT="$PWD/docs/bench"; shift ;;
    *) break ;;
  esac
done
bash scripts/servers.sh stop >/dev/null 2>&1 || true
bash scripts/servers.sh start
trap 'bash scripts/servers.sh stop >/dev/null 2>&1 || true' EXIT INT TERM
eval "$(bash scripts/servers.sh env)"
cargo bench -p distlock-tests "${benches[@]}" "$@"
