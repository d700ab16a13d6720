#!/usr/bin/env python3
"""Runs distlock, its peers and a floor without a library on six workloads against one
Redis, every client process pinned to a CPU in both placements (on the server's CPU, on
another), in alternating order over several runs; prints the tables and writes them
(markdown + JSON + SVG) into a folder.

Called by `scripts/bench.sh peers` (which installs the peers and starts the pinned server):

    run.py --url URL --rust EXE --node-dir DIR --python PY --server-cpu N [--runs 2] [--out DIR]

Standard library only. Every contender is a fresh process (or set of processes, on the
cross-process workloads) per (placement, run, workload); each prints one JSON line (see
bench/peers/README.md). run.py reaps each with `os.wait4` (the process's whole CPU, start-up
included, `process_cpu_us` in the JSON, shown beside the window's CPU) and kills what is left of its process
group before the next one starts.
"""

import argparse
import datetime
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# (id, label, runner); the runner is "rust", "node" or "python".
CONTENDERS = [
    ("bare", "no library: SET NX PX + compare-and-delete (1 ms poll)", "rust"),
    ("distlock", "distlock", "rust"),
    ("distlock-barging", "distlock, handoff = false", "rust"),
    ("redisson-raw", "Redisson protocol raw", "rust"),
    ("redlock", "node-redlock (200 ms)", "node"),
    ("redlock-tuned", "node-redlock (10 ms)", "node"),
    ("semaphore", "redis-semaphore Mutex (10 ms)", "node"),
    ("semaphore-tuned", "redis-semaphore Mutex (1 ms)", "node"),
    ("redis-py", "redis-py Lock (0.1 s)", "python"),
    ("redis-py-tuned", "redis-py Lock (0.01 s)", "python"),
]
PEERS = {"redlock", "redlock-tuned", "semaphore", "semaphore-tuned", "redis-py", "redis-py-tuned"}
FLOOR = "bare"
LABEL = {c: label for c, label, _ in CONTENDERS}
# The workloads whose figure is a throughput of a 2 s window: one process of the same
# contender differs from the next by up to 10-20 % on this VM, and the best of six peers so
# taken is the luckiest. Each contender runs there in `--repeats` processes per run, and
# its median counts.
REPEATED = {"sequential", "concurrent"}

# The cross-process workloads (the same as the single-process ones', see README.md).
XPROCS = 4
XTASKS = 4
XHOT_SECS = 2.0
HANDOFF_SECS = 3.0
HANDOFF_MAX = 200
HANDOFF_MIN = 5
TIMEOUT = 60

# (id, title, unit, higher is better)
WORKLOADS = [
    ("sequential", "sequential lock+unlock, 1 client, 64 rotating keys", "µs/pair", False),
    ("concurrent", "64 tasks, each its own key", "pairs/s", True),
    ("handoff", "hand-off in one process, release → waiter holds it", "ms (p50)", False),
    ("hotkey", "one hot key, 16 tasks of one process", "acquisitions/s (owner changes/s)", True),
    ("xhandoff", "hand-off between processes, release → waiter holds it", "ms (p50)", False),
    (
        "xhotkey",
        f"one hot key, {XPROCS} processes × {XTASKS} tasks",
        "acquisitions/s (owner changes between processes/s)",
        True,
    ),
]
UNIT = {w: unit for w, _, unit, _ in WORKLOADS}


def command(args, contender, runner, workload, key=None):
    tail = [args.url, workload, contender] + ([key] if key else [])
    if runner == "rust":
        return [args.rust, *tail]
    if runner == "node":
        return ["node", os.path.join(args.node_dir, "peer.mjs"), *tail]
    return [args.python, os.path.join(HERE, "python", "peer.py"), *tail]


# ---------------------------------------------------------------- the server's counters


def info(url, *sections):
    """The text of `INFO sections..` on the server at `url`, on a connection of its own."""
    hostport = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = hostport.rpartition(":")
    req = [b"INFO", *(s.encode() for s in sections)]
    msg = b"*%d\r\n" % len(req) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in req)
    with socket.create_connection((host or "127.0.0.1", int(port or 6379)), timeout=5) as s:
        s.sendall(msg)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, rest = data.partition(b"\r\n")
            if sep and not head.startswith(b"$"):
                raise RuntimeError(f"INFO on {url}: {head.decode(errors='replace')}")
            if sep and len(rest) >= int(head[1:]) + 2:
                break
    return data.partition(b"\r\n")[2].decode(errors="replace")


