//! The reentrant lock on a master found through Redis Sentinel (`mode = "sentinel"`).
//!
//! The non-destructive tests use the shared master + replica + 3 sentinels of
//! `scripts/servers.sh` (`DISTLOCK_TEST_SENTINELS`); the failover and `sync_replicas` tests
//! start private groups of their own (ports 17400..17499) and shut servers down.
//!
//! The shared scenarios (exclusion, timeouts, leases, tokens, reentrancy, ...) run on this
//! backend from the table in `matrix.rs`; this file has the tests of this backend only.

mod common;
#[allow(dead_code)]
mod scenarios;

use std::time::{Duration, Instant};

use common::*;
use distlock::{InitError, Lease, LockError, Registry};
use distlock_tests::topology::{info_field, role, PrivateSentinel};
use distlock_tests::{resp_command, sentinel_master_name, sentinel_urls, wait_until};
use scenarios::exclusion_16_tasks;

fn config(sentinels: &[String], master: &str, extra: &str, watchdog: &str) -> String {
    let list = sentinels
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[defaults]\nwatchdog_timeout = \"{watchdog}\"\n[backends.main]\nmode = \"sentinel\"\nmaster_name = \"{master}\"\nsentinels = [{list}]\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n{extra}"
    )
}

/// Wait (up to 5 s) until `replica` has every write `master` has taken so far.
fn replicated(master: &str, replica: &str, what: &str) {
    let offset = |addr: &str| {
        info_field(addr, "replication", "master_repl_offset")
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(-1)
    };
    let written = offset(master);
    wait_until(Duration::from_secs(5), what, || offset(replica) >= written);
}

fn hash_name(key: &str) -> String {
    format!("lock:{{{key}}}")
}

/// With its replica up, `sync_replicas = 1` acquires normally (WAIT is acknowledged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_with_the_replica_up() {
    let reg = Registry::from_str(&config(
        &sentinel_urls(),
        &sentinel_master_name(),
        "sync_replicas = 1\nsync_timeout = \"1s\"\n",
        "1s",
    ))
    .await
    .expect("connect");
    let start = Instant::now();
    for _ in 0..20 {
        let g = reg
            .lock(unique("sync-up").as_str())
            .acquire()
            .await
            .expect("acquire");
        g.release().await.expect("release");
    }
    println!(
        "sentinel: acquire (+ WAIT 1) and release: {:?} per pair",
        start.elapsed() / 20
    );
    exclusion_16_tasks(&reg).await;
}

