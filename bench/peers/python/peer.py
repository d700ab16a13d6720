"""The Python peer of distlock's peer benchmark: one contender, one workload, one JSON line.

    python peer.py <redis-url> <workload> <contender> [key]

workload:  sequential | concurrent | handoff | hotkey   (see bench/peers/README.md; the same
           parameters as bench/peers/node/workloads.mjs and tests/benches/peers.rs), or a
           cross-process role on `key` (xhotkey | xholder | xwaiter), driven by run.py
contender: redis-py        redis-py's asyncio Lock, sleep 0.1 s (its default)
           redis-py-tuned  redis-py's asyncio Lock, sleep 0.01 s
Every contender: one redis.asyncio.Redis client (its connection pool) for the whole
process, a 30 s lease (timeout), blocking without a limit within the workload's wait.
"""

import asyncio
import json
import os
import random
import resource
import sys
import time

import redis.asyncio as aioredis
from redis.asyncio.lock import Lock

SEQ_KEYS = 64
SEQ_SECS = 2
SEQ_MAX = 20_000
CONC_TASKS = 64
CONC_SECS = 2
HANDOFF_SECS = 3
HANDOFF_MAX = 200
HANDOFF_MIN = 5
HANDOFF_SETTLE_MS = 5
HOT_TASKS = 16
HOT_SECS = 2

LEASE_S = 30


def now_ms():
    return time.perf_counter() * 1000.0


class Peer:
    def __init__(self, client, sleep):
        self.client = client
        self.sleep = sleep
        self.poll_ms = sleep * 1000.0

    async def lock(self, key):
        lock = Lock(self.client, key, timeout=LEASE_S, sleep=self.sleep, blocking=True)
        await lock.acquire()
        return lock

    async def unlock(self, lock):
        await lock.release()


def own_cpu_us():
    """This process's user + system CPU, µs (every thread)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return (ru.ru_utime + ru.ru_stime) * 1e6


async def info(client):
    """INFO commandstats + stats + cpu: calls and µs per command, the server's read events
    and CPU (µs); and this process's CPU."""
    client_cpu = own_cpu_us()
    parsed = await client.info("commandstats", "stats", "cpu")
    stats = {k[len("cmdstat_") :]: v for k, v in parsed.items() if k.startswith("cmdstat_") and isinstance(v, dict)}
    calls = {k: int(v["calls"]) for k, v in stats.items()}
    usec = {k: int(v["usec"]) for k, v in stats.items()}
    reads = int(parsed.get("total_reads_processed", 0))
    server_cpu = (float(parsed.get("used_cpu_user", 0)) + float(parsed.get("used_cpu_sys", 0))) * 1e6
    return calls, reads, usec, server_cpu, client_cpu


def counted(a, b, ops):
    """Commands Redis ran between two snapshots (the INFO calls left out), and the CPU the
    server and this process spent, per operation."""
    breakdown, cmds, usec = {}, 0, 0
    for k, v in b[0].items():
        if k == "info":
            continue
        d = v - a[0].get(k, 0)
        usec += b[2][k] - a[2].get(k, 0)
        if d > 0:
            breakdown[k] = d
            cmds += d
    reads = b[1] - a[1] - 1  # the second INFO's own read event
    return {
        "cmds": cmds,
        "cmds_per_op": cmds / ops,
        "reads_per_op": reads / ops,
        "client_cpu_us_per_op": (b[4] - a[4]) / ops,
        "server_cpu_us_per_op": (b[3] - a[3]) / ops,
        "server_cmd_us_per_op": usec / ops,
        "breakdown": breakdown,
    }


async def sleep_precise(ms):
    """Sleeps `ms` (fractional): a timer, then turns of the loop. Returns the CPU (µs) the
    turns cost, which is the harness's and left out of the counts."""
    target = now_ms() + ms
    if ms >= 2:
        await asyncio.sleep((ms - 1) / 1000.0)
    cpu0 = own_cpu_us()
    while now_ms() < target:
        await asyncio.sleep(0)
    return own_cpu_us() - cpu0


def percentile(sorted_values, p):
    return sorted_values[round((len(sorted_values) - 1) * p)]


