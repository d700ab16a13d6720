//! What every benchmark of this crate measures the same way: medians and percentiles, this
//! process's CPU time, and the hand-off of a lock from its holder to a waiter.

#![allow(dead_code)] // each bench uses its own part

use std::time::{Duration, Instant};

use distlock::Registry;

pub mod floor;
pub mod plot;

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The `p` percentile (0.0..=1.0) of `times`, which it sorts.
pub fn pct(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    times[((times.len() as f64 - 1.0) * p).round() as usize]
}

/// This process's CPU time (user + system) in seconds, from /proc/self/stat (100 ticks a
/// second).
pub fn cpu_seconds() -> f64 {
    cpu_seconds_in("/proc/self/stat")
}

/// The CPU time (user + system) of process `pid` so far, in seconds.
pub fn cpu_seconds_of(pid: u32) -> f64 {
    cpu_seconds_in(&format!("/proc/{pid}/stat"))
}

fn cpu_seconds_in(stat_file: &str) -> f64 {
    let stat = std::fs::read_to_string(stat_file).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// `["a", "b"]` as a TOML array of strings.
pub fn list(urls: &[String]) -> String {
    urls.iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `rounds` hand-offs on `key` of the backend `main` of `reg`: the time from the holder's
/// release to the waiter holding the lock (the waiter is asleep on the lock before the
/// release: waited for through `Registry::waiting`, not slept for).
pub async fn hand_off(reg: &Registry, key: &str, rounds: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let held = reg.lock(key).acquire().await.expect("acquire");
        let (r2, k2) = (reg.clone(), key.to_owned());
        let waiter = tokio::spawn(async move {
            let g = r2
                .lock(k2)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
                .expect("waiter");
            let t = Instant::now();
            g.release().await.expect("release");
            t
        });
        while reg.waiting("main").unwrap_or(0) == 0 {
            tokio::task::yield_now().await;
        }
        let released = Instant::now();
        held.release().await.expect("release");
        times.push(
            waiter
                .await
                .expect("waiter")
                .saturating_duration_since(released),
        );
    }
    times
}
