// The four workloads of the peer benchmark, the same for every contender (and the same as
// bench/peers/python/peer.py and tests/benches/peers.rs): see bench/peers/README.md.
//
// A peer is { pollMs, lock(key) -> handle, unlock(handle) }; lock waits until it holds.
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";

export const SEQ_KEYS = 64;
export const SEQ_SECS = 2;
export const SEQ_MAX = 20_000;
export const CONC_TASKS = 64;
export const CONC_SECS = 2;
export const HANDOFF_SECS = 3;
export const HANDOFF_MAX = 200;
export const HANDOFF_MIN = 5;
export const HANDOFF_SETTLE_MS = 5;
export const HOT_TASKS = 16;
export const HOT_SECS = 2;

/** This process's user + system CPU, µs (every thread). */
export function ownCpuUs() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

/**
 * INFO commandstats + stats + cpu: calls and µs per command, the server's read events and
 * CPU (µs); and this process's CPU.
 */
async function snapshot(client) {
  const clientCpuUs = ownCpuUs();
  const text = await client.call("INFO", "commandstats", "stats", "cpu");
  const calls = {};
  const usec = {};
  let reads = 0;
  let serverCpuUs = 0;
  for (const line of text.split("\r\n")) {
    let m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
    if (m) {
      calls[m[1]] = Number(m[2]);
      usec[m[1]] = Number(m[3]);
    }
    m = /^total_reads_processed:(\d+)/.exec(line);
    if (m) reads = Number(m[1]);
    m = /^used_cpu_(user|sys):([\d.]+)/.exec(line);
    if (m) serverCpuUs += Number(m[2]) * 1e6;
  }
  return { calls, usec, reads, serverCpuUs, clientCpuUs };
}

/**
 * Commands Redis ran between two snapshots (the INFO calls left out), and the CPU the
 * server and this process spent, per operation.
 */
