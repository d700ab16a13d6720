//! The performance targets, each a ratio measured in this one run, printed as one table.
//!
//! Run: `scripts/bench.sh` (starts the shared loopback servers, runs this in release mode,
//! stops them). Asserts nothing: it reports.
//!
//! The floor is **Redisson's protocol sent raw**: its lock script (EXISTS/HEXISTS, HINCRBY,
//! PEXPIRE) and its unlock script (the unlock latch GET, HEXISTS, HINCRBY, DEL, PUBLISH,
//! latch SET), as distlock writes them in `protocol/redisson/`, by EVALSHA over one
//! multiplexed TCP_NODELAY connection, without the fencing counter, without a watchdog,
//! and without the latch's follow-up DEL (so the floor is, if anything, cheaper than
//! Redisson). distlock runs with everything on: fencing tokens, the watchdog (auto lease),
//! reentrancy marks, wake-up subscription on contention.
//!
//! Every comparison alternates its contenders in batches (A B A B …) and reports medians,
//! so a noisy neighbour on the machine hits both sides alike.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{distributed_lock, Lease, LockError, Registry};
use support::floor::{Floor, REDISSON_LOCK, REDISSON_UNLOCK};
use support::{cpu_seconds, cpu_seconds_of, hand_off, list, median, pct};

const TASKS: usize = 64;
const LEASES: usize = 100_000;

// ------------------------------------------------------------------ the floor

/// Median µs of a PING round trip on the floor's connection: the machine's loopback cost,
/// which every hand-off pays twice.
async fn ping_us(floor: &Floor, n: usize) -> f64 {
    let mut conn = floor.conn.clone();
    let mut t = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .expect("ping");
        t.push(start.elapsed().as_secs_f64() * 1e6);
    }
    median(t)
}

/// Redisson's hand-off sent raw, `rounds` times: the holder unlocks (the script publishes
/// on the lock's channel); a waiter, subscribed and refused before the unlock, tries again
/// on the message. The time from the unlock's sending to the waiter's lock reply.
async fn floor_hand_off(url: &str, floor: &Floor, rounds: usize) -> Vec<Duration> {
    use futures_util::StreamExt;
    let key = format!("t:fho:{}", unique());
    let channel = format!("redisson_lock__channel:{{{key}}}");
    let client = redis::Client::open(url).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(&channel).await.expect("subscribe");
    let mut messages = pubsub.into_on_message();
    let mut times = Vec::with_capacity(rounds);
    let mut conn = floor.conn.clone();
    for r in 0..rounds {
        let holder = format!("holder:{r}");
        let waiter = format!("waiter:{r}");
        let v: Vec<i64> = floor
            .lock_cmd(&key, &holder)
            .query_async(&mut conn)
            .await
            .expect("lock");
        assert_eq!(v.first(), Some(&1));
        let v: Vec<i64> = floor
            .lock_cmd(&key, &waiter)
            .query_async(&mut conn)
            .await
            .expect("refused");
        assert_eq!(v.first(), Some(&0), "the waiter is refused first");
        let (floor2, key2, waiter2) = (floor.clone(), key.clone(), waiter.clone());
        let mut wconn = floor.conn.clone();
        let w = async move {
            let _ = messages.next().await;
            let v: Vec<i64> = floor2
                .lock_cmd(&key2, &waiter2)
                .query_async(&mut wconn)
                .await
                .expect("lock");
            assert_eq!(v.first(), Some(&1), "the waiter holds it");
            (Instant::now(), messages)
        };
        let waiting = tokio::spawn(w);
        tokio::task::yield_now().await;
        let released = Instant::now();
        let _: i64 = redis::cmd("EVALSHA")
            .arg(&floor.unlock_sha)
            .arg(3)
            .arg(&key)
            .arg(&channel)
            .arg(format!("redisson_unlock_latch:{{{key}}}:{holder}"))
            .arg(0)
            .arg(30_000)
            .arg(&holder)
            .arg("publish")
            .arg(1_000)
            .query_async(&mut conn)
            .await
            .expect("unlock");
        let (held, m) = waiting.await.expect("waiter");
        messages = m;
        times.push(held.saturating_duration_since(released));
        let _: i64 = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("del");
    }
    times
}

/// The pid of the redis-server behind `floor`'s connection (`INFO server`).
async fn server_pid(floor: &Floor) -> u32 {
    let mut conn = floor.conn.clone();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .expect("info");
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("process_id")
}

/// CPU µs per sequential pair, (this client, the server), of `pairs` pairs of `c`. The
/// client's figure counts every thread of this process, spinning idle workers included.
async fn cpu_per_pair(c: &Contender, server: u32, pairs: usize) -> (f64, f64) {
    let base = unique();
    let owner = format!("{:032x}:1", rand::random::<u128>());
    let (c0, s0) = (cpu_seconds(), cpu_seconds_of(server));
    for i in 0..pairs {
        c.pair(format!("t:cpu:{base}:{i}"), &owner).await;
    }
    let (c1, s1) = (cpu_seconds(), cpu_seconds_of(server));
    let per = |d: f64| d * 1e6 / pairs as f64;
    (per(c1 - c0), per(s1 - s0))
}

/// Redisson's floor over the redis-rs cluster client (what distlock's cluster backend
/// sends through): EVALSHA of the same two scripts, with the NOSCRIPT fallback of
/// `redis::Script`.
#[derive(Clone)]
struct ClusterFloor {
    conn: redis::cluster_async::ClusterConnection,
}

impl ClusterFloor {
    async fn new(nodes: &[String]) -> ClusterFloor {
        let client = redis::cluster::ClusterClient::new(nodes.to_vec()).expect("cluster");
        ClusterFloor {
            conn: client.get_async_connection().await.expect("connect"),
        }
    }

