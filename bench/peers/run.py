#!/usr/bin/env python3
"""Runs distlock and its peers on the four workloads against one Redis, in alternating
order over several runs, prints the table and writes it (markdown + SVG) into a folder.

Called by `scripts/bench.sh peers` (which installs the peers and starts the server):

    run.py --url URL --rust EXE --node-dir DIR --python PY [--runs 2] [--out DIR]

Standard library only. Every contender is a fresh process per (run, workload); each prints
one JSON line (see bench/peers/README.md).
"""

import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# (id, label, runner); the runner is "rust", "node" or "python".
CONTENDERS = [
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
LABEL = {c: label for c, label, _ in CONTENDERS}
# The workloads whose figure is a throughput of a 2 s window: one process of the same
# contender differs from the next by up to 10-20 % on this VM (which CPU, which placement),
# and the best of six peers so taken is the luckiest. Each contender runs there in
# `--repeats` processes per run, and its median counts.
REPEATED = {"sequential", "concurrent"}

# (id, title, unit, higher is better)
WORKLOADS = [
    ("sequential", "sequential lock+unlock, 1 client, 64 rotating keys", "µs/pair", False),
    ("concurrent", "64 tasks, each its own key", "pairs/s", True),
    ("handoff", "hand-off, release → waiter holds it", "ms (p50)", False),
    ("hotkey", "one hot key, 16 tasks", "acquisitions/s (owner changes/s)", True),
]


def command(args, contender, runner, workload):
    if runner == "rust":
        return [args.rust, args.url, workload, contender]
    if runner == "node":
        return ["node", os.path.join(args.node_dir, "peer.mjs"), args.url, workload, contender]
    return [args.python, os.path.join(HERE, "python", "peer.py"), args.url, workload, contender]


def expiring_keys(url):
    """The number of keys with an expiry on the server at `url` (INFO keyspace, db 0)."""
    hostport = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = hostport.rpartition(":")
    with socket.create_connection((host or "127.0.0.1", int(port or 6379)), timeout=5) as s:
        s.sendall(b"*2\r\n$4\r\nINFO\r\n$8\r\nkeyspace\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            head, sep, rest = data.partition(b"\r\n")
            if sep and not head.startswith(b"$"):
                raise RuntimeError(f"INFO keyspace on {url}: {head.decode(errors='replace')}")
            if sep and len(rest) >= int(head[1:]) + 2:
                break
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("db0:"):
            for field in line[4:].split(","):
                if field.startswith("expires="):
                    return int(field[len("expires="):])
    return 0


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


def run_one(args, contender, runner, workload):
    cmd = command(args, contender, runner, workload)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 60 s"}
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {out.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


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


def fmt(workload, r):
    if "error" in r:
        return "error"
    if workload == "handoff":
        return f"{r['p50_ms']:.2f} / {r['max_ms']:.1f}"
    if workload == "sequential":
        return f"{r['value']:.0f}"
    if workload == "hotkey":
        return f"{r['value'] / 1000:.1f}k ({r['switches_per_s'] / 1000:.1f}k)"
    return f"{r['value'] / 1000:.1f}k" if r["value"] >= 1000 else f"{r['value']:.0f}"


def best_peer(results, workload, higher):
    vals = [(r["value"], c) for c, r in results.items() if c in PEERS and "error" not in r]
    if not vals:
        return None
    return max(vals) if higher else min(vals)


def ratio(r, best):
    if "error" in r or best is None or best[0] == 0:
        return None
    return r["value"] / best[0]


def tables(res, runs):
    """The summary and the full table, as markdown lines."""
    out = []
    out.append("| workload | distlock | best peer | distlock ÷ best peer | Redisson raw ÷ best peer |")
    out.append("|---|---|---|---|---|")
    for w, title, unit, higher in WORKLOADS:
        cells_d, cells_b, cells_r, cells_f = [], [], [], []
        for k in range(runs):
            rr = res[k][w]
            b = best_peer(rr, w, higher)
            d = rr.get("distlock", {"error": "missing"})
            f = rr.get("redisson-raw", {"error": "missing"})
            cells_d.append(fmt(w, d))
            cells_b.append(f"{fmt(w, rr[b[1]])} {LABEL[b[1]]}" if b else "—")
            rd, rf = ratio(d, b), ratio(f, b)
            cells_r.append(f"{rd:.2f}" if rd is not None else "—")
            cells_f.append(f"{rf:.2f}" if rf is not None else "—")
        u = "p50 / max ms" if w == "handoff" else unit
        out.append(
            f"| {title} ({u}; {'higher' if higher else 'lower'} is better) | {' · '.join(cells_d)} | "
            f"{' · '.join(cells_b)} | {' · '.join(cells_r)} | {' · '.join(cells_f)} |"
        )
    out.append("")
    out.append(
        "Each cell: run 1 · run 2. Ratio = the contender's value ÷ the best peer's in the same run "
        "(above 1 is slower for µs and ms, faster for /s)."
    )
    out.append("")
    out.append("| workload | contender | value (run 1 · run 2) | ÷ best peer | commands/op | server reads/op |")
    out.append("|---|---|---|---|---|---|")
    for w, title, unit, higher in WORKLOADS:
        u = "p50 / max ms" if w == "handoff" else unit
        for c, label, _ in CONTENDERS:
            if all(c not in res[k][w] for k in range(runs)):
                continue
            vals, rats, cmds, reads = [], [], [], []
            for k in range(runs):
                rr = res[k][w]
                r = rr.get(c, {"error": "missing"})
                b = best_peer(rr, w, higher)
                vals.append(fmt(w, r))
                q = ratio(r, b)
                rats.append("—" if q is None else f"{q:.2f}" + ("★" if b and b[1] == c else ""))
                cmds.append("—" if "error" in r else f"{r['cmds_per_op']:.1f}")
                reads.append("—" if "error" in r else f"{r['reads_per_op']:.1f}")
            out.append(
                f"| {w} ({u}) | {label} | {' · '.join(vals)} | {' · '.join(rats)} | "
                f"{' · '.join(cmds)} | {' · '.join(reads)} |"
            )
    out.append("")
    out.append(
        "★ the best peer of that run. commands/op: `INFO commandstats` calls between the window's "
        "ends (commands run inside scripts included, INFO left out) ÷ operations (pairs; hand-off "
        "rounds; hot-key acquisitions). server reads/op: `total_reads_processed` ÷ operations (about "
        "one per request on the sequential paths; less where requests are pipelined). Hot key: "
        "every acquisition counts (a release followed by the same task's next acquisition too); "
        "in brackets the acquisitions by another task than the last holder."
    )
    out.append("")
    out.extend(handoffs(res, runs))
    return out


def handoffs(res, runs):
    """The hot key by hand-off (an acquisition by another task than the last holder): what the
    issue's hot-key target counts, with the commands sent per hand-off."""
    out = [
        "| hot key, 16 tasks | hand-offs/s (run 1 · run 2) | ÷ best peer | commands per hand-off |",
        "|---|---|---|---|",
    ]
    per = {}
    for c, label, _ in CONTENDERS:
        vals, cmds = [], []
        for k in range(runs):
            r = res[k]["hotkey"].get(c, {"error": "missing"})
            if "error" in r or not r.get("switches_per_s"):
                vals.append(None)
                cmds.append(None)
                continue
            vals.append(r["switches_per_s"])
            cmds.append(r["cmds_per_op"] * r["value"] / r["switches_per_s"])
        per[c] = (label, vals, cmds)
    best = []
    for k in range(runs):
        peers = [(v[1][k], c) for c, v in per.items() if c in PEERS and v[1][k] is not None]
        best.append(max(peers) if peers else None)
    for c, (label, vals, cmds) in per.items():
        if all(v is None for v in vals):
            continue
        shown = " · ".join("—" if v is None else f"{v / 1000:.1f}k" for v in vals)
        rats = " · ".join(
            "—" if v is None or b is None else f"{v / b[0]:.2f}" + ("★" if b[1] == c else "")
            for v, b in zip(vals, best)
        )
        cm = " · ".join("—" if x is None else f"{x:.1f}" for x in cmds)
        out.append(f"| {label} | {shown} | {rats} | {cm} |")
    out.append("")
    out.append(
        "A hand-off: an acquisition by another task than the last holder (the bracketed figure "
        "above). Commands per hand-off: commands/op × acquisitions ÷ hand-offs (a poller's "
        "re-acquisitions by the same task and its refused polls are part of what each hand-off cost)."
    )
    return out


def breakdown(res, runs):
    out = ["| workload | contender | commands per op, by command (run 1) |", "|---|---|---|"]
    for w, _, _, _ in WORKLOADS:
        if w not in ("handoff", "hotkey", "sequential"):
            continue
        for c, label, _ in CONTENDERS:
            r = res[0][w].get(c, {"error": "missing"})
            if "error" in r:
                continue
            ops = max(r["ops"], 1)
            parts = sorted(r["breakdown"].items(), key=lambda kv: -kv[1])
            out.append(f"| {w} | {label} | " + ", ".join(f"{k} {v / ops:.2f}" for k, v in parts) + " |")
    return out


def svg(res, runs, path):
    """Four panels, one bar per contender (the mean of the runs), log scale, best peer marked."""
    import math

    W, PH, LW = 900, 250, 230
    colors = {"rust": "#1f77b4", "node": "#2ca02c", "python": "#ff7f0e"}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{PH * 4 + 40}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{PH * 4 + 40}" fill="white"/>',
        f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="16">distlock and its peers, one '
        f"loopback redis-server (mean of {runs} runs, log scale)</text>",
    ]
    for i, (w, title, unit, higher) in enumerate(WORKLOADS):
        y0 = 40 + i * PH
        vals = []
        for c, label, runner in CONTENDERS:
            rs = [res[k][w].get(c, {}) for k in range(runs)]
            vs = [r["value"] for r in rs if "value" in r and r["value"] > 0]
            if vs:
                vals.append((label, runner, c, sum(vs) / len(vs)))
        if not vals:
            continue
        lo = min(v for *_, v in vals) / 2
        hi = max(v for *_, v in vals) * 1.5
        span = math.log10(hi) - math.log10(lo)
        x = lambda v: LW + (W - LW - 80) * (math.log10(v) - math.log10(lo)) / span
        better = "higher" if higher else "lower"
        parts.append(f'<text x="10" y="{y0 + 16}" font-size="14">{title} ({unit.split(" (")[0]}, {better} is better)</text>')
        bh = (PH - 40) / len(vals)
        for j, (label, runner, c, v) in enumerate(vals):
            y = y0 + 26 + j * bh
            parts.append(f'<text x="{LW - 6}" y="{y + bh * 0.7}" text-anchor="end">{label}</text>')
            parts.append(
                f'<rect x="{LW}" y="{y + 2}" width="{max(x(v) - LW, 1):.1f}" height="{bh - 4:.1f}" '
                f'fill="{colors[runner]}"/>'
            )
            shown = f"{v:.2f}" if v < 10 else (f"{v:.0f}" if v < 10000 else f"{v / 1000:.1f}k")
            parts.append(f'<text x="{x(v) + 4:.1f}" y="{y + bh * 0.7}">{shown}</text>')
    parts.append(
        f'<text x="{W - 10}" y="{PH * 4 + 34}" text-anchor="end" fill="#555">blue: Rust (distlock, '
        "Redisson protocol raw) · green: Node.js · orange: Python</text>"
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--rust", required=True, help="the peers bench executable")
    ap.add_argument("--node-dir", required=True, help="peer.mjs with its node_modules")
    ap.add_argument("--python", required=True, help="a python with redis-py")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", help="folder for peers.md, peers.json and peers.svg")
    ap.add_argument("--only", nargs="*", help="contenders to run (default: all)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="processes per contender and run on the sequential and 64-task workloads "
        "(the median is kept; default 3)",
    )
    args = ap.parse_args()

    contenders = [c for c in CONTENDERS if not args.only or c[0] in args.only]
    res = [{w: {} for w, *_ in WORKLOADS} for _ in range(args.runs)]
    started = time.time()
    load0 = os.getloadavg()[0]
    baseline = expiring_keys(args.url)
    for k in range(args.runs):
        for i, (w, *_rest) in enumerate(WORKLOADS):
            # A B A B: the order turns every workload and every run (and every repeat).
            order = contenders if (k + i) % 2 == 0 else list(reversed(contenders))
            reps = args.repeats if w in REPEATED else 1
            samples = {c: [] for c, *_ in contenders}
            for j in range(reps):
                for c, label, runner in order if j % 2 == 0 else list(reversed(order)):
                    baseline = settle(args.url, baseline)
                    r = run_one(args, c, runner, w)
                    samples[c].append(r)
                    shown = r.get("error") or f"{fmt(w, r)}  ({r['cmds_per_op']:.1f} cmds/op)"
                    print(f"run {k + 1}  {w:<10}  {label:<30}  {shown}", flush=True)
            for c, *_ in contenders:
                res[k][w][c] = median_result(samples[c])
    took = time.time() - started
    load1 = os.getloadavg()[0]
    md = tables(res, args.runs)
    print()
    print("\n".join(md))
    print()
    print(
        f"({len(contenders)} contenders × {len(WORKLOADS)} workloads × {args.runs} runs, "
        f"{args.repeats} processes each on {', '.join(sorted(REPEATED))}, in {took:.0f} s)"
    )
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        doc = [
            "# distlock and its peers, one Redis",
            "",
            f"Written by `scripts/bench.sh peers` on {when}: {versions(args)}. One loopback "
            f"redis-server for everyone; {args.runs} runs, the contenders' order turned every workload "
            f"and run; every contender a fresh process per workload, the median of {args.repeats} "
            "processes on the sequential and 64-task workloads. How each workload is measured: "
            "[bench/peers/README.md](../../bench/peers/README.md). Chart: [peers.svg](peers.svg). "
            f"Load average (1 min) {load0:.1f} at the start, {load1:.1f} at the end, {took:.0f} s in all.",
            "",
            *md,
            "",
            "## Commands per operation, by command",
            "",
            *breakdown(res, args.runs),
            "",
        ]
        with open(os.path.join(args.out, "peers.md"), "w") as f:
            f.write("\n".join(doc))
        with open(os.path.join(args.out, "peers.json"), "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        svg(res, args.runs, os.path.join(args.out, "peers.svg"))
        print(f"wrote {args.out}/peers.md, peers.json, peers.svg")
    errors = [(k, w, c) for k in range(args.runs) for w in res[k] for c, r in res[k][w].items() if "error" in r]
    if errors:
        print(f"{len(errors)} runs failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