function counted(a, b, ops) {
  const breakdown = {};
  let cmds = 0;
  let usec = 0;
  for (const [k, v] of Object.entries(b.calls)) {
    if (k === "info") continue;
    const d = v - (a.calls[k] ?? 0);
    usec += b.usec[k] - (a.usec[k] ?? 0);
    if (d > 0) {
      breakdown[k] = d;
      cmds += d;
    }
  }
  // The second INFO's own read event is in `b`.
  const reads = b.reads - a.reads - 1;
  return {
    cmds,
    cmds_per_op: cmds / ops,
    reads_per_op: reads / ops,
    client_cpu_us_per_op: (b.clientCpuUs - a.clientCpuUs) / ops,
    server_cpu_us_per_op: (b.serverCpuUs - a.serverCpuUs) / ops,
    server_cmd_us_per_op: usec / ops,
    breakdown,
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Sleeps `ms` (fractional): a timer for the whole milliseconds, then turns of the loop.
 * Returns the CPU (µs) the turns cost, which is the harness's and left out of the counts.
 */
async function sleepPrecise(now, ms) {
  const target = now() + ms;
  if (ms >= 2) await sleep(Math.floor(ms) - 1);
  const cpu0 = ownCpuUs();
  while (now() < target) await new Promise((r) => setImmediate(r));
  return ownCpuUs() - cpu0;
}

function percentile(sorted, p) {
  return sorted[Math.round((sorted.length - 1) * p)];
}

/** CLOCK_MONOTONIC in ns (libuv's hrtime): one clock for every process of the host. */
const monotonicNs = () => Number(process.hrtime.bigint());

/** run.py's steps: an iterator over the lines of stdin. */
function steps() {
  return createInterface({ input: process.stdin })[Symbol.asyncIterator]();
}

/** Warms the peer up on a key of this process's own (uncontended), then says `ready`. */
async function ready(peer, key) {
  await peer.unlock(await peer.lock(`${key}:warm:${process.pid}`));
  const it = steps();
  console.log("ready");
  return it;
}

/**
 * The cross-process roles, driven by bench/peers/run.py over stdin and stdout (the same
 * steps as tests/benches/peers.rs): `xhotkey`, `xholder`, `xwaiter` on one shared key.
 */
export const roles = {
  /** On `go <secs> <tasks>`: tasks take and release the key; every acquisition's instant. */
  async xhotkey({ peer, key }) {
    const it = await ready(peer, key);
    const [, secs, tasks] = (await it.next()).value.split(/\s+/);
    const cpu0 = ownCpuUs();
    const start = monotonicNs();
    const acquired = [];
    let stop = false;
    for (let t = 0; t < Number(tasks); t++) {
      (async () => {
        while (!stop) {
          const h = await peer.lock(key);
          if (stop) break; // after the window: left to expire, the process exits
          acquired.push(monotonicNs());
          await peer.unlock(h);
        }
      })();
    }
    await sleep(Number(secs) * 1000);
    stop = true;
    const end = monotonicNs();
    return { start_ns: start, end_ns: end, client_cpu_us: ownCpuUs() - cpu0, ops: acquired.length, acquired };
  },

  /** `hold`, `release` (5 ms + U(0, poll interval) later; says its instant), `mark`, `end`. */
  async xholder({ peer, key }) {
    const it = await ready(peer, key);
    let held = null;
    let cpu0 = ownCpuUs();
    let spun = 0;
    for (;;) {
      const { value: step, done } = await it.next();
      if (done || step === "end") break;
      if (step === "mark") {
        cpu0 = ownCpuUs();
        spun = 0;
        console.log("marked");
      } else if (step === "hold") {
        held = await peer.lock(key);
        console.log("held");
      } else if (step === "release") {
        const now = () => performance.now();
        spun += await sleepPrecise(now, HANDOFF_SETTLE_MS + Math.random() * peer.pollMs);
        const at = monotonicNs();
        await peer.unlock(held);
        held = null;
        console.log(`released ${at}`);
      }
    }
    return { client_cpu_us: ownCpuUs() - cpu0 - spun };
  },

  /** `wait`: a task takes the key, says the instant it holds it, releases; `mark`, `end`. */
  async xwaiter({ peer, key }) {
    const it = await ready(peer, key);
    let cpu0 = ownCpuUs();
    for (;;) {
      const { value: step, done } = await it.next();
      if (done || step === "end") break;
      if (step === "mark") {
        cpu0 = ownCpuUs();
        console.log("marked");
      } else if (step === "wait") {
        (async () => {
          const h = await peer.lock(key);
          const at = monotonicNs();
          await peer.unlock(h);
          console.log(`acquired ${at}`);
        })();
        console.log("waiting");
      }
    }
    return { client_cpu_us: ownCpuUs() - cpu0 };
  },
};

export const workloads = {
  /** One client, lock+unlock in sequence over 64 rotating keys: µs per pair. */
  async sequential({ client, peer, prefix, now }) {
    for (let i = 0; i < 200; i++) await peer.unlock(await peer.lock(`${prefix}:${i % SEQ_KEYS}`));
    const s0 = await snapshot(client);
    const t0 = now();
    let n = 0;
    while (n < SEQ_MAX && now() - t0 < SEQ_SECS * 1000) {
      await peer.unlock(await peer.lock(`${prefix}:${n % SEQ_KEYS}`));
      n++;
    }
    const ms = now() - t0;
    const s1 = await snapshot(client);
    return { value: (ms * 1000) / n, unit: "us/pair", ops: n, secs: ms / 1000, ...counted(s0, s1, n) };
  },

  /** 64 tasks, each lock+unlock on its own key, for 2 s: pairs/s. */
  async concurrent({ client, peer, prefix, now }) {
    const key = (t) => `${prefix}:${t}`;
    await Promise.all(
      Array.from({ length: CONC_TASKS }, async (_, t) => {
        for (let i = 0; i < 2; i++) await peer.unlock(await peer.lock(key(t)));
      }),
    );
    const s0 = await snapshot(client);
    let stop = false;
    let n = 0;
    const t0 = now();
    const tasks = Array.from({ length: CONC_TASKS }, async (_, t) => {
      while (!stop) {
        await peer.unlock(await peer.lock(key(t)));
        n++;
      }
    });
    await sleep(CONC_SECS * 1000);
    stop = true;
    const atStop = n;
    const ms = now() - t0;
    await Promise.all(tasks);
    const s1 = await snapshot(client);
    // Commands over every pair done, the last ones after the window included.
    return { value: atStop / (ms / 1000), unit: "pairs/s", ops: atStop, secs: ms / 1000, ...counted(s0, s1, n) };
  },

  /**
   * Hand-off: a holder holds the key; a waiter asks for it and waits; the holder releases at
   * a random point of the waiter's poll cycle (5 ms + U(0, poll interval) after the waiter
   * started); the time from the release call to the waiter holding it. p50 (ms).
   */
  async handoff({ client, peer, prefix, now }) {
    const key = `${prefix}:k`;
    let spun = 0;
    const round = async () => {
      const held = await peer.lock(key);
      let gotAt = 0;
      const waiter = (async () => {
        const h = await peer.lock(key);
        gotAt = now();
        await peer.unlock(h);
      })();
      spun += await sleepPrecise(now, HANDOFF_SETTLE_MS + Math.random() * peer.pollMs);
      const releasedAt = now();
      await peer.unlock(held);
      await waiter;
      return gotAt - releasedAt;
    };
    for (let i = 0; i < 2; i++) await round();
    const s0 = await snapshot(client);
    spun = 0;
    const t0 = now();
    const lat = [];
    while (lat.length < HANDOFF_MIN || (lat.length < HANDOFF_MAX && now() - t0 < HANDOFF_SECS * 1000)) {
      lat.push(await round());
    }
    const ms = now() - t0;
    const s1 = await snapshot(client);
    lat.sort((a, b) => a - b);
    const p50 = percentile(lat, 0.5);
    const c = counted(s0, s1, lat.length);
    // The turns of the loop that time the release are the harness's, not the peer's.
    c.client_cpu_us_per_op -= spun / lat.length;
    return {
      value: p50,
      unit: "ms",
      p50_ms: p50,
      p90_ms: percentile(lat, 0.9),
      max_ms: lat[lat.length - 1],
      ops: lat.length,
      secs: ms / 1000,
      ...c,
    };
  },

  /** 16 tasks take and release one hot key for 2 s: acquisitions (hand-offs) per second. */
  async hotkey({ client, peer, prefix, now }) {
    const key = `${prefix}:hot`;
    await peer.unlock(await peer.lock(key));
    const s0 = await snapshot(client);
    let stop = false;
    let n = 0;
    let switches = 0;
    let last = -1;
    const t0 = now();
    for (let t = 0; t < HOT_TASKS; t++) {
      (async () => {
        while (!stop) {
          const h = await peer.lock(key);
          if (stop) break; // after the window: leave it to expire, the process exits
          n++;
          if (last !== t) switches++;
          last = t;
          await peer.unlock(h);
        }
      })();
    }
    await sleep(HOT_SECS * 1000);
    stop = true;
    const ms = now() - t0;
    const atStop = n;
    const s1 = await snapshot(client);
    return {
      value: atStop / (ms / 1000),
      unit: "acquisitions/s",
      switches_per_s: switches / (ms / 1000),
      ops: atStop,
      secs: ms / 1000,
      ...counted(s0, s1, atStop),
    };
  },
};
