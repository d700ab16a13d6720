//! Multi-key locks (`Lock::all`, `Registry::lock_all`, `#[distributed_lock(keys = [..])]`)
//! on real servers: all or nothing within one wait, deadlock-free across OS processes that
//! ask for the keys in opposite orders, keys in different cluster slots (the in-process
//! scenarios on single, cluster, sentinel, redlock and memory), a token per key,
//! release on every way out.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::unique;
use distlock::{distributed_lock, Lease, LockError, Registry};
use distlock_tests::{addr_of, cluster_urls, resp_command, single_url};

async fn registries() -> Vec<(&'static str, Registry)> {
    common::every_mode().await
}

/// Until `key` is held by someone else than `reg`'s own tries (at most 5 s).
async fn until_held_elsewhere(reg: &Registry, key: &str, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while reg.lock(key).try_acquire().await.expect("try").is_some() {
        assert!(
            Instant::now() < deadline,
            "{name}: {key} never taken by the waiter"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// All or nothing: a held key makes the whole acquisition time out, naming that key, and
/// leaves none of the others held; each key gets its own token; release frees all.
#[tokio::test]
async fn all_or_nothing_with_a_token_per_key() {
    for (name, reg) in registries().await {
        let (a, b, c) = (unique("all-a"), unique("all-b"), unique("all-c"));
        let other = reg.lock(b.as_str()).acquire().await.expect("hold b");
        let start = Instant::now();
        let err = reg
            .lock_all([c.as_str(), a.as_str(), b.as_str()])
            .wait(Duration::from_millis(300))
            .acquire()
            .await
            .expect_err("b is held");
        match &err {
            LockError::Timeout { key, waited, .. } => {
                assert_eq!(key, &b, "{name}: the Timeout names the key not taken");
                assert!(*waited >= Duration::from_millis(300), "{name}: {waited:?}");
            }
            other => panic!("{name}: expected Timeout, got {other:?}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{name}: one wait for all"
        );
        // `a` (taken before `b` in sorted order) was given back; `c` was never taken.
        for k in [&a, &c] {
            let g = reg
                .lock(k.as_str())
                .wait(Duration::from_secs(2))
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{name}: {k} left held: {e}"));
            g.release().await.expect("release");
        }
        assert!(
            reg.lock_all([a.as_str(), b.as_str()])
                .try_acquire()
                .await
                .expect("try")
                .is_none(),
            "{name}: try_acquire is None while b is held"
        );
        other.release().await.expect("release b");

        let g = reg
            .lock_all([b.as_str(), a.as_str(), a.as_str()])
            .wait(Duration::from_secs(2))
            .acquire()
            .await
            .expect("both free");
        let mut sorted = [a.as_str(), b.as_str()];
        sorted.sort_unstable();
        assert_eq!(g.keys(), sorted, "{name}: sorted, deduplicated");
        let ta = g.token(&a).expect("token of a");
        let tb = g.token(&b).expect("token of b");
        assert!(ta >= 1 && tb >= 1, "{name}");
        assert_eq!(g.fencing_tokens().len(), 2);
        assert!(g.is_held());
        assert!(
            reg.lock(a.as_str())
                .try_acquire()
                .await
                .expect("try")
                .is_none(),
            "{name}: a is held by the multi-key guard"
        );
        g.release().await.expect("release both");
        let g2 = reg
            .lock_all([a.as_str(), b.as_str()])
            .try_acquire()
            .await
            .expect("try")
            .expect("free after release");
        assert!(g2.token(&a).unwrap() > ta, "{name}: tokens grow per key");
        assert!(g2.token(&b).unwrap() > tb, "{name}: tokens grow per key");
        drop(g2);
        // Dropped: released in the background.
        let again = reg
            .lock_all([a.as_str(), b.as_str()])
            .wait(Duration::from_secs(3))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{name}: not released on drop: {e}"));
        again.release().await.expect("release");
        let empty = reg.lock_all(Vec::<String>::new()).acquire().await;
        assert!(
            matches!(empty, Err(LockError::InvalidKey { .. })),
            "{name}: {empty:?}"
        );
    }
}

/// An acquisition dropped while it waits for its second key gives back the first.
#[tokio::test]
async fn dropped_while_waiting_releases_what_it_took() {
    for (name, reg) in registries().await {
        let (a, b) = (unique("drop-a"), unique("drop-b"));
        let held_b = reg.lock(b.as_str()).acquire().await.expect("hold b");
        let waiting = {
            let (reg, a, b) = (reg.clone(), a.clone(), b.clone());
            tokio::spawn(async move {
                reg.lock_all([a.as_str(), b.as_str()])
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
            })
        };
        // It takes `a`, then waits for `b`.
        until_held_elsewhere(&reg, &a, name).await;
        waiting.abort();
        assert!(waiting.await.is_err(), "{name}: aborted");
        let g = reg
            .lock(a.as_str())
            .wait(Duration::from_secs(3))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{name}: a still held after the waiter was dropped: {e}"));
        g.release().await.expect("release");
        held_b.release().await.expect("release b");
    }
}

/// A key taken first and force-released while the acquisition still waits for the next
/// one (another owner then takes it, and the waiter hears of its loss): the acquisition
/// never returns a guard with that key lost. It takes the keys again within its wait, and
/// the guard it returns holds all of them.
#[tokio::test]
async fn a_key_lost_while_waiting_for_the_next_is_taken_again() {
    for (name, reg) in registries().await {
        let (a, b) = (unique("again-a"), unique("again-b"));
        let held_b = reg.lock(b.as_str()).acquire().await.expect("hold b");
        let waiting = {
            let (reg, a, b) = (reg.clone(), a.clone(), b.clone());
            tokio::spawn(async move {
                reg.lock_all([a.as_str(), b.as_str()])
                    .lease(Lease::Auto)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
            })
        };
        // It takes `a`, then waits for `b`.
        until_held_elsewhere(&reg, &a, name).await;
        // `a` revoked under it, and taken by another owner for a moment.
        assert!(
            reg.lock(a.as_str()).force_unlock().await.expect("force"),
            "{name}"
        );
        let other_a = reg
            .lock(a.as_str())
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{name}: a not free after its force_unlock: {e}"));
        // The waiter heard of its loss of `a` (its lease left the watchdog: `b` and the
        // other owner's `a` are left) before `b` comes free.
        let deadline = Instant::now() + Duration::from_secs(5);
        while reg.watched_leases("main") != Some(2) {
            assert!(
                Instant::now() < deadline,
                "{name}: the revocation of a was not heard"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        held_b.release().await.expect("release b");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "{name}: returned while another owner holds a"
        );
        other_a.release().await.expect("release a");
        let g = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap_or_else(|_| panic!("{name}: the multi-key acquisition did not return"))
            .expect("task")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(g.is_held(), "{name}: the guard returned holds every key");
        for k in [&a, &b] {
            let taken = reg.lock(k.as_str()).try_acquire().await.expect("try");
            assert!(
                taken.is_none(),
                "{name}: {k} is not held by the multi-key guard"
            );
        }
        g.release()
            .await
            .unwrap_or_else(|e| panic!("{name}: release: {e}"));
    }
}

/// A key deleted under the guard: `lost()` names it, `run` drops its body with
/// `LeaseLost`, `release` frees the others and reports `NotHeld`.
#[tokio::test]
async fn a_lost_key_is_signalled() {
    for (name, reg) in registries().await {
        let (a, b) = (unique("lost-a"), unique("lost-b"));
        let g = reg
            .lock_all([a.as_str(), b.as_str()])
            .lease(Lease::Auto)
            .acquire()
            .await
            .expect("acquire");
        assert!(reg.lock(b.as_str()).force_unlock().await.expect("force"));
        let lost = tokio::time::timeout(Duration::from_secs(5), g.lost())
            .await
            .unwrap_or_else(|_| panic!("{name}: lost() did not resolve"));
        assert!(
            matches!(&lost, LockError::LeaseLost { key, .. } if key == &b),
            "{name}: {lost:?}"
        );
        assert!(!g.is_held());
        let released = g.release().await;
        assert!(
            matches!(&released, Err(LockError::NotHeld { key, .. }) if key == &b),
            "{name}: {released:?}"
        );
        let free = reg.lock(a.as_str()).try_acquire().await.expect("try");
        assert!(free.is_some(), "{name}: a released");
        drop(free);

        let reg2 = reg.clone();
        let b2 = b.clone();
        let out = reg
            .lock_all([a.as_str(), b.as_str()])
            .run(async move {
                assert!(distlock::fencing_token_of(&b2).is_some());
                reg2.lock(b2.as_str()).force_unlock().await.expect("force");
                tokio::time::sleep(Duration::from_secs(30)).await;
            })
            .await;
        assert!(
            matches!(&out, Err(LockError::LeaseLost { key, .. }) if key == &b),
            "{name}: {out:?}"
        );
    }
}

#[derive(Debug)]
enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "10s")]
async fn transfer(from: &str, to: &str) -> Result<(u64, u64), AppError> {
    let f = distlock::fencing_token_of(&format!("account:{from}")).expect("from held");
    let t = distlock::fencing_token_of(&format!("account:{to}")).expect("to held");
    Ok((f, t))
}

#[distributed_lock(keys = ["account:<from>", "account:<to>"], wait = "300ms")]
async fn transfer_or_give_up(from: &str, to: &str) -> Result<(), AppError> {
    panic!("the body must not run: {from} -> {to}");
}

/// The attribute on every backend: both keys held in the body, each with its token, both
/// free afterwards; a busy key makes it return `Timeout` without running the body.
#[tokio::test]
async fn attribute_with_keys() {
    for (name, reg) in registries().await {
        let (x, y) = (unique("x"), unique("y"));
        let (fx, ty) = reg.scope(transfer(&x, &y)).await.expect("transfer");
        let (fy, tx) = reg.scope(transfer(&y, &x)).await.expect("transfer back");
        assert!(tx > fx && fy > ty, "{name}: new holders, larger tokens");
        let held = reg
            .lock(format!("account:{y}"))
            .acquire()
            .await
            .expect("hold y");
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            reg.scope(transfer_or_give_up(&x, &y)),
        )
        .await
        .expect("bounded by wait");
        assert!(
            matches!(r, Err(AppError::Lock(LockError::Timeout { ref key, .. })) if key == &format!("account:{y}")),
            "{name}: {r:?}"
        );
        held.release().await.expect("release");
        let free = reg
            .lock(format!("account:{x}"))
            .try_acquire()
            .await
            .expect("try");
        assert!(free.is_some(), "{name}: x given back after the timeout");
    }
}

fn run_workers(mode: &str, nodes: &str, keys: [&str; 2], tasks: usize, iterations: usize) {
    let counter_url = single_url();
    for k in keys {
        for suffix in [":count", ":inside"] {
            resp_command(&addr_of(&counter_url), &["DEL", &format!("{k}{suffix}")]).expect("DEL");
        }
    }
    let orders = [
        format!("{},{}", keys[0], keys[1]),
        format!("{},{}", keys[1], keys[0]),
    ];
    let start = Instant::now();
    let children: Vec<_> = orders
        .iter()
        .map(|order| {
            Command::new(env!("CARGO_BIN_EXE_lock-worker"))
                .args([
                    "multi",
                    mode,
                    nodes,
                    &counter_url,
                    order,
                    &tasks.to_string(),
                    &iterations.to_string(),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn lock-worker")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("lock-worker");
        assert!(
            out.status.success(),
            "{mode}: lock-worker failed (a 60 s acquire timing out means a deadlock): {:?}",
            out.status
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.trim(),
            "DONE 0",
            "{mode}: a worker saw overlapping holders"
        );
    }
    let took = start.elapsed();
    let expected = (2 * tasks * iterations).to_string();
    for k in keys {
        let v = resp_command(&addr_of(&counter_url), &["GET", &format!("{k}:count")]).expect("GET");
        assert_eq!(
            v.as_str(),
            Some(expected.as_str()),
            "{mode}: every increment of {k} counted"
        );
    }
    println!(
        "{mode}: 2 processes x {tasks} tasks x {iterations} rounds of [a, b] / [b, a] in {took:?} ({:?} per round)",
        took / (2 * tasks * iterations) as u32
    );
}

/// Two OS processes lock `[a, b]` and `[b, a]` in a loop (4 tasks each): no deadlock (every
/// acquire waits at most 60 s, so a deadlock fails the worker) and never two holders of
/// either key.
#[test]
fn opposite_orders_in_two_processes_single() {
    let (a, b) = (unique("pa"), unique("pb"));
    run_workers("single", &single_url(), [&a, &b], 4, 40);
}

/// The same on the cluster, with the two keys in different slots (on different masters).
#[test]
fn opposite_orders_in_two_processes_cluster() {
    let urls = cluster_urls();
    let node = addr_of(&urls[0]);
    let slot = |k: &str| {
        resp_command(&node, &["CLUSTER", "KEYSLOT", &format!("lock:{{{k}}}")])
            .expect("CLUSTER KEYSLOT")
            .as_int()
            .expect("a slot")
    };
    // One key in the first third of the slots, one in the last: different masters in the
    // 3-master test cluster.
    let base = unique("slots");
    let a = (0..)
        .map(|i| format!("{base}:a{i}"))
        .find(|k| slot(k) < 5000)
        .expect("a key");
    let b = (0..)
        .map(|i| format!("{base}:b{i}"))
        .find(|k| slot(k) > 11000)
        .expect("a key");
    assert_ne!(slot(&a), slot(&b));
    run_workers("cluster", &urls.join(","), [&a, &b], 4, 40);
}

/// A task that holds one key of a multi-key lock and asks for the whole set, when that set
/// needs a key sorting before one it holds, could deadlock with another task that holds the
/// earlier key and waits for the later one (each waiting out its `wait`): refused at once,
/// naming the keys and the order, on every mode. Asking for keys that sort after all the
/// held ones (or that re-enter every one of them) is in order and works.
#[tokio::test]
async fn a_multi_key_lock_out_of_order_with_a_held_key_is_refused_at_once() {
    for (name, reg) in registries().await {
        let (a, b) = (unique("order-a"), unique("order-b"));
        // Another task holds `a` and waits for `b`.
        let other_a = reg.lock(a.as_str()).acquire().await.expect("hold a");
        let held_b = reg.lock(b.as_str()).acquire().await.expect("hold b");
        let waiter = {
            let reg = reg.clone();
            let b = b.clone();
            tokio::spawn(async move {
                let _a = other_a;
                reg.lock(b.as_str())
                    .wait(Duration::from_secs(3))
                    .acquire()
                    .await
                    .map(drop)
            })
        };
        let start = Instant::now();
        let err = held_b
            .scope(
                reg.lock_all([a.as_str(), b.as_str()])
                    .wait(Duration::from_secs(3))
                    .acquire(),
            )
            .await
            .expect_err("out of order");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{name}: refused at once, not after the wait ({:?})",
            start.elapsed()
        );
        match &err {
            LockError::LockOrder { held, needs, .. } => {
                assert_eq!(held, &b, "{name}");
                assert_eq!(needs, &a, "{name}");
            }
            other => panic!("{name}: expected LockOrder, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains(&a) && msg.contains(&b), "{name}: {msg}");
        // In order: holding `a`, the set [a, b] re-enters `a` and takes `b` once it is free.
        held_b.release().await.expect("release b");
        waiter.await.expect("join").expect("the other task got b");
        let held_a = reg.lock(a.as_str()).acquire().await.expect("hold a again");
        let both = held_a
            .scope(reg.lock_all([a.as_str(), b.as_str()]).acquire())
            .await
            .unwrap_or_else(|e| panic!("{name}: in order: {e}"));
        both.release().await.expect("release both");
        held_a.release().await.expect("release a");
    }
}
