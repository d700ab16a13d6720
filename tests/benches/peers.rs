//! distlock's side of the peer benchmark (`scripts/bench.sh peers`): one contender, one
//! workload, one JSON line, like the Node.js and Python peers in `bench/peers/`.
//!
//! ```text
//! cargo bench -p distlock-tests --bench peers -- <redis-url> <workload> <contender> [key]
//! ```
//!
//! workload: `sequential | concurrent | handoff | hotkey`, with the parameters of
//! `bench/peers/node/workloads.mjs` and `bench/peers/python/peer.py` (see
//! `bench/peers/README.md`). contender:
//! - `distlock`: a `single` backend on the URL, `Lease::Auto` (watchdog 30 s), fencing
//!   tokens, reentrancy, wake-ups by pub/sub; a contended lock waits up to 30 s. A release
//!   hands the lock to a waiter of the process directly (`handoff = true`, the default).
//! - `distlock-barging`: the same with `handoff = false`: a release frees the lock and
//!   publishes, and the woken waiters (or the releasing task acquiring again) race for it.
//! - `redisson-raw`: Redisson's protocol sent raw (`support::floor`, the floor of
//!   `targets.rs`): its lock and unlock scripts by EVALSHA on one multiplexed connection;
//!   a refused lock waits for the lock channel's message (one subscriber per process,
//!   subscribed before the window; each message wakes one waiter) or the holder's TTL.
//! - `bare`: no library, the floor: `SET key token NX PX 30000` and a compare-and-delete
//!   script by EVALSHA on one multiplexed connection; a refused lock polls every 1 ms.
//!
//! Asserts nothing; prints `{"contender": .., "workload": .., "value": .., ...}`.
//!
//! The cross-process roles (`xhotkey`, `xholder`, `xwaiter`, on `key`) are driven by
//! `bench/peers/run.py` over stdin and stdout, one line per step (see `cross_process`).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Lease, LockGuard, Registry};
use redis::aio::MultiplexedConnection;
use support::floor::{connect, Floor};

const SEQ_KEYS: usize = 64;
const SEQ_SECS: f64 = 2.0;
const SEQ_MAX: usize = 20_000;
const CONC_TASKS: usize = 64;
const CONC_SECS: f64 = 2.0;
const HANDOFF_SECS: f64 = 3.0;
const HANDOFF_MAX: usize = 200;
const HANDOFF_MIN: usize = 5;
const HANDOFF_SETTLE: Duration = Duration::from_millis(5);
const HOT_TASKS: usize = 16;
const HOT_SECS: f64 = 2.0;
const WAIT: Duration = Duration::from_secs(30);
const LEASE_MS: u64 = 30_000;
/// The bare floor's poll interval while the key is held.
const BARE_POLL: Duration = Duration::from_millis(1);
/// Compare-and-delete: the bare floor's unlock.
const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

// ------------------------------------------------------------------ the contenders

/// Redisson's protocol sent raw, waiting on its lock channel.
struct Raw {
    floor: Floor,
    wake: Arc<tokio::sync::Notify>,
    client: redis::Client,
    listeners: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// No library: SET NX PX and a compare-and-delete script, polling while the key is held.
#[derive(Clone)]
struct Bare {
    conn: MultiplexedConnection,
    unlock_sha: String,
}

#[derive(Clone)]
enum Peer {
    Distlock(Registry),
    Raw(Arc<Raw>),
    Bare(Bare),
}

enum Held {
    Distlock(LockGuard),
    Raw { key: String, owner: String },
    Bare { key: String, token: String },
}

impl Peer {
    /// Called once per contended key before the window: the raw floor subscribes to its
    /// channel (Redisson subscribes on the first refusal and keeps the subscription while
    /// it has waiters).
    async fn prepare(&self, key: &str) {
        if let Peer::Raw(raw) = self {
            let mut pubsub = raw.client.get_async_pubsub().await.expect("pubsub");
            pubsub
                .subscribe(format!("redisson_lock__channel:{{{key}}}"))
                .await
                .expect("subscribe");
            let wake = raw.wake.clone();
            let listener = tokio::spawn(async move {
                use futures_util::StreamExt;
                let mut messages = pubsub.into_on_message();
                while messages.next().await.is_some() {
                    wake.notify_one();
                }
            });
            raw.listeners.lock().expect("listeners").push(listener);
        }
    }