async def sequential(client, peer, prefix):
    for i in range(200):
        await peer.unlock(await peer.lock(f"{prefix}:{i % SEQ_KEYS}"))
    s0 = await info(client)
    t0 = now_ms()
    n = 0
    while n < SEQ_MAX and now_ms() - t0 < SEQ_SECS * 1000:
        await peer.unlock(await peer.lock(f"{prefix}:{n % SEQ_KEYS}"))
        n += 1
    ms = now_ms() - t0
    s1 = await info(client)
    return {"value": ms * 1000 / n, "unit": "us/pair", "ops": n, "secs": ms / 1000, **counted(s0, s1, n)}


async def concurrent(client, peer, prefix):
    async def warm(t):
        for _ in range(2):
            await peer.unlock(await peer.lock(f"{prefix}:{t}"))

    await asyncio.gather(*(warm(t) for t in range(CONC_TASKS)))
    s0 = await info(client)
    state = {"stop": False, "n": 0}

    async def task(t):
        key = f"{prefix}:{t}"
        while not state["stop"]:
            await peer.unlock(await peer.lock(key))
            state["n"] += 1

    t0 = now_ms()
    tasks = [asyncio.create_task(task(t)) for t in range(CONC_TASKS)]
    await asyncio.sleep(CONC_SECS)
    state["stop"] = True
    at_stop = state["n"]
    ms = now_ms() - t0
    await asyncio.gather(*tasks)
    s1 = await info(client)
    return {
        "value": at_stop / (ms / 1000),
        "unit": "pairs/s",
        "ops": at_stop,
        "secs": ms / 1000,
        **counted(s0, s1, state["n"]),
    }


async def handoff(client, peer, prefix):
    key = f"{prefix}:k"
    spun = [0.0]

    async def round_():
        held = await peer.lock(key)
        got = {}

        async def waiter():
            h = await peer.lock(key)
            got["at"] = now_ms()
            await peer.unlock(h)

        w = asyncio.create_task(waiter())
        spun[0] += await sleep_precise(HANDOFF_SETTLE_MS + random.random() * peer.poll_ms)
        released_at = now_ms()
        await peer.unlock(held)
        await w
        return got["at"] - released_at

    for _ in range(2):
        await round_()
    s0 = await info(client)
    spun[0] = 0.0
    t0 = now_ms()
    lat = []
    while len(lat) < HANDOFF_MIN or (len(lat) < HANDOFF_MAX and now_ms() - t0 < HANDOFF_SECS * 1000):
        lat.append(await round_())
    ms = now_ms() - t0
    s1 = await info(client)
    lat.sort()
    p50 = percentile(lat, 0.5)
    c = counted(s0, s1, len(lat))
    # The turns of the loop that time the release are the harness's, not the peer's.
    c["client_cpu_us_per_op"] -= spun[0] / len(lat)
    return {
        "value": p50,
        "unit": "ms",
        "p50_ms": p50,
        "p90_ms": percentile(lat, 0.9),
        "max_ms": lat[-1],
        "ops": len(lat),
        "secs": ms / 1000,
        **c,
    }


async def hotkey(client, peer, prefix):
    key = f"{prefix}:hot"
    await peer.unlock(await peer.lock(key))
    s0 = await info(client)
    state = {"stop": False, "n": 0, "switches": 0, "last": -1}

    async def task(t):
        while not state["stop"]:
            h = await peer.lock(key)
            if state["stop"]:
                break  # after the window: left to expire, the process exits
            state["n"] += 1
            if state["last"] != t:
                state["switches"] += 1
            state["last"] = t
            await peer.unlock(h)

    t0 = now_ms()
    tasks = [asyncio.create_task(task(t)) for t in range(HOT_TASKS)]
    await asyncio.sleep(HOT_SECS)
    state["stop"] = True
    ms = now_ms() - t0
    at_stop = state["n"]
    s1 = await info(client)
    del tasks  # abandoned: the process exits
    return {
        "value": at_stop / (ms / 1000),
        "unit": "acquisitions/s",
        "switches_per_s": state["switches"] / (ms / 1000),
        "ops": at_stop,
        "secs": ms / 1000,
        **counted(s0, s1, at_stop),
    }


# ---- the cross-process roles, driven by bench/peers/run.py over stdin and stdout (the
# same steps as tests/benches/peers.rs and bench/peers/node/workloads.mjs)


