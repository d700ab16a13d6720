//! distlock against the floor and rslock on one loopback redis-server, side by side.
//!
//! Run: `scripts/bench.sh` (starts the servers, runs this in release mode, stops them).
//! The floor is the same two scripts distlock sends (`distlock::__private::scripts::ACQUIRE` and
//! `RELEASE`) as raw EVALSHA over one multiplexed connection: two round trips per pair.
//! Prints a table; asserts nothing.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Lease, Registry};
use redis::aio::MultiplexedConnection;
use support::{cpu_seconds, hand_off, median, pct};

const SEQ_PAIRS: usize = 5_000;
const ROUNDS: usize = 3;
const TASKS: usize = 64;
const CONCURRENT_FOR: Duration = Duration::from_secs(2);
const HANDOFFS: usize = 300;
const RSLOCK_HANDOFFS: usize = 10;
const LEASES: usize = 10_000;

struct Floor {
    conn: MultiplexedConnection,
    acquire_sha: String,
    release_sha: String,
}

impl Floor {
    async fn new(url: &str) -> Floor {
        // The same socket options distlock uses (TCP_NODELAY), so only the library differs.
        let info = redis::IntoConnectionInfo::into_connection_info(url).expect("url");
        let info = info.set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let client = redis::Client::open(info).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let load = |src: &'static str| {
            let mut c = redis::cmd("SCRIPT");
            c.arg("LOAD").arg(src);
            c
        };
        let acquire_sha: String = load(distlock::__private::scripts::ACQUIRE)
            .query_async(&mut conn)
            .await
            .expect("load");
        let release_sha: String = load(distlock::__private::scripts::RELEASE)
            .query_async(&mut conn)
            .await
            .expect("load");
        Floor {
            conn,
            acquire_sha,
            release_sha,
        }
    }

    async fn pair(&self, key: &str, owner: &str) {
        let mut conn = self.conn.clone();
        let hash = format!("floor:{{{key}}}");
        let (fence, channel) = (format!("{hash}:fence"), format!("{hash}:released"));
        let v: redis::Value = redis::cmd("EVALSHA")
            .arg(&self.acquire_sha)
            .arg(2)
            .arg(&hash)
            .arg(&fence)
            .arg(owner)
            .arg(30_000)
            .arg("0")
            .query_async(&mut conn)
            .await
            .expect("acquire");
        assert!(
            matches!(&v, redis::Value::Array(a) if a.first() == Some(&redis::Value::Int(1))),
            "{v:?}"
        );
        let r: i64 = redis::cmd("EVALSHA")
            .arg(&self.release_sha)
            .arg(1)
            .arg(&hash)
            .arg(owner)
            .arg(&channel)
            .arg("0")
            .query_async(&mut conn)
            .await
            .expect("release");
        assert_eq!(r, 0);
    }
}

fn owner() -> String {
    format!("{:032x}", rand_u128())
}

fn rand_u128() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let s = std::collections::hash_map::RandomState::new();
    let mut h = s.build_hasher();
    h.write_u64(7);
    (u128::from(h.finish()) << 64) | u128::from(s.build_hasher().finish())
}

async fn sequential(
    reg: &Registry,
    reg_off: &Registry,
    floor: &Floor,
    rs: &rslock::LockManager,
) -> (f64, f64, f64, f64) {
    let (mut f, mut d, mut r, mut o) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let start = Instant::now();
        for i in 0..SEQ_PAIRS {
            floor.pair(&format!("seq:{round}:{i}"), &owner()).await;
        }
        f.push(start.elapsed().as_secs_f64() * 1e6 / SEQ_PAIRS as f64);

        let start = Instant::now();
        for i in 0..SEQ_PAIRS {
            let g = reg
                .lock(format!("seq:{round}:{i}"))
                .lease(Lease::Auto)
                .acquire()
                .await
                .expect("acquire");
            g.release().await.expect("release");
        }
        d.push(start.elapsed().as_secs_f64() * 1e6 / SEQ_PAIRS as f64);

        let start = Instant::now();
        for i in 0..SEQ_PAIRS {
            let g = reg_off
                .lock(format!("seq-off:{round}:{i}"))
                .lease(Lease::Auto)
                .acquire()
                .await
                .expect("acquire");
            g.release().await.expect("release");
        }
        o.push(start.elapsed().as_secs_f64() * 1e6 / SEQ_PAIRS as f64);

        let start = Instant::now();
        for i in 0..SEQ_PAIRS {
            let key = format!("rslock:seq:{round}:{i}");
            let l = rs
                .lock(key.as_bytes(), Duration::from_secs(30))
                .await
                .expect("rslock");
            rs.unlock(&l).await;
        }
        r.push(start.elapsed().as_secs_f64() * 1e6 / SEQ_PAIRS as f64);
    }
    (median(f), median(d), median(r), median(o))
}

