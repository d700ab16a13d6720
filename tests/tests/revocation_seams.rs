//! Revocation where it meets another mechanism: a lock handed to a local waiter and then
//! force-released (or deleted unheard) is free to try at once; Redisson's own
//! `forceUnlock` on a cluster (sharded and plain pub/sub) is heard at once; a forced
//! release whose message arrives before the acquisition's reply is not dropped; and a
//! server that restarts with data to load (the lock not among it) is heard once it has
//! loaded; a revocation heard on a hot key is checked once, not for ever. Every bound is a generous protocol bound (a message and one renewal round trip,
//! or the checks' backoff), far under the lease that would otherwise tell.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{quoted, unique};
use distlock::{Lease, LockError, LockKind, Registry};
use distlock_tests::proxy::Proxy;
use distlock_tests::{
    cluster_urls, lock_fields, resp_command, single_url, RedisProcess, RespValue,
};

/// How soon a holder must hear of a forced release (a message and a renewal round trip).
const HEARD_WITHIN: Duration = Duration::from_secs(1);

async fn registry(backend: &str) -> Registry {
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"30s\"\nwait = \"5s\"\n[backends.main]\n{backend}\n"
    ))
    .await
    .unwrap_or_else(|e| panic!("connect {backend:?} (scripts/test.sh starts it): {e}"))
}

