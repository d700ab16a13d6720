//! The scenarios of the test matrix (`matrix.rs`): each takes a connected registry whose
//! backend `main` is the one under test, with `watchdog_timeout = "1s"`, and asserts one
//! behaviour. `matrix.rs` runs every one of them on every backend where its table says so.
//!
//! No `allow(dead_code)` here, on purpose: in `matrix.rs` a scenario that no cell of the
//! table runs is a dead-code error, so a new scenario cannot be left out of the table.
//! (Other test files that reuse a few scenarios with their own configuration, such as
//! `acl.rs` or `tls.rs`, declare this module with `#[allow(dead_code)]`.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Lease, LockError, Registry};

use crate::common::{hand_off, percentile, unique, WATCHDOG};

mod kinds;
// Used by `matrix.rs`; a file that runs only reentrant scenarios does not use it.
#[allow(unused_imports)]
pub use kinds::*;

// ---- The reentrant lock ----------------------------------------------------------------

/// 16 tasks x 50 locked, non-atomic read-modify-writes never overlap; the count is exact.
pub async fn exclusion_16_tasks(reg: &Registry) {
    let key = unique("exclusion");
    let counter = Arc::new(std::sync::Mutex::new(0u64));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (reg, key, counter, inside) =
            (reg.clone(), key.clone(), counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                let g = reg
                    .lock(key.as_str())
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire");
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders inside at once"
                );
                let v = *counter.lock().unwrap();
                tokio::task::yield_now().await;
                *counter.lock().unwrap() = v + 1;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(*counter.lock().unwrap(), 16 * 50);
}

/// `try_acquire` on a held key is `None`; `wait = 300ms` gives `Timeout` after 300 ms.
pub async fn try_and_timeout(reg: &Registry) {
    let key = unique("timeout");
    let held = reg.lock(key.as_str()).acquire().await.expect("acquire");
    assert!(reg
        .lock(key.as_str())
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    let start = Instant::now();
    let err = reg
        .lock(key.as_str())
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .expect_err("must time out");
    let took = start.elapsed();
    assert!(
        matches!(&err, LockError::Timeout { key: k, backend, .. } if *k == key && backend == "main"),
        "{err}"
    );
    assert!(
        took >= Duration::from_millis(300),
        "gave up early: {took:?}"
    );
    assert!(took < Duration::from_millis(600), "gave up late: {took:?}");
    assert!(err.to_string().contains(&key), "{err}");
    held.release().await.expect("release");
}

/// A waiter is handed the lock promptly, over 50 rounds: the median hand-off under `p50`,
/// the slowest under 100 ms (generous protocol bounds; the benchmark measures the figures).
pub async fn hand_off_is_prompt(reg: &Registry, p50: Duration) {
    let mut times = hand_off(reg, 50).await;
    let median = percentile(&mut times, 0.5);
    let max = percentile(&mut times, 1.0);
    println!("hand-off over 50 rounds: p50 {median:?}, max {max:?}");
    assert!(median < p50, "p50 {median:?}");
    assert!(max < Duration::from_millis(100), "max {max:?}");
}

/// An auto lease with `watchdog_timeout = 1s` is still held, exclusively, after 3.5 s.
pub async fn auto_lease_outlives_watchdog(reg: &Registry) {
    let key = unique("auto");
    let g = reg
        .lock(key.as_str())
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("acquire");
    // Time is what is tested here: the lease must survive 3.5 watchdog periods of 1 s.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(g.is_held(), "the auto lease must still be held after 3.5 s");
    assert!(
        reg.lock(key.as_str())
            .try_acquire()
            .await
            .expect("try")
            .is_none(),
        "and exclusively"
    );
    g.release().await.expect("still ours, so release is Ok");
}

/// A fixed 500 ms lease expires; the old holder's late release is `NotHeld` and does not
/// free the next holder's lock. (On redlock and multi it may answer `Ok`: its part on a
/// node that expires it a moment later than the others is still there, and is freed;
/// the next holder, granted on the other nodes, keeps the lock either way.)
pub async fn fixed_lease_expires(reg: &Registry) {
    let key = unique("fixed");
    let first = reg
        .lock(key.as_str())
        .lease(Lease::Fixed(Duration::from_millis(500)))
        .acquire()
        .await
        .expect("acquire");
    let start = Instant::now();
    let second = reg
        .lock(key.as_str())
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .expect("the fixed lease must run out");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "acquired too early: {took:?}"
    );
    assert!(
        took < Duration::from_millis(1500),
        "acquired late: {took:?}"
    );
    assert!(!first.is_held());
    match first.release().await {
        Err(LockError::NotHeld { .. }) => {}
        Ok(())
            if reg.mode("main").is_some_and(|(m, _)| {
                matches!(
                    m,
                    distlock::config::ModeKind::Redlock | distlock::config::ModeKind::Multi
                )
            }) => {}
        other => panic!("late release: {other:?}"),
    }
    assert!(second.is_held());
    assert!(
        reg.lock(key.as_str())
            .try_acquire()
            .await
            .expect("try")
            .is_none(),
        "the late release must not free it"
    );
    assert!(second.fencing_token() > 0);
    second.release().await.expect("release");
}

