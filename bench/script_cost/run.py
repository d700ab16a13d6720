#!/usr/bin/env python3
"""Server CPU per lock+unlock pair of distlock's scripts, against what bounds it.

    python3 bench/script_cost/run.py [--pairs N] [--rounds R]

Starts a private redis-server (the first on PATH) on a free loopback port, pinned to CPU 0
with `taskset`, and sends it, from this process on CPU 1, pairs of commands in pipelines
of 64 pairs, each pair on a key of its own; the server's CPU time (`INFO cpu`, user +
system) over a round, divided by its pairs, is the figure. The contenders alternate
round by round (A B C, C B A, ...); each one's median over the rounds is printed, with its
ratio to the floor:

  floor      SET NX PX and a compare-and-delete script: the two requests a pair needs
  noop       two EVALSHA of `return 0` with the arguments distlock sends: the scripts'
             calls and arguments, no work
  calls      the inner calls of a fresh acquisition and a release (EXISTS, INCR, SET PX;
             GET, DEL, PUBLISH) with no other Lua: what the calls alone cost
  distlock   the acquire and release scripts as distlock sends them by EVALSHA, where
             a server refuses its function library (their sources, prologues included,
             from distlock/src/protocol)
  functions  the same bodies as distlock's function library holds them, called with
             FCALL, as distlock sends them where the server takes the library: the
             prologues run once, when the library is loaded, not on every call

Nothing else should run on the machine meanwhile. No dependency beyond Python 3.
"""
import argparse
import os
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTOCOL = os.path.join(ROOT, "distlock", "src", "protocol")
BATCH = 64
OWNER = "0123456789abcdef0123456789abcdef"
HOLDER = "bench-host\t12345\tsrc/main.rs:42:9\t1764350000000"


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb")

    def read(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)

    def cmd(self, *args):
        self.s.sendall(enc(*args))
        return self.read()


def source(*files):
    return "".join(open(os.path.join(PROTOCOL, f)).read() for f in files)


def library():
    """acquire.lua and release.lua as functions of one library, after their prologues (as
    distlock's library, `protocol/script.rs`, defines them)."""
    body = source("record.lua", "fence_prologue.lua", "release_prologue.lua")
    for name, file, flags in (("acquire", "acquire.lua", ""), ("release", "release.lua", "'allow-oom'")):
        body += (
            "redis.register_function{function_name='dlbench_%s', callback=function(KEYS, ARGV)\n"
            "%s\nend, flags={%s}}\n" % (name, source(file), flags)
        )
    return "#!lua name=dlbench\n" + body


CALLS_ACQUIRE = """local found = redis.call('exists', KEYS[1], KEYS[3])
local token = redis.call('incr', KEYS[2])
redis.call('set', KEYS[1], ARGV[1] .. '\\t' .. token .. '\\t' .. ARGV[3] .. '\\t\\t\\t' .. ARGV[4], 'px', ARGV[2])
return {1, token}"""
CALLS_RELEASE = """local text = redis.call('get', KEYS[1])
redis.call('del', KEYS[1])
redis.call('publish', ARGV[2], ARGV[1])
return 0"""
COMPARE_AND_DELETE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def contenders(c):
    def load(src):
        return c.cmd("SCRIPT", "LOAD", src).decode()

    cad = load(COMPARE_AND_DELETE)
    c.cmd("FUNCTION", "LOAD", "REPLACE", library())
    pairs = {}

    def floor(key):
        return enc("SET", key, OWNER, "NX", "PX", "30000") + enc("EVALSHA", cad, "1", key, OWNER)

    pairs["floor"] = floor

    def scripted(verb, acquire, release):
        def pair(key):
            return enc(verb, acquire, "3", key, "distlock:fence", key + ":fence",
                       OWNER, "30000", "1a2b3c4d5e6f7a8b", HOLDER, "7f3e") + \
                enc(verb, release, "1", key, OWNER, key + ":released", "1a2b3c4d5e6f7a8b", "1")
        return pair

    noop = load("return 0")
    pairs["noop"] = scripted("EVALSHA", noop, noop)
    pairs["calls"] = scripted("EVALSHA", load(CALLS_ACQUIRE), load(CALLS_RELEASE))
    pairs["distlock"] = scripted(
        "EVALSHA",
        load(source("record.lua", "fence_prologue.lua", "acquire.lua")),
        load(source("record.lua", "release_prologue.lua", "release.lua")),
    )
    pairs["functions"] = scripted("FCALL", "dlbench_acquire", "dlbench_release")
    return pairs


def server_cpu(c):
    info = c.cmd("INFO", "cpu").decode()
    fields = dict(line.split(":", 1) for line in info.split("\r\n") if ":" in line)
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def measure(c, pair, prefix, n):
    batches = [b"".join(pair("lock:{%s:%d}" % (prefix, i)) for i in range(j, j + BATCH))
               for j in range(0, n, BATCH)]
    before = server_cpu(c)
    for b in batches:
        c.s.sendall(b)
        for _ in range(2 * BATCH):
            c.read()
    return (server_cpu(c) - before) * 1e6 / (len(batches) * BATCH)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=20000, help="pairs per contender and round")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    port = free_port()
    data = tempfile.mkdtemp()
    server = subprocess.Popen(
        ["taskset", "-c", "0", "redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", data],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        os.sched_setaffinity(0, {1 % os.cpu_count()})
        for _ in range(100):
            try:
                c = Conn(port)
                c.cmd("PING")
                break
            except (OSError, RuntimeError):
                time.sleep(0.05)
        else:
            raise SystemExit("script_cost: redis-server did not start")
        version = c.cmd("INFO", "server").decode().split("redis_version:")[1].split("\r\n")[0]
        pairs = contenders(c)
        names = list(pairs)
        figures = {n: [] for n in names}
        for r in range(args.rounds):
            for n in (names if r % 2 == 0 else names[::-1]):
                figures[n].append(measure(c, pairs[n], "%s-%d" % (n, r), args.pairs))
        floor = statistics.median(figures["floor"])
        print("server CPU per lock+unlock pair, %d pairs pipelined 64 at a time, median of %d "
              "rounds (redis-server %s, CPU 0; client CPU 1)" % (args.pairs, args.rounds, version))
        for n in names:
            m = statistics.median(figures[n])
            print("  %-10s %6.2f us  %5.2fx floor   (rounds: %s)" % (
                n, m, m / floor, " ".join("%.2f" % x for x in figures[n])))
    finally:
        server.terminate()
        server.wait()


main()
