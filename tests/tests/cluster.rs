//! The reentrant lock on a real Redis Cluster (`mode = "cluster"`).
//!
//! The non-destructive tests use the shared 3-master + 3-replica cluster of
//! `scripts/servers.sh` (`DISTLOCK_TEST_CLUSTER`); the failover test starts a private
//! cluster of its own (ports 17400..17499) and SIGKILLs one of its masters.
//!
//! The shared scenarios (exclusion, timeouts, leases, tokens, reentrancy, ...) run on this
//! backend from the table in `matrix.rs`; this file has the tests of this backend only.

mod common;
#[allow(dead_code)]
mod scenarios;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use distlock::{InitError, Lease, LockError, Registry};
use distlock_tests::topology::{keyslot, master_of_slot, role, PrivateCluster};
use distlock_tests::{addr_of, cluster_urls, resp_command, RespValue};
use scenarios::exclusion_16_tasks;

fn config(urls: &[String], watchdog: &str, response_timeout: &str) -> String {
    let nodes = urls
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[defaults]\nwatchdog_timeout = \"{watchdog}\"\n[backends.main]\nmode = \"cluster\"\nnodes = [{nodes}]\nresponse_timeout = \"{response_timeout}\"\nconnect_timeout = \"500ms\"\n"
    )
}

async fn registry() -> Registry {
    backend::cluster().await
}

fn addrs(urls: &[String]) -> Vec<String> {
    urls.iter().map(|u| addr_of(u)).collect()
}

/// The Redis name of the lock hash of `key` (prefix `lock:`, no braces in `key`).
fn hash_name(key: &str) -> String {
    format!("lock:{{{key}}}")
}

/// Acquisitions and releases cut short at every point of their round trip leave nothing
/// held and no reply misread ([`cut_requests_leave_nothing_held`], as on a single server),
/// most of them on the connection the calling task drives itself to the key's master; on
/// every lock kind.
#[tokio::test]
async fn requests_cut_at_any_point_leave_nothing_held_and_no_reply_misread() {
    let reg = registry().await;
    let nodes = addrs(&cluster_urls());
    for kind in LOCK_KINDS {
        cut_requests_leave_nothing_held(&reg, &unique("cut"), false, kind, |hash| {
            master_of_slot(&nodes, keyslot(&nodes, hash)).expect("a master serves the slot")
        })
        .await;
    }
}

/// Redisson's format on a cluster, every lock kind: acquisitions cut short after 0 to 399
/// turns of the runtime leave nothing held ([`cut_requests_leave_nothing_held`]). They go
/// on the cluster connection that never sends twice,
/// and the release undoing a cut one on the routed connections, which could overtake it
/// (the lock then held for nobody until its lease ended: 2-6 of 300 rounds before
/// `backend/redisson_once.rs`).
#[tokio::test]
async fn redisson_acquisitions_cut_at_any_point_leave_nothing_held() {
    let urls = cluster_urls();
    let nodes = addrs(&urls);
    let list = urls
        .iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let reg = Registry::from_str(&format!(
        "[backends.main]\nmode = \"cluster\"\nnodes = [{list}]\nprotocol = \"redisson\"\n"
    ))
    .await
    .expect("connect");
    for kind in LOCK_KINDS {
        cut_requests_leave_nothing_held(&reg, &unique("redisson-cut"), true, kind, |hash| {
            master_of_slot(&nodes, keyslot(&nodes, hash)).expect("a master serves the slot")
        })
        .await;
    }
}

/// Many auto leases on all three masters are renewed together (concurrent EVALSHAs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_auto_leases_on_every_master_are_renewed() {
    let reg = registry().await;
    let base = unique("many");
    let mut guards = Vec::new();
    for i in 0..200 {
        guards.push(
            reg.lock(format!("{base}:{i}"))
                .lease(Lease::Auto)
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    assert_eq!(reg.watched_leases("main"), Some(200));
    // Three watchdog periods of 1/3 s, and some: every lease has been renewed several times.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for g in &guards {
        assert!(g.is_held(), "{} lost", g.key());
    }
    for g in guards {
        g.release().await.expect("release");
    }
}