    async fn pair(&self, key: &str, owner: &str) {
        let mut conn = self.conn.clone();
        let v: Vec<i64> = redis::Script::new(REDISSON_LOCK)
            .key(key)
            .arg(30_000)
            .arg(owner)
            .invoke_async(&mut conn)
            .await
            .expect("cluster floor lock");
        assert_eq!(v.first(), Some(&1), "{v:?}");
        let r: i64 = redis::Script::new(REDISSON_UNLOCK)
            .key(key)
            .key(format!("redisson_lock__channel:{{{key}}}"))
            .key(format!("redisson_unlock_latch:{{{key}}}:{owner}"))
            .arg(0)
            .arg(30_000)
            .arg(owner)
            .arg("spublish")
            .arg(1_000)
            .invoke_async(&mut conn)
            .await
            .expect("cluster floor unlock");
        assert_eq!(r, 1);
    }
}

// ------------------------------------------------------------------ helpers

/// The URL of the master serving slot 0's range in `CLUSTER SLOTS` (asked of `node`), and
/// every slot it serves.
async fn first_cluster_master(
    node: &str,
) -> (
    String,
    std::collections::HashSet<redis::cluster_routing::Slot>,
) {
    use redis::Value;
    let mut conn = support::floor::connect(node).await;
    let ranges: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await
        .expect("CLUSTER SLOTS");
    let Value::Array(ranges) = ranges else {
        panic!("CLUSTER SLOTS: {ranges:?}")
    };
    let entry = |r: &Value| -> Option<(i64, i64, String)> {
        let Value::Array(items) = r else { return None };
        let (Value::Int(start), Value::Int(end), Value::Array(master)) =
            (items.first()?, items.get(1)?, items.get(2)?)
        else {
            return None;
        };
        let host: String = redis::from_redis_value(master.first()?.clone()).ok()?;
        let port: i64 = redis::from_redis_value(master.get(1)?.clone()).ok()?;
        Some((*start, *end, format!("{host}:{port}")))
    };
    let all: Vec<_> = ranges.iter().filter_map(entry).collect();
    let first = all
        .iter()
        .min_by_key(|e| e.0)
        .expect("a slot range")
        .2
        .clone();
    let slots = all
        .iter()
        .filter(|e| e.2 == first)
        .flat_map(|e| e.0..=e.1)
        .filter_map(|n| redis::cluster_routing::Slot::new(u16::try_from(n).ok()?))
        .collect();
    (format!("redis://{first}"), slots)
}

fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}:{nanos}", std::process::id())
}

async fn registry(backend: &str) -> Registry {
    Registry::from_str(&format!("[backends.main]\n{backend}"))
        .await
        .unwrap_or_else(|e| panic!("{backend}: {e}"))
}

/// What one batch of a comparison runs.
#[derive(Clone)]
enum Contender {
    Floor(Floor),
    ClusterFloor(ClusterFloor),
    /// The floor straight on one cluster master, on keys of its own slots.
    MasterFloor(
        Floor,
        Arc<std::collections::HashSet<redis::cluster_routing::Slot>>,
    ),
    Lock(Registry),
    Attribute,
    Run(Registry),
}

impl Contender {
    async fn pair(&self, key: String, owner: &str) {
        match self {
            Contender::Floor(f) => f.pair(&key, owner).await,
            Contender::ClusterFloor(f) => f.pair(&key, owner).await,
            Contender::MasterFloor(f, slots) => {
                let key = (0..)
                    .map(|n| format!("{key}:{n}"))
                    .find(|k| slots.contains(&redis::cluster_routing::Slot::for_key(k)))
                    .expect("a key of the master's slots");
                f.pair(&key, owner).await
            }
            Contender::Lock(reg) => {
                let g = reg
                    .lock(key)
                    .lease(Lease::Auto)
                    .acquire()
                    .await
                    .expect("acquire");
                g.release().await.expect("release");
            }
            Contender::Attribute => attributed(key).await.expect("attribute"),
            Contender::Run(reg) => reg
                .lock(key)
                .lease(Lease::Auto)
                .run(body())
                .await
                .expect("run")
                .expect("body"),
        }
    }
}

/// The body both the attribute and `Lock::run` run.
async fn body() -> Result<(), LockError> {
    std::hint::black_box(());
    Ok(())
}

#[distributed_lock(key = "attr:<key>", lease = "auto")]
async fn attributed(key: String) -> Result<(), LockError> {
    body().await
}

/// Median µs per sequential lock+unlock pair of each contender, in `batches` alternating
/// batches of `pairs`.
async fn sequential(contenders: &[Contender], batches: usize, pairs: usize) -> Vec<f64> {
    sequential_batches(contenders, batches, pairs)
        .await
        .into_iter()
        .map(median)
        .collect()
}

/// µs per sequential lock+unlock pair of each contender in each of `batches` alternating
/// batches of `pairs` (`[contender][batch]`; the contenders' batches `b` ran back to back).
async fn sequential_batches(
    contenders: &[Contender],
    batches: usize,
    pairs: usize,
) -> Vec<Vec<f64>> {
    let base = unique();
    let owner = format!("{:032x}:1", rand::random::<u128>());
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    for b in 0..batches {
        // The order turns every batch (A B, B A, …): no contender always runs right after
        // another one.
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        if b % 2 == 1 {
            order.reverse();
        }
        for k in order {
            let (c, out) = (&contenders[k], &mut per[k]);
            let start = Instant::now();
            // Keys of this contender's own: contenders that share servers (redlock and
            // multi share three nodes) must not find each other's state (a key's
            // counters on some nodes and not on others, which redlock then raises).
            for i in 0..pairs {
                c.pair(format!("t:seq:{base}:{b}:{i}:{k}"), &owner).await;
            }
            out.push(start.elapsed().as_secs_f64() * 1e6 / pairs as f64);
        }
    }
    per
}

/// Two contenders' median µs per sequential pair over 80 alternating batches of 200, and
/// the median of each batch's ratio (the first's to the second's) to the batch beside it:
/// the machine's drift over the run, which moves two medians taken apart by a percent or
/// two, cancels within a pair of batches.
async fn paired_ratio(contenders: [Contender; 2]) -> ([f64; 2], f64) {
    let per = sequential_batches(&contenders, 80, 200).await;
    let ratio = median(per[0].iter().zip(&per[1]).map(|(a, b)| a / b).collect());
    ([median(per[0].clone()), median(per[1].clone())], ratio)
}

