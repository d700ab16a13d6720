//! The quorum backends next to `mode = "single"`: redlock over 3 and over the 5 loopback
//! masters of `DISTLOCK_TEST_REDLOCK` (17201..17205), multi over 3 of them, single on
//! `DISTLOCK_TEST_SINGLE` (17379).
//!
//! Run with the test servers up:
//!
//! ```sh
//! bash scripts/servers.sh start && eval "$(bash scripts/servers.sh env)"
//! cargo bench -p distlock-tests --bench quorum
//! bash scripts/servers.sh stop
//! ```
//!
//! Prints a table; asserts nothing. The requests to the nodes go out in parallel, so over
//! a network (round trips of 0.1 ms and more) a lock+unlock costs about what one server's
//! does. On loopback the round trip is mostly CPU (client and servers), which grows with the
//! number of nodes: the "client CPU" column shows this process's share.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::Registry;
use support::{cpu_seconds, hand_off, pct};

const PAIRS: usize = 3_000;
const ROUNDS: usize = 3;
const TASKS: usize = 64;
const CONCURRENT_FOR: Duration = Duration::from_secs(2);
const HANDOFFS: usize = 200;

/// `[backends.main]` for a row of the table: `single`, or `redlock/N` / `multi/N` over the
/// first N masters.
fn config(row: &str) -> String {
    let head = "[defaults]\nwatchdog_timeout = \"5s\"\n[backends.main]\n";
    let Some((mode, n)) = row.split_once('/') else {
        return format!(
            "{head}mode = \"single\"\nurl = \"{}\"\n",
            distlock_tests::single_url()
        );
    };
    let mut urls = distlock_tests::redlock_urls();
    urls.truncate(n.parse().expect("a node count"));
    let nodes = urls
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{head}mode = \"{mode}\"\nnodes = [{nodes}]\n")
}

fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "bench:{name}:{}:{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Median over `ROUNDS` of the mean µs per sequential, uncontended lock+unlock; the p99 of
/// the last round; and this process's CPU µs per pair over all rounds.
async fn sequential(reg: &Registry) -> (f64, Duration, f64) {
    let key = unique("seq");
    let mut means = Vec::new();
    let mut times = Vec::with_capacity(PAIRS);
    let cpu = cpu_seconds();
    for _ in 0..ROUNDS {
        times.clear();
        let start = Instant::now();
        for _ in 0..PAIRS {
            let t = Instant::now();
            let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
            g.release().await.expect("release");
            times.push(t.elapsed());
        }
        means.push(start.elapsed().as_secs_f64() * 1e6 / PAIRS as f64);
    }
    let cpu = (cpu_seconds() - cpu) * 1e6 / (PAIRS * ROUNDS) as f64;
    means.sort_by(f64::total_cmp);
    (means[means.len() / 2], pct(&mut times, 0.99), cpu)
}

/// Pairs per second with `TASKS` tasks on distinct keys.
async fn concurrent(reg: &Registry) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (reg, stop, done) = (reg.clone(), stop.clone(), done.clone());
            let key = unique(&format!("conc{i}"));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
                    g.release().await.expect("release");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let start = Instant::now();
    tokio::time::sleep(CONCURRENT_FOR).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("task");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let modes = ["single", "redlock/3", "redlock/5", "multi/3"];
    let mut registries = Vec::new();
    for mode in modes {
        registries.push(
            Registry::from_str(&config(mode))
                .await
                .unwrap_or_else(|e| panic!("{mode}: {e}")),
        );
    }
    println!("distlock quorum benchmark: loopback servers, tokio multi-thread runtime, 2 workers");
    println!(
        "  single: 1 server; redlock/N: N masters, a majority; multi/N: N masters, all of them"
    );
    println!();

    println!("lock+unlock, uncontended, sequential ({PAIRS} pairs x {ROUNDS} rounds, median):");
    println!(
        "  {:<10} {:>10} {:>10} {:>10} {:>14}",
        "", "us/pair", "p99", "x single", "client CPU us"
    );
    let mut single = 0.0;
    for (mode, reg) in modes.iter().zip(&registries) {
        let (us, p99, cpu) = sequential(reg).await;
        if *mode == "single" {
            single = us;
        }
        println!(
            "  {:<10} {:>10.1} {:>10.1?} {:>10.2} {:>14.1}",
            mode,
            us,
            p99,
            us / single,
            cpu
        );
    }
    println!();

    println!("{TASKS} tasks on distinct keys, {CONCURRENT_FOR:?}:");
    println!("  {:<10} {:>10} {:>10}", "", "pairs/s", "/ single");
    let mut single = 0.0;
    for (mode, reg) in modes.iter().zip(&registries) {
        let per_s = concurrent(reg).await;
        if *mode == "single" {
            single = per_s;
        }
        println!("  {:<10} {:>10.0} {:>10.2}", mode, per_s, per_s / single);
    }
    println!();

    println!("hand-off ({HANDOFFS} rounds): release -> the waiter holds the lock");
    println!("  {:<10} {:>10} {:>10} {:>10}", "", "p50", "p99", "max");
    for (mode, reg) in modes.iter().zip(&registries) {
        let mut t = hand_off(reg, &unique("handoff"), HANDOFFS).await;
        println!(
            "  {:<10} {:>10.1?} {:>10.1?} {:>10.1?}",
            mode,
            pct(&mut t, 0.5),
            pct(&mut t, 0.99),
            pct(&mut t, 1.0)
        );
    }
}