/// Init fails naming the backend and the sentinels' addresses when none answers, and the
/// master's name when the sentinels do not know it.
#[tokio::test]
async fn init_errors_name_the_backend_and_addresses() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = Registry::from_str(&config(
        &[format!("redis://127.0.0.1:{port}")],
        "x",
        "",
        "1s",
    ))
    .await
    .expect_err("nothing listens there");
    assert!(matches!(err, InitError::Connect { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("`main`"), "{msg}");
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");

    let err = Registry::from_str(&config(&sentinel_urls(), "no-such-master", "", "1s"))
        .await
        .expect_err("unknown master");
    let msg = err.to_string();
    assert!(msg.contains("`main`"), "{msg}");
    assert!(msg.contains("no-such-master"), "{msg}");
}

// ------------------------------------------------------------------ private groups

/// How a waiter across the failover ended.
#[derive(Debug)]
enum Outcome {
    Acquired,
    TimedOut,
    BackendError,
}

/// Shut the master down mid-run: new locks work once the sentinels have promoted the
/// replica; waiters across the failover end cleanly; auto leases keep renewing on the new
/// master or are reported lost, never silently held nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_failover_is_followed() {
    let mut group = tokio::task::spawn_blocking(|| PrivateSentinel::start(3))
        .await
        .expect("start the private sentinel group");
    let response_timeout = Duration::from_millis(500);
    let reg = Registry::from_str(&config(
        &group.sentinel_urls(),
        PrivateSentinel::MASTER_NAME,
        "",
        "6s",
    ))
    .await
    .expect("connect through the private sentinels");
    let (old_master, replica) = (group.master.addr(), group.replica.addr());

    let base = unique("sentinel-failover");
    let keys: Vec<String> = (0..3).map(|i| format!("{base}:{i}")).collect();
    // A second process whose auto leases (1 s) are shorter than the failover.
    let short = Registry::from_str(&config(
        &group.sentinel_urls(),
        PrivateSentinel::MASTER_NAME,
        "",
        "1s",
    ))
    .await
    .expect("connect through the private sentinels");
    let short_guard = short
        .lock(format!("{base}:short"))
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("acquire a short lease");
    let mut holders = Vec::new();
    for k in &keys {
        holders.push(
            reg.lock(k.as_str())
                .lease(Lease::Auto)
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    replicated(&old_master, &replica, "the replica to have the locks");
    let wait = Duration::from_secs(15);
    let mut waiters = Vec::new();
    for k in &keys {
        let (reg, k) = (reg.clone(), k.clone());
        waiters.push(tokio::spawn(async move {
            let start = Instant::now();
            let r = reg.lock(k.as_str()).wait(wait).acquire().await;
            let took = start.elapsed();
            let outcome = match r {
                Ok(g) => {
                    g.release().await.ok();
                    Outcome::Acquired
                }
                Err(LockError::Timeout { .. }) => Outcome::TimedOut,
                Err(LockError::Backend { .. }) => Outcome::BackendError,
                Err(e) => panic!("unexpected error for a waiter: {e}"),
            };
            (outcome, took)
        }));
    }
    let start = Instant::now();
    while reg.waiting("main").unwrap_or(0) < keys.len() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "waiters never slept"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Shut the master down (SHUTDOWN NOSAVE).
    let down = Instant::now();
    group.master.stop();
    // When the sentinels name the new master (for the report: their own part).
    let switched = {
        let sentinel = group.sentinels[0].addr();
        let replica = replica.clone();
        tokio::task::spawn_blocking(move || {
            wait_until(Duration::from_secs(30), "the sentinels' switch", || {
                distlock_tests::topology::sentinel_master_addr(
                    &sentinel,
                    PrivateSentinel::MASTER_NAME,
                )
                .as_deref()
                    == Some(replica.as_str())
            });
            down.elapsed()
        })
    };

    let mut failures = 0;
    let mut slowest = Duration::ZERO;
    let mut last_error = String::new();
    let took_over = loop {
        let t = Instant::now();
        let r = reg.lock(unique("probe").as_str()).try_acquire().await;
        let took = t.elapsed();
        slowest = slowest.max(took);
        assert!(
            took <= response_timeout + Duration::from_millis(300),
            "a try_acquire took {took:?} (response_timeout {response_timeout:?})"
        );
        match r {
            Ok(Some(g)) => {
                g.release().await.expect("release on the new master");
                break down.elapsed();
            }
            Ok(None) => panic!("nobody holds a fresh key"),
            Err(e @ LockError::Backend { .. }) => {
                failures += 1;
                last_error = e.to_string();
            }
            Err(e) => panic!("expected Backend errors during the failover, got {e}"),
        }
        assert!(
            down.elapsed() < Duration::from_secs(30),
            "no lock worked within 30 s of the shutdown; last error: {last_error}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        group.master_addr().as_deref(),
        Some(replica.as_str()),
        "the sentinels promoted the replica"
    );
    assert_eq!(role(&replica).as_deref(), Some("master"));
    let switched = switched.await.expect("switch poll");
    println!(
        "sentinel failover: the sentinels named the new master {switched:?} after the shutdown; \
         new locks work {took_over:?} after it \
         ({failures} failed probes, slowest call {slowest:?}; last error: {last_error})"
    );

    // One renewal period (6s / 3) and some: every auto lease has been renewed on the new
    // master, or reported lost.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (mut kept, mut lost) = (0, 0);
    for g in &holders {
        if g.is_held() {
            let pttl = resp_command(&replica, &["PTTL", &hash_name(g.key())]).expect("PTTL");
            assert!(
                pttl.as_int().is_some_and(|t| t > 4000),
                "{} held as far as we know, but the new master has PTTL {pttl:?}",
                g.key()
            );
            kept += 1;
        } else {
            let e = tokio::time::timeout(Duration::from_millis(10), g.lost())
                .await
                .expect("not held means reported lost");
            assert!(matches!(e, LockError::LeaseLost { .. }), "{e}");
            lost += 1;
        }
    }
    println!("sentinel failover: auto leases: {kept} kept renewing on the new master, {lost} reported lost");
    // The 1 s lease could not be renewed during the failover: reported lost, not held.
    assert!(
        !short_guard.is_held(),
        "a 1 s lease cannot outlive a 3 s failover"
    );
    let e = tokio::time::timeout(Duration::from_millis(10), short_guard.lost())
        .await
        .expect("reported lost");
    println!("sentinel failover: the 1 s auto lease of another registry: {e}");

    for g in holders {
        let _ = g.release().await;
    }
    let mut outcomes = Vec::new();
    for w in waiters {
        let (outcome, took) = w.await.expect("waiter");
        assert!(
            took <= wait + response_timeout + Duration::from_millis(300),
            "a waiter took {took:?} (wait {wait:?})"
        );
        outcomes.push((outcome, took));
    }
    println!("sentinel failover: waiters across it: {outcomes:?}");
    exclusion_16_tasks(&reg).await;
}

/// `sync_replicas = 1` with the replica stopped: acquiring fails with an error naming the
/// backend, the key and the acknowledgements, and leaves no lock behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_without_the_replica_fails_cleanly() {
    let mut group = tokio::task::spawn_blocking(|| PrivateSentinel::start(1))
        .await
        .expect("start the private sentinel group");
    let reg = Registry::from_str(&config(
        &group.sentinel_urls(),
        PrivateSentinel::MASTER_NAME,
        "sync_replicas = 1\nsync_timeout = \"300ms\"\n",
        "1s",
    ))
    .await
    .expect("connect");
    let master = group.master.addr();
    let g = reg
        .lock(unique("sync-ok").as_str())
        .acquire()
        .await
        .expect("acquired with the replica up");
    g.release().await.expect("release");

    group.replica.stop();
    wait_until(
        Duration::from_secs(10),
        "the master to notice its replica is gone",
        || info_field(&master, "replication", "connected_slaves").as_deref() == Some("0"),
    );
    let key = unique("sync-fail");
    let start = Instant::now();
    let err = reg
        .lock(key.as_str())
        .acquire()
        .await
        .expect_err("no replica can acknowledge");
    let took = start.elapsed();
    match &err {
        LockError::ReplicationFailed {
            key: k,
            backend,
            acked,
            needed,
            released,
            ..
        } => {
            assert_eq!(k, &key);
            assert_eq!(backend, "main");
            assert_eq!((*acked, *needed), (0, 1));
            assert!(released, "released again");
        }
        other => panic!("expected ReplicationFailed, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&key) && msg.contains("`main`") && msg.contains("0 of the 1"),
        "{msg}"
    );
    assert_eq!(err.key(), Some(key.as_str()));
    assert_eq!(err.backend(), Some("main"));
    assert!(took >= Duration::from_millis(300), "WAITed {took:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let exists = resp_command(&master, &["EXISTS", &hash_name(&key)]).expect("EXISTS");
    assert_eq!(exists.as_int(), Some(0), "no lock is left behind");
    println!("sentinel: sync_replicas = 1 without the replica failed after {took:?}: {err}");

    // With the replica back, acquiring works again.
    group.replica.restart();
    wait_until(Duration::from_secs(10), "the replica to resync", || {
        distlock_tests::topology::replica_online(&master)
    });
    distlock_tests::topology::wait_acknowledged(&master, 1);
    let g = reg
        .lock(key.as_str())
        .acquire()
        .await
        .expect("acquired with the replica back");
    g.release().await.expect("release");
}

/// The master is killed holding a lock with a long fixed lease; the sentinels promote its
/// replica (which has the lock), and before they announce the switch the old master comes
/// back empty at its address. A release sent then reaches that empty server, which answers
/// "not held": believing it would leave the lock held on the new master until its lease
/// ends. The release must reach the new master, and the lock be free soon after the switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_restarted_old_master_answers_reaches_the_new_master() {
    let mut group = tokio::task::spawn_blocking(|| PrivateSentinel::start(3))
        .await
        .expect("start the private sentinel group");
    let urls = group.sentinel_urls();
    let reg = Registry::from_str(&config(&urls, PrivateSentinel::MASTER_NAME, "", "6s"))
        .await
        .expect("connect through the private sentinels");
    let (old_master, replica) = (group.master.addr(), group.replica.addr());
    let key = unique("sentinel-restarted-master");
    let lease = Duration::from_secs(20);
    let guard = reg
        .lock(key.as_str())
        .lease(Lease::Fixed(lease))
        .acquire()
        .await
        .expect("acquire");
    let held_since = Instant::now();
    replicated(&old_master, &replica, "the replica to have the lock");

    // SIGKILL; once the sentinels have promoted the replica (it answers ROLE as a master),
    // the old master starts again, empty, before the switch is announced (the sentinels
    // announce it after their next look at the promoted replica, up to a second later).
    group.master.kill();
    let r = replica.clone();
    tokio::task::spawn_blocking(move || {
        wait_until(
            Duration::from_secs(30),
            "the replica to be promoted",
            || role(&r).as_deref() == Some("master"),
        )
    })
    .await
    .expect("promotion poll");
    group.master.restart();
    let announced = group.master_addr();
    let released = guard.release().await;
    println!(
        "sentinel: release after the old master came back empty (sentinels then named \
         {announced:?}): {released:?}"
    );

    let sentinel = group.sentinels[0].addr();
    let r = replica.clone();
    tokio::task::spawn_blocking(move || {
        wait_until(
            Duration::from_secs(30),
            "the sentinels to name the replica",
            || {
                distlock_tests::topology::sentinel_master_addr(
                    &sentinel,
                    PrivateSentinel::MASTER_NAME,
                )
                .as_deref()
                    == Some(r.as_str())
            },
        )
    })
    .await
    .expect("switch poll");
    // A registry that starts now resolves the new master at once.
    let rival = Registry::from_str(&config(&urls, PrivateSentinel::MASTER_NAME, "", "6s"))
        .await
        .expect("connect through the private sentinels");
    let bound = Duration::from_secs(5);
    let got = rival
        .lock(key.as_str())
        .wait(bound)
        .acquire()
        .await
        .unwrap_or_else(|e| {
            let pttl = resp_command(&replica, &["PTTL", &hash_name(&key)]);
            panic!(
                "the lock stayed held on the new master {replica} (PTTL {pttl:?}) {:?} after \
                 it was taken with a {lease:?} lease, released {released:?}: {e}",
                held_since.elapsed()
            )
        });
    assert!(
        held_since.elapsed() < lease,
        "free before its lease ran out"
    );
    got.release().await.expect("release on the new master");
}