async def step():
    """run.py's next step: a line of stdin ("" at its end)."""
    return (await asyncio.to_thread(sys.stdin.readline)).strip()


async def ready(peer, key):
    """Warms the peer up on a key of this process's own (uncontended), then says `ready`."""
    await peer.unlock(await peer.lock(f"{key}:warm:{os.getpid()}"))
    print("ready", flush=True)


async def xhotkey(peer, key):
    """On `go <secs> <tasks>`: tasks take and release the key; every acquisition's instant
    (CLOCK_MONOTONIC ns, taken while holding)."""
    await ready(peer, key)
    _, secs, n_tasks = (await step()).split()
    cpu0 = own_cpu_us()
    start = time.monotonic_ns()
    acquired = []
    state = {"stop": False}

    async def task():
        while not state["stop"]:
            h = await peer.lock(key)
            if state["stop"]:
                break  # after the window: left to expire, the process exits
            acquired.append(time.monotonic_ns())
            await peer.unlock(h)

    tasks = [asyncio.create_task(task()) for _ in range(int(n_tasks))]
    await asyncio.sleep(float(secs))
    state["stop"] = True
    end = time.monotonic_ns()
    del tasks  # abandoned: the process exits
    return {
        "start_ns": start,
        "end_ns": end,
        "client_cpu_us": own_cpu_us() - cpu0,
        "ops": len(acquired),
        "acquired": acquired,
    }


async def xholder(peer, key):
    """`hold`, `release` (5 ms + U(0, poll interval) later; says its instant), `mark`, `end`."""
    await ready(peer, key)
    held, cpu0, spun = None, own_cpu_us(), 0.0
    while (s := await step()) not in ("", "end"):
        if s == "mark":
            cpu0, spun = own_cpu_us(), 0.0
            print("marked", flush=True)
        elif s == "hold":
            held = await peer.lock(key)
            print("held", flush=True)
        elif s == "release":
            spun += await sleep_precise(HANDOFF_SETTLE_MS + random.random() * peer.poll_ms)
            at = time.monotonic_ns()
            await peer.unlock(held)
            held = None
            print(f"released {at}", flush=True)
    return {"client_cpu_us": own_cpu_us() - cpu0 - spun}


async def xwaiter(peer, key):
    """`wait`: a task takes the key, says the instant it holds it, releases; `mark`, `end`."""
    await ready(peer, key)
    cpu0, pending = own_cpu_us(), set()

    async def take():
        h = await peer.lock(key)
        at = time.monotonic_ns()
        await peer.unlock(h)
        print(f"acquired {at}", flush=True)

    while (s := await step()) not in ("", "end"):
        if s == "mark":
            cpu0 = own_cpu_us()
            print("marked", flush=True)
        elif s == "wait":
            t = asyncio.create_task(take())
            pending.add(t)
            t.add_done_callback(pending.discard)
            print("waiting", flush=True)
    return {"client_cpu_us": own_cpu_us() - cpu0}


WORKLOADS = {"sequential": sequential, "concurrent": concurrent, "handoff": handoff, "hotkey": hotkey}
ROLES = {"xhotkey": xhotkey, "xholder": xholder, "xwaiter": xwaiter}
PEERS = {"redis-py": 0.1, "redis-py-tuned": 0.01}


async def main():
    args = sys.argv[1:]
    known = len(args) == 3 and args[1] in WORKLOADS or len(args) == 4 and args[1] in ROLES
    if not known or args[2] not in PEERS:
        print(
            "usage: peer.py <redis-url> <sequential|concurrent|handoff|hotkey|xhotkey|xholder|xwaiter> "
            "<redis-py|redis-py-tuned> [key]",
            file=sys.stderr,
        )
        sys.exit(2)
    url, workload, contender = args[:3]
    client = aioredis.Redis.from_url(url)
    peer = Peer(client, PEERS[contender])
    if workload in ROLES:
        result = await ROLES[workload](peer, args[3])
    else:
        result = await WORKLOADS[workload](client, peer, f"bench:{contender}:{os.getpid()}:{workload}")
    print(json.dumps({"contender": contender, "workload": workload, **result}), flush=True)
    # Tasks still polling after the window are abandoned: their keys are unique to this run.
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
