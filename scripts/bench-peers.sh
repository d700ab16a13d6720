#!/usr/bin/env bash
# `scripts/bench.sh peers`: distlock and its peers on one private loopback redis-server.
#
# Installs the peers under target/peers (not committed): the Node.js ones with npm from
# bench/peers/node/package-lock.json (`npm ci`; the first install writes the lock file back
# into bench/peers/node), redis-py with pip into a venv from bench/peers/python/requirements.txt.
# Builds the Rust side (tests/benches/peers.rs, release), starts a redis-server of its own on
# the first free port in 17400-17449 (stopped on exit), pinned with taskset to one CPU
# (BENCH_SERVER_CPU, default 0), and runs bench/peers/run.py, which pins every client process
# to that CPU (placement `same`) and to another (`split`), alternates the contenders over two
# runs and writes docs/bench/peers.{md,json,svg}. Arguments go to run.py (`--runs N`,
# `--only ID..`, `--workloads ID..`, `--placements same|split`, `--out DIR`; `--out ''`
# writes nothing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
work="$root/target/peers"
mkdir -p "$work/node"

for tool in node npm python3 redis-server redis-cli cargo taskset; do
  command -v "$tool" >/dev/null || { echo "bench peers: $tool is not installed" >&2; exit 1; }
done

# --- the Node.js peers
src="$root/bench/peers/node"
cp "$src/package.json" "$src"/*.mjs "$work/node/"
if [[ -f "$src/package-lock.json" ]]; then
  if ! cmp -s "$src/package-lock.json" "$work/node/.installed-lock" 2>/dev/null \
    || [[ ! -d "$work/node/node_modules" ]]; then
    cp "$src/package-lock.json" "$work/node/"
    (cd "$work/node" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$src/package-lock.json" "$work/node/.installed-lock"
  fi
else
  (cd "$work/node" && npm install --no-audit --no-fund --loglevel=error)
  cp "$work/node/package-lock.json" "$src/package-lock.json"
  cp "$src/package-lock.json" "$work/node/.installed-lock"
  echo "bench peers: wrote bench/peers/node/package-lock.json (commit it)"
fi

# --- the Python peer
if [[ ! -x "$work/venv/bin/python" ]]; then
  python3 -m venv "$work/venv"
fi
"$work/venv/bin/pip" install --quiet --disable-pip-version-check \
  -r "$root/bench/peers/python/requirements.txt"

# --- distlock's side (and Redisson's protocol raw)
exe=$(cargo bench -p distlock-tests --bench peers --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "peers" and m.get("executable"):
        print(m["executable"])
')
if [[ -z "$exe" ]]; then
  cargo bench -p distlock-tests --bench peers --no-run # shows the error
  exit 1
fi

# --- one redis-server of our own
port=""
for p in $(seq 17400 17449); do
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    port=$p
    break
  fi
done
[[ -n "$port" ]] || { echo "bench peers: no free port in 17400-17449" >&2; exit 1; }
server_cpu=${BENCH_SERVER_CPU:-0}
data=$(mktemp -d)
taskset -c "$server_cpu" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$data" \
  --logfile "$data/redis.log" &
server=$!
cleanup() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT INT TERM
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.05
done
echo "bench peers: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on 127.0.0.1:$port, CPU $server_cpu"

python3 "$root/bench/peers/run.py" --url "redis://127.0.0.1:$port" --rust "$exe" \
  --node-dir "$work/node" --python "$work/venv/bin/python" --server-cpu "$server_cpu" \
  --out "$root/docs/bench" "$@"