/// The cost of holder information on a shared, noisy machine: batches of 200 sequential
/// pairs alternating between the two registries (30 each), and 1 s runs of 64 tasks
/// alternating (4 each); medians.
async fn holder_info_cost(on: &Registry, off: &Registry) -> ((f64, f64), (f64, f64)) {
    const BATCH: usize = 200;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..30 {
        for (reg, out, label) in [(on, &mut a, "hi-on"), (off, &mut b, "hi-off")] {
            let start = Instant::now();
            for i in 0..BATCH {
                let g = reg
                    .lock(format!("{label}:{round}:{i}"))
                    .lease(Lease::Auto)
                    .acquire()
                    .await
                    .expect("acquire");
                g.release().await.expect("release");
            }
            out.push(start.elapsed().as_secs_f64() * 1e6 / BATCH as f64);
        }
    }
    let (mut c, mut d) = (Vec::new(), Vec::new());
    for round in 0..4 {
        c.push(concurrent_pairs_for(&format!("hi-on:c{round}"), on, Duration::from_secs(1)).await);
        d.push(
            concurrent_pairs_for(&format!("hi-off:c{round}"), off, Duration::from_secs(1)).await,
        );
    }
    ((median(a), median(b)), (median(c), median(d)))
}

async fn concurrent_pairs_for(label: &str, reg: &Registry, run_for: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let (stop, count, reg, label) =
            (stop.clone(), count.clone(), reg.clone(), label.to_string());
        handles.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let g = reg
                    .lock(format!("{label}:{t}:{i}"))
                    .lease(Lease::Auto)
                    .acquire()
                    .await
                    .expect("acquire");
                g.release().await.expect("release");
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

/// Pairs per second over `CONCURRENT_FOR` with `TASKS` tasks on distinct keys.
async fn concurrent_pairs(label: &str, reg: Option<&Registry>, floor: Option<&Floor>) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let (stop, count) = (stop.clone(), count.clone());
        let reg = reg.cloned();
        let floor = floor.map(|f| Floor {
            conn: f.conn.clone(),
            acquire_sha: f.acquire_sha.clone(),
            release_sha: f.release_sha.clone(),
        });
        let label = label.to_string();
        handles.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("{label}:{t}:{i}");
                if let Some(f) = &floor {
                    f.pair(&key, &owner()).await;
                } else if let Some(r) = &reg {
                    let g = r
                        .lock(key)
                        .lease(Lease::Auto)
                        .acquire()
                        .await
                        .expect("acquire");
                    g.release().await.expect("release");
                }
                i += 1;
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(CONCURRENT_FOR).await;
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64();
    for h in handles {
        h.await.expect("task");
    }
    n as f64 / secs
}

async fn rslock_hand_off(rs: &rslock::LockManager, rounds: usize) -> Vec<Duration> {
    let key = format!("rslock:handoff:{}", owner());
    let mut times = Vec::new();
    for _ in 0..rounds {
        let held = rs
            .lock(key.as_bytes(), Duration::from_secs(30))
            .await
            .expect("rslock");
        let (rs2, k2) = (rs.clone(), key.clone());
        let waiter = tokio::spawn(async move {
            let g = rs2
                .acquire(k2.as_bytes(), Duration::from_secs(30))
                .await
                .expect("waiter");
            let t = Instant::now();
            g.release().await;
            t
        });
        // rslock has no way to tell that a waiter is waiting: give it a moment to start polling.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let released = Instant::now();
        rs.unlock(&held).await;
        times.push(
            waiter
                .await
                .expect("waiter")
                .saturating_duration_since(released),
        );
    }
    times
}

/// (commands processed, counting those run inside scripts; EVALSHA calls).
fn commands_processed(addr: &str) -> (i64, i64) {
    let info = distlock_tests::resp_command(addr, &["INFO", "all"]).expect("INFO");
    let text = info.as_str().unwrap_or("");
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let evalsha = text
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (total, evalsha)
}

