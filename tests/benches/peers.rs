//! distlock's side of the peer benchmark (`scripts/bench.sh peers`): one contender, one
//! workload, one JSON line, like the Node.js and Python peers in `bench/peers/`.
//!
//! ```text
//! cargo bench -p distlock-tests --bench peers -- <redis-url> <workload> <contender>
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
//!
//! Asserts nothing; prints `{"contender": .., "workload": .., "value": .., ...}`.

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

// ------------------------------------------------------------------ the contenders

/// Redisson's protocol sent raw, waiting on its lock channel.
struct Raw {
    floor: Floor,
    wake: Arc<tokio::sync::Notify>,
    client: redis::Client,
    listeners: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

#[derive(Clone)]
enum Peer {
    Distlock(Registry),
    Raw(Arc<Raw>),
}

enum Held {
    Distlock(LockGuard),
    Raw { key: String, owner: String },
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
            _ => unreachable!("a handle of another contender"),
        }
    }

    async fn pair(&self, key: &str) {
        let h = self.lock(key).await;
        self.unlock(h).await;
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

/// Calls per command and the server's read events, from `INFO commandstats stats`.
struct Snapshot {
    calls: BTreeMap<String, u64>,
    reads: u64,
}

async fn snapshot(conn: &mut MultiplexedConnection) -> Snapshot {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("stats")
        .query_async(conn)
        .await
        .expect("info");
    let mut calls = BTreeMap::new();
    let mut reads = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("cmdstat_") {
            if let Some((name, stats)) = rest.split_once(':') {
                let n = stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                calls.insert(name.to_owned(), n);
            }
        } else if let Some(v) = line.strip_prefix("total_reads_processed:") {
            reads = v.trim().parse().unwrap_or(0);
        }
    }
    Snapshot { calls, reads }
}

/// The JSON fields of the commands Redis ran between `a` and `b` (INFO left out), per op.
fn counted(a: &Snapshot, b: &Snapshot, ops: u64) -> String {
    let mut total = 0;
    let mut parts = Vec::new();
    for (name, n) in &b.calls {
        if name == "info" {
            continue;
        }
        let d = n.saturating_sub(a.calls.get(name).copied().unwrap_or(0));
        if d > 0 {
            total += d;
            parts.push(format!("\"{name}\":{d}"));
        }
    }
    // The second INFO's own read event is in `b`.
    let reads = b.reads.saturating_sub(a.reads + 1);
    let ops = ops.max(1) as f64;
    format!(
        "\"cmds\":{total},\"cmds_per_op\":{},\"reads_per_op\":{},\"breakdown\":{{{}}}",
        total as f64 / ops,
        reads as f64 / ops,
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

/// One hand-off: the time from the holder's release call to the waiter holding the key.
async fn handoff_round(peer: &Peer, key: &str) -> Duration {
    let held = peer.lock(key).await;
    let (p2, k2) = (peer.clone(), key.to_owned());
    let waiter = tokio::spawn(async move {
        let h = p2.lock(&k2).await;
        let at = Instant::now();
        p2.unlock(h).await;
        at
    });
    // The contenders here do not poll: the release falls 5 ms after the waiter started.
    tokio::time::sleep(HANDOFF_SETTLE).await;
    peer.until_waiting().await;
    let released = Instant::now();
    peer.unlock(held).await;
    waiter
        .await
        .expect("waiter")
        .saturating_duration_since(released)
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
    while lat.len() < HANDOFF_MIN
        || (lat.len() < HANDOFF_MAX && t0.elapsed().as_secs_f64() < HANDOFF_SECS)
    {
        lat.push(handoff_round(peer, &key).await.as_secs_f64() * 1e3);
    }
    let secs = t0.elapsed().as_secs_f64();
    let s1 = snapshot(info).await;
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
    let [url, workload, contender] = match <[String; 3]>::try_from(args) {
        Ok(a) => a,
        Err(_) => {
            eprintln!(
                "usage: peers <redis-url> <sequential|concurrent|handoff|hotkey> <distlock|distlock-barging|redisson-raw>"
            );
            std::process::exit(2);
        }
    };
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
        other => {
            eprintln!("unknown contender {other}: distlock, distlock-barging, redisson-raw");
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
        other => {
            eprintln!("unknown workload {other}");
            std::process::exit(2);
        }
    };
    println!("{{\"contender\":\"{contender}\",\"workload\":\"{workload}\",{fields}}}");
    // Tasks still waiting after the window are abandoned: their keys are unique to this run.
    std::process::exit(0);
}