/// Until `reg`'s subscriber has connected once (its revocation channel is subscribed).
async fn subscribed(reg: &Registry) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while reg.subscriber_connections("main").unwrap_or(0) == 0 {
        assert!(
            Instant::now() < deadline,
            "the subscriber did not connect within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `lost` must resolve with `LeaseLost` within `bound`.
async fn lost_within(
    what: &str,
    bound: Duration,
    lost: impl std::future::Future<Output = LockError>,
) {
    let e = tokio::time::timeout(bound, lost)
        .await
        .unwrap_or_else(|_| panic!("{what}: the holder did not hear of it within {bound:?}"));
    assert!(matches!(e, LockError::LeaseLost { .. }), "{what}: {e:?}");
}

fn cmd(addr: &str, args: &[&str]) -> RespValue {
    resp_command(addr, args).unwrap_or_else(|e| panic!("{args:?} on {addr}: {e}"))
}

/// A lock handed to a waiter of this process is free to try at once once that hold has
/// ended: force-released (heard: the hand-off mark goes with the hold), or deleted without
/// a message (not heard: a try-once asks the server rather than answering "busy" from the
/// mark). Before, every `try_acquire` of the process answered busy without asking Redis
/// until the grant's lease (30 s) ended.
#[tokio::test]
async fn a_handed_off_lock_is_free_to_try_once_its_hold_ended() {
    let holder = registry(&format!("mode = \"single\"\nurl = \"{}\"", single_url())).await;
    let admin = registry(&format!("mode = \"single\"\nurl = \"{}\"", single_url())).await;
    subscribed(&holder).await;
    let addr = distlock_tests::addr_of(&single_url());
    for how in ["force_unlock", "DEL without a message"] {
        let key = unique("seam-handoff");
        let hash = format!("lock:{{{key}}}");
        let a = holder
            .lock(key.as_str())
            .lease(Lease::Auto)
            .acquire()
            .await
            .expect("a acquires");
        let a_token = a.fencing_token();
        let waiter = {
            let holder = holder.clone();
            let key = key.clone();
            tokio::spawn(async move {
                holder
                    .lock(key.as_str())
                    .lease(Lease::Auto)
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while holder.waiting("main").unwrap_or(0) == 0 {
            assert!(Instant::now() < deadline, "{how}: b never waited");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        a.release().await.expect("a releases (hands off to b)");
        let b = waiter.await.expect("b's task").expect("b acquires");
        assert!(b.fencing_token() > a_token, "{how}: b holds a new hold");
        match how {
            "force_unlock" => {
                assert!(admin
                    .lock(key.as_str())
                    .force_unlock()
                    .await
                    .expect("force"));
                lost_within(how, HEARD_WITHIN, b.lost()).await;
            }
            _ => assert_eq!(cmd(&addr, &["DEL", &hash]).as_int(), Some(1)),
        }
        assert_eq!(
            cmd(&addr, &["EXISTS", &hash]).as_int(),
            Some(0),
            "{how}: the lock is gone on the server"
        );
        let again = holder
            .lock(key.as_str())
            .try_acquire()
            .await
            .expect("try_acquire");
        let Some(again) = again else {
            panic!("{how}: try_acquire answered busy for a lock the server does not hold (b's hand-off outlived its hold)");
        };
        again.release().await.expect("release");
        drop(b);
    }
}

/// Redisson's own `forceUnlock` on a cluster (`DEL`, then the publish command Redisson
/// passes: SPUBLISH with sharded pub/sub, PUBLISH without, of its unlock message on the
/// lock's channel) is heard at once by a distlock holder in Redisson's format, as on a
/// single server: before, the push was taken for a plain wake-up and the holder learned
/// at its next renewal (10 s).
#[tokio::test]
async fn redissons_own_force_unlock_is_heard_at_once_on_a_cluster() {
    let nodes = cluster_urls();
    let addrs: Vec<String> = nodes.iter().map(|u| distlock_tests::addr_of(u)).collect();
    for mode in ["on", "off"] {
        let reg = registry(&format!(
            "mode = \"cluster\"\nnodes = [{}]\nprotocol = \"redisson\"\nsharded_subscription_mode = \"{mode}\"",
            quoted(&nodes)
        ))
        .await;
        let publish = if mode == "on" { "spublish" } else { "publish" };
        let numsub = if mode == "on" {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        // Redisson's forceUnlock of each object: the reentrant lock publishes
        // UNLOCK_MESSAGE (0) on its channel; a read or write lock READ_UNLOCK_MESSAGE (1)
        // on the read-write channel, when the hash is in its mode.
        for (kind, lock_kind) in [
            ("reentrant", LockKind::Reentrant),
            ("read", LockKind::Read),
            ("write", LockKind::Write),
        ] {
            let what = format!("cluster/{mode}/{kind}");
            let name = unique("seam-redisson-cluster");
            let (channel, message, script) = match kind {
                "reentrant" => (
                    distlock_tests::redisson::lock_channel(&name),
                    "0",
                    "if redis.call('del', KEYS[1]) == 1 then redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1 end return 0".to_owned(),
                ),
                _ => (
                    distlock_tests::redisson::rwlock_channel(&name),
                    "1",
                    format!("if redis.call('hget', KEYS[1], 'mode') == '{kind}' then redis.call('del', KEYS[1]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1 end return 0"),
                ),
            };
            let g = reg
                .lock(name.as_str())
                .kind(lock_kind)
                .lease(Lease::Auto)
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("{what}: acquire: {e}"));
            let slot = distlock_tests::topology::keyslot(&addrs, &name);
            let master = distlock_tests::topology::master_of_slot(&addrs, slot)
                .unwrap_or_else(|| panic!("{what}: no master serves slot {slot}"));
            // The holder subscribes its lock's channel in the background just after the
            // acquisition: until the node counts the subscription.
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let subs = cmd(&master, &["PUBSUB", numsub, &channel]);
                let n = subs
                    .as_array()
                    .and_then(|a| a.get(1))
                    .and_then(RespValue::as_int);
                if n.unwrap_or(0) > 0 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{what}: the holder never subscribed {channel} on {master}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let lost = std::pin::pin!(g.lost());
            let forced = cmd(
                &master,
                &["EVAL", &script, "2", &name, &channel, message, publish],
            );
            assert_eq!(
                forced.as_int(),
                Some(1),
                "{what}: forceUnlock found the lock"
            );
            let start = Instant::now();
            lost_within(&what, HEARD_WITHIN, lost).await;
            assert!(!g.is_held(), "{what}");
            eprintln!(
                "{what}: lost() resolved {:?} after forceUnlock",
                start.elapsed()
            );
        }
    }
}

/// A forced release whose message reaches the holder's process before the reply of the
/// acquisition it revokes (a slow link: the proxy delays the reply, not the message) is
/// not dropped for want of a lease to check: the lease is checked once registered, and a
/// fixed 60 s lease turns lost at once, not when it runs out. On every kind, on a private
/// server (the proxy's latency is its own).
#[tokio::test]
async fn a_forced_release_heard_before_the_acquisitions_reply_is_not_dropped() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let holder = registry(&format!(
        "mode = \"single\"\nurl = \"{}\"\nresponse_timeout = \"5s\"",
        proxy.url()
    ))
    .await;
    let admin = registry(&format!("mode = \"single\"\nurl = \"{}\"", server.url())).await;
    subscribed(&holder).await;
    let addr = server.addr();
    let delay = Duration::from_millis(600);
    for kind in ["reentrant", "read", "write", "fair", "semaphore"] {
        let key = unique("seam-inflight");
        let hash = match kind {
            "semaphore" => format!("lock:{{{key}}}:sem"),
            "fair" => format!("lock:{{{key}}}:fair"),
            "read" | "write" => format!("lock:{{{key}}}:rw"),
            _ => format!("lock:{{{key}}}"),
        };
        // Warm: the scripts are loaded, so the acquisition below is one request.
        match kind {
            "semaphore" => drop(
                holder
                    .semaphore(format!("{key}-warm").as_str(), 1)
                    .acquire(1)
                    .await
                    .expect("warm"),
            ),
            k => drop(
                holder
                    .lock(format!("{key}-warm").as_str())
                    .kind(kind_of(k))
                    .acquire()
                    .await
                    .expect("warm"),
            ),
        }
        proxy.set_latency(delay);
        let acquire = {
            let holder = holder.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let lease = Lease::Fixed(Duration::from_secs(60));
                match kind {
                    "semaphore" => holder
                        .semaphore(key.as_str(), 1)
                        .lease(lease)
                        .acquire(1)
                        .await
                        .map(Either::Permit),
                    k => holder
                        .lock(key.as_str())
                        .kind(kind_of(k))
                        .lease(lease)
                        .acquire()
                        .await
                        .map(Either::Lock),
                }
            })
        };
        // The acquisition ran on the server; its reply is on its way (delayed).
        let deadline = Instant::now() + Duration::from_secs(5);
        while cmd(&addr, &["EXISTS", &hash]).as_int() != Some(1) {
            assert!(
                Instant::now() < deadline,
                "{kind}: the acquisition never ran"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // The server wrote the reply with the key; the proxy reads it at once (a margin
        // for a busy machine: no event tells) and holds it for `delay`, while the message
        // of the forced release below is not held back. Were the reply let through, the
        // check after the acquisition says so instead of passing.
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.set_latency(Duration::ZERO);
        let forced = match kind {
            "semaphore" => admin.semaphore(key.as_str(), 1).force_unlock().await,
            k => {
                admin
                    .lock(key.as_str())
                    .kind(kind_of(k))
                    .force_unlock()
                    .await
            }
        };
        assert!(
            forced.expect("force_unlock"),
            "{kind}: force_unlock found it"
        );
        let sent = Instant::now();
        let held = acquire.await.expect("task").expect("acquire");
        assert!(
            sent.elapsed() >= Duration::from_millis(200),
            "{kind}: the reply came {:?} after the forced release: it was not held back",
            sent.elapsed()
        );
        // Another owner takes it meanwhile.
        let other = match kind {
            "semaphore" => admin
                .semaphore(key.as_str(), 1)
                .try_acquire(1)
                .await
                .expect("other")
                .map(|_| ()),
            k => admin
                .lock(key.as_str())
                .kind(kind_of(k))
                .try_acquire()
                .await
                .expect("other")
                .map(|_| ()),
        };
        assert!(other.is_some(), "{kind}: the lock is free on the server");
        let what = format!("{kind}: a forced release heard before the acquisition's reply");
        match &held {
            Either::Lock(g) => lost_within(&what, HEARD_WITHIN, g.lost()).await,
            Either::Permit(g) => lost_within(&what, HEARD_WITHIN, g.lost()).await,
        }
        let still = match &held {
            Either::Lock(g) => g.is_held(),
            Either::Permit(g) => g.is_held(),
        };
        assert!(!still, "{kind}: is_held() after the loss");
    }
}

enum Either {
    Lock(distlock::LockGuard),
    Permit(distlock::SemaphoreGuard),
}

fn kind_of(kind: &str) -> LockKind {
    match kind {
        "reentrant" => LockKind::Reentrant,
        "fair" => LockKind::Fair,
        "read" => LockKind::Read,
        "write" => LockKind::Write,
        other => panic!("not a lock kind: {other}"),
    }
}

/// A server that restarts with data to load, the lock not among it (taken after the last
/// save), answers `LOADING` for a while: the lease check the reconnect raises is retried
/// (with backoff) until the server answers, and a fixed 60 s lease is found lost soon after
/// the load ends — before, the check failed once, was logged and never retried, and the
/// holder said held while another owner had the lock.
#[tokio::test]
async fn a_restart_with_data_to_load_is_heard_once_loaded() {
    // Loading is slowed (a delay per key, events processed every KiB) so that the
    // subscriber reconnects while the server still loads.
    let mut server = RedisProcess::start_with_args(&[
        "--key-load-delay",
        "20",
        "--loading-process-events-interval-bytes",
        "1024",
        "--enable-debug-command",
        "yes",
    ]);
    let addr = server.addr();
    assert!(cmd(&addr, &["DEBUG", "POPULATE", "100000", "seam:data"]).is_ok());
    assert!(cmd(&addr, &["SAVE"]).is_ok());
    let holder = registry(&format!(
        "mode = \"single\"\nurl = \"{}\"\nconnect_timeout = \"1s\"\nresponse_timeout = \"1s\"",
        server.url()
    ))
    .await;
    subscribed(&holder).await;
    let key = unique("seam-loading");
    let g = holder
        .lock(key.as_str())
        .lease(Lease::Fixed(Duration::from_secs(60)))
        .acquire()
        .await
        .expect("acquire");
    let connections = holder.subscriber_connections("main").unwrap_or(0);
    server.restart();
    let loading = |addr: &str| {
        cmd(addr, &["INFO", "persistence"])
            .as_str()
            .is_some_and(|s| s.contains("loading:1"))
    };
    assert!(loading(&addr), "the restarted server is loading");
    // The subscriber reconnects while the server loads.
    let deadline = Instant::now() + Duration::from_secs(10);
    while holder.subscriber_connections("main").unwrap_or(0) == connections {
        assert!(
            Instant::now() < deadline,
            "the subscriber did not reconnect within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        loading(&addr),
        "the subscriber reconnected while the server loads (loading ended first: slow it further)"
    );
    while loading(&addr) {
        assert!(
            Instant::now() < deadline + Duration::from_secs(30),
            "loading did not end"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let loaded = Instant::now();
    let other = registry(&format!("mode = \"single\"\nurl = \"{}\"", server.url())).await;
    let taken = other
        .lock(key.as_str())
        .try_acquire()
        .await
        .expect("other")
        .expect("the lock was not in the saved data: free");
    // The checks' backoff tops at a second; a renewal round trip after it.
    lost_within(
        "a restart with data to load",
        Duration::from_secs(3),
        g.lost(),
    )
    .await;
    eprintln!(
        "restart with data to load: lost() resolved {:?} after the load ended",
        loaded.elapsed()
    );
    assert!(!g.is_held());
    taken.release().await.expect("release");
}

/// The fields of the lock record `key` on `addr` (as `lock_fields` reads them), sorted.
fn fields(addr: &str, key: &str) -> Vec<String> {
    let mut f: Vec<String> = lock_fields(addr, key).into_iter().map(|(f, _)| f).collect();
    f.sort();
    f
}

/// A lock handed to a waiter of this process, then force-released before the hand-off's
/// reply reached the releasing process: the new holder registers its lease after the
/// revocation was heard, and must still hear of it (the revocation is kept for the
/// acquisitions in flight, a hand-off's waiter among them).
#[tokio::test]
async fn a_forced_release_heard_before_a_hand_offs_reply_is_not_dropped() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let holder = registry(&format!(
        "mode = \"single\"\nurl = \"{}\"\nresponse_timeout = \"5s\"",
        proxy.url()
    ))
    .await;
    let admin = registry(&format!("mode = \"single\"\nurl = \"{}\"", server.url())).await;
    subscribed(&holder).await;
    let addr = server.addr();
    let lease = Lease::Fixed(Duration::from_secs(60));
    for round in 0..3 {
        let key = unique("seam-handoff-revoked");
        let hash = format!("lock:{{{key}}}");
        let first = holder
            .lock(key.as_str())
            .lease(lease)
            .acquire()
            .await
            .expect("first holder");
        let waiter = {
            let holder = holder.clone();
            let key = key.clone();
            tokio::spawn(async move {
                holder
                    .lock(key.as_str())
                    .lease(lease)
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while holder.waiting("main").unwrap_or(0) == 0 {
            assert!(
                Instant::now() < deadline,
                "round {round}: the waiter never waited"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let before = fields(&addr, &hash);
        // The hand-off's reply is held back by the proxy; the forced release's message
        // below is not.
        proxy.set_latency(Duration::from_millis(600));
        let release = tokio::spawn(first.release());
        let deadline = Instant::now() + Duration::from_secs(5);
        while fields(&addr, &hash) == before {
            assert!(
                Instant::now() < deadline,
                "round {round}: the hand-off never ran"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.set_latency(Duration::ZERO);
        let forced = admin.lock(key.as_str()).force_unlock().await;
        assert!(
            forced.expect("force_unlock"),
            "round {round}: force_unlock found it"
        );
        let held = waiter
            .await
            .expect("task")
            .expect("the waiter was handed the lock");
        release.await.expect("task").expect("release");
        let what = format!("round {round}: a forced release heard before the hand-off's reply");
        lost_within(&what, HEARD_WITHIN, held.lost()).await;
        assert!(!held.is_held(), "{what}: is_held() after the loss");
    }
}

/// A revocation heard while acquisitions are in flight has each of them check its lease
/// once. That check is no revocation of its own: counted as one, every acquisition of a
/// hot key (one is always in flight) saw it and checked its lease again, a renewal for
/// about every other acquisition for as long as the key stayed hot, and half the
/// throughput.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_heard_on_a_hot_key_is_checked_once_not_for_ever() {
    let server = RedisProcess::start();
    let addr = server.addr();
    let reg = registry(&format!("mode = \"single\"\nurl = \"{}\"", server.url())).await;
    subscribed(&reg).await;
    let key = unique("hot-recheck");
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (reg, key, stop, taken) = (reg.clone(), key.clone(), stop.clone(), taken.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
                taken.fetch_add(1, Ordering::Relaxed);
                g.release().await.expect("release");
            }
        }));
    }
    // Every subscriber connection cut, three times: it connects again, and every lease
    // held then is checked (a revocation of every lock), while acquisitions of the key
    // are in flight.
    for _ in 0..3 {
        let connections = reg.subscriber_connections("main").unwrap_or(0);
        cmd(&addr, &["CLIENT", "KILL", "TYPE", "pubsub"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while reg.subscriber_connections("main").unwrap_or(0) <= connections {
            assert!(
                Instant::now() < deadline,
                "the subscriber did not connect again"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A window of the hot key's traffic, well after the checks that revocation called for.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cmd(&addr, &["CONFIG", "RESETSTAT"]).is_ok());
    let before = taken.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let stats = cmd(&addr, &["INFO", "commandstats"]);
    let in_window = taken.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("task");
    }
    let stats = stats.as_str().unwrap_or_default().to_owned();
    // A renewal (or any lease check) asks PTTL; a hand-off or a release does not.
    let checks: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_pttl:calls="))
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0);
    assert!(
        in_window > 100,
        "the key stayed hot: {in_window} acquisitions"
    );
    assert!(
        checks <= 10,
        "{checks} lease checks for {in_window} acquisitions, long after one revocation: {stats}"
    );
}
