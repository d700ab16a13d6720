#!/usr/bin/env bash
# Benchmarks distlock against the raw-script floor and rslock on a loopback redis-server.
# Starts the test servers, runs the bench in release mode, prints its table, stops them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/servers.sh stop >/dev/null 2>&1 || true
bash scripts/servers.sh start
trap 'bash scripts/servers.sh stop >/dev/null 2>&1 || true' EXIT INT TERM
eval "$(bash scripts/servers.sh env)"
cargo bench -p distlock-tests --bench locks --bench topologies --bench quorum "$@"
