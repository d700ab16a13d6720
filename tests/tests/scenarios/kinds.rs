//! The scenarios of fair and read-write locks (`LockKind::Fair`, `Read`, `Write`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{Lease, LockError, LockKind, Registry};

use crate::common::unique;

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
/// reader can't take the write lock of a key it reads (no upgrade: `NestedKind` at once,
/// `nested_kinds.rs`).
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
