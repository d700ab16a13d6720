#!/usr/bin/env bash
# THE test command of distlock: starts every real redis topology the suite
# needs (scripts/servers.sh), runs `cargo test --workspace "$@"` against them
# (without --workspace when "$@" selects packages with -p), and stops the
# servers again on every exit path.
#
#   scripts/test.sh                      # whole workspace
#   scripts/test.sh -p distlock-tests    # extra args go to `cargo test`
#
# Without arguments (as CI runs it) a passing suite is followed by the fault-testing run
# `scripts/torture.sh --quick` (also with DISTLOCK_TORTURE=1), which must pass too.
#
# Installs redis-server / redis-sentinel with apt-get when they are missing.
# Concurrent runs on one machine are serialized with a lock file, since all
# runs share the same fixed ports.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SERVERS="$ROOT/scripts/servers.sh"
LOCK_FILE="${DISTLOCK_TEST_LOCK:-/tmp/distlock-test.lock}"
LOCK_TIMEOUT="${DISTLOCK_TEST_LOCK_TIMEOUT:-1800}"

section() { printf '\n==== %s ====\n' "$*"; }
die() {
    printf 'scripts/test.sh: ERROR: %s\n' "$*" >&2
    exit 1
}

install_redis() {
    local sudo=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null 2>&1 ||
            die "redis-server/redis-sentinel missing and not root without sudo: install the Debian packages redis-server and redis-sentinel"
        # Never prompt in CI; elsewhere sudo may ask for a password.
        if [[ "${CI:-}" == true ]]; then sudo=(sudo -n); else sudo=(sudo); fi
    fi
    command -v apt-get >/dev/null 2>&1 ||
        die "redis-server/redis-sentinel missing and apt-get not available: install redis (7.x) by hand"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        redis-server redis-sentinel redis-tools
}

install_postgres() {
    command -v apt-get >/dev/null 2>&1 ||
        die "PostgreSQL missing and apt-get not available: install the Debian package postgresql"
    local sudo=()
    [[ "$(id -u)" != 0 ]] && sudo=(sudo -n)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql
}

section "tools"
missing=()
for tool in redis-server redis-sentinel redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
    echo "missing: ${missing[*]}; installing with apt-get"
    install_redis
fi
# PostgreSQL (Debian's package keeps initdb/pg_ctl in /usr/lib/postgresql/<v>/bin) for the
# SQL fencing tests.
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && ! command -v initdb >/dev/null 2>&1; then
    echo "missing: PostgreSQL; installing with apt-get"
    install_postgres
