#!/usr/bin/env bash
# Benchmarks on the shared loopback servers (started here, stopped on exit).
#
#   scripts/bench.sh          the performance targets: one table, every row a ratio
#                             measured in this run (tests/benches/targets.rs)
#   scripts/bench.sh --all    also the detailed tables: distlock vs its own-script floor and
#                             rslock (locks), every topology (topologies), redlock/multi
#                             (quorum)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
benches=(--bench targets)
if [[ "${1:-}" == "--all" ]]; then
  shift
  benches+=(--bench locks --bench topologies --bench quorum)
fi
bash scripts/servers.sh stop >/dev/null 2>&1 || true
bash scripts/servers.sh start
trap 'bash scripts/servers.sh stop >/dev/null 2>&1 || true' EXIT INT TERM
eval "$(bash scripts/servers.sh env)"
cargo bench -p distlock-tests "${benches[@]}" "$@"