/// The locks of many keys are spread over all three masters, each lock's keys (hash and
/// fence counter) on the master that serves their slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_every_master() {
    let urls = cluster_urls();
    let nodes = addrs(&urls);
    let reg = registry().await;
    let base = unique("spread");
    let keys: Vec<String> = (0..60).map(|i| format!("{base}:{i}")).collect();
    let mut guards = Vec::new();
    for k in &keys {
        guards.push(reg.lock(k.as_str()).acquire().await.expect("acquire"));
    }
    let mut per_master: BTreeMap<String, usize> = BTreeMap::new();
    for (k, g) in keys.iter().zip(&guards) {
        let hash = hash_name(k);
        // The counter of the lock's slot, shared with the other keys of the slot.
        let fence = distlock::__private::slot_fence_counter("lock:", &hash);
        let slot = keyslot(&nodes, &hash);
        assert_eq!(keyslot(&nodes, &fence), slot, "hash and fence share a slot");
        assert_eq!(
            keyslot(&nodes, &format!("{hash}:released")),
            slot,
            "and so does the channel name"
        );
        let master = master_of_slot(&nodes, slot).expect("a master serves the slot");
        let exists = resp_command(&master, &["EXISTS", &hash]).expect("EXISTS");
        assert_eq!(exists.as_int(), Some(1), "{hash} on {master} (slot {slot})");
        let fence_v = resp_command(&master, &["GET", &fence]).expect("GET");
        let counter: Option<u64> = fence_v.as_str().and_then(|v| v.parse().ok());
        assert!(
            counter.is_some_and(|c| c >= g.fencing_token()),
            "fence counter {fence} of {k} ({counter:?}, at or past its token {}) next to its hash on {master}",
            g.fencing_token()
        );
        let own = resp_command(&master, &["EXISTS", &format!("{hash}:fence")]).expect("EXISTS");
        assert_eq!(own.as_int(), Some(0), "{k} has no counter of its own");
        *per_master.entry(master).or_default() += 1;
    }
    println!("cluster: 60 locks per master: {per_master:?}");
    assert_eq!(
        per_master.len(),
        3,
        "the keys must spread over all three masters: {per_master:?}"
    );
    for g in guards {
        g.release().await.expect("release");
    }
}

/// A user key with braces gets a hash tag of its own: one slot per lock, and it locks.
#[tokio::test]
async fn user_key_with_braces_locks_correctly() {
    let nodes = addrs(&cluster_urls());
    let reg = registry().await;
    let base = unique("braces");
    let key = format!("cart{{{base}}}:items");
    let other = format!("cart{{{base}}}:other");
    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
    assert!(
        reg.lock(key.as_str())
            .try_acquire()
            .await
            .expect("try")
            .is_none(),
        "held"
    );
    // Another key with the same user braces is another lock.
    let g2 = reg
        .lock(other.as_str())
        .try_acquire()
        .await
        .expect("try")
        .expect("another key is another lock");
    // Find the lock hash on the cluster: lock:{#HASH}KEY, and its fence in the same slot.
    let mut found = None;
    for master in nodes
        .iter()
        .filter(|a| role(a).as_deref() == Some("master"))
    {
        if let Ok(RespValue::Array(names)) =
            resp_command(master, &["KEYS", &format!("lock:{{#*}}{key}")])
        {
            if let Some(name) = names.first().and_then(RespValue::as_str) {
                found = Some(name.to_owned());
            }
        }
    }
    let hash = found.expect("the lock hash lock:{#...}KEY exists on a master");
    assert_eq!(
        keyslot(
            &nodes,
            &distlock::__private::slot_fence_counter("lock:", &hash)
        ),
        keyslot(&nodes, &hash)
    );
    g2.release().await.expect("release");
    g.release().await.expect("release");
    assert!(reg
        .lock(key.as_str())
        .try_acquire()
        .await
        .expect("try")
        .is_some());
}

