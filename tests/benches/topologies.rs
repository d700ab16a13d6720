//! distlock on each Redis topology side by side: one server (`single`), a 3-master cluster
//! (`cluster`), a master found through sentinels (`sentinel`, and with `sync_replicas = 1`).
//!
//! Run against the shared test servers (all on loopback):
//!
//! ```sh
//! bash scripts/servers.sh start && eval "$(bash scripts/servers.sh env)"
//! cargo bench -p distlock-tests --bench topologies
//! bash scripts/servers.sh stop
//! ```
//!
//! Prints tables; asserts nothing (beyond the locks working).

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Lease, Registry};
use support::{cpu_seconds, hand_off, list, median, pct};

const SEQ_PAIRS: usize = 2_000;
const ROUNDS: usize = 3;
const TASKS: usize = 64;
const CONCURRENT_FOR: Duration = Duration::from_secs(2);
const HANDOFFS: usize = 200;
const LEASES: usize = 5_000;

fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}:{nanos}", std::process::id())
}

fn config(backend: &str, watchdog: &str) -> String {
    format!("[defaults]\nwatchdog_timeout = \"{watchdog}\"\n[backends.main]\n{backend}")
}

fn backends() -> Vec<(&'static str, String)> {
    let sentinel = format!(
        "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]\n",
        distlock_tests::sentinel_master_name(),
        list(&distlock_tests::sentinel_urls())
    );
    vec![
        (
            "single",
            format!(
                "mode = \"single\"\nurl = \"{}\"\n",
                distlock_tests::single_url()
            ),
        ),
        (
            "cluster",
            format!(
                "mode = \"cluster\"\nnodes = [{}]\n",
                list(&distlock_tests::cluster_urls())
            ),
        ),
        ("sentinel", sentinel.clone()),
        (
            "sentinel, sync_replicas=1",
            format!("{sentinel}sync_replicas = 1\nsync_timeout = \"1s\"\n"),
        ),
    ]
}

/// Median µs per uncontended lock+unlock pair, one task.
async fn sequential(reg: &Registry) -> f64 {
    let base = unique();
    let mut per_round = Vec::new();
    for round in 0..ROUNDS {
        let start = Instant::now();
        for i in 0..SEQ_PAIRS {
            let g = reg
                .lock(format!("bench:seq:{base}:{round}:{i}"))
                .lease(Lease::Auto)
                .acquire()
                .await
                .expect("acquire");
            g.release().await.expect("release");
        }
        per_round.push(start.elapsed().as_secs_f64() * 1e6 / SEQ_PAIRS as f64);
    }
    median(per_round)
}

/// Pairs per second, `TASKS` tasks on distinct keys.
async fn concurrent(reg: &Registry) -> f64 {
    let base = unique();
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let (reg, stop, count, base) = (reg.clone(), stop.clone(), count.clone(), base.clone());
        handles.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let g = reg
                    .lock(format!("bench:c:{base}:{t}:{i}"))
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
    tokio::time::sleep(CONCURRENT_FOR).await;
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64();
    for h in handles {
        h.await.expect("task");
    }
    n as f64 / secs
}

/// CPU of this process (% of one core) while `LEASES` auto leases are renewed every second
/// (watchdog_timeout 3s), and how many are still held after the window.
async fn watchdog(backend: &str) -> (f64, usize) {
    let reg = Registry::from_str(&config(backend, "3s"))
        .await
        .expect("connect");
    let base = unique();
    let mut guards = Vec::with_capacity(LEASES);
    for i in 0..LEASES {
        guards.push(
            reg.lock(format!("bench:wd:{base}:{i}"))
                .lease(Lease::Auto)
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let cpu = (cpu_seconds() - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    let held = guards.iter().filter(|g| g.is_held()).count();
    for g in guards {
        g.release().await.expect("release");
    }
    (cpu, held)
}

/// One renewal round of `LEASES` leases at the protocol level: one pipeline on a single
/// server, against concurrent EVALSHAs on the cluster (what the watchdog sends on each).
async fn renewal_round() -> (Duration, Duration) {
    let script = redis::Script::new(distlock::__private::scripts::RENEW);
    let sha = script.get_hash().to_string();
    let base = unique();
    let keys: Vec<String> = (0..LEASES)
        .map(|i| format!("bench:rr:{{{base}:{i}}}"))
        .collect();

    let client = redis::Client::open(distlock_tests::single_url()).expect("url");
    let mut single = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(distlock::__private::scripts::RENEW);
    let _: String = load.query_async(&mut single).await.expect("load");
    let mut pipe = redis::pipe();
    for k in &keys {
        pipe.cmd("EVALSHA")
            .arg(&sha)
            .arg(1)
            .arg(k)
            .arg("owner")
            .arg(3000);
    }
    let mut best_single = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let _: Vec<i64> = pipe.query_async(&mut single).await.expect("pipeline");
        best_single = best_single.min(t.elapsed());
    }

    let cluster =
        redis::cluster::ClusterClient::new(distlock_tests::cluster_urls()).expect("cluster client");
    let conn = cluster.get_async_connection().await.expect("connect");
    let _: redis::Value = load.query_async(&mut conn.clone()).await.expect("load");
    let mut best_cluster = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let calls = keys.iter().map(|k| {
            let mut c = conn.clone();
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&sha).arg(1).arg(k).arg("owner").arg(3000);
            async move { cmd.query_async::<i64>(&mut c).await }
        });
        for r in futures_util::future::join_all(calls).await {
            r.expect("evalsha");
        }
        best_cluster = best_cluster.min(t.elapsed());
    }
    (best_single, best_cluster)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("distlock on each topology (loopback, tokio multi-thread runtime, 2 workers)");
    println!();
    println!(
        "  {:<26} {:>12} {:>12} {:>10} {:>10} {:>10}",
        "topology", "lock+unlock", "64 tasks", "hand-off", "", ""
    );
    println!(
        "  {:<26} {:>12} {:>12} {:>10} {:>10} {:>10}",
        "", "us/pair", "pairs/s", "p50", "p99", "max"
    );
    for (name, backend) in backends() {
        let reg = Registry::from_str(&config(&backend, "30s"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let seq = sequential(&reg).await;
        let conc = concurrent(&reg).await;
        let mut t = hand_off(&reg, &format!("bench:handoff:{}", unique()), HANDOFFS).await;
        println!(
            "  {:<26} {:>12.1} {:>12.0} {:>10.3?} {:>10.3?} {:>10.3?}",
            name,
            seq,
            conc,
            pct(&mut t, 0.5),
            pct(&mut t, 0.99),
            pct(&mut t, 1.0)
        );
    }
    println!();

    println!("{LEASES} held auto leases, watchdog_timeout 3s (renewed every 1s), over 4s:");
    for (name, backend) in backends().into_iter().take(2) {
        let (cpu, held) = watchdog(&backend).await;
        println!("  {name:<10} CPU of this process {cpu:>6.1}% of one core; still held {held} of {LEASES}");
    }
    let (single, cluster) = renewal_round().await;
    println!("one renewal round of {LEASES} leases (best of 5):");
    println!("  single:  one pipeline of EVALSHAs        {single:>10.3?}");
    println!("  cluster: concurrent EVALSHAs (3 masters) {cluster:>10.3?}");
}