def expiring_keys(url):
    """The number of keys with an expiry on the server at `url` (INFO keyspace, db 0)."""
    for line in info(url, "keyspace").splitlines():
        if line.startswith("db0:"):
            for field in line[4:].split(","):
                if field.startswith("expires="):
                    return int(field[len("expires="):])
    return 0


def server_stats(url):
    """Calls and µs per command, read events and the server's CPU (µs), as the contenders'
    own snapshots read them (INFO commandstats stats cpu)."""
    calls, usec, reads, cpu = {}, {}, 0, 0.0
    for line in info(url, "commandstats", "stats", "cpu").splitlines():
        if line.startswith("cmdstat_"):
            name, _, stats = line[len("cmdstat_"):].partition(":")
            fields = dict(kv.split("=", 1) for kv in stats.split(","))
            calls[name], usec[name] = int(fields["calls"]), int(fields["usec"])
        elif line.startswith("total_reads_processed:"):
            reads = int(line.split(":", 1)[1])
        elif line.startswith(("used_cpu_user:", "used_cpu_sys:")):
            cpu += float(line.split(":", 1)[1]) * 1e6
    return {"calls": calls, "usec": usec, "reads": reads, "cpu": cpu}


def server_counted(a, b, ops):
    """The fields of `counted` in the contenders: commands (INFO left out), read events and
    server CPU between two `server_stats`, per operation."""
    breakdown, usec = {}, 0
    for k, v in b["calls"].items():
        if k == "info":
            continue
        usec += b["usec"][k] - a["usec"].get(k, 0)
        if v - a["calls"].get(k, 0) > 0:
            breakdown[k] = v - a["calls"].get(k, 0)
    cmds = sum(breakdown.values())
    ops = max(ops, 1)
    return {
        "cmds": cmds,
        "cmds_per_op": cmds / ops,
        "reads_per_op": (b["reads"] - a["reads"] - 1) / ops,  # the second INFO's own read
        "server_cpu_us_per_op": (b["cpu"] - a["cpu"]) / ops,
        "server_cmd_us_per_op": usec / ops,
        "breakdown": breakdown,
    }


def settle(url, baseline):
    """Wait (at most 5 s) until the server holds no more keys with an expiry than
    `baseline`, or none of them has expired for 250 ms (what is left lives long: a fencing
    counter's 24 h), so that what a contender left to expire (Redisson raw's unlock latches,
    1 s each) is not expired on the next contender's time. Returns the count then: the
    next call's baseline."""
    end = time.monotonic() + 5
    last, still = expiring_keys(url), time.monotonic()
    while last > baseline:
        if time.monotonic() > end:
            print(f"settle: keys with an expiry still above {baseline} after 5 s", file=sys.stderr)
            return last
        time.sleep(0.02)
        n = expiring_keys(url)
        if n != last:
            last, still = n, time.monotonic()
        elif time.monotonic() - still >= 0.25:
            return last
    return last


# ---------------------------------------------------------------- the contenders' processes


