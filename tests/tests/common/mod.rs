//! Scenarios shared by the backends' test files: each takes a connected registry whose
//! backend `main` is the one under test, with `watchdog_timeout = "1s"`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Lease, LockError, Registry};

/// A key no other test (or earlier run) uses.
pub fn unique(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "test:{name}:{}:{nanos}:{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub const WATCHDOG: Duration = Duration::from_secs(1);

/// `["a", "b"]` as a TOML array of strings.
pub fn quoted(urls: &[String]) -> String {
    urls.iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A registry per mode whose backend `main` is the shared test topology of that mode
/// (single, cluster, sentinel, redlock) or memory, each with `watchdog_timeout = "1s"`.
pub async fn every_mode() -> Vec<(&'static str, Registry)> {
    use distlock_tests::{
        cluster_urls, redlock_urls, sentinel_master_name, sentinel_urls, single_url,
    };
    let defaults = "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\n";
    let configs = [
        (
            "single",
            format!("mode = \"single\"\nurl = \"{}\"", single_url()),
        ),
        (
            "cluster",
            format!("mode = \"cluster\"\nnodes = [{}]", quoted(&cluster_urls())),
        ),
        (
            "sentinel",
            format!(
                "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
                sentinel_master_name(),
                quoted(&sentinel_urls())
            ),
        ),
        (
            "redlock",
            format!(
                "mode = \"redlock\"\nnodes = [{}]\nnode_timeout = \"200ms\"\nretry_delay = \"20ms\"",
                quoted(&redlock_urls())
            ),
        ),
        ("memory", "mode = \"memory\"".to_owned()),
    ];
    let mut out = Vec::new();
    for (name, backend) in configs {
        let reg = Registry::from_str(&format!("{defaults}{backend}\n"))
            .await
            .unwrap_or_else(|e| {
                panic!("connect the {name} backend (scripts/test.sh starts it): {e}")
            });
        out.push((name, reg));
    }
    out
}

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

/// A waiter gets the lock within a few ms of the release. Returns the hand-off times.
pub async fn hand_off(reg: &Registry, rounds: usize) -> Vec<Duration> {
    let key = unique("handoff");
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let held = reg.lock(key.as_str()).acquire().await.expect("acquire");
        let (reg2, key2) = (reg.clone(), key.clone());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn(async move {
            let lock = reg2.lock(key2.as_str()).wait(Duration::from_secs(10));
            let _ = ready_tx.send(());
            let g = lock.acquire().await.expect("waiter acquire");
            let got = Instant::now();
            g.release().await.expect("waiter release");
            got
        });
        ready_rx.await.expect("waiter started");
        // Let the waiter reach its wait (its first attempt fails, it subscribes, it sleeps).
        wait_for_waiter(reg, &key).await;
        let released = Instant::now();
        held.release().await.expect("release");
        let got = waiter.await.expect("waiter");
        times.push(got.saturating_duration_since(released));
    }
    times
}

/// Until a waiter on the backend is asleep waiting for a release (bounded).
pub async fn wait_for_waiter(reg: &Registry, _key: &str) {
    let start = Instant::now();
    while reg.waiting("main").unwrap_or(0) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the waiter never started waiting"
        );
        tokio::task::yield_now().await;
    }
}

pub fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    let i = ((times.len() as f64 - 1.0) * p).round() as usize;
    times[i]
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
/// free the next holder's lock.
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
    let err = first.release().await.expect_err("late release");
    assert!(matches!(err, LockError::NotHeld { .. }), "{err}");
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

// ---- Fair and read-write locks -------------------------------------------------------

use distlock::LockKind;

/// 10 readers of one key hold it at the same time: all 10 are inside together.
pub async fn readers_overlap(reg: &Registry) {
    let key = unique("readers");
    let inside = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let all_in = Arc::new(tokio::sync::Barrier::new(10));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (reg, key, inside, max, all_in) = (
            reg.clone(),
            key.clone(),
            inside.clone(),
            max.clone(),
            all_in.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let g = reg
                .lock(key.as_str())
                .kind(LockKind::Read)
                .wait(Duration::from_secs(10))
                .acquire()
                .await
                .expect("read lock");
            let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
            max.fetch_max(n, Ordering::SeqCst);
            tokio::time::timeout(Duration::from_secs(5), all_in.wait())
                .await
                .expect("10 readers must be inside together");
            inside.fetch_sub(1, Ordering::SeqCst);
            g.release().await.expect("release");
        }));
    }
    for t in tasks {
        t.await.expect("reader task");
    }
    assert_eq!(max.load(Ordering::SeqCst), 10);
    // Free again: a writer gets it at once.
    let w = reg
        .lock(key.as_str())
        .kind(LockKind::Write)
        .try_acquire()
        .await
        .expect("try write");
    assert!(w.is_some(), "the lock is free after every reader left");
}

