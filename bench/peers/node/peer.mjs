// The Node.js peers of distlock's peer benchmark: one contender, one workload, one JSON line.
//
//   node peer.mjs <redis-url> <workload> <contender> [key]
//
// workload:  sequential | concurrent | handoff | hotkey   (see bench/peers/README.md), or a
//            cross-process role on `key` (xhotkey | xholder | xwaiter), driven by run.py
// contender: redlock          node-redlock 5, retryDelay 200 ms, retryJitter 100 ms (its defaults)
//            redlock-tuned    node-redlock 5, retryDelay 10 ms, retryJitter 5 ms
//            semaphore        redis-semaphore Mutex, retryInterval 10 ms (its default)
//            semaphore-tuned  redis-semaphore Mutex, retryInterval 1 ms
// Every contender: one ioredis client for the whole process, a 30 s lease, and no limit on
// the number of attempts (redlock's retryCount -1) within the workload's wait.
import { performance } from "node:perf_hooks";
import Redis from "ioredis";
import Redlock from "redlock";
import { Mutex } from "redis-semaphore";
import { roles, workloads } from "./workloads.mjs";

const [url, workload, contender, key] = process.argv.slice(2);
if (!url || !(workloads[workload] || (roles[workload] && key))) {
  console.error(
    "usage: node peer.mjs <redis-url> <sequential|concurrent|handoff|hotkey|xhotkey|xholder|xwaiter> <contender> [key]",
  );
  process.exit(2);
}

const LEASE_MS = 30_000;
const client = new Redis(url);

function redlockPeer(retryDelay, retryJitter) {
  const redlock = new Redlock([client], { retryCount: -1, retryDelay, retryJitter });
  // Unused here (no `using`), but a listener keeps a failed attempt from being thrown.
  redlock.on("error", () => {});
  return {
    pollMs: retryDelay,
    lock: (key) => redlock.acquire([key], LEASE_MS),
    unlock: (lock) => lock.release(),
  };
}

function semaphorePeer(retryInterval) {
  return {
    pollMs: retryInterval,
    lock: async (key) => {
      const m = new Mutex(client, key, {
        lockTimeout: LEASE_MS,
        acquireTimeout: LEASE_MS,
        retryInterval,
      });
      await m.acquire();
      return m;
    },
    unlock: (m) => m.release(),
  };
}

const peers = {
  redlock: () => redlockPeer(200, 100),
  "redlock-tuned": () => redlockPeer(10, 5),
  semaphore: () => semaphorePeer(10),
  "semaphore-tuned": () => semaphorePeer(1),
};
if (!peers[contender]) {
  console.error(`unknown contender ${contender}: ${Object.keys(peers).join(", ")}`);
  process.exit(2);
}

const result = roles[workload]
  ? await roles[workload]({ peer: peers[contender](), key })
  : await workloads[workload]({
      client,
      peer: peers[contender](),
      prefix: `bench:${contender}:${process.pid}:${workload}`,
      now: () => performance.now(),
    });
// Exits once the line is written: a pipe's writes may be asynchronous, and process.exit
// right after console.log cut a hot-key line (tens of kB of instants) at 64 kB. Tasks
// still polling after the window are abandoned: their keys are unique to this run.
process.stdout.write(JSON.stringify({ contender, workload, ...result }) + "\n", () =>
  process.exit(0),
);