fi
# Other tools of the tests, by Debian package: openssl (the TLS tests' certificates),
# iproute2 and iptables (the torture run's network-namespace partition, partition-netns),
# faketime (examples/tests/scheduled_report.rs skews two instances' clocks with it). The
# missing ones are installed with one apt-get.
packages=()
command -v openssl >/dev/null 2>&1 || packages+=(openssl)
command -v ip >/dev/null 2>&1 || packages+=(iproute2)
command -v iptables >/dev/null 2>&1 || packages+=(iptables)
command -v faketime >/dev/null 2>&1 || packages+=(faketime)
if ((${#packages[@]})); then
    echo "missing: ${packages[*]}; installing with apt-get"
    command -v apt-get >/dev/null 2>&1 || die "apt-get not available: install the Debian packages ${packages[*]}"
    sudo_cmd=()
    [[ "$(id -u)" != 0 ]] && sudo_cmd=(sudo -n)
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
fi
command -v cargo >/dev/null 2>&1 || die "cargo not found in PATH"
# A whole-suite build from a clean clone gains nothing from incremental compilation, and its
# files double the target directory's size: off unless asked for.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
redis-server --version
redis-sentinel --version | sed 's/^/sentinel: /'
cargo --version
rustc --version

# Lints first: they need no server. Skipped when a package selection or extra arguments
# ask for a partial run (DISTLOCK_LINT=1 forces them).
if (($# == 0)) || [[ "${DISTLOCK_LINT:-}" == 1 ]]; then
    section "cargo fmt --check"
    cargo fmt --all -- --check
    section "cargo clippy -D warnings"
    cargo clippy --workspace --all-targets --all-features -- -D warnings
    section "cargo doc (warnings denied)"
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features
    section "commit subjects (at most 72 characters)"
    bash "$ROOT/scripts/check-commits.sh"
    section "links of README.md and docs/*.md"
    bash "$ROOT/scripts/check-links.sh"
    # The three library crates as they would be published: each packaged and built from its
    # package alone (distlock against the packaged distlock-macros and distlock-config).
    section "cargo package (distlock-config, distlock-macros, distlock)"
    # cargo package verifies each crate against the others' freshly packaged copies through a
    # local registry, and keeps their unpacked sources by name and version in CARGO_HOME: a
    # previous run's copies (same version, older content) would be used instead. Remove them.
    cargo_home="${CARGO_HOME:-$HOME/.cargo}"
    find "$cargo_home/registry/src" "$cargo_home/registry/cache" -mindepth 2 -maxdepth 2 \
        -path '*/-*/distlock*' -exec rm -rf {} + 2>/dev/null || true
    # Registry crates are never rebuilt for a change of their sources (a version is
    # immutable), so the verification builds in a target directory of its own, made afresh:
    # a previous run's distlock-config 0.1.0 would otherwise be reused, however old.
    rm -rf "$ROOT/target/package-check"
    CARGO_TARGET_DIR="$ROOT/target/package-check" \
        cargo package --allow-dirty -p distlock-config -p distlock-macros -p distlock
    rm -rf "$ROOT/target/package-check"
fi

# One run at a time per machine: the ports are fixed, and a second run's
# `servers.sh start` would pull the servers from under the first.
if command -v flock >/dev/null 2>&1; then
    exec 9>>"$LOCK_FILE"
    if ! flock -n 9; then
        echo "another scripts/test.sh run holds $LOCK_FILE; waiting up to ${LOCK_TIMEOUT}s"
        flock -w "$LOCK_TIMEOUT" 9 || die "still locked after ${LOCK_TIMEOUT}s: $LOCK_FILE"
    fi
else
    echo "warning: flock not found; concurrent runs of scripts/test.sh would collide on ports" >&2
fi

# shellcheck disable=SC2317 # invoked via trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    section "stopping test servers"
    bash "$SERVERS" stop 9>&- || echo "warning: scripts/servers.sh stop failed" >&2
    bash "$ROOT/scripts/postgres.sh" stop 9>&- || echo "warning: scripts/postgres.sh stop failed" >&2
    exit "$rc"
}

section "stopping leftover test servers"
bash "$SERVERS" stop 9>&-

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

section "starting test servers"
# 9>&-: the daemonized servers must not inherit (and so hold) the lock.
bash "$SERVERS" start 9>&-
eval "$(bash "$SERVERS" env)"
bash "$ROOT/scripts/postgres.sh" start 9>&-
eval "$(bash "$ROOT/scripts/postgres.sh" env)"
env | grep '^DISTLOCK_' | sort

# `--workspace` by default; a package selection (-p/--package) replaces it,
# since cargo ignores -p next to --workspace.
scope=(--workspace)
for arg in "$@"; do
    [[ "$arg" == -- ]] && break
    case "$arg" in
    -p | -p* | --package | --package=*) scope=() ;;
    esac
done

section "$(printf '%s ' cargo test "${scope[@]}" "$@")"
status=0
cargo test --no-fail-fast "${scope[@]}" "$@" 9>&- || status=$?

# The fault-testing run (scripts/torture.sh --quick, about 4 minutes) after a passing full
# suite (no cargo arguments, as CI runs it), or whenever DISTLOCK_TORTURE=1. Its servers
# are its own (17300..17339).
if ((status == 0)) && { (($# == 0)) || [[ "${DISTLOCK_TORTURE:-}" == 1 ]]; }; then
    section "scripts/torture.sh --quick"
    bash "$ROOT/scripts/torture.sh" --quick 9>&- || status=$?
fi

if ((status == 0)); then
    section "tests passed"
else
    section "tests FAILED (cargo exit status $status)"
fi
exit "$status"