async fn watchdog_cost() -> (f64, f64, f64, f64, usize) {
    // A private server, so the command count is the watchdog's alone.
    let server = distlock_tests::RedisProcess::start();
    let url = server.url();
    let reg = Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"3s\"\n[backends.main]\nmode = \"single\"\nurl = \"{url}\"\n"
    ))
    .await
    .expect("connect");
    let prefix = owner();
    let mut guards = Vec::with_capacity(LEASES);
    for i in 0..LEASES {
        guards.push(
            reg.lock(format!("wd:{prefix}:{i}"))
                .lease(Lease::Auto)
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    let addr = server.addr();
    let window = Duration::from_secs(6);
    let (c0, cpu0, t0) = (commands_processed(&addr), cpu_seconds(), Instant::now());
    tokio::time::sleep(window).await;
    let (c1, cpu1, secs) = (
        commands_processed(&addr),
        cpu_seconds(),
        t0.elapsed().as_secs_f64(),
    );
    let held = guards.iter().filter(|g| g.is_held()).count();
    drop(guards);
    drop(reg);
    (
        (c1.0 - c0.0) as f64 / secs,
        (c1.1 - c0.1) as f64 / secs,
        (cpu1 - cpu0) / secs * 100.0,
        secs,
        held,
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let url = distlock_tests::single_url();
    let reg = Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"30s\"\n[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nholder_info = true\n"
    ))
    .await
    .expect("connect");
    let reg_off = Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"30s\"\n[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nholder_info = false\n"
    ))
    .await
    .expect("connect");
    let floor = Floor::new(&url).await;
    let rs = rslock::LockManager::new(vec![url.clone()]);

    println!("distlock benchmark: one loopback redis-server ({url}), tokio multi-thread runtime, 2 workers");
    println!();
    let (f, d, r, o) = sequential(&reg, &reg_off, &floor, &rs).await;
    println!("lock+unlock, uncontended, sequential ({SEQ_PAIRS} pairs x {ROUNDS} rounds, median):");
    println!("  {:<28} {:>10} {:>8}", "", "us/pair", "x floor");
    println!(
        "  {:<28} {:>10.1} {:>8.2}",
        "floor (2 x raw EVALSHA)", f, 1.0
    );
    println!(
        "  {:<28} {:>10.1} {:>8.2}",
        "distlock, holder_info=true",
        d,
        d / f
    );
    println!(
        "  {:<28} {:>10.1} {:>8.2}",
        "distlock, holder_info=false",
        o,
        o / f
    );
    println!("  {:<28} {:>10.1} {:>8.2}", "rslock", r, r / f);
    println!();

    let fp = concurrent_pairs("floor:c", None, Some(&floor)).await;
    let dp = concurrent_pairs("dl:c", Some(&reg), None).await;
    let op = concurrent_pairs("dl-off:c", Some(&reg_off), None).await;
    let fp2 = concurrent_pairs("floor:c2", None, Some(&floor)).await;
    let dp2 = concurrent_pairs("dl:c2", Some(&reg), None).await;
    let op2 = concurrent_pairs("dl-off:c2", Some(&reg_off), None).await;
    let (fp, dp, op) = ((fp + fp2) / 2.0, (dp + dp2) / 2.0, (op + op2) / 2.0);
    println!("{TASKS} tasks on distinct keys, one connection, {CONCURRENT_FOR:?} x 2 runs each:");
    println!("  {:<28} {:>10} {:>8}", "", "pairs/s", "/ floor");
    println!("  {:<28} {:>10.0} {:>8.2}", "floor", fp, 1.0);
    println!(
        "  {:<28} {:>10.0} {:>8.2}",
        "distlock, holder_info=true",
        dp,
        dp / fp
    );
    println!(
        "  {:<28} {:>10.0} {:>8.2}",
        "distlock, holder_info=false",
        op,
        op / fp
    );
    println!();

    let ((seq_on, seq_off), (par_on, par_off)) = holder_info_cost(&reg, &reg_off).await;
    println!(
        "holder information (holder_info = true, the default, vs false), alternating, medians:"
    );
    println!("  {:<28} {:>10} {:>10} {:>8}", "", "on", "off", "on/off");
    println!(
        "  {:<28} {:>10.1} {:>10.1} {:>8.2}",
        "lock+unlock us/pair",
        seq_on,
        seq_off,
        seq_on / seq_off
    );
    println!(
        "  {:<28} {:>10.0} {:>10.0} {:>8.2}",
        format!("{TASKS} tasks pairs/s"),
        par_on,
        par_off,
        par_on / par_off
    );
    println!();

    let mut t = hand_off(&reg, &format!("handoff:{}", owner()), HANDOFFS).await;
    let mut rt = rslock_hand_off(&rs, RSLOCK_HANDOFFS).await;
    println!("hand-off: release -> waiter holds the lock");
    println!("  {:<28} {:>10} {:>10} {:>10}", "", "p50", "p99", "max");
    println!(
        "  {:<28} {:>10.3?} {:>10.3?} {:>10.3?}",
        format!("distlock ({HANDOFFS} rounds)"),
        pct(&mut t, 0.5),
        pct(&mut t, 0.99),
        pct(&mut t, 1.0)
    );
    println!(
        "  {:<28} {:>10.3?} {:>10.3?} {:>10.3?}",
        format!("rslock ({RSLOCK_HANDOFFS} rounds, polls)"),
        pct(&mut rt, 0.5),
        pct(&mut rt, 0.99),
        pct(&mut rt, 1.0)
    );
    println!();

    let (cmds, evalsha, cpu, secs, held) = watchdog_cost().await;
    println!("{LEASES} held auto-leases, watchdog_timeout 3s (renewal every 1s), over {secs:.1}s:");
    println!(
        "  EVALSHA calls/s     {evalsha:>8.0}   (default watchdog_timeout 30s: about {:.0}/s)",
        evalsha / 10.0
    );
    println!("  commands/s counted by Redis, including those inside the scripts: {cmds:.0}");
    println!(
        "  CPU of this process {cpu:>7.1}%  of one core (30s: about {:.2}%)",
        cpu / 10.0
    );
    println!("  still held at the end: {held} of {LEASES}");
}