/// Pairs per second of `TASKS` tasks on distinct keys for `run_for`.
async fn concurrent(c: &Contender, run_for: Duration) -> f64 {
    concurrent_n(c, TASKS, run_for).await
}

/// Pairs per second of `tasks` tasks on distinct keys for `run_for`.
async fn concurrent_n(c: &Contender, tasks: usize, run_for: Duration) -> f64 {
    concurrent_keys(c, tasks, run_for, false).await
}

/// Pairs per second of `tasks` tasks for `run_for`, each pair on a key of its own
/// (`reuse` false: every acquisition starts a fencing counter) or each task on one key
/// of its own (`reuse`: its counter is reused, as a lock of a long-lived resource's is).
async fn concurrent_keys(c: &Contender, tasks: usize, run_for: Duration, reuse: bool) -> f64 {
    let base = unique();
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (c, stop, count, base) = (c.clone(), stop.clone(), count.clone(), base.clone());
        handles.push(tokio::spawn(async move {
            let owner = format!("{:032x}:1", rand::random::<u128>());
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if reuse {
                    // An owner per pair: the floor's unlock leaves a latch per key and owner
                    // (Redisson's, deleted by its client after the reply), which would answer
                    // the same owner's next unlock of the key without unlocking.
                    let owner = format!("{:032x}:1", rand::random::<u128>());
                    c.pair(format!("t:c:{base}:{t}"), &owner).await;
                } else {
                    c.pair(format!("t:c:{base}:{t}:{i}"), &owner).await;
                }
                i += 1;
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(run_for).await;
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64();
    for h in handles {
        h.await.expect("task");
    }
    n as f64 / secs
}

/// Median pairs/s of each contender with `tasks` tasks, three rounds, the contenders
/// alternating within each round, all on the server at `url`.
async fn concurrent_alternating(
    url: &str,
    contenders: &[Contender],
    tasks: usize,
    run_for: Duration,
) -> Vec<f64> {
    concurrent_alternating_keys(url, contenders, tasks, run_for, false).await
}

/// [`concurrent_alternating`], the keys as [`concurrent_keys`] takes them.
async fn concurrent_alternating_keys(
    url: &str,
    contenders: &[Contender],
    tasks: usize,
    run_for: Duration,
    reuse: bool,
) -> Vec<f64> {
    let mut baseline = expiring_keys(url);
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    for _ in 0..3 {
        for (c, out) in contenders.iter().zip(per.iter_mut()) {
            baseline = settle(url, baseline).await;
            out.push(concurrent_keys(c, tasks, run_for, reuse).await);
        }
    }
    per.into_iter().map(median).collect()
}

/// The number of keys with an expiry on the server at `url` (`INFO keyspace`, db 0; none
/// when the db is empty).
fn expiring_keys(url: &str) -> u64 {
    distlock_tests::topology::info_field(&distlock_tests::addr_of(url), "keyspace", "db0")
        .and_then(|db| {
            db.split(',')
                .find_map(|f| f.strip_prefix("expires="))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Wait until the server at `url` holds no more keys with an expiry than `baseline`, or
/// none of them has expired for 250 ms (what is left lives long: a fencing counter's
/// 24 h), at most 5 s: the keys a contender left to expire are not expired on the next
/// one's time. Returns the count then, the next call's baseline. The floor's unlock leaves
/// a latch of 1 s per pair (Redisson's client deletes it after the reply, the floor does
/// not): 60-90 thousand after a run of 64 tasks, which the server expired during the next
/// contender's run, taking 5-10 % of its CPU there.
async fn settle(url: &str, baseline: u64) -> u64 {
    let end = Instant::now() + Duration::from_secs(5);
    let (mut last, mut still) = (expiring_keys(url), Instant::now());
    while last > baseline {
        if Instant::now() > end {
            eprintln!("settle: keys with an expiry still above {baseline} after 5 s");
            return last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let n = expiring_keys(url);
        if n != last {
            (last, still) = (n, Instant::now());
        } else if still.elapsed() >= Duration::from_millis(250) {
            return last;
        }
    }
    last
}

/// UNLINK every key of the server at `url` whose name matches `pattern` (SCAN MATCH).
fn unlink_matching(url: &str, pattern: &str) {
    let addr = distlock_tests::addr_of(url);
    let mut cursor = "0".to_owned();
    loop {
        let reply = distlock_tests::resp_command(
            &addr,
            &["SCAN", &cursor, "MATCH", pattern, "COUNT", "10000"],
        )
        .expect("SCAN");
        let a = reply.as_array().expect("SCAN reply");
        cursor = a[0].as_str().expect("cursor").to_owned();
        let names: Vec<&str> = a[1]
            .as_array()
            .expect("keys")
            .iter()
            .filter_map(|k| k.as_str())
            .collect();
        if !names.is_empty() {
            let mut args = vec!["UNLINK"];
            args.extend(names);
            distlock_tests::resp_command(&addr, &args).expect("UNLINK");
        }
        if cursor == "0" {
            return;
        }
    }
}

fn rss_bytes() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        * 1024.0
}

/// `LEASES` auto leases held on a private server with the default watchdog_timeout (30 s,
/// renewed every 10 s): (client CPU % of one core over two renewal rounds, client memory
/// added in bytes, leases still held at the end).
async fn many_leases() -> (f64, f64, usize) {
    let server = distlock_tests::RedisProcess::start();
    let reg = registry(&format!("mode = \"single\"\nurl = \"{}\"\n", server.url())).await;
    let base = unique();
    let rss0 = rss_bytes();
    let per_task = LEASES / TASKS + 1;
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let (reg, base) = (reg.clone(), base.clone());
        handles.push(tokio::spawn(async move {
            let mut guards = Vec::with_capacity(per_task);
            for i in 0..per_task {
                if t * per_task + i >= LEASES {
                    break;
                }
                guards.push(
                    reg.lock(format!("t:wd:{base}:{t}:{i}"))
                        .lease(Lease::Auto)
                        .acquire()
                        .await
                        .expect("acquire"),
                );
            }
            guards
        }));
    }
    // Each task's guards stay in its own vector: copied into one, they would be counted
    // twice (the copies' memory freed, but kept by the allocator).
    let mut guards = Vec::with_capacity(handles.len());
    for h in handles {
        guards.push(h.await.expect("task"));
    }
    let rss1 = rss_bytes();
    let window = Duration::from_secs(21);
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    tokio::time::sleep(window).await;
    let cpu = (cpu_seconds() - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    let held = guards.iter().flatten().filter(|g| g.is_held()).count();
    drop(guards);
    drop(reg);
    (cpu, rss1 - rss0, held)
}

// ------------------------------------------------------------------ one hot key

/// Tasks per process contending for the hot key.
const HOT_TASKS: usize = 32;

/// Redisson's waiting, sent raw: one subscriber per process on the lock's channel; each
/// unlock message wakes one waiter (Redisson's per-channel semaphore), which tries again;
/// a waiter also tries again when the holder's TTL would have run out.
async fn floor_hot(url: &str, key: &str, run_for: Duration) -> u64 {
    let floor = Floor::new(url).await;
    let client = redis::Client::open(url).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe(format!("redisson_lock__channel:{{{key}}}"))
        .await
        .expect("subscribe");
    let wake = Arc::new(tokio::sync::Notify::new());
    let w = wake.clone();
    let listener = tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut messages = pubsub.into_on_message();
        while messages.next().await.is_some() {
            w.notify_one();
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..HOT_TASKS {
        let (floor, wake, stop, count, key) = (
            floor.clone(),
            wake.clone(),
            stop.clone(),
            count.clone(),
            key.to_owned(),
        );
        handles.push(tokio::spawn(async move {
            let owner = format!("{:032x}:{t}", rand::random::<u128>());
            let mut conn = floor.conn.clone();
            while !stop.load(Ordering::Relaxed) {
                let v: Vec<i64> = redis::cmd("EVALSHA")
                    .arg(&floor.lock_sha)
                    .arg(1)
                    .arg(&key)
                    .arg(30_000)
                    .arg(&owner)
                    .query_async(&mut conn)
                    .await
                    .expect("floor lock");
                if v.first() != Some(&1) {
                    let ttl = v.get(1).copied().unwrap_or(100).max(1) as u64;
                    let _ = tokio::time::timeout(Duration::from_millis(ttl), wake.notified()).await;
                    continue;
                }
                count.fetch_add(1, Ordering::Relaxed);
                let _: i64 = redis::cmd("EVALSHA")
                    .arg(&floor.unlock_sha)
                    .arg(3)
                    .arg(&key)
                    .arg(format!("redisson_lock__channel:{{{key}}}"))
                    .arg(format!(
                        "redisson_unlock_latch:{{{key}}}:{owner}:{}",
                        rand::random::<u64>()
                    ))
                    .arg(0)
                    .arg(30_000)
                    .arg(&owner)
                    .arg("publish")
                    .arg(1_000)
                    .query_async(&mut conn)
                    .await
                    .expect("floor unlock");
            }
        }));
    }
    tokio::time::sleep(run_for).await;
    stop.store(true, Ordering::Relaxed);
    wake.notify_waiters();
    for h in handles {
        // A waiter asleep on a TTL wakes within it; the lock is never held long.
        let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
    }
    listener.abort();
    count.load(Ordering::Relaxed)
}

/// distlock: `HOT_TASKS` tasks taking and releasing `key` for `run_for`.
async fn distlock_hot(url: &str, key: &str, run_for: Duration) -> u64 {
    let reg = registry(&format!("mode = \"single\"\nurl = \"{url}\"\n")).await;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..HOT_TASKS {
        let (reg, stop, count, key) = (reg.clone(), stop.clone(), count.clone(), key.to_owned());
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let g = reg
                    .lock(key.as_str())
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire");
                count.fetch_add(1, Ordering::Relaxed);
                g.release().await.expect("release");
            }
        }));
    }
    tokio::time::sleep(run_for).await;
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.expect("task");
    }
    count.load(Ordering::Relaxed)
}

/// Hand-offs per second on one hot key: this process and a child process (this bench run
/// again with `hot-child`), `HOT_TASKS` tasks each; and the share of the acquisitions that
/// went to the process that got fewer (0.5: even; 0: one process starved).
async fn hot_key(which: &str, url: &str, run_for: Duration) -> (f64, f64) {
    let key = format!("t:hot:{which}:{}", unique());
    let child = tokio::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "hot-child",
            which,
            url,
            &key,
            &run_for.as_millis().to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("child");
    let start = Instant::now();
    let mine = match which {
        "floor" => floor_hot(url, &key, run_for).await,
        _ => distlock_hot(url, &key, run_for).await,
    };
    let out = child.wait_with_output().await.expect("child");
    let theirs: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("child count");
    let all = (mine + theirs) as f64;
    (
        all / start.elapsed().as_secs_f64().max(run_for.as_secs_f64()),
        mine.min(theirs) as f64 / all.max(1.0),
    )
}

/// The child process of [`hot_key`]: prints its count.
async fn hot_child(args: &[String]) {
    let (which, url, key) = (&args[0], &args[1], &args[2]);
    let run_for = Duration::from_millis(args[3].parse().expect("ms"));
    let n = match which.as_str() {
        "floor" => floor_hot(url, key, run_for).await,
        _ => distlock_hot(url, key, run_for).await,
    };
    println!("{n}");
}

struct Row {
    metric: String,
    measured: String,
    target: &'static str,
    ok: bool,
}

fn row(
    rows: &mut Vec<Row>,
    metric: impl Into<String>,
    measured: String,
    target: &'static str,
    ok: bool,
) {
    let r = Row {
        metric: metric.into(),
        measured,
        target,
        ok,
    };
    println!(
        "  {:<62} {:>24}  {:<12} {}",
        r.metric,
        r.measured,
        r.target,
        if r.ok { "met" } else { "NOT MET" }
    );
    rows.push(r);
}

// ------------------------------------------------------------------ charts

/// Hand-off latency distribution per topology, and pairs/s against tasks for the floor and
/// distlock, as SVG files in `dir`.
async fn plot(dir: &std::path::Path, single: &Registry, floor: &Floor) {
    std::fs::create_dir_all(dir).expect("plot directory");
    let sentinel = registry(&format!(
        "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]\n",
        distlock_tests::sentinel_master_name(),
        list(&distlock_tests::sentinel_urls())
    ))
    .await;
    let cluster = registry(&format!(
        "mode = \"cluster\"\nnodes = [{}]\n",
        list(&distlock_tests::cluster_urls())
    ))
    .await;
    let mut handoffs = Vec::new();
    for (name, reg) in [
        ("single", single),
        ("sentinel", &sentinel),
        ("cluster", &cluster),
    ] {
        let t = hand_off(reg, &format!("t:plot:{name}:{}", unique()), 300).await;
        handoffs.push((format!("distlock, {name}"), t));
    }
    let f = floor_hand_off(&distlock_tests::single_url(), floor, 300).await;
    handoffs.push(("Redisson raw (floor), single".to_owned(), f));
    let path = dir.join("handoff.svg");
    support::plot::handoff_cdf(&path, "Hand-off latency, 300 hand-offs each", &handoffs)
        .expect("handoff chart");
    println!("wrote {}", path.display());

    let mut lines = vec![
        ("Redisson raw (floor)".to_owned(), Vec::new()),
        ("distlock (fencing, watchdog)".to_owned(), Vec::new()),
    ];
    for tasks in [1usize, 2, 4, 8, 16, 32, 64] {
        let m = concurrent_alternating(
            &distlock_tests::single_url(),
            &[
                Contender::Floor(floor.clone()),
                Contender::Lock(single.clone()),
            ],
            tasks,
            Duration::from_millis(600),
        )
        .await;
        lines[0].1.push((tasks, m[0]));
        lines[1].1.push((tasks, m[1]));
    }
    let path = dir.join("throughput.svg");
    support::plot::throughput(&path, "lock+unlock throughput, single server", &lines)
        .expect("throughput chart");
    println!("wrote {}", path.display());
}

// ------------------------------------------------------------------ main

/// Whether the row group `name` runs: every group without arguments, else only those
/// named (`cargo bench --bench targets -- concurrent handoff`): sequential, concurrent,
/// topologies, latency, handoff, hotkey, attribute, tls, leases; and the profiles, which
/// run only when named: profile-seq-floor, profile-seq-distlock, profile-seq-cluster,
/// profile-distlock.
fn wanted(name: &str) -> bool {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if args.is_empty() {
        !name.starts_with("profile-")
    } else {
        args.iter().any(|a| a == name)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("hot-child") {
        hot_child(&args[1..]).await;
        return;
    }
    let single_url = distlock_tests::single_url();
    let single = registry(&format!("mode = \"single\"\nurl = \"{single_url}\"\n")).await;
    distlock::init_with(single.clone()).expect("init");
    let floor = Floor::new(&single_url).await;
    let mut rows = Vec::new();
    println!(
        "distlock performance targets: loopback redis-server 7.0, release build, tokio 2 workers"
    );
    println!("floor = Redisson's lock/unlock scripts by raw EVALSHA, one multiplexed connection, no fencing");
    println!();
    println!("  {:<62} {:>24}  {:<12}", "metric", "measured", "target");

    if wanted("sequential") {
        // 1. lock+unlock sequential vs the floor.
        let seq = sequential(
            &[
                Contender::Floor(floor.clone()),
                Contender::Lock(single.clone()),
            ],
            12,
            400,
        )
        .await;
        let r = seq[1] / seq[0];
        row(
            &mut rows,
            "lock+unlock sequential, x floor",
            format!("{:.1} vs {:.1} us = {r:.2}x", seq[1], seq[0]),
            "<= 1.05x",
            r <= 1.05,
        );
        // Holder information: on by default (`single` above); the same with it off.
        let off = registry(&format!(
            "mode = \"single\"\nurl = \"{single_url}\"\nholder_info = false\n"
        ))
        .await;
        // A difference of a few per cent: measured as the attribute's (`paired_ratio`).
        let (hi, r) = paired_ratio([Contender::Lock(single.clone()), Contender::Lock(off)]).await;
        row(
            &mut rows,
            "holder information on (the default) vs off, sequential",
            format!("{:.1} vs {:.1} us, batch by batch {r:.2}x", hi[0], hi[1]),
            "<= 1.03x",
            r <= 1.03,
        );
        // Diagnostics of that gap: the loopback round trip, and the floor itself with its
        // connection on a second runtime, as distlock's connections live on its background
        // runtime (two cross-thread wake-ups per command instead of none).
        let other: &'static tokio::runtime::Runtime = Box::leak(Box::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime"),
        ));
        let far = Floor::on_runtime(&single_url, other).await;
        let d = sequential(
            &[Contender::Floor(floor.clone()), Contender::Floor(far)],
            12,
            400,
        )
        .await;
        row(
            &mut rows,
            "  diagnostic: PING round trip on this machine, p50",
            format!("{:.1} us", ping_us(&floor, 2000).await),
            "report",
            true,
        );
        row(
            &mut rows,
            "  diagnostic: floor, connection on a 2nd runtime, x floor",
            format!("{:.1} vs {:.1} us = {:.2}x", d[1], d[0], d[1] / d[0]),
            "report",
            true,
        );
        // Where the gap goes on the server: its CPU per pair, each side (the client's own
        // CPU is not comparable: tokio's idle workers spin before they park).
        let pid = server_pid(&floor).await;
        let mut fc = Vec::new();
        let mut dc = Vec::new();
        for _ in 0..3 {
            fc.push(cpu_per_pair(&Contender::Floor(floor.clone()), pid, 3000).await);
            dc.push(cpu_per_pair(&Contender::Lock(single.clone()), pid, 3000).await);
        }
        let server = |v: &[(f64, f64)]| median(v.iter().map(|p| p.1).collect());
        row(
            &mut rows,
            "  diagnostic: server CPU per pair, distlock vs floor",
            format!("{:.1} vs {:.1} us", server(&dc), server(&fc)),
            "report",
            true,
        );
    }

    if wanted("concurrent") {
        // 2. 64 tasks on distinct keys vs the floor (fencing on), and as a diagnostic
        // Redisson's own fenced lock (RFencedLock: one INCR per acquire) sent raw: what a
        // fencing counter costs the same protocol.
        let fenced = Floor {
            fenced: true,
            ..floor.clone()
        };
        let off = registry(&format!(
            "mode = \"single\"\nurl = \"{single_url}\"\nholder_info = false\n"
        ))
        .await;
        // distlock's command connections leave Nagle's algorithm on by default
        // (`tcp_nodelay = false`); the floor's has TCP_NODELAY. What each transport gives
        // each side: the floor with Nagle on, distlock with `tcp_nodelay = true`.
        let nodelay = registry(&format!(
            "mode = \"single\"\nurl = \"{single_url}\"\ntcp_nodelay = true\n"
        ))
        .await;
        let m = concurrent_alternating(
            &single_url,
            &[
                Contender::Floor(floor.clone()),
                Contender::Lock(single.clone()),
                Contender::Floor(fenced),
                Contender::Lock(off),
                Contender::Floor(Floor::with_nagle(&single_url).await),
                Contender::Lock(nodelay),
            ],
            TASKS,
            Duration::from_millis(1500),
        )
        .await;
        let (f, d, ff, off, fnagle, dnodelay) = (m[0], m[1], m[2], m[3], m[4], m[5]);
        row(
            &mut rows,
            format!("{TASKS} tasks, distinct keys, pairs/s / floor (fencing on)"),
            format!("{d:.0} / {f:.0} = {:.2}", d / f),
            ">= 0.90",
            d / f >= 0.90,
        );
        row(
            &mut rows,
            format!("  diagnostic: {TASKS} tasks, Redisson fenced lock raw / floor"),
            format!("{ff:.0} / {f:.0} = {:.2}", ff / f),
            "report",
            true,
        );
        row(
            &mut rows,
            format!("  diagnostic: {TASKS} tasks, holder information on (default) / off"),
            format!("{d:.0} / {off:.0} = {:.2}", d / off),
            "report",
            true,
        );
        row(
            &mut rows,
            format!("  diagnostic: {TASKS} tasks, floor with Nagle's algorithm on / floor"),
            format!("{fnagle:.0} / {f:.0} = {:.2}", fnagle / f),
            "report",
            true,
        );
        row(
            &mut rows,
            format!("  diagnostic: {TASKS} tasks, distlock with tcp_nodelay = true / floor"),
            format!("{dnodelay:.0} / {f:.0} = {:.2}", dnodelay / f),
            "report",
            true,
        );
        // Redisson's fenced lock keeps a token counter per key for good: the rows above
        // left one per pair of that diagnostic (hundreds of thousands), which would slow
        // every later row on this server. Gone before the next measure.
        unlink_matching(&single_url, "redisson_lock_token:{t:c:*");
        // Above, every pair is on a new key (distlock's tokens come from the server's one
        // counter). Each task on a key of its own instead:
        let r = concurrent_alternating_keys(
            &single_url,
            &[
                Contender::Floor(floor.clone()),
                Contender::Lock(single.clone()),
            ],
            TASKS,
            Duration::from_millis(1500),
            true,
        )
        .await;
        row(
            &mut rows,
            format!("  diagnostic: {TASKS} tasks, each on one key of its own / floor"),
            format!("{:.0} / {:.0} = {:.2}", r[1], r[0], r[1] / r[0]),
            "report",
            true,
        );
    }

    if wanted("topologies") {
        // 3-4. sentinel and cluster vs single.
        let sentinel = registry(&format!(
            "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]\n",
            distlock_tests::sentinel_master_name(),
            list(&distlock_tests::sentinel_urls())
        ))
        .await;
        let cluster = registry(&format!(
            "mode = \"cluster\"\nnodes = [{}]\n",
            list(&distlock_tests::cluster_urls())
        ))
        .await;
        // The sentinel backend against a single backend on the very master the sentinels
        // name (same server, same replica attached): only the library's paths differ.
        let sentinels = distlock_tests::sentinel_urls();
        let master = distlock_tests::topology::sentinel_master_addr(
            &distlock_tests::addr_of(&sentinels[0]),
            &distlock_tests::sentinel_master_name(),
        )
        .expect("the sentinels name a master");
        let on_master = registry(&format!("mode = \"single\"\nurl = \"redis://{master}\"\n")).await;
        // The floor on the single server and straight on one cluster master (a plain
        // connection, keys of its own slots), in the same run: what each server costs the
        // same protocol with no library and no routing.
        let (master_url, slots) = first_cluster_master(&distlock_tests::cluster_urls()[0]).await;
        let topo = sequential(
            &[
                Contender::Lock(single.clone()),
                Contender::Lock(cluster.clone()),
                Contender::Lock(on_master.clone()),
                Contender::Floor(floor.clone()),
                Contender::MasterFloor(Floor::new(&master_url).await, Arc::new(slots)),
            ],
            10,
            300,
        )
        .await;
        // Two backends on one server whose paths differ by a lookup of the current master:
        // a difference of a few per cent at most, measured as the attribute's
        // (`paired_ratio`); the alternation above puts their batches two apart, and the
        // machine's drift moved that ratio by several per cent from run to run.
        let (st, sr) = paired_ratio([
            Contender::Lock(sentinel.clone()),
            Contender::Lock(on_master.clone()),
        ])
        .await;
        row(
            &mut rows,
            "sentinel lock+unlock, x single on the same master",
            format!("{:.1} vs {:.1} us, batch by batch {sr:.2}x", st[0], st[1]),
            "<= 1.05x",
            sr <= 1.05,
        );
        // The cluster's masters have a replica each (the failover tests need them); so has
        // the sentinels' master, and a single backend on it is the single server the
        // cluster is measured against: each write of either is replicated once, and only
        // the library's paths (routing by slot, the slot's counter) differ. Against the
        // single server without a replica, the ratio is mostly the replica's: on this
        // 2-CPU machine the replicas share the CPUs, and the floor itself costs 1.3-1.5x
        // more on a cluster master than on that server (the diagnostics below).
        row(
            &mut rows,
            "cluster lock+unlock, x single (each master with a replica)",
            format!(
                "{:.1} vs {:.1} us = {:.2}x",
                topo[1],
                topo[2],
                topo[1] / topo[2]
            ),
            "<= 1.25x",
            topo[1] / topo[2] <= 1.25,
        );
        row(
            &mut rows,
            "  diagnostic: cluster, x single without a replica",
            format!(
                "{:.1} vs {:.1} us = {:.2}x",
                topo[1],
                topo[0],
                topo[1] / topo[0]
            ),
            "report",
            true,
        );
        // Diagnostic: the floor itself through the redis-rs cluster client, against the floor
        // on one server: what that client costs the same protocol.
        let cfloor = ClusterFloor::new(&distlock_tests::cluster_urls()).await;
        let cf = sequential(
            &[
                Contender::Floor(floor.clone()),
                Contender::ClusterFloor(cfloor),
            ],
            10,
            300,
        )
        .await;
        row(
            &mut rows,
            "  diagnostic: floor via the redis-rs cluster client, x floor",
            format!("{:.1} vs {:.1} us = {:.2}x", cf[1], cf[0], cf[1] / cf[0]),
            "report",
            true,
        );
        // Diagnostic: the same split by what the server costs. The floor on a cluster master
        // against the floor on the single server is the server's share (its replica, the
        // cluster bus); distlock against the floor on each is the library's share.
        row(
            &mut rows,
            "  diagnostic: floor on a cluster master, x floor on single",
            format!(
                "{:.1} vs {:.1} us = {:.2}x",
                topo[4],
                topo[3],
                topo[4] / topo[3]
            ),
            "report",
            true,
        );
        row(
            &mut rows,
            "  diagnostic: cluster x floor on a cluster master / single x floor",
            format!("{:.2}x / {:.2}x", topo[1] / topo[4], topo[0] / topo[3]),
            "report",
            true,
        );
        drop((sentinel, cluster, on_master));
    }

    if wanted("latency") {
        // 5-6. redlock over 5 and multi over 3 vs single, 1 ms added each way per node.
        let nodes = distlock_tests::redlock_urls();
        let mut upstreams: Vec<String> = nodes.iter().map(|u| distlock_tests::addr_of(u)).collect();
        upstreams.push(distlock_tests::addr_of(&single_url));
        let proxies = distlock_tests::proxy::Proxies::start(&upstreams);
        for ms in [1u64, 5] {
            for p in proxies.all() {
                p.set_latency(Duration::from_millis(ms));
            }
            let via = |addr: &str| proxies.of(addr).url();
            let slow_single = registry(&format!(
                "mode = \"single\"\nurl = \"{}\"\n",
                via(&distlock_tests::addr_of(&single_url))
            ))
            .await;
            let proxied: Vec<String> = nodes
                .iter()
                .map(|u| via(&distlock_tests::addr_of(u)))
                .collect();
            let redlock = registry(&format!(
                "mode = \"redlock\"\nnodes = [{}]\nnode_timeout = \"{}ms\"\n",
                list(&proxied),
                50 * ms
            ))
            .await;
            let multi = registry(&format!(
                "mode = \"multi\"\nnodes = [{}]\nnode_timeout = \"{}ms\"\n",
                list(&proxied[..3]),
                50 * ms
            ))
            .await;
            let pairs = if ms == 1 { 40 } else { 12 };
            let q = sequential(
                &[
                    Contender::Lock(slow_single.clone()),
                    Contender::Lock(redlock.clone()),
                    Contender::Lock(multi.clone()),
                ],
                6,
                pairs,
            )
            .await;
            let target = if ms == 1 { "<= 1.3x" } else { "report" };
            row(
                &mut rows,
                format!("redlock over 5, +{ms} ms each way per node, x single (same)"),
                format!("{:.0} vs {:.0} us = {:.2}x", q[1], q[0], q[1] / q[0]),
                target,
                ms != 1 || q[1] / q[0] <= 1.3,
            );
            row(
                &mut rows,
                format!("multi over 3, +{ms} ms each way per node, x single (same)"),
                format!("{:.0} vs {:.0} us = {:.2}x", q[2], q[0], q[2] / q[0]),
                target,
                ms != 1 || q[2] / q[0] <= 1.3,
            );
            drop((slow_single, redlock, multi));
        }
        drop(proxies);
    }

    if wanted("handoff") {
        // 7. hand-off.
        let mut t = hand_off(&single, &format!("t:handoff:{}", unique()), 300).await;
        let (p50, max) = (pct(&mut t, 0.5), pct(&mut t, 1.0));
        row(
            &mut rows,
            "hand-off release -> waiter holds it, single, p50 / max (300)",
            format!("{p50:.2?} / {max:.2?}"),
            "<0.3ms / <2ms",
            p50 < Duration::from_micros(300) && max < Duration::from_millis(2),
        );
        let mut f = floor_hand_off(&single_url, &floor, 300).await;
        row(
            &mut rows,
            "  diagnostic: the floor's hand-off (Redisson raw), p50 / max",
            format!("{:.2?} / {:.2?}", pct(&mut f, 0.5), pct(&mut f, 1.0)),
            "report",
            true,
        );
    }

    if wanted("hotkey") {
        let (mut f, mut d) = (Vec::new(), Vec::new());
        let (mut f_share, mut d_share) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (rate, share) = hot_key("floor", &single_url, Duration::from_secs(2)).await;
            f.push(rate);
            f_share.push(share);
            let (rate, share) = hot_key("distlock", &single_url, Duration::from_secs(2)).await;
            d.push(rate);
            d_share.push(share);
        }
        let (f, d) = (median(f), median(d));
        row(
            &mut rows,
            format!(
                "one hot key, {} tasks over 2 processes: hand-offs/s / floor",
                2 * HOT_TASKS
            ),
            format!("{d:.0} / {f:.0} = {:.2}", d / f),
            "report",
            true,
        );
        let pct = |v: &[f64]| {
            v.iter()
                .map(|s| format!("{:.0}%", s * 100.0))
                .collect::<Vec<_>>()
                .join(" ")
        };
        row(
            &mut rows,
            "  diagnostic: the share of the process that got fewer, distlock / floor",
            format!("{} / {}", pct(&d_share), pct(&f_share)),
            "report",
            true,
        );
    }

    if wanted("attribute") {
        // 8. the attribute vs Lock::run.
        // Two contenders that differ by a few allocations per pair.
        let (a, ratio) = paired_ratio([Contender::Attribute, Contender::Run(single.clone())]).await;
        let apart = (ratio - 1.0).abs();
        row(
            &mut rows,
            "#[distributed_lock] fn vs the same body under Lock::run",
            format!(
                "{:.1} vs {:.1} us, batch by batch {:.1}% apart",
                a[0],
                a[1],
                apart * 100.0
            ),
            "<= 2% apart",
            apart <= 0.02,
        );
        // The same measure of two identical contenders: how far apart it puts them.
        let (_, control) = paired_ratio([
            Contender::Run(single.clone()),
            Contender::Run(single.clone()),
        ])
        .await;
        row(
            &mut rows,
            "  diagnostic: Lock::run vs Lock::run, the same measure",
            format!("batch by batch {:.1}% apart", (control - 1.0).abs() * 100.0),
            "report",
            true,
        );
    }

    if wanted("tls") {
        // 9. TLS vs plaintext, one private server each, same settings.
        let certs = distlock_tests::tls::Certs::generate();
        let tls_server = distlock_tests::tls::TlsRedis::start(
            &certs,
            "server",
            distlock_tests::tls::ClientAuth::No,
            &[],
        );
        let plain_server = distlock_tests::RedisProcess::start();
        let tls = registry(&format!(
            "mode = \"single\"\nurl = \"{}\"\ntls_ca = \"{}\"\n",
            tls_server.url(),
            certs.file("ca.pem")
        ))
        .await;
        let plain = registry(&format!(
            "mode = \"single\"\nurl = \"{}\"\n",
            plain_server.url()
        ))
        .await;
        let s = sequential(
            &[Contender::Lock(plain.clone()), Contender::Lock(tls.clone())],
            10,
            300,
        )
        .await;
        row(
            &mut rows,
            "lock+unlock over TLS, x plaintext (report)",
            format!("{:.1} vs {:.1} us = {:.2}x", s[1], s[0], s[1] / s[0]),
            "report",
            true,
        );
        drop((tls, plain, tls_server, plain_server));
    }

    if wanted("leases") {
        // 10. 100k auto leases.
        let (cpu, bytes, held) = many_leases().await;
        row(
            &mut rows,
            format!("{LEASES} auto leases (watchdog 30s): client CPU, % of a core"),
            format!("{cpu:.2}%"),
            "<= 5%",
            cpu <= 5.0,
        );
        row(
            &mut rows,
            format!("{LEASES} auto leases: client memory added (per lease)"),
            format!("{:.1} MB ({:.0} B)", bytes / 1e6, bytes / LEASES as f64),
            "<= 100 MB",
            bytes <= 100e6,
        );
        row(
            &mut rows,
            format!("{LEASES} auto leases still held after two renewal rounds"),
            format!("{held}"),
            "all",
            held == LEASES,
        );
    }

    // Only with `-- profile-seq-floor` / `-- profile-seq-distlock`: 10,000 sequential pairs
    // of one contender alone, for `perf stat` (context switches, CPU per pair).
    for (name, c) in [
        ("profile-seq-floor", Contender::Floor(floor.clone())),
        ("profile-seq-distlock", Contender::Lock(single.clone())),
    ] {
        if wanted(name) {
            let t = sequential(&[c], 1, 10_000).await;
            println!("{name}: {:.1} us per pair", t[0]);
        }
    }

    // Only with `-- profile-seq-cluster`: the same on the cluster backend.
    if wanted("profile-seq-cluster") {
        let cluster = registry(&format!(
            "mode = \"cluster\"\nnodes = [{}]\n",
            list(&distlock_tests::cluster_urls())
        ))
        .await;
        let t = sequential(&[Contender::Lock(cluster)], 1, 10_000).await;
        println!("profile-seq-cluster: {:.1} us per pair", t[0]);
    }

    // Only with `-- profile-distlock`: 20 s of distlock's 64-task loop, for `perf record`.
    if wanted("profile-distlock") {
        let n = concurrent(&Contender::Lock(single.clone()), Duration::from_secs(20)).await;
        println!("profile run: {n:.0} pairs/s");
    }

    // `scripts/bench.sh --plot`: the charts, into $DISTLOCK_BENCH_PLOT.
    if let Some(dir) = std::env::var_os("DISTLOCK_BENCH_PLOT") {
        plot(std::path::Path::new(&dir), &single, &floor).await;
    }

    let met = rows.iter().filter(|r| r.ok).count();
    println!();
    println!("{met} of {} rows met", rows.len());
}
