//! Queued (`Semaphore::fair`) against unqueued semaphore waiting, on the suite's single
//! server: two instances (registries, each with its own connections, as two processes)
//! × 6 tasks share a semaphore of 3 permits; each task takes a permit (wait 2 s), holds it
//! 10 ms, and thinks for an exponential time (mean 40 ms): an offered load of about 80 % of
//! the permits. Printed per mode: the permits' use, the wait's p50 / p99 / max, and per
//! instance the acquisitions and time-outs (their spread is the fairness).
//!
//! `cargo bench -p distlock-tests --bench fair_semaphore [-- SECONDS]` (default 8 s per
//! mode; `scripts/bench.sh --all` runs it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{LockError, Registry};
use rand::Rng;
use tokio::sync::Mutex;

const INSTANCES: usize = 2;
const TASKS: usize = 6;
const PERMITS: u32 = 3;
const HOLD: Duration = Duration::from_millis(10);
const THINK_MEAN_MS: f64 = 40.0;
const WAIT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Tally {
    waits: Vec<Duration>,
    timeouts: usize,
    held: Duration,
}

async fn registry(url: &str) -> Registry {
    Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{url}\"\n"
    ))
    .await
    .unwrap_or_else(|e| panic!("connect {url} (scripts/bench.sh starts it): {e}"))
}

async fn task(reg: Registry, key: String, fair: bool, until: Instant, tally: Arc<Mutex<Tally>>) {
    let mut sem = reg.semaphore(key, PERMITS).wait(WAIT);
    if fair {
        sem = sem.fair();
    }
    while Instant::now() < until {
        let think = {
            let u: f64 = rand::rng().random_range(f64::EPSILON..1.0);
            Duration::from_secs_f64(-u.ln() * THINK_MEAN_MS / 1000.0)
        };
        tokio::time::sleep(think).await;
        let start = Instant::now();
        match sem.acquire(1).await {
            Ok(g) => {
                let waited = start.elapsed();
                tokio::time::sleep(HOLD).await;
                let held = start.elapsed() - waited;
                g.release().await.expect("release");
                let mut t = tally.lock().await;
                t.waits.push(waited);
                t.held += held;
            }
            Err(LockError::Timeout { .. }) => tally.lock().await.timeouts += 1,
            Err(e) => panic!("acquire: {e}"),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn run(url: &str, fair: bool, secs: u64) {
    let key = format!("bench-fair-sem-{}-{}", std::process::id(), fair);
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let mut tallies = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..INSTANCES {
        let reg = registry(url).await;
        let tally = Arc::new(Mutex::new(Tally::default()));
        for _ in 0..TASKS {
            handles.push(tokio::spawn(task(
                reg.clone(),
                key.clone(),
                fair,
                until,
                tally.clone(),
            )));
        }
        tallies.push(tally);
    }
    for h in handles {
        h.await.expect("task");
    }
    let elapsed = start.elapsed();
    let mut all = Vec::new();
    let mut held = Duration::ZERO;
    let mut per = Vec::new();
    for t in &tallies {
        let t = t.lock().await;
        all.extend_from_slice(&t.waits);
        held += t.held;
        per.push(format!(
            "{} acquired / {} timed out",
            t.waits.len(),
            t.timeouts
        ));
    }
    all.sort();
    let name = if fair { "queued (fair)" } else { "unqueued" };
    println!(
        "{name:<14} use {:>4.0} %  wait p50 {:>8.2?}  p99 {:>8.2?}  max {:>8.2?}  instances: {}",
        100.0 * held.as_secs_f64() / (elapsed.as_secs_f64() * f64::from(PERMITS)),
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        all.last().copied().unwrap_or_default(),
        per.join(" · ")
    );
}

fn main() {
    let secs = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<u64>().ok())
        .unwrap_or(8);
    let url = distlock_tests::single_url();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        println!(
            "semaphore of {PERMITS}, {INSTANCES} instances x {TASKS} tasks, hold {HOLD:?}, \
             think ~{THINK_MEAN_MS} ms, wait {WAIT:?}, {secs} s each"
        );
        for fair in [false, true] {
            run(&url, fair, secs).await;
        }
    });
}
