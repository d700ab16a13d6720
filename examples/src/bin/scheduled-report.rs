//! A scheduled job that runs once per schedule across every instance of a service:
//! `tokio-cron-scheduler` fires it every 10 seconds in each instance, and
//! `#[distributed_lock(.., hold_at_least = "4s")]` lets one instance run it. The lock is
//! kept at least 4 s after it was taken (on the Redis server's clock), so an instance whose
//! clock is a few seconds behind fires later, finds the lock still held, and skips.
//!
//! ```text
//! DISTLOCK_CONFIG=distlock.toml cargo run -p distlock-examples --bin scheduled-report
//! ```
//!
//! Start it two or three times against one Redis: each run of the report is printed by one
//! instance (`ran slot=..`); the others print `skipped slot=..`. Without `DISTLOCK_CONFIG`
//! (and no `./distlock.toml`) it uses the in-process memory backend, which only shows the
//! schedule: instances then do not see each other. `--runs N` stops after N fired slots.
//!
//! The slot is the schedule's time as this instance's clock sees it, rounded down to the
//! 10 s period; lines are flushed as they are printed.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{distributed_lock, LockError};
use tokio_cron_scheduler::{Job, JobScheduler};

/// Every 10 seconds (seconds field first: `sec min hour day month weekday`).
const SCHEDULE: &str = "*/10 * * * * *";
const PERIOD_SECS: u64 = 10;

const FALLBACK: &str = "[backends.main]\nmode = \"memory\"\n";

/// The job: at most one instance runs it per schedule slot. `wait = "0s"`: an instance that
/// finds the lock held skips at once (`LockError::Skipped`). `lease = "1m"` is the longest it
/// may hold the lock (a crashed instance frees it then); `hold_at_least = "4s"` is the
/// shortest: more than the spread of the instances' clocks, less than the period.
#[distributed_lock(
    key = "report:every-10s",
    wait = "0s",
    lease = "1m",
    hold_at_least = "4s"
)]
async fn report(slot: u64) -> Result<u64, LockError> {
    // The report itself would go here; the fencing token guards what it writes.
    let token = distlock::fencing_token().unwrap_or(0);
    let _ = slot;
    Ok(token)
}

/// This instance's clock, in whole seconds, rounded down to the period.
fn slot() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    now - now % PERIOD_SECS
}

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let runs: Option<u64> = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => None,
        [flag, n] if flag == "--runs" => Some(n.parse()?),
        other => return Err(format!("usage: scheduled-report [--runs N], not {other:?}").into()),
    };
    let configured = std::env::var_os("DISTLOCK_CONFIG").is_some()
        || std::path::Path::new("distlock.toml").exists();
    if configured {
        distlock::init().await?;
    } else {
        distlock::init_from_str(FALLBACK).await?;
        say("no DISTLOCK_CONFIG and no ./distlock.toml: memory backend (instances do not see each other)".into());
    }

    let (fired_tx, mut fired_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let scheduler = JobScheduler::new().await?;
    scheduler
        .add(Job::new_async(SCHEDULE, move |_id, _scheduler| {
            let fired = fired_tx.clone();
            Box::pin(async move {
                let slot = slot();
                match report(slot).await {
                    Ok(token) => say(format!(
                        "ran slot={slot} pid={} token={token}",
                        std::process::id()
                    )),
                    Err(e) if e.is_skipped() => {
                        say(format!("skipped slot={slot} pid={}", std::process::id()))
                    }
                    Err(e) => say(format!("failed slot={slot}: {e}")),
                }
                let _ = fired.send(());
            })
        })?)
        .await?;
    scheduler.start().await?;
    let clock_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis();
    say(format!(
        "ready pid={} clock_ms={clock_ms}",
        std::process::id()
    ));

    let mut fired = 0;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            got = fired_rx.recv() => {
                if got.is_none() {
                    break;
                }
                fired += 1;
                if runs.is_some_and(|n| fired >= n) {
                    break;
                }
            }
        }
    }
    let mut scheduler = scheduler;
    scheduler.shutdown().await?;
    Ok(())
}
