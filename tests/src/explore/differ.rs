//! Differential steps: one acquisition with inputs at the edges of what distlock accepts,
//! on the Redis backend and on a memory backend; both must answer alike.

use std::time::Duration;

use distlock::{Lease, LockError, Registry};

use super::check::Checker;
use super::model::Edge;
use super::world::World;

/// The answer's class: accepted, or the error variant.
fn class(r: &Result<(), LockError>) -> &'static str {
    match r {
        Ok(()) => "accepted",
        Err(LockError::Timeout { .. }) => "Timeout",
        Err(LockError::InvalidKey { .. }) => "InvalidKey",
        Err(LockError::InvalidDuration { .. }) => "InvalidDuration",
        Err(LockError::InvalidPermits { .. }) => "InvalidPermits",
        Err(LockError::Backend { .. }) => "Backend",
        Err(LockError::Unsupported { .. }) => "Unsupported",
        Err(LockError::QuorumNotReached { .. }) => "QuorumNotReached",
        Err(_) => "another error",
    }
}

fn key_of(prefix: &str, e: &Edge) -> String {
    match e.key % 4 {
        0 => format!("{prefix}edge"),
        1 => String::new(),
        2 => format!("{{{prefix}tag}}edge"),
        _ => format!("{prefix}{}", "x".repeat(600)),
    }
}

async fn attempt(reg: &Registry, key: &str, e: &Edge) -> Result<(), LockError> {
    let fixed = e.lease_ms.map(|ms| Duration::from_millis(u64::from(ms)));
    let lease = fixed.map_or(Lease::Auto, Lease::Fixed);
    // The lease starts at the latest when the request is sent, and Redis keeps expiries
    // in whole milliseconds.
    let start = std::time::Instant::now();
    let acquired = |r: Result<(), LockError>| match r {
        // A fixed lease as short as a round trip may end before its release arrives:
        // `NotHeld` then is that lease's end, not an answer to compare.
        Err(LockError::NotHeld { .. })
            if fixed.is_some_and(|l| start.elapsed() + Duration::from_millis(2) >= l) =>
        {
            Ok(())
        }
        r => r,
    };
    match e.permits {
        Some(p) => {
            let n = if e.take_all { p } else { 1 };
            let s = reg.semaphore(key, p).wait(Duration::ZERO).lease(lease);
            let g = s.acquire(n).await?;
            acquired(g.release().await)
        }
        None => {
            let g = reg
                .lock(key)
                .wait(Duration::ZERO)
                .lease(lease)
                .acquire()
                .await?;
            acquired(g.release().await)
        }
    }
}

/// Run the edge case on both backends and compare.
pub async fn differential(world: &World, checker: &Checker, prefix: &str, e: &Edge) {
    let Some(memory) = world.memory() else { return };
    let key = key_of(prefix, e);
    let redis = attempt(world.owner(0), &key, e).await;
    // After a fault the Redis side may fail for the fault's sake: a connection error, or on
    // redlock and multi too few nodes answering (CLIENT KILL, a minority down: with `wait`
    // 0 there is no second attempt). Not an answer to the input.
    let faulted = matches!(
        redis,
        Err(LockError::Backend { .. } | LockError::QuorumNotReached { .. })
    );
    if checker.faults() > 0 && faulted {
        return;
    }
    // A connection an earlier schedule's fault cut (CLIENT KILL of every client) and that
    // stayed idle since fails its next request: with `wait` 0 nothing retries it
    // (transient errors are retried within `wait`, docs/design.md). Seen on a cluster in
    // Redisson's format ("unexpected end of file") as a schedule's first step.
    if world.faulted_before() && matches!(&redis, Err(e) if e.is_transient()) {
        return;
    }
    let mem = attempt(memory, &key, e).await;
    // A backend without semaphores (redlock, multi, Redisson's format) refuses them.
    let unoffered = e.permits.is_some() && !world.offers(super::model::Kind::Semaphore(1));
    if unoffered && matches!(redis, Err(LockError::Unsupported { .. })) {
        return;
    }
    // redlock and multi refuse a fixed lease with nothing left after their clock-drift
    // allowance (`lease × 0.01 + 2 ms`: 2 ms or less) as a bad duration; memory has none.
    let too_short = e.lease_ms.is_some_and(|ms| ms <= 2) && world.backend.quorum();
    if too_short && matches!(redis, Err(LockError::InvalidDuration { .. })) {
        return;
    }
    if class(&redis) != class(&mem) {
        let text = |r: &Result<(), LockError>| match r {
            Ok(()) => "accepted".to_owned(),
            Err(e) => format!("{e}"),
        };
        checker.violation(format!(
            "memory and redis disagree on {e:?}: redis {} ({}), memory {} ({})",
            class(&redis),
            text(&redis),
            class(&mem),
            text(&mem)
        ));
    }
}