/// Fencing tokens grow strictly over successive holders, concurrent ones included.
pub async fn fencing_tokens_grow(reg: &Registry) {
    let key = unique("fence");
    let mut last = 0;
    for _ in 0..20 {
        let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
        assert!(
            g.fencing_token() > last,
            "token {} after {last}",
            g.fencing_token()
        );
        last = g.fencing_token();
        g.release().await.expect("release");
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (reg, key, seen) = (reg.clone(), key.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let g = reg
                    .lock(key.as_str())
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire");
                seen.lock().unwrap().push(g.fencing_token());
                g.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    // In the order the holders held it, tokens grow: the log was appended while holding.
    let seen = seen.lock().unwrap().clone();
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert!(seen[0] > last);
}

/// Deleting the lock behind an auto-lease holder's back is noticed within watchdog_timeout.
pub async fn deleted_lock_is_lost(reg: &Registry) {
    let key = unique("deleted");
    let g = reg
        .lock(key.as_str())
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("acquire");
    assert!(reg
        .lock(key.as_str())
        .force_unlock()
        .await
        .expect("force unlock"));
    let start = Instant::now();
    let err = tokio::time::timeout(WATCHDOG * 2, g.lost())
        .await
        .expect("lost() must resolve within watchdog_timeout");
    assert!(
        start.elapsed() <= WATCHDOG + Duration::from_millis(300),
        "noticed after {:?}",
        start.elapsed()
    );
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    assert!(!g.is_held());
    assert!(matches!(g.release().await, Err(LockError::NotHeld { .. })));
}

/// A dropped guard's lock is free at once (a waiter is woken by the release).
pub async fn dropped_guard_frees(reg: &Registry) {
    let key = unique("dropped");
    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
    drop(g);
    let start = Instant::now();
    let g2 = reg
        .lock(key.as_str())
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("free after drop");
    assert!(
        start.elapsed() < Duration::from_millis(200),
        "took {:?}",
        start.elapsed()
    );
    g2.release().await.expect("release");
}

/// Nested acquisitions in one task's lock scope re-enter; a spawned task does not.
pub async fn reentrancy(reg: &Registry) {
    let key = unique("reentrant");
    let outer = reg.lock(key.as_str()).acquire().await.expect("acquire");
    let token = outer.fencing_token();
    outer
        .scope(async {
            assert_eq!(distlock::fencing_token(), Some(token));
            let inner = reg
                .lock(key.as_str())
                .wait(Duration::ZERO)
                .acquire()
                .await
                .expect("re-enters without waiting");
            assert_eq!(inner.fencing_token(), token);
            inner.release().await.expect("inner release");
            let (reg2, key2) = (reg.clone(), key.clone());
            let spawned = tokio::spawn(async move { reg2.lock(key2.as_str()).try_acquire().await })
                .await
                .expect("task");
            assert!(
                spawned.expect("try").is_none(),
                "a spawned task is another owner"
            );
            assert!(
                reg.lock(key.as_str())
                    .try_acquire()
                    .await
                    .expect("try")
                    .is_some_and(|g| g.fencing_token() == token),
                "still held by the outer owner after the inner release"
            );
        })
        .await;
    assert_eq!(distlock::fencing_token(), None);
    outer.release().await.expect("outer release");
    assert!(
        reg.lock(key.as_str())
            .try_acquire()
            .await
            .expect("try")
            .is_some(),
        "free after the outer release"
    );
}

/// `run` holds the lock for the body and frees it after.
pub async fn run_releases(reg: &Registry) {
    let key = unique("run");
    let k2 = key.clone();
    let out = reg
        .lock(key.as_str())
        .run(async {
            assert!(distlock::fencing_token().is_some());
            assert!(
                reg.lock(k2.as_str())
                    .try_acquire()
                    .await
                    .expect("try")
                    .is_some(),
                "re-enters in scope"
            );
            7
        })
        .await
        .expect("run");
    assert_eq!(out, 7);
    assert!(reg
        .lock(key.as_str())
        .try_acquire()
        .await
        .expect("try")
        .is_some());
}

/// Bad keys and backends are errors naming them.
pub async fn errors_name_things(reg: &Registry) {
    let err = reg.lock("").acquire().await.expect_err("empty key");
    assert!(matches!(err, LockError::InvalidKey { .. }), "{err}");
    let err = reg
        .lock("k")
        .backend("nope")
        .acquire()
        .await
        .expect_err("no backend");
    assert!(
        matches!(&err, LockError::NoSuchBackend { backend, .. } if backend == "nope"),
        "{err}"
    );
    assert!(
        err.to_string().contains("main"),
        "lists the configured ones: {err}"
    );
}