class Child:
    """A contender's process, pinned to `cpu` by taskset, in a process group of its own
    (killed as a whole when reaped), stdin and stdout as pipes, killed after TIMEOUT s."""

    def __init__(self, cmd, cpu):
        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(
            ["taskset", "-c", str(cpu), *cmd],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self.timer = threading.Timer(TIMEOUT, self.kill)
        self.timer.start()
        self.timed_out = False
        self.result = None

    def kill(self):
        self.timed_out = True
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def say(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def expect(self, word):
        """The next line of stdout, which must start with `word`."""
        line = self.p.stdout.readline().strip()
        if not line.startswith(word):
            raise RuntimeError(f"expected {word!r}, got {line!r}: {self.tail()}")
        return line

    def tail(self):
        if self.timed_out:
            return f"timed out after {TIMEOUT} s"
        self.err.seek(0)
        return " | ".join(self.err.read().strip().splitlines()[-3:])

    def finish(self):
        """Reads stdout to its end, reaps the process (`os.wait4`) and kills what is left
        of its group; returns its JSON line with `process_cpu_us` (user + sys of the whole
        process), or {"error": ..}. Once: later calls return the same."""
        if self.result is None:
            self.result = self._finish()
        return self.result

    def _finish(self):
        try:
            out = self.p.stdout.read()
        except (OSError, ValueError):
            out = ""
        _, status, ru = os.wait4(self.p.pid, 0)
        self.timer.cancel()
        self.p.returncode = os.waitstatus_to_exitcode(status)
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        lines = [l for l in out.splitlines() if l.startswith("{")]
        if self.p.returncode != 0 or not lines:
            return {"error": f"exit {self.p.returncode}: {self.tail()}"}
        r = json.loads(lines[-1])
        r["process_cpu_us"] = (ru.ru_utime + ru.ru_stime) * 1e6
        r["process_cpu_us_per_op"] = r["process_cpu_us"] / max(r.get("ops", 0), 1)
        return r


def run_one(args, contender, runner, workload, cpu):
    """A single-process workload: the contender's own JSON line."""
    child = Child(command(args, contender, runner, workload), cpu)
    child.p.stdin.close()
    return child.finish()


def run_xhotkey(args, contender, runner, cpu, key):
    """XPROCS processes × XTASKS tasks on one key for XHOT_SECS: acquisitions/s and owner
    changes between processes/s over the span every process was in its window, ordered by
    the instants (CLOCK_MONOTONIC) each took while holding the key."""
    kids = [Child(command(args, contender, runner, "xhotkey", key), cpu) for _ in range(XPROCS)]
    try:
        for k in kids:
            k.expect("ready")
        s0 = server_stats(args.url)
        for k in kids:
            k.say(f"go {XHOT_SECS} {XTASKS}")
        # Read every process's output at once: one blocked on a full pipe would not exit,
        # and its waiters would go on asking the server for the key.
        readers = [threading.Thread(target=k.finish) for k in kids]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        outs = [k.finish() for k in kids]
    except (RuntimeError, OSError) as e:
        for k in kids:
            k.kill()
            k.finish()
        return {"error": str(e)}
    s1 = server_stats(args.url)
    for o in outs:
        if "error" in o:
            return o
    start = max(o["start_ns"] for o in outs)
    end = min(o["end_ns"] for o in outs)
    events = sorted((t, i) for i, o in enumerate(outs) for t in o["acquired"] if start <= t <= end)
    changes = sum(1 for a, b in zip(events, events[1:]) if a[1] != b[1])
    secs = (end - start) / 1e9
    ops = sum(o["ops"] for o in outs)
    return {
        "contender": contender,
        "workload": "xhotkey",
        "value": len(events) / secs,
        "unit": "acquisitions/s",
        "switches_per_s": changes / secs,
        "ops": len(events),
        "secs": secs,
        "per_process": [o["ops"] for o in outs],
        "client_cpu_us_per_op": sum(o["client_cpu_us"] for o in outs) / max(ops, 1),
        "process_cpu_us": sum(o["process_cpu_us"] for o in outs),
        "process_cpu_us_per_op": sum(o["process_cpu_us"] for o in outs) / max(ops, 1),
        **server_counted(s0, s1, ops),
    }


def run_xhandoff(args, contender, runner, cpu, key):
    """A holder process and a waiter process: per round the holder takes the key, the
    waiter asks for it, the holder releases 5 ms (+ a random point of a poller's cycle)
    later; the latency is the waiter's acquire instant minus the holder's release instant,
    both CLOCK_MONOTONIC. 2 rounds of warm-up, then HANDOFF_SECS or HANDOFF_MAX rounds."""
    holder = Child(command(args, contender, runner, "xholder", key), cpu)
    waiter = Child(command(args, contender, runner, "xwaiter", key), cpu)

    def round_():
        holder.say("hold")
        holder.expect("held")
        waiter.say("wait")
        waiter.expect("waiting")
        holder.say("release")
        released = int(holder.expect("released").split()[1])
        acquired = int(waiter.expect("acquired").split()[1])
        return (acquired - released) / 1e6

    try:
        holder.expect("ready")
        waiter.expect("ready")
        for _ in range(2):
            round_()
        for k in (holder, waiter):
            k.say("mark")
            k.expect("marked")
        s0 = server_stats(args.url)
        t0 = time.monotonic()
        lat = []
        while len(lat) < HANDOFF_MIN or (len(lat) < HANDOFF_MAX and time.monotonic() - t0 < HANDOFF_SECS):
            lat.append(round_())
        secs = time.monotonic() - t0
        s1 = server_stats(args.url)
        for k in (holder, waiter):
            k.say("end")
        outs = [holder.finish(), waiter.finish()]
    except (RuntimeError, OSError) as e:
        for k in (holder, waiter):
            k.kill()
            k.finish()
        return {"error": str(e)}
    for o in outs:
        if "error" in o:
            return o
    lat.sort()
    pct = lambda p: lat[round((len(lat) - 1) * p)]  # noqa: E731
    return {
        "contender": contender,
        "workload": "xhandoff",
        "value": pct(0.5),
        "unit": "ms",
        "p50_ms": pct(0.5),
        "p90_ms": pct(0.9),
        "max_ms": lat[-1],
        "ops": len(lat),
        "secs": secs,
        "client_cpu_us_per_op": sum(o["client_cpu_us"] for o in outs) / len(lat),
        "process_cpu_us": sum(o["process_cpu_us"] for o in outs),
        "process_cpu_us_per_op": sum(o["process_cpu_us"] for o in outs) / len(lat),
        **server_counted(s0, s1, len(lat)),
    }


def median_result(rs):
    """The result of the median value among one contender's processes (with every
    value under "samples"); an error if any of them failed."""
    for r in rs:
        if "error" in r:
            return r
    if len(rs) == 1:
        return rs[0]
    m = dict(sorted(rs, key=lambda r: r["value"])[len(rs) // 2])
    m["samples"] = [r["value"] for r in rs]
    return m


def per_s(v):
    return f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"


def fmt(workload, r):
    if "error" in r:
        return "error"
    if workload in ("handoff", "xhandoff"):
        return f"{r['p50_ms']:.2f} / {r['max_ms']:.1f}"
    if workload == "sequential":
        return f"{r['value']:.0f}"
    if workload in ("hotkey", "xhotkey"):
        return f"{per_s(r['value'])} ({per_s(r['switches_per_s'])})"
    return per_s(r["value"])


def fmt_cpu(r, field):
    if "error" in r or field not in r:
        return "—"
    return f"{r[field]:.0f}" if r[field] >= 10 else f"{r[field]:.1f}"


def best_peer(results, workload, higher):
    vals = [(r["value"], c) for c, r in results.items() if c in PEERS and "error" not in r]
    if not vals:
        return None
    return max(vals) if higher else min(vals)


def ratio(r, best):
    if "error" in r or best is None or best[0] == 0:
        return None
    return r["value"] / best[0]


def unit_of(w):
    return "p50 / max ms" if w in ("handoff", "xhandoff") else UNIT[w]


def summary(res, placements, runs, contenders):
    """distlock, the best peer and the floor per workload and placement."""
    ids = {c for c, *_ in contenders}
    out = [
        "| workload | placement | distlock | best peer | distlock ÷ best peer | no library (floor) | "
        "distlock ÷ floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for w, title, _, higher in WORKLOADS:
        for pl in placements:
            d, b, rb, f, rf = [], [], [], [], []
            for k in range(runs):
                rr = res[pl][k][w]
                best = best_peer(rr, w, higher)
                dr = rr.get("distlock", {"error": "missing"})
                fr = rr.get(FLOOR, {"error": "missing"})
                d.append(fmt(w, dr) if "distlock" in ids else "—")
                b.append(f"{fmt(w, rr[best[1]])} {LABEL[best[1]]}" if best else "—")
                q = ratio(dr, best)
                rb.append(f"{q:.2f}" if q is not None else "—")
                f.append(fmt(w, fr) if FLOOR in ids else "—")
                q = ratio(dr, (fr["value"], FLOOR)) if "error" not in fr else None
                rf.append(f"{q:.2f}" if q is not None else "—")
            out.append(
                f"| {title} ({unit_of(w)}; {'higher' if higher else 'lower'} is better) | {pl} | "
                f"{' · '.join(d)} | {' · '.join(b)} | {' · '.join(rb)} | {' · '.join(f)} | {' · '.join(rf)} |"
            )
    out.append("")
    out.append(
        "Each cell: run 1 · run 2. Ratio = distlock's value ÷ the best peer's (or the floor's) in the "
        "same placement and run (above 1 is slower for µs and ms, faster for /s). `same`: every client "
        "process on the server's CPU; `split`: on the other CPU."
    )
    return out


def full_table(res, pl, runs, contenders):
    """Every contender on every workload in one placement."""
    out = [
        "| workload | contender | value | ÷ best peer | client µs CPU/op (whole process) | "
        "server µs CPU/op | commands/op |",
        "|---|---|---|---|---|---|---|",
    ]
    for w, _, _, higher in WORKLOADS:
        for c, label, _ in contenders:
            if all(c not in res[pl][k][w] for k in range(runs)):
                continue
            vals, rats, ccpu, scpu, cmds = [], [], [], [], []
            for k in range(runs):
                rr = res[pl][k][w]
                r = rr.get(c, {"error": "missing"})
                b = best_peer(rr, w, higher)
                vals.append(fmt(w, r))
                q = ratio(r, b)
                rats.append("—" if q is None else f"{q:.2f}" + ("★" if b and b[1] == c else ""))
                ccpu.append(
                    f"{fmt_cpu(r, 'client_cpu_us_per_op')} ({fmt_cpu(r, 'process_cpu_us_per_op')})"
                )
                scpu.append(fmt_cpu(r, "server_cpu_us_per_op"))
                cmds.append("—" if "error" in r else f"{r['cmds_per_op']:.1f}")
            out.append(
                f"| {w} ({unit_of(w)}) | {label} | {' · '.join(vals)} | {' · '.join(rats)} | "
                f"{' · '.join(ccpu)} | {' · '.join(scpu)} | {' · '.join(cmds)} |"
            )
    out.append("")
    out.append(
        "Each cell: run 1 · run 2. ★ the best peer of that run. client µs CPU/op: the contender's "
        "processes' user + system CPU over the measured window (getrusage / process.cpuUsage) ÷ "
        "operations; in brackets the whole processes' (`os.wait4`: start-up and warm-up included) ÷ "
        "the same operations. server µs CPU/op: redis-server's `used_cpu_user` + `used_cpu_sys` over the window "
        "÷ operations (its I/O included; the server runs nothing else). "
        "commands/op: `INFO commandstats` calls over the window (commands run inside scripts "
        "included, INFO left out) ÷ operations (pairs; hand-off rounds; hot-key acquisitions). "
        "Hot key: every acquisition counts (a release followed by the same task's next acquisition "
        "too); in brackets the acquisitions by another task than the last holder (cross-process: "
        "by another process)."
    )
    return out


def breakdown(res, pl, contenders):
    out = [f"| workload | contender | commands per op, by command ({pl}, run 1) |", "|---|---|---|"]
    for w, _, _, _ in WORKLOADS:
        if w == "concurrent":
            continue
        for c, label, _ in contenders:
            r = res[pl][0][w].get(c, {"error": "missing"})
            if "error" in r:
                continue
            ops = max(r["ops"], 1)
            parts = sorted(r["breakdown"].items(), key=lambda kv: -kv[1])
            out.append(f"| {w} | {label} | " + ", ".join(f"{k} {v / ops:.2f}" for k, v in parts) + " |")
    return out


def svg(res, placements, runs, contenders, path):
    """One panel per workload, one bar per contender and placement (the mean of the runs),
    log scale."""
    import math

    W, LW = 900, 330
    colors = {"rust": "#1f77b4", "node": "#2ca02c", "python": "#ff7f0e"}
    panels = []
    for w, title, unit, higher in WORKLOADS:
        vals = []
        for c, label, runner in contenders:
            for pl in placements:
                rs = [res[pl][k][w].get(c, {}) for k in range(runs)]
                vs = [r["value"] for r in rs if "value" in r and r["value"] > 0]
                if vs:
                    vals.append((f"{label} · {pl}", runner, pl, sum(vs) / len(vs)))
        if vals:
            panels.append((title, unit, higher, vals))
    bh = 14
    heights = [40 + bh * len(v) for *_, v in panels]
    H = 40 + sum(heights) + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="16">distlock and its peers, one pinned '
        f"loopback redis-server (mean of {runs} runs, log scale)</text>",
    ]
    y0 = 40
    for (title, unit, higher, vals), ph in zip(panels, heights):
        lo = min(v for *_, v in vals) / 2
        hi = max(v for *_, v in vals) * 1.5
        span = math.log10(hi) - math.log10(lo)
        x = lambda v: LW + (W - LW - 80) * (math.log10(v) - math.log10(lo)) / span  # noqa: E731
        better = "higher" if higher else "lower"
        parts.append(f'<text x="10" y="{y0 + 16}" font-size="14">{title} ({unit.split(" (")[0]}, {better} is better)</text>')
        for j, (label, runner, pl, v) in enumerate(vals):
            y = y0 + 26 + j * bh
            opacity = "1" if pl == placements[0] else "0.55"
            parts.append(f'<text x="{LW - 6}" y="{y + bh * 0.75}" text-anchor="end">{label}</text>')
            parts.append(
                f'<rect x="{LW}" y="{y + 1}" width="{max(x(v) - LW, 1):.1f}" height="{bh - 2}" '
                f'fill="{colors[runner]}" fill-opacity="{opacity}"/>'
            )
            shown = f"{v:.2f}" if v < 10 else (f"{v:.0f}" if v < 10000 else f"{v / 1000:.1f}k")
            parts.append(f'<text x="{x(v) + 4:.1f}" y="{y + bh * 0.75}">{shown}</text>')
        y0 += ph
    parts.append(
        f'<text x="{W - 10}" y="{H - 8}" text-anchor="end" fill="#555">blue: Rust (no library, distlock, '
        f"Redisson protocol raw) · green: Node.js · orange: Python; paler: {', '.join(placements[1:])}</text>"
    )
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def versions(args):
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001 - a missing tool only leaves the line out
            return "?"

    lock = os.path.join(args.node_dir, "node_modules")
    def npm_version(pkg):
        try:
            with open(os.path.join(lock, pkg, "package.json")) as f:
                return json.load(f)["version"]
        except OSError:
            return "?"

    return (
        f"redis-server {out(['redis-server', '--version']).split('v=')[-1].split()[0]}, "
        f"node {out(['node', '--version'])} (redlock {npm_version('redlock')}, redis-semaphore "
        f"{npm_version('redis-semaphore')}, ioredis {npm_version('ioredis')}), "
        f"{out([args.python, '--version'])} (redis-py "
        f"{out([args.python, '-c', 'import redis; print(redis.__version__)'])}), "
        f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    )


def placement_cpus(server_cpu, placements):
    """The client CPU of each placement: `same` the server's, `split` another one this
    process may run on."""
    others = sorted(os.sched_getaffinity(0) - {server_cpu})
    cpus = {}
    for pl in placements:
        if pl == "same":
            cpus[pl] = server_cpu
        elif pl == "split" and others:
            cpus[pl] = others[0]
        else:
            sys.exit(f"placement {pl}: no CPU for it (server on {server_cpu}, others {others})")
    return cpus


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--rust", required=True, help="the peers bench executable")
    ap.add_argument("--node-dir", required=True, help="peer.mjs with its node_modules")
    ap.add_argument("--python", required=True, help="a python with redis-py")
    ap.add_argument("--server-cpu", type=int, required=True, help="the CPU redis-server is pinned to")
    ap.add_argument("--placements", nargs="+", default=["same", "split"], choices=["same", "split"])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", help="folder for peers.md, peers.json and peers.svg")
    ap.add_argument("--only", nargs="*", help="contenders to run (default: all)")
    ap.add_argument("--workloads", nargs="*", help="workloads to run (default: all)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="processes per contender and run on the sequential and 64-task workloads "
        "(the median is kept; default 3)",
    )
    ap.add_argument(
        "--pause",
        type=float,
        default=1.0,
        help="seconds of quiet between one contender's processes and the next's (default 1)",
    )
    args = ap.parse_args()

    global WORKLOADS
    if args.workloads:
        WORKLOADS = [w for w in WORKLOADS if w[0] in args.workloads]
    contenders = [c for c in CONTENDERS if not args.only or c[0] in args.only]
    cpus = placement_cpus(args.server_cpu, args.placements)
    res = {pl: [{w: {} for w, *_ in WORKLOADS} for _ in range(args.runs)] for pl in args.placements}
    started = time.time()
    load0 = os.getloadavg()[0]
    baseline = expiring_keys(args.url)
    # The cross-process keys are unique to this invocation too: an earlier one's abandoned
    # holders (30 s leases) must not hold them.
    invocation = f"{os.getpid()}-{int(started)}"
    for k in range(args.runs):
        # The placements' order turns every run too (same, split; split, same; …).
        placements = args.placements if k % 2 == 0 else list(reversed(args.placements))
        for p, pl in enumerate(placements):
            for i, (w, *_rest) in enumerate(WORKLOADS):
                # A B A B: the order turns every workload, placement and run (and repeat).
                order = contenders if (k + p + i) % 2 == 0 else list(reversed(contenders))
                reps = args.repeats if w in REPEATED else 1
                samples = {c: [] for c, *_ in contenders}
                for j in range(reps):
                    for c, label, runner in order if j % 2 == 0 else list(reversed(order)):
                        baseline = settle(args.url, baseline)
                        time.sleep(args.pause)  # quiet between contenders, not a synchronisation
                        key = f"bench:{c}:{pl}:{k}:{w}:{invocation}"
                        if w == "xhotkey":
                            r = run_xhotkey(args, c, runner, cpus[pl], key)
                        elif w == "xhandoff":
                            r = run_xhandoff(args, c, runner, cpus[pl], key)
                        else:
                            r = run_one(args, c, runner, w, cpus[pl])
                        samples[c].append(r)
                        shown = r.get("error") or (
                            f"{fmt(w, r)}  ({r['cmds_per_op']:.1f} cmds/op, client "
                            f"{fmt_cpu(r, 'client_cpu_us_per_op')} µs/op, server "
                            f"{fmt_cpu(r, 'server_cpu_us_per_op')} µs/op)"
                        )
                        print(f"run {k + 1}  {pl:<5}  {w:<10}  {label:<30}  {shown}", flush=True)
                for c, *_ in contenders:
                    res[pl][k][w][c] = median_result(samples[c])
    took = time.time() - started
    load1 = os.getloadavg()[0]
    md = [*summary(res, args.placements, args.runs, contenders), ""]
    for pl in args.placements:
        md += [f"## Every contender, placement `{pl}` (clients on CPU {cpus[pl]})", ""]
        md += [*full_table(res, pl, args.runs, contenders), ""]
    print()
    print("\n".join(md))
    print(
        f"({len(contenders)} contenders × {len(WORKLOADS)} workloads × {len(args.placements)} placements "
        f"× {args.runs} runs, {args.repeats} processes each on {', '.join(sorted(REPEATED))}, in {took:.0f} s; "
        f"server on CPU {args.server_cpu}, load average {load0:.1f} → {load1:.1f})"
    )
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        repeated = f"the median of {args.repeats} processes" if args.repeats > 1 else "one process"
        doc = [
            "# distlock and its peers, one Redis",
            "",
            f"Written by `scripts/bench.sh peers` on {when}: {versions(args)}. One loopback "
            f"redis-server for everyone, pinned to CPU {args.server_cpu}; every client process pinned "
            f"too, in each placement ({', '.join(f'`{pl}`: CPU {c}' for pl, c in cpus.items())}). "
            f"{args.runs} runs, the contenders' order turned every workload, placement and run; every "
            f"contender a fresh process (or set of processes) per workload, {args.pause:g} s of quiet "
            f"between contenders, {repeated} on the sequential and 64-task workloads. How each "
            "workload is measured: [bench/peers/README.md](../../bench/peers/README.md). "
            f"Chart: [peers.svg](peers.svg). Load average (1 min) {load0:.1f} at the start, "
            f"{load1:.1f} at the end, {took:.0f} s in all.",
            "",
            *md,
            "## Commands per operation, by command",
            "",
            *breakdown(res, args.placements[0], contenders),
            "",
        ]
        with open(os.path.join(args.out, "peers.md"), "w") as f:
            f.write("\n".join(doc))
        with open(os.path.join(args.out, "peers.json"), "w") as f:
            json.dump({"server_cpu": args.server_cpu, "client_cpus": cpus, "results": res}, f, indent=1)
            f.write("\n")
        svg(res, args.placements, args.runs, contenders, os.path.join(args.out, "peers.svg"))
        print(f"wrote {args.out}/peers.md, peers.json, peers.svg")
    errors = [
        (pl, k, w, c)
        for pl in res
        for k in range(args.runs)
        for w in res[pl][k]
        for c, r in res[pl][k][w].items()
        if "error" in r
    ]
    if errors:
        print(f"{len(errors)} runs failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