    /// Takes `key`, waiting while another holds it.
    async fn lock(&self, key: &str) -> Held {
        match self {
            Peer::Distlock(reg) => Held::Distlock(
                reg.lock(key)
                    .lease(Lease::Auto)
                    .wait(WAIT)
                    .acquire()
                    .await
                    .expect("acquire"),
            ),
            Peer::Raw(raw) => {
                let owner = format!("{:032x}:1", rand::random::<u128>());
                let mut conn = raw.floor.conn.clone();
                loop {
                    let v: Vec<i64> = raw
                        .floor
                        .lock_cmd(key, &owner)
                        .query_async(&mut conn)
                        .await
                        .expect("floor lock");
                    if v.first() == Some(&1) {
                        return Held::Raw {
                            key: key.to_owned(),
                            owner,
                        };
                    }
                    let ttl = v.get(1).copied().unwrap_or(100).max(1) as u64;
                    let _ =
                        tokio::time::timeout(Duration::from_millis(ttl), raw.wake.notified()).await;
                }
            }
            Peer::Bare(bare) => {
                let token = format!("{:032x}", rand::random::<u128>());
                let mut conn = bare.conn.clone();
                loop {
                    let set: Option<String> = redis::cmd("SET")
                        .arg(key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(LEASE_MS)
                        .query_async(&mut conn)
                        .await
                        .expect("bare lock");
                    if set.is_some() {
                        return Held::Bare {
                            key: key.to_owned(),
                            token,
                        };
                    }
                    tokio::time::sleep(BARE_POLL).await;
                }
            }
        }
    }

    async fn unlock(&self, held: Held) {
        match (self, held) {
            (Peer::Distlock(_), Held::Distlock(g)) => g.release().await.expect("release"),
            (Peer::Raw(raw), Held::Raw { key, owner }) => {
                let mut conn = raw.floor.conn.clone();
                let _: i64 = raw
                    .floor
                    .unlock_cmd(&key, &owner)
                    .query_async(&mut conn)
                    .await
                    .expect("floor unlock");
            }
            (Peer::Bare(bare), Held::Bare { key, token }) => {
                let mut conn = bare.conn.clone();
                let _: i64 = redis::cmd("EVALSHA")
                    .arg(&bare.unlock_sha)
                    .arg(1)
                    .arg(&key)
                    .arg(&token)
                    .query_async(&mut conn)
                    .await
                    .expect("bare unlock");
            }
            _ => unreachable!("a handle of another contender"),
        }
    }

    async fn pair(&self, key: &str) {
        let h = self.lock(key).await;
        self.unlock(h).await;
    }

    /// The poll interval of a contender that polls (the hand-off releases at a random point
    /// of it), zero for one woken by the release.
    fn poll(&self) -> Duration {
        match self {
            Peer::Bare(_) => BARE_POLL,
            _ => Duration::ZERO,
        }
    }

    /// Waits until the hand-off's waiter is known to wait, where the contender says so.
    async fn until_waiting(&self) {
        if let Peer::Distlock(reg) = self {
            while reg.waiting("main").unwrap_or(0) == 0 {
                tokio::task::yield_now().await;
            }
        }
    }
}

// ------------------------------------------------------------------ commands counted

/// Calls per command, the server's read events and CPU (`INFO commandstats stats cpu`),
/// and this process's CPU.
struct Snapshot {
    calls: BTreeMap<String, u64>,
    /// µs spent in each command (`usec` of `INFO commandstats`).
    usec: BTreeMap<String, u64>,
    reads: u64,
    /// The server's user + system CPU, µs (`used_cpu_user` + `used_cpu_sys`).
    server_cpu_us: f64,
    client_cpu_us: f64,
}

/// This process's user + system CPU, µs (`getrusage(RUSAGE_SELF)`: every thread).
fn own_cpu_us() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let ru = unsafe {
        let mut ru = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// `CLOCK_MONOTONIC` in ns: one clock for every process of the host (Node.js's
/// `process.hrtime`, Python's `time.monotonic_ns`), unlike `Instant`'s opaque origin.
fn monotonic_ns() -> u64 {
    // SAFETY: clock_gettime only writes the struct it is given.
    let ts = unsafe {
        let mut ts = std::mem::zeroed::<libc::timespec>();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts
    };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

async fn snapshot(conn: &mut MultiplexedConnection) -> Snapshot {
    let client_cpu_us = own_cpu_us();
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("stats")
        .arg("cpu")
        .query_async(conn)
        .await
        .expect("info");
    let mut calls = BTreeMap::new();
    let mut usec = BTreeMap::new();
    let mut reads = 0;
    let mut server_cpu_us = 0.0;
    let field = |stats: &str, name: &str| -> u64 {
        stats
            .split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("cmdstat_") {
            if let Some((name, stats)) = rest.split_once(':') {
                calls.insert(name.to_owned(), field(stats, "calls"));
                usec.insert(name.to_owned(), field(stats, "usec"));
            }
        } else if let Some(v) = line.strip_prefix("total_reads_processed:") {
            reads = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line
            .strip_prefix("used_cpu_user:")
            .or_else(|| line.strip_prefix("used_cpu_sys:"))
        {
            server_cpu_us += v.trim().parse::<f64>().unwrap_or(0.0) * 1e6;
        }
    }
    Snapshot {
        calls,
        usec,
        reads,
        server_cpu_us,
        client_cpu_us,
    }
}

/// The JSON fields of the commands Redis ran between `a` and `b` (INFO left out), and of
/// the CPU the server and this process spent, per op.
fn counted(a: &Snapshot, b: &Snapshot, ops: u64) -> String {
    let mut total = 0;
    let mut usec = 0;
    let mut parts = Vec::new();
    for (name, n) in &b.calls {
        if name == "info" {
            continue;
        }
        let d = n.saturating_sub(a.calls.get(name).copied().unwrap_or(0));
        usec += b.usec[name].saturating_sub(a.usec.get(name).copied().unwrap_or(0));
        if d > 0 {
            total += d;
            parts.push(format!("\"{name}\":{d}"));
        }
    }
    // The second INFO's own read event is in `b`.
    let reads = b.reads.saturating_sub(a.reads + 1);
    let ops = ops.max(1) as f64;
    format!(
        "\"cmds\":{total},\"cmds_per_op\":{},\"reads_per_op\":{},\"client_cpu_us_per_op\":{},\"server_cpu_us_per_op\":{},\"server_cmd_us_per_op\":{},\"breakdown\":{{{}}}",
        total as f64 / ops,
        reads as f64 / ops,
        (b.client_cpu_us - a.client_cpu_us) / ops,
        (b.server_cpu_us - a.server_cpu_us) / ops,
        usec as f64 / ops,
        parts.join(",")
    )
}

// ------------------------------------------------------------------ the workloads

/// One client, lock+unlock in sequence over 64 rotating keys: µs per pair.
async fn sequential(peer: &Peer, info: &mut MultiplexedConnection, prefix: &str) -> String {
    for i in 0..200 {
        peer.pair(&format!("{prefix}:{}", i % SEQ_KEYS)).await;
    }
    let s0 = snapshot(info).await;
    let t0 = Instant::now();
    let mut n = 0;
    while n < SEQ_MAX && t0.elapsed().as_secs_f64() < SEQ_SECS {
        peer.pair(&format!("{prefix}:{}", n % SEQ_KEYS)).await;
        n += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    let s1 = snapshot(info).await;
    format!(
        "\"value\":{},\"unit\":\"us/pair\",\"ops\":{n},\"secs\":{secs},{}",
        secs * 1e6 / n as f64,
        counted(&s0, &s1, n as u64)
    )
}

/// 64 tasks, each lock+unlock on its own key, for 2 s: pairs/s.
async fn concurrent(peer: &Peer, info: &mut MultiplexedConnection, prefix: &str) -> String {
    let warm: Vec<_> = (0..CONC_TASKS)
        .map(|t| {
            let (peer, key) = (peer.clone(), format!("{prefix}:{t}"));
            tokio::spawn(async move {
                for _ in 0..2 {
                    peer.pair(&key).await;
                }
            })
        })
        .collect();
    for w in warm {
        w.await.expect("warm-up");
    }
    let s0 = snapshot(info).await;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..CONC_TASKS)
        .map(|t| {
            let (peer, key) = (peer.clone(), format!("{prefix}:{t}"));
            let (stop, count) = (stop.clone(), count.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    peer.pair(&key).await;
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(CONC_SECS)).await;
    stop.store(true, Ordering::Relaxed);
    let at_stop = count.load(Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    for t in tasks {
        t.await.expect("task");
    }
    let s1 = snapshot(info).await;
    // Commands over every pair done, the last ones after the window included.
    format!(
        "\"value\":{},\"unit\":\"pairs/s\",\"ops\":{at_stop},\"secs\":{secs},{}",
        at_stop as f64 / secs,
        counted(&s0, &s1, count.load(Ordering::Relaxed))
    )
}

/// Waits until a hand-off's release point: 5 ms after the waiter started, plus a random
/// point of a poller's cycle (the bare floor's; the others do not poll). Tokio's timer ticks
/// by the millisecond, as the poller's own sleep does, so the last millisecond is spent
/// yielding (as the Node.js and Python peers spend it), or the release would line up with
/// the poll. Returns the CPU (µs) that cost: the harness's, left out of the counts.
async fn release_pause(peer: &Peer) -> f64 {
    let poll = peer.poll();
    if poll.is_zero() {
        tokio::time::sleep(HANDOFF_SETTLE).await;
        return 0.0;
    }
    let target = Instant::now() + HANDOFF_SETTLE + poll.mul_f64(rand::random::<f64>());
    tokio::time::sleep(HANDOFF_SETTLE - Duration::from_millis(1)).await;
    let cpu0 = own_cpu_us();
    while Instant::now() < target {
        tokio::task::yield_now().await;
    }
    own_cpu_us() - cpu0
}

/// One hand-off: the time from the holder's release call to the waiter holding the key,
/// and the CPU (µs) the release pause cost.
async fn handoff_round(peer: &Peer, key: &str) -> (Duration, f64) {
    let held = peer.lock(key).await;
    let (p2, k2) = (peer.clone(), key.to_owned());
    let waiter = tokio::spawn(async move {
        let h = p2.lock(&k2).await;
        let at = Instant::now();
        p2.unlock(h).await;
        at
    });
    let spun = release_pause(peer).await;
    peer.until_waiting().await;
    let released = Instant::now();
    peer.unlock(held).await;
    let latency = waiter
        .await
        .expect("waiter")
        .saturating_duration_since(released);
    (latency, spun)
}

/// Hand-off p50 / p90 / max in ms over up to 200 rounds or 3 s.
async fn handoff(peer: &Peer, info: &mut MultiplexedConnection, prefix: &str) -> String {
    let key = format!("{prefix}:k");
    peer.prepare(&key).await;
    for _ in 0..2 {
        handoff_round(peer, &key).await;
    }
    let s0 = snapshot(info).await;
    let t0 = Instant::now();
    let mut lat = Vec::new();
    let mut spun = 0.0;
    while lat.len() < HANDOFF_MIN
        || (lat.len() < HANDOFF_MAX && t0.elapsed().as_secs_f64() < HANDOFF_SECS)
    {
        let (latency, cpu) = handoff_round(peer, &key).await;
        lat.push(latency.as_secs_f64() * 1e3);
        spun += cpu;
    }
    let secs = t0.elapsed().as_secs_f64();
    let mut s1 = snapshot(info).await;
    s1.client_cpu_us -= spun;
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
    format!(
        "\"value\":{},\"unit\":\"ms\",\"p50_ms\":{},\"p90_ms\":{},\"max_ms\":{},\"ops\":{},\"secs\":{secs},{}",
        pct(0.5),
        pct(0.5),
        pct(0.9),
        pct(1.0),
        lat.len(),
        counted(&s0, &s1, lat.len() as u64)
    )
}

/// 16 tasks take and release one hot key for 2 s: acquisitions (hand-offs) per second.
async fn hotkey(peer: &Peer, info: &mut MultiplexedConnection, prefix: &str) -> String {
    let key = format!("{prefix}:hot");
    peer.prepare(&key).await;
    peer.pair(&key).await;
    let s0 = snapshot(info).await;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let switches = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicI64::new(-1));
    let t0 = Instant::now();
    for t in 0..HOT_TASKS {
        let (peer, key) = (peer.clone(), key.clone());
        let (stop, count, switches, last) =
            (stop.clone(), count.clone(), switches.clone(), last.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let h = peer.lock(&key).await;
                if stop.load(Ordering::Relaxed) {
                    // After the window: left to expire, the process exits.
                    std::mem::forget(h);
                    break;
                }
                count.fetch_add(1, Ordering::Relaxed);
                if last.swap(t as i64, Ordering::Relaxed) != t as i64 {
                    switches.fetch_add(1, Ordering::Relaxed);
                }
                peer.unlock(h).await;
            }
        });
    }
    tokio::time::sleep(Duration::from_secs_f64(HOT_SECS)).await;
    stop.store(true, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    let n = count.load(Ordering::Relaxed);
    let s1 = snapshot(info).await;
    format!(
        "\"value\":{},\"unit\":\"acquisitions/s\",\"switches_per_s\":{},\"ops\":{n},\"secs\":{secs},{}",
        n as f64 / secs,
        switches.load(Ordering::Relaxed) as f64 / secs,
        counted(&s0, &s1, n)
    )
}

// ------------------------------------------------------------------ cross-process roles

/// run.py's steps: the lines of stdin, read on a thread of their own.
fn steps() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Warms the contender up on a key of this process's own (uncontended), then says `ready`.
async fn ready(peer: &Peer, key: &str) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    peer.prepare(key).await;
    peer.pair(&format!("{key}:warm:{}", std::process::id()))
        .await;
    let steps = steps();
    println!("ready");
    steps
}

/// One process of the cross-process hot key. On `go <secs> <tasks>` its tasks take and
/// release `key` for `secs`; then the window's ends and every acquisition's instant
/// (CLOCK_MONOTONIC ns, taken while holding), from which run.py counts the acquisitions in
/// the window every process was in and the owner changes between processes.
async fn xhotkey(peer: &Peer, key: &str) -> String {
    let mut steps = ready(peer, key).await;
    let go = steps.recv().await.expect("go <secs> <tasks>");
    let mut words = go.split_whitespace().skip(1);
    let secs: f64 = words.next().and_then(|w| w.parse().ok()).expect("secs");
    let tasks: usize = words.next().and_then(|w| w.parse().ok()).expect("tasks");
    let cpu0 = own_cpu_us();
    let start = monotonic_ns();
    let stop = Arc::new(AtomicBool::new(false));
    let acquired = Arc::new(std::sync::Mutex::new(Vec::with_capacity(1 << 16)));
    for _ in 0..tasks {
        let (peer, key) = (peer.clone(), key.to_owned());
        let (stop, acquired) = (stop.clone(), acquired.clone());
        tokio::spawn(async move {
            loop {
                let h = peer.lock(&key).await;
                if stop.load(Ordering::Relaxed) {
                    // After the window: left to expire, the process exits.
                    std::mem::forget(h);
                    break;
                }
                acquired.lock().expect("acquired").push(monotonic_ns());
                peer.unlock(h).await;
            }
        });
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let end = monotonic_ns();
    let cpu = own_cpu_us() - cpu0;
    let acquired = acquired.lock().expect("acquired").clone();
    let list: Vec<String> = acquired.iter().map(u64::to_string).collect();
    format!(
        "\"start_ns\":{start},\"end_ns\":{end},\"client_cpu_us\":{cpu},\"ops\":{},\"acquired\":[{}]",
        acquired.len(),
        list.join(",")
    )
}

/// The holder of the cross-process hand-off: `hold` takes `key` (says `held`); `release`
/// waits 5 ms (plus a random point of a poller's cycle), notes the instant
/// (CLOCK_MONOTONIC ns) and releases (says `released <ns>`); `mark` starts the CPU count;
/// `end` reports it.
async fn xholder(peer: &Peer, key: &str) -> String {
    let mut steps = ready(peer, key).await;
    let mut held = None;
    let mut cpu0 = own_cpu_us();
    let mut spun = 0.0;
    while let Some(step) = steps.recv().await {
        match step.as_str() {
            "mark" => {
                cpu0 = own_cpu_us();
                spun = 0.0;
                println!("marked");
            }
            "hold" => {
                held = Some(peer.lock(key).await);
                println!("held");
            }
            "release" => {
                spun += release_pause(peer).await;
                let at = monotonic_ns();
                peer.unlock(held.take().expect("release without hold"))
                    .await;
                println!("released {at}");
            }
            _ => break,
        }
    }
    format!("\"client_cpu_us\":{}", own_cpu_us() - cpu0 - spun)
}

/// The waiter of the cross-process hand-off: `wait` starts a task that takes `key`, notes
/// the instant it holds it (CLOCK_MONOTONIC ns), releases it and says `acquired <ns>`; the
/// process says `waiting` once the task is started. `mark` and `end` as the holder's.
async fn xwaiter(peer: &Peer, key: &str) -> String {
    let mut steps = ready(peer, key).await;
    let mut cpu0 = own_cpu_us();
    while let Some(step) = steps.recv().await {
        match step.as_str() {
            "mark" => {
                cpu0 = own_cpu_us();
                println!("marked");
            }
            "wait" => {
                let (peer, key) = (peer.clone(), key.to_owned());
                tokio::spawn(async move {
                    let h = peer.lock(&key).await;
                    let at = monotonic_ns();
                    peer.unlock(h).await;
                    println!("acquired {at}");
                });
                println!("waiting");
            }
            _ => break,
        }
    }
    format!("\"client_cpu_us\":{}", own_cpu_us() - cpu0)
}

// ------------------------------------------------------------------ main

/// A tokio runtime with 2 workers, as `targets.rs`, with the workload in a task spawned on
/// them, as a server's handlers run (not on the thread of `block_on`, which is no worker: each
/// reply would wake the worker that read it and then that thread, two switches per round
/// trip where a task on a worker takes one, as a Node.js peer's single thread does).
/// `DISTLOCK_PEERS_RUNTIME=current_thread` runs everything on one thread instead, and
/// `DISTLOCK_PEERS_RUNTIME=block_on` the workload on `block_on`'s thread (diagnostics: what
/// the wake-ups between threads cost; distlock's own background runtime is unchanged).
fn main() {
    let mode = std::env::var("DISTLOCK_PEERS_RUNTIME").unwrap_or_default();
    let mut rt = if mode == "current_thread" {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    };
    let rt = rt.enable_all().build().expect("runtime");
    if mode == "block_on" {
        rt.block_on(run());
    } else {
        rt.block_on(async { tokio::spawn(run()).await.expect("the workload's task") });
    }
}

async fn run() {
    // `cargo bench` passes `--bench`; the rest are ours.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if !(3..=4).contains(&args.len()) {
        eprintln!(
            "usage: peers <redis-url> <sequential|concurrent|handoff|hotkey|xhotkey|xholder|xwaiter> \
             <distlock|distlock-barging|redisson-raw|bare> [key (the cross-process roles)]"
        );
        std::process::exit(2);
    }
    let (url, workload, contender) = (args[0].clone(), args[1].clone(), args[2].clone());
    let shared_key = args.get(3).cloned().unwrap_or_default();
    let peer = match contender.as_str() {
        "distlock" | "distlock-barging" => Peer::Distlock(
            Registry::from_str(&format!(
                "[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nhandoff = {}\n",
                contender == "distlock"
            ))
            .await
            .expect("registry"),
        ),
        "redisson-raw" => Peer::Raw(Arc::new(Raw {
            floor: Floor::new(&url).await,
            wake: Arc::new(tokio::sync::Notify::new()),
            client: redis::Client::open(url.as_str()).expect("url"),
            listeners: std::sync::Mutex::new(Vec::new()),
        })),
        "bare" => {
            let mut conn = connect(&url).await;
            let unlock_sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(COMPARE_AND_DELETE)
                .query_async(&mut conn)
                .await
                .expect("load");
            Peer::Bare(Bare { conn, unlock_sha })
        }
        other => {
            eprintln!("unknown contender {other}: distlock, distlock-barging, redisson-raw, bare");
            std::process::exit(2);
        }
    };
    let mut info = connect(&url).await;
    let prefix = format!("bench:{contender}:{}:{workload}", std::process::id());
    let fields = match workload.as_str() {
        "sequential" => sequential(&peer, &mut info, &prefix).await,
        "concurrent" => concurrent(&peer, &mut info, &prefix).await,
        "handoff" => handoff(&peer, &mut info, &prefix).await,
        "hotkey" => hotkey(&peer, &mut info, &prefix).await,
        "xhotkey" => xhotkey(&peer, &shared_key).await,
        "xholder" => xholder(&peer, &shared_key).await,
        "xwaiter" => xwaiter(&peer, &shared_key).await,
        other => {
            eprintln!("unknown workload {other}");
            std::process::exit(2);
        }
    };
    println!("{{\"contender\":\"{contender}\",\"workload\":\"{workload}\",{fields}}}");
    // Tasks still waiting after the window are abandoned: their keys are unique to this run.
    std::process::exit(0);
}