/// Init fails naming the backend and the addresses when no node answers.
#[tokio::test]
async fn unreachable_nodes_fail_init() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let start = Instant::now();
    let err = Registry::from_str(&config(&[url], "1s", "500ms"))
        .await
        .expect_err("nothing listens there");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(matches!(err, InitError::Connect { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("`main`"), "{msg}");
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
}

/// Two registries (two "processes") on the cluster exclude each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_registries_exclude_each_other() {
    let (a, b) = (registry().await, registry().await);
    let key = unique("two");
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for reg in [a, b] {
        for _ in 0..4 {
            let (reg, key, inside) = (reg.clone(), key.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let g = reg
                        .lock(key.as_str())
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .await
                        .expect("acquire");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
}

// ------------------------------------------------------------------ failover (private cluster)

/// How a waiter across the failover ended.
#[derive(Debug)]
enum Outcome {
    Acquired,
    TimedOut,
    BackendError,
}

/// SIGKILL a master while locks on it are held and others wait on them: the process keeps
/// working once its replica takes over, and no call hangs beyond its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_failover_is_survived() {
    let mut cluster = tokio::task::spawn_blocking(PrivateCluster::start)
        .await
        .expect("start the private cluster");
    let response_timeout = Duration::from_millis(500);
    let reg = Registry::from_str(&config(&cluster.urls(), "5s", "500ms"))
        .await
        .expect("connect to the private cluster");
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.addr()).collect();
    let victim = cluster.nodes[0].addr();
    assert_eq!(
        role(&victim).as_deref(),
        Some("master"),
        "node 0 starts as a master"
    );

    // Keys served by the victim, and one served by another master.
    let base = unique("failover");
    let mut on_victim = Vec::new();
    let mut elsewhere = None;
    for i in 0.. {
        let key = format!("{base}:{i}");
        let master = master_of_slot(&nodes, keyslot(&nodes, &hash_name(&key))).expect("slot map");
        if master == victim {
            if on_victim.len() < 5 {
                on_victim.push(key);
            }
        } else if elsewhere.is_none() {
            elsewhere = Some(key);
        }
        if on_victim.len() == 5 && elsewhere.is_some() {
            break;
        }
    }
    let elsewhere = elsewhere.expect("a key on another master");
    let probe_key = on_victim.pop().expect("a probe key");
    let short_key = on_victim.pop().expect("a key for a short lease");

    // Hold three locks on the victim, and one elsewhere; a waiter on each victim lock.
    // A second process whose auto leases (1 s) are shorter than the failover.
    let short = Registry::from_str(&config(&cluster.urls(), "1s", "500ms"))
        .await
        .expect("connect to the private cluster");
    let short_guard = short
        .lock(short_key.as_str())
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("acquire a short lease");
    let mut holders = Vec::new();
    for k in &on_victim {
        holders.push(
            reg.lock(k.as_str())
                .lease(Lease::Auto)
                .acquire()
                .await
                .expect("acquire"),
        );
    }
    let other_holder = reg
        .lock(elsewhere.as_str())
        .lease(Lease::Auto)
        .acquire()
        .await
        .expect("acquire elsewhere");
    // Give the replica time to receive the writes (asynchronous replication).
    let victim_replica = nodes
        .iter()
        .find(|a| {
            role(a).as_deref() == Some("slave")
                && distlock_tests::topology::info_field(a, "replication", "master_port").as_deref()
                    == victim.rsplit(':').next()
        })
        .cloned()
        .expect("the victim's replica");
    // (A replica answers MOVED to plain reads: compare replication offsets instead.)
    let offset = |addr: &str| {
        distlock_tests::topology::info_field(addr, "replication", "master_repl_offset")
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(-1)
    };
    let written = offset(&victim);
    distlock_tests::wait_until(
        Duration::from_secs(5),
        "the replica to have the locks",
        || offset(&victim_replica) >= written,
    );
    let wait = Duration::from_secs(8);
    let mut waiters = Vec::new();
    for k in &on_victim {
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
    while reg.waiting("main").unwrap_or(0) < on_victim.len() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "waiters never slept"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Crash the master.
    let killed = Instant::now();
    cluster.nodes[0].kill(); // SIGKILL and reap: a few ms
                             // When the replica reports itself master (for the report: the cluster's own part).
    let promoted = {
        let replica = victim_replica.clone();
        tokio::task::spawn_blocking(move || {
            distlock_tests::wait_until(Duration::from_secs(20), "the replica's promotion", || {
                role(&replica).as_deref() == Some("master")
            });
            killed.elapsed()
        })
    };

    // Probe the victim's slots until a lock works again; no call may hang.
    let mut failures = 0;
    let mut other_failures = 0;
    let mut other_error = String::new();
    let mut slowest = Duration::ZERO;
    let gap = loop {
        let t = Instant::now();
        let r = reg.lock(probe_key.as_str()).try_acquire().await;
        let took = t.elapsed();
        slowest = slowest.max(took);
        assert!(
            took <= response_timeout + Duration::from_millis(300),
            "a try_acquire took {took:?} (response_timeout {response_timeout:?})"
        );
        match r {
            Ok(Some(g)) => {
                g.release().await.expect("release after the failover");
                break killed.elapsed();
            }
            Ok(None) => panic!("nobody holds the probe key"),
            Err(LockError::Backend { backend, .. }) => {
                assert_eq!(backend, "main");
                failures += 1;
            }
            Err(e) => panic!("expected a Backend error during the failover, got {e}"),
        }
        // Locks on the other masters keep working meanwhile (or fail cleanly).
        let t = Instant::now();
        match reg.lock(elsewhere.as_str()).try_acquire().await {
            Ok(None) => {}
            Ok(Some(_)) => panic!("the other master lost a held lock"),
            Err(e) => {
                other_failures += 1;
                other_error = e.to_string();
            }
        }
        assert!(t.elapsed() <= response_timeout + Duration::from_millis(300));
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the victim's slots did not work again within 20 s ({failures} failed attempts)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let promoted = promoted.await.expect("promotion poll");
    // The probe worked, so some node serves the slot; the other nodes learn the new map by
    // gossip, which may trail the client by a moment: wait (bounded) for it to converge.
    let slot = keyslot(&nodes[1..], &hash_name(&probe_key));
    let mut new_master = String::new();
    distlock_tests::wait_until(
        Duration::from_secs(10),
        "the cluster's slot map to name the replica as the slot's master",
        || {
            new_master = master_of_slot(&nodes[1..], slot).unwrap_or_default();
            !new_master.is_empty() && new_master != victim
        },
    );
    println!(
        "cluster failover: the replica promoted itself {promoted:?} after SIGKILL; \
         locks on the killed master's slots work again {gap:?} after SIGKILL \
         ({failures} failed probes, slowest call {slowest:?}; {other_failures} failures on another master meanwhile {other_error:?}); new master {new_master}"
    );

    // Let the watchdog run on the new master (renewal every 5s / 3).
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let mut kept = 0;
    let mut lost = 0;
    for g in &holders {
        if g.is_held() {
            // Held as far as we know: then the new master has it, and it is exclusive.
            let exists =
                resp_command(&new_master, &["EXISTS", &hash_name(g.key())]).expect("EXISTS");
            assert_eq!(
                exists.as_int(),
                Some(1),
                "{} held but not on the new master",
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
    assert!(
        other_holder.is_held(),
        "a lease on another master is unaffected"
    );
    println!("cluster failover: auto leases on the killed master: {kept} kept renewing on the new master, {lost} reported lost");
    // The 1 s lease could not be renewed during the failover: reported lost, not held.
    assert!(
        !short_guard.is_held(),
        "a 1 s lease cannot outlive a 2 s failover"
    );
    let e = tokio::time::timeout(Duration::from_millis(10), short_guard.lost())
        .await
        .expect("reported lost");
    println!("cluster failover: the 1 s auto lease of another registry: {e}");

    // Free them: the waiters get the locks (or have ended cleanly already).
    for g in holders {
        let _ = g.release().await;
    }
    other_holder.release().await.expect("release elsewhere");
    let mut outcomes = Vec::new();
    for w in waiters {
        let (outcome, took) = w.await.expect("waiter");
        assert!(
            took <= wait + response_timeout + Duration::from_millis(300),
            "a waiter took {took:?} (wait {wait:?})"
        );
        outcomes.push((outcome, took));
    }
    println!("cluster failover: waiters: {outcomes:?}");
    let mut seen = HashSet::new();
    for (o, _) in &outcomes {
        seen.insert(format!("{o:?}"));
    }
    assert!(
        outcomes.iter().all(|(o, _)| matches!(
            o,
            Outcome::Acquired | Outcome::TimedOut | Outcome::BackendError
        )),
        "{seen:?}"
    );
    // The process works normally again.
    exclusion_16_tasks(&reg).await;
}

/// The node id (`CLUSTER MYID`) of the node at `addr`.
fn node_id(addr: &str) -> String {
    resp_command(addr, &["CLUSTER", "MYID"])
        .expect("CLUSTER MYID")
        .as_str()
        .expect("an id")
        .to_owned()
}

/// A lock's slot moves to another master (as `redis-cli --cluster reshard` does it) after
/// this process learned the slot map: its commands, sent by slot on distlock's own
/// connection to the old master, are answered `MOVED` there; they are sent again through
/// the cluster connection, the map is asked again, and the lock keeps working — on the
/// new master, with tokens that still grow (the counter moved with the slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_to_another_master_is_followed() {
    let cluster = tokio::task::spawn_blocking(PrivateCluster::start)
        .await
        .expect("start the private cluster");
    let reg = Registry::from_str(&config(&cluster.urls(), "5s", "500ms"))
        .await
        .expect("connect to the private cluster");
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.addr()).collect();
    let key = unique("moved");
    let hash = hash_name(&key);
    let slot = keyslot(&nodes, &hash);
    let from = master_of_slot(&nodes, slot).expect("a master serves the slot");
    let to = nodes[..3]
        .iter()
        .find(|n| **n != from && role(n).as_deref() == Some("master"))
        .expect("another master")
        .clone();

    // Learned on `from`: the token counter lives there now.
    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
    let first = g.fencing_token();
    g.release().await.expect("release");

    // Move the slot and its keys (the fencing counter) from `from` to `to`.
    let (from_id, to_id) = (node_id(&from), node_id(&to));
    let s = slot.to_string();
    let ok = |addr: &str, args: &[&str]| {
        let r = resp_command(addr, args).unwrap_or_else(|e| panic!("{args:?} on {addr}: {e}"));
        assert!(
            !matches!(r, RespValue::Error(_)),
            "{args:?} on {addr}: {r:?}"
        );
    };
    ok(&to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]);
    ok(&from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]);
    let (to_host, to_port) = to.rsplit_once(':').expect("host:port");
    let keys = resp_command(&from, &["CLUSTER", "GETKEYSINSLOT", &s, "100"]).expect("keys");
    for k in keys.as_array().expect("an array") {
        let k = k.as_str().expect("a key name");
        ok(&from, &["MIGRATE", to_host, to_port, k, "0", "5000"]);
    }
    for n in &nodes[..3] {
        ok(n, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
    }
    assert_eq!(master_of_slot(&nodes, slot).as_deref(), Some(to.as_str()));

    // Still the old map in this process: the first command meets MOVED.
    for round in 0..20 {
        let g = reg
            .lock(key.as_str())
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire after the move (round {round}): {e}"));
        assert!(
            g.fencing_token() > first,
            "token {} after {first}",
            g.fencing_token()
        );
        let on_to = resp_command(&to, &["EXISTS", &hash]).expect("EXISTS");
        assert_eq!(
            on_to.as_int(),
            Some(1),
            "the lock is held on the new master"
        );
        g.release().await.expect("release after the move");
    }
}