/// 8 tasks x 300 sections, one in four a write: a writer never overlaps anyone; the
/// writers' non-atomic increments add up exactly; readers do overlap.
pub async fn writers_exclude(reg: &Registry) {
    let key = unique("rw-mixed");
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(std::sync::Mutex::new(0u64));
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (reg, key, readers, writers, max_readers, counter) = (
            reg.clone(),
            key.clone(),
            readers.clone(),
            writers.clone(),
            max_readers.clone(),
            counter.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for i in 0..300 {
                let write = (i + t) % 4 == 0;
                let kind = if write {
                    LockKind::Write
                } else {
                    LockKind::Read
                };
                let g = reg
                    .lock(key.as_str())
                    .kind(kind)
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire");
                if write {
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer among readers");
                    let v = *counter.lock().unwrap();
                    tokio::task::yield_now().await;
                    *counter.lock().unwrap() = v + 1;
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a reader got in");
                    writers.fetch_sub(1, Ordering::SeqCst);
                } else {
                    let n = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    max_readers.fetch_max(n, Ordering::SeqCst);
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader with a writer");
                    tokio::task::yield_now().await;
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a writer got in");
                    readers.fetch_sub(1, Ordering::SeqCst);
                }
                g.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(*counter.lock().unwrap(), 8 * 300 / 4);
    println!(
        "read-write: at most {} readers inside together",
        max_readers.load(Ordering::SeqCst)
    );
}

/// Readers keep arriving (the read lock is never free of readers by itself), yet a writer
/// queued behind them gets the lock within a few seconds; new readers wait for it.
pub async fn writer_not_starved(reg: &Registry) {
    let key = unique("starve");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..6u64 {
        let (reg, key, stop, writing, reads) = (
            reg.clone(),
            key.clone(),
            stop.clone(),
            writing.clone(),
            reads.clone(),
        );
        tasks.push(tokio::spawn(async move {
            // Staggered, so some reader always holds it.
            tokio::time::sleep(Duration::from_millis(i * 15)).await;
            while !stop.load(Ordering::SeqCst) {
                let g = reg
                    .lock(key.as_str())
                    .kind(LockKind::Read)
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
                    .expect("read");
                assert!(
                    !writing.load(Ordering::SeqCst),
                    "a reader beside the writer"
                );
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(80)).await;
                g.release().await.expect("release read");
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(reads.load(Ordering::SeqCst) > 0);
    let start = Instant::now();
    let w = reg
        .lock(key.as_str())
        .kind(LockKind::Write)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the writer must not starve");
    let waited = start.elapsed();
    writing.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    writing.store(false, Ordering::SeqCst);
    w.release().await.expect("release write");
    let before = reads.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        reads.load(Ordering::SeqCst) > before,
        "readers go on after the writer"
    );
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.expect("reader");
    }
    println!("read-write: a writer behind a stream of readers waited {waited:?}");
    assert!(waited < Duration::from_secs(3), "writer waited {waited:?}");
}

/// A reader that vanished (its guard forgotten, a fixed 500 ms lease) blocks a writer only
/// until its own lease ends, even while another reader keeps renewing its auto lease and
/// then leaves.
pub async fn crashed_reader_expires(reg: &Registry) {
    let key = unique("crashed-reader");
    let other = reg
        .lock(key.as_str())
        .kind(LockKind::Read)
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("read");
    let crashed = reg
        .lock(key.as_str())
        .kind(LockKind::Read)
        .lease(Lease::Fixed(Duration::from_millis(500)))
        .acquire()
        .await
        .expect("read");
    std::mem::forget(crashed);
    let start = Instant::now();
    let reg2 = reg.clone();
    let key2 = key.clone();
    let writer = tokio::spawn(async move {
        reg2.lock(key2.as_str())
            .kind(LockKind::Write)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .map(|g| (g, Instant::now()))
    });
    // The auto-leased reader outlives its first lease (1 s) thanks to its own renewals.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(other.is_held());
    assert!(!writer.is_finished(), "a writer beside a live reader");
    other
        .release()
        .await
        .expect("the renewed reader still held it");
    let (w, at) = writer.await.expect("writer task").expect("writer");
    let after = at.duration_since(start);
    println!(
        "read-write: writer got the lock {after:?} after start (crashed reader's lease: 500 ms)"
    );
    assert!(after < Duration::from_millis(2500), "{after:?}");
    w.release().await.expect("release");
}

/// The writer may take the read lock (a downgrade); others may not read meanwhile; a
/// reader can't take the write lock of a key it reads (no upgrade: it times out).
pub async fn downgrade_and_tokens(reg: &Registry) {
    let key = unique("downgrade");
    let w = reg
        .lock(key.as_str())
        .kind(LockKind::Write)
        .acquire()
        .await
        .expect("write");
    let t1 = w.fencing_token();
    let inner_reg = reg.clone();
    let inner_key = key.clone();
    let r_token = w
        .scope(async move {
            let r = inner_reg
                .lock(inner_key.as_str())
                .kind(LockKind::Read)
                .try_acquire()
                .await
                .expect("try read")
                .expect("the writer reads its own key");
            let t = r.fencing_token();
            // Keep the read lock; release the write lock below.
            std::mem::forget(r);
            t
        })
        .await;
    assert!(r_token > t1);
    assert!(reg
        .lock(key.as_str())
        .kind(LockKind::Read)
        .try_acquire()
        .await
        .expect("try")
        .is_none());
    w.release().await.expect("release write");
    // Now only a (forgotten) read lock remains: others read too.
    let r2 = reg
        .lock(key.as_str())
        .kind(LockKind::Read)
        .try_acquire()
        .await
        .expect("try")
        .expect("readers share it after the downgrade");
    assert!(r2.fencing_token() > r_token);
    // A reentrant lock of the same key is a separate lock.
    let plain = reg.lock(key.as_str()).try_acquire().await.expect("try");
    assert!(plain.is_some());
    assert!(reg
        .lock(key.as_str())
        .kind(LockKind::Read)
        .force_unlock()
        .await
        .expect("force"));
}

/// 8 waiters queued one after the other get a fair lock in that order.
pub async fn fair_in_order(reg: &Registry) {
    let key = unique("fair");
    let holder = reg
        .lock(key.as_str())
        .kind(LockKind::Fair)
        .acquire()
        .await
        .expect("fair");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (reg, key, order) = (reg.clone(), key.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = reg
                .lock(key.as_str())
                .kind(LockKind::Fair)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .expect("fair waiter");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            g.release().await.expect("release");
        }));
        // Queued before the next one asks.
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    holder.release().await.expect("release");
    // A newcomer does not jump the queue, even when the lock is free for a moment.
    let jumped = reg
        .lock(key.as_str())
        .kind(LockKind::Fair)
        .try_acquire()
        .await
        .expect("try");
    assert!(jumped.is_none(), "a newcomer jumped the queue");
    for t in tasks {
        t.await.expect("waiter");
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    // Reentrant, with growing tokens.
    let g = reg
        .lock(key.as_str())
        .kind(LockKind::Fair)
        .acquire()
        .await
        .expect("fair");
    let inner = {
        let (reg, key) = (reg.clone(), key.clone());
        g.scope(async move {
            reg.lock(key.as_str())
                .kind(LockKind::Fair)
                .try_acquire()
                .await
                .expect("try")
                .is_some()
        })
        .await
    };
    assert!(inner, "a fair lock re-enters in the same task");
    g.release().await.expect("release");
}

/// A fair waiter that gives up (times out) leaves the queue at once: the next one is not
/// held back until its deadline.
pub async fn fair_timeout_leaves_queue(reg: &Registry) {
    let key = unique("fair-giveup");
    let holder = reg
        .lock(key.as_str())
        .kind(LockKind::Fair)
        .acquire()
        .await
        .expect("fair");
    let (r1, k1) = (reg.clone(), key.clone());
    let first = tokio::spawn(async move {
        r1.lock(k1.as_str())
            .kind(LockKind::Fair)
            .wait(Duration::from_millis(300))
            .acquire()
            .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (r2, k2) = (reg.clone(), key.clone());
    let second = tokio::spawn(async move {
        r2.lock(k2.as_str())
            .kind(LockKind::Fair)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .map(|g| (g, Instant::now()))
    });
    assert!(matches!(
        first.await.expect("task"),
        Err(LockError::Timeout { .. })
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    holder.release().await.expect("release");
    let (g, at) = second.await.expect("task").expect("second waiter");
    let after = at.duration_since(released);
    assert!(after < Duration::from_millis(500), "{after:?}");
    g.release().await.expect("release");
}
