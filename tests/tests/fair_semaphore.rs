//! Fair semaphores (`Semaphore::fair`) on real servers and on memory: waiters of several
//! owners (separate registries, as separate processes) are served in the order they asked,
//! a waiter asking for many permits is not overtaken by later ones asking for fewer, a
//! waiter that gives up leaves the queue (the next is served at once), `try_acquire` does
//! not jump the queue, and nothing is left in Redis after the last waiter and holder.

mod common;

use std::time::{Duration, Instant};

use common::{unique, wait_for_waiter};
use distlock::{LockError, Registry};
use distlock_tests::{addr_of, resp_command, single_url, RespValue};

/// One registry per owner on `mode`'s shared topology (memory: one registry shared by the
/// owners, as memory is one process's).
async fn owners(mode: &str, n: usize) -> Vec<Registry> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(match mode {
            "single" => common::backend::single().await,
            "cluster" => common::backend::cluster().await,
            "sentinel" => common::backend::sentinel().await,
            "memory" => match out.first() {
                Some(first) => Registry::clone(first),
                None => common::backend::memory().await,
            },
            other => panic!("no mode {other}"),
        });
    }
    out
}

const MODES: [&str; 4] = ["single", "cluster", "sentinel", "memory"];

/// Until `reg` has `n` waiters asleep (bounded).
async fn waiters(reg: &Registry, key: &str, n: usize) {
    let start = Instant::now();
    while reg.waiting("main").unwrap_or(0) < n {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{n} waiters never slept on {key}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn waiters_are_served_in_the_order_they_asked() {
    for mode in MODES {
        let regs = owners(mode, 4).await;
        let key = unique("fair-sem-order");
        let holder = regs[0]
            .semaphore(key.as_str(), 1)
            .fair()
            .acquire(1)
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for (i, reg) in regs.iter().enumerate().skip(1) {
            let sem = reg
                .semaphore(key.as_str(), 1)
                .fair()
                .wait(Duration::from_secs(20));
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let g = sem.acquire(1).await.expect("acquire in turn");
                tx.send(i).expect("send");
                g.release().await.expect("release");
            }));
            // The next one asks only once this one is queued and asleep.
            if mode == "memory" {
                waiters(reg, &key, i).await;
            } else {
                wait_for_waiter(reg, &key).await;
            }
        }
        drop(tx);
        holder.release().await.expect("release the holder");
        let mut order = Vec::new();
        while let Some(i) = rx.recv().await {
            order.push(i);
        }
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(order, vec![1, 2, 3], "{mode}: served in the order asked");
    }
}

#[tokio::test]
async fn a_large_request_is_not_overtaken_by_smaller_later_ones() {
    for mode in MODES {
        let regs = owners(mode, 3).await;
        let key = unique("fair-sem-large");
        let sem = |r: &Registry| r.semaphore(key.as_str(), 3).fair();
        let two = sem(&regs[0]).acquire(2).await.expect("two of three");
        // Asks for two while one is free: queued at the head.
        let big = {
            let s = sem(&regs[1]).wait(Duration::from_secs(20));
            tokio::spawn(async move { s.acquire(2).await })
        };
        wait_for_waiter(&regs[1], &key).await;
        // One permit is free, but the head waits for two: a later small request waits too.
        let small = sem(&regs[2])
            .wait(Duration::from_millis(300))
            .acquire(1)
            .await;
        assert!(
            matches!(small, Err(LockError::Timeout { .. })),
            "{mode}: a later small request overtook the head: {small:?}"
        );
        assert!(
            sem(&regs[2]).try_acquire(1).await.expect("try").is_none(),
            "{mode}: try_acquire jumped the queue"
        );
        let small = {
            let s = sem(&regs[2]).wait(Duration::from_secs(20));
            tokio::spawn(async move { s.acquire(1).await })
        };
        two.release().await.expect("release two");
        let big = big.await.expect("task").expect("the head gets its two");
        // The head took two of three and woke the next: one is left for it.
        let small = small
            .await
            .expect("task")
            .expect("the next gets the one left");
        big.release().await.expect("release");
        small.release().await.expect("release");
        // Unqueued (and nobody waiting): free permits are taken at once.
        let g = sem(&regs[2])
            .try_acquire(3)
            .await
            .expect("try")
            .expect("all free");
        g.release().await.expect("release");
    }
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    for mode in MODES {
        let regs = owners(mode, 3).await;
        let key = unique("fair-sem-cancel");
        let sem = |r: &Registry| r.semaphore(key.as_str(), 1).fair();
        let holder = sem(&regs[0]).acquire(1).await.expect("hold");
        // The first waiter's future is dropped while it waits at the head.
        let first = {
            let s = sem(&regs[1]).wait(Duration::from_secs(60));
            tokio::spawn(async move { s.acquire(1).await })
        };
        wait_for_waiter(&regs[1], &key).await;
        first.abort();
        assert!(first.await.is_err(), "aborted");
        holder.release().await.expect("release");
        // The next asker is served at once, not after the first one's 60 s.
        let start = Instant::now();
        let g = sem(&regs[2])
            .wait(Duration::from_secs(10))
            .acquire(1)
            .await
            .unwrap_or_else(|e| panic!("{mode}: the queue kept a waiter that left: {e}"));
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{mode}: served after {:?}",
            start.elapsed()
        );
        g.release().await.expect("release");
    }
}

/// What the server holds under a semaphore's names (distlock's default prefix `lock:`).
fn sem_keys_left(addr: &str, key: &str) -> Vec<String> {
    let pattern = format!("lock:{{{key}}}:sem*");
    match resp_command(addr, &["KEYS", &pattern]) {
        Ok(RespValue::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        other => panic!("KEYS {pattern}: {other:?}"),
    }
}

#[tokio::test]
async fn nothing_is_left_after_the_last_waiter_and_holder() {
    let regs = owners("single", 2).await;
    let addr = addr_of(&single_url());
    let key = unique("fair-sem-keys");
    let sem = |r: &Registry| r.semaphore(key.as_str(), 1).fair();
    let g = sem(&regs[0]).acquire(1).await.expect("hold");
    // A waiter that times out: its place goes with its wait.
    let refused = sem(&regs[1])
        .wait(Duration::from_millis(200))
        .acquire(1)
        .await;
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "{refused:?}"
    );
    g.release().await.expect("release");
    let left = sem_keys_left(&addr, &key);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test]
async fn quorum_modes_refuse_it() {
    for (mode, reg) in common::every_mode().await {
        if mode != "redlock" {
            continue;
        }
        let r = reg
            .semaphore(unique("fair-sem-q"), 2)
            .fair()
            .acquire(1)
            .await;
        assert!(
            matches!(r, Err(LockError::Unsupported { .. })),
            "{mode}: {r:?}"
        );
    }
}
