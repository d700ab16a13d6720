//! Safety against a real redis-server: scripts that run twice, rollbacks that undo only
//! their own level, nested acquisitions of a lock that vanished, sibling futures, dropped
//! futures, transient failures within the wait, and one bad renewal in a batch.
//!
//! Each test here failed before the fix it names.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::unique;
use distlock::{Lease, LockError, Registry};
use distlock_tests::proxy::Proxy;
use distlock_tests::{
    addr_of, lock_field, lock_fields, resp_command, single_url, RedisProcess, RespValue,
};

async fn registry(url: &str, extra: &str) -> Registry {
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n{extra}\n[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n"
    ))
    .await
    .expect("connect to the test redis-server")
}

/// `EVAL script 2 hash fence args...` on the shared server, raw.
fn eval(script: &str, keys: &[&str], args: &[&str]) -> RespValue {
    let mut cmd = vec!["EVAL", script];
    let n = keys.len().to_string();
    cmd.push(&n);
    cmd.extend_from_slice(keys);
    cmd.extend_from_slice(args);
    resp_command(&addr_of(&single_url()), &cmd).expect("EVAL")
}

fn hget(hash: &str, field: &str) -> Option<i64> {
    match resp_command(&addr_of(&single_url()), &["HGET", hash, field]).expect("HGET") {
        RespValue::Bulk(b) => String::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// The level count of `owner` in the lock record `key`.
fn count(key: &str, owner: &str) -> Option<i64> {
    lock_field(&addr_of(&single_url()), key, owner)?
        .parse()
        .ok()
}

const OWNER: &str = "0123456789abcdef0123456789abcdef";

/// An acquire run twice (a client or proxy retrying after a lost reply) answers
/// the same, and counts once: the guard gets a real token, and one release frees it.
#[test]
fn acquire_script_run_twice_counts_once() {
    use distlock::__private::scripts::{ACQUIRE, RELEASE};
    let hash = format!("lock:{{{}}}", unique("twice"));
    let fence = format!("{hash}:fence");
    let keys = [hash.as_str(), fence.as_str()];
    let first = eval(ACQUIRE, &keys, &[OWNER, "10000", "a1"]);
    let again = eval(ACQUIRE, &keys, &[OWNER, "10000", "a1"]);
    assert_eq!(first, again, "the same answer, with the same token");
    assert_eq!(count(&hash, OWNER), Some(1), "counted once");
    let freed = eval(RELEASE, &[&hash], &[OWNER, "ch", "a1"]);
    assert_eq!(freed, RespValue::Integer(0), "one release frees it");
}

fn pttl(key: &str) -> i64 {
    resp_command(&addr_of(&single_url()), &["PTTL", key])
        .expect("PTTL")
        .as_int()
        .expect("an integer")
}

/// Found by the torture run's `latency` scenario: the first run of an acquire
/// takes the lock, its reply is late, and the client's retry (sent later) finds the
/// level's mark. The client counts its lease from the retry's send time, so the retry
/// must make the server's expiry at least a full lease from then (only ever extending),
/// else the lock expires on the server while its holder believes it has time left, and
/// another process gets in unsignalled. Same for a nested acquisition's retry.
#[test]
fn a_retried_acquire_extends_the_lease_from_the_retry() {
    use distlock::__private::scripts::ACQUIRE;
    let hash = format!("lock:{{{}}}", unique("retry-lease"));
    let fence = format!("{hash}:fence");
    let keys = [hash.as_str(), fence.as_str()];
    let first = eval(ACQUIRE, &keys, &[OWNER, "1000", "r1"]);
    std::thread::sleep(Duration::from_millis(600)); // the late reply (a fault, not a sync)
    let retry = eval(ACQUIRE, &keys, &[OWNER, "1000", "r1"]);
    assert_eq!(first, retry, "the same answer, with the same token");
    let left = pttl(&hash);
    assert!(
        left > 900,
        "a full lease from the retry, not what the first run left: {left} ms"
    );

    // A nested acquisition's retry likewise.
    eval(ACQUIRE, &keys, &[OWNER, "1000", "n1", "", "", "1"]);
    std::thread::sleep(Duration::from_millis(600));
    eval(ACQUIRE, &keys, &[OWNER, "1000", "n1", "", "", "1"]);
    let left = pttl(&hash);
    assert!(left > 900, "nested retry: {left} ms");
}

/// For read-write locks: an acquire (write or read) run again answers the same and
/// counts once; a release run again changes nothing; one release per acquisition frees it.
#[test]
fn rw_scripts_run_twice_count_once() {
    let prologue = include_str!("../../distlock/src/protocol/rw_prologue.lua");
    let fence = include_str!("../../distlock/src/protocol/fence_prologue.lua");
    let acquire = format!(
        "{prologue}{fence}{}",
        include_str!("../../distlock/src/protocol/rw_acquire.lua")
    );
    let release = format!(
        "{prologue}{}",
        include_str!("../../distlock/src/protocol/rw_release.lua")
    );
    let base = format!("lock:{{{}}}:rw", unique("rw-twice"));
    let (readers, writers, counter) = (
        format!("{base}:readers"),
        format!("{base}:writers"),
        format!("{base}:fence"),
    );
    let keys = [
        base.as_str(),
        readers.as_str(),
        writers.as_str(),
        counter.as_str(),
    ];
    let acq = |mode: &str, level: &str, nested: &str| {
        eval(&acquire, &keys, &[OWNER, "10000", mode, "0", level, nested])
    };
    let rel = |mode: &str, level: &str| {
        eval(&release, &keys[..3], &[OWNER, mode, "ch", "publish", level])
    };
    // Write: first run and run again answer the same token; counted once.
    let first = acq("write", "w1", "0");
    assert_eq!(first, acq("write", "w1", "0"), "the same answer");
    assert_eq!(hget(&base, "wcount"), Some(1), "counted once");
    // A nested write level, its acquire and its release each run twice.
    acq("write", "w2", "1");
    acq("write", "w2", "1");
    assert_eq!(hget(&base, "wcount"), Some(2));
    assert_eq!(rel("write", "w2"), RespValue::Integer(1));
    assert_eq!(
        rel("write", "w2"),
        RespValue::Integer(1),
        "run again: no change"
    );
    assert_eq!(hget(&base, "wcount"), Some(1), "the outer level stands");
    // Read, downgraded under the write lock, run twice each.
    acq("read", "r1", "0");
    acq("read", "r1", "0");
    assert_eq!(
        hget(&base, &format!("r:{OWNER}")),
        Some(1),
        "read counted once"
    );
    assert_eq!(rel("read", "r1"), RespValue::Integer(0));
    assert_eq!(
        rel("read", "r1"),
        RespValue::Integer(-1),
        "run again: nothing held"
    );
    // The last write release frees it; run again: nothing held.
    assert_eq!(rel("write", "w1"), RespValue::Integer(0));
    assert_eq!(rel("write", "w1"), RespValue::Integer(-1));
    let exists = resp_command(&addr_of(&single_url()), &["EXISTS", &base]).expect("EXISTS");
    assert_eq!(exists.as_int(), Some(0), "freed");
}

/// Items 2 and 3: a nested release run twice, or a release of a level that was never
/// taken (a rolled-back attempt that did not run on that node), leaves the outer hold.
#[test]
fn release_only_undoes_its_own_level_once() {
    use distlock::__private::scripts::{ACQUIRE, RELEASE};
    let hash = format!("lock:{{{}}}", unique("levels"));
    let fence = format!("{hash}:fence");
    let keys = [hash.as_str(), fence.as_str()];
    eval(ACQUIRE, &keys, &[OWNER, "10000", "outer"]);
    eval(ACQUIRE, &keys, &[OWNER, "10000", "inner", "", "", "1"]);
    assert_eq!(count(&hash, OWNER), Some(2));
    let release = |level: &str| eval(RELEASE, &[&hash], &[OWNER, "ch", level]);
    assert_eq!(release("inner"), RespValue::Integer(1));
    assert_eq!(
        release("inner"),
        RespValue::Integer(1),
        "run again: no change"
    );
    assert_eq!(
        release("never-taken"),
        RespValue::Integer(1),
        "a level never taken"
    );
    assert_eq!(count(&hash, OWNER), Some(1), "the outer level stands");
}

/// Through the client: the reply to an acquire is lost (the proxy resets the
/// connection right after the server answered) and the acquire is tried again within its
/// wait: the guard gets a real, larger token, and its release frees the lock.
#[tokio::test]
async fn acquire_retried_after_a_lost_reply() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let reg = registry(&proxy.url(), "").await;
    let first = reg.lock("k").acquire().await.expect("acquire");
    let t1 = first.fencing_token();
    first.release().await.expect("release");
    proxy.reset_after_replies(1);
    let g = reg
        .lock("k")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("acquire after a lost reply");
    assert!(g.fencing_token() > t1, "{} after {t1}", g.fencing_token());
    g.release().await.expect("release");
    let direct = registry(&server.url(), "").await;
    assert!(
        direct.lock("k").try_acquire().await.expect("try").is_some(),
        "freed by the one release"
    );
}

/// A nested acquisition of a lock that vanished under its outer hold (deleted
/// behind its back) fails with `LeaseLost`, tells the outer guard, and re-creates nothing.
#[tokio::test]
async fn nested_acquire_of_a_vanished_lock_reports_the_outer_lost() {
    let reg = registry(&single_url(), "").await;
    let key = unique("vanished");
    let outer = reg
        .lock(key.as_str())
        .lease(Lease::Fixed(Duration::from_secs(10)))
        .acquire()
        .await
        .expect("acquire");
    assert!(reg.lock(key.as_str()).force_unlock().await.expect("force"));
    let nested = outer.scope(reg.lock(key.as_str()).acquire()).await;
    assert!(
        matches!(nested, Err(LockError::LeaseLost { .. })),
        "{nested:?}"
    );
    assert!(!outer.is_held(), "the outer guard heard of it");
    let lost = tokio::time::timeout(Duration::from_secs(1), outer.lost()).await;
    assert!(lost.is_ok(), "lost() resolved");
    let exists = resp_command(
        &addr_of(&single_url()),
        &["EXISTS", &format!("lock:{{{key}}}")],
    );
    assert_eq!(
        exists.expect("EXISTS"),
        RespValue::Integer(0),
        "not re-created"
    );
}

/// Sibling futures of one task under one outer hold take the same lock in turns.
#[tokio::test]
async fn sibling_futures_exclude_each_other() {
    for reg in [
        registry(&single_url(), "").await,
        Registry::from_str("[backends.main]\nmode = \"memory\"")
            .await
            .expect("memory"),
    ] {
        let key = unique("siblings");
        let outer = reg.lock(key.as_str()).acquire().await.expect("acquire");
        let inside = Arc::new(AtomicBool::new(false));
        let counter = Arc::new(AtomicU32::new(0));
        let section = || {
            let (reg, key, inside, counter) =
                (reg.clone(), key.clone(), inside.clone(), counter.clone());
            async move {
                let g = reg
                    .lock(key.as_str())
                    .wait(Duration::from_secs(5))
                    .acquire()
                    .await
                    .expect("nested");
                assert!(!inside.swap(true, Ordering::SeqCst), "two siblings inside");
                let read = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                counter.store(read + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                g.release().await.expect("release");
            }
        };
        outer
            .scope(async { tokio::join!(section(), section(), section()) })
            .await;
        assert_eq!(counter.load(Ordering::SeqCst), 3, "no update lost");
        outer.release().await.expect("release");
    }
}

/// An acquire whose future is dropped after the script was sent leaves nothing
/// held; so does a dropped `release()`.
#[tokio::test]
async fn dropped_acquire_and_release_leave_nothing_held() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let reg = registry(&proxy.url(), "").await;
    let direct = registry(&server.url(), "").await;
    let fixed = Lease::Fixed(Duration::from_secs(20));
    proxy.set_latency(Duration::from_millis(200));
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        reg.lock("a").lease(fixed).acquire(),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "cancelled while the script was under way"
    );
    let free = direct
        .lock("a")
        .wait(Duration::from_secs(3))
        .acquire()
        .await;
    assert!(
        free.is_ok(),
        "the cancelled acquisition was released: {free:?}"
    );
    drop(free);
    proxy.set_latency(Duration::ZERO);
    let g = reg.lock("b").lease(fixed).acquire().await.expect("acquire");
    proxy.set_latency(Duration::from_millis(200));
    let cancelled = tokio::time::timeout(Duration::from_millis(50), g.release()).await;
    assert!(cancelled.is_err(), "release cancelled");
    let free = direct
        .lock("b")
        .wait(Duration::from_secs(3))
        .acquire()
        .await;
    assert!(free.is_ok(), "the dropped release still released: {free:?}");
}

/// An acquire that meets a server it cannot reach keeps trying within its wait.
#[tokio::test]
async fn transient_failures_are_retried_within_the_wait() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let reg = registry(&proxy.url(), "").await;
    proxy.set_refuse(true);
    proxy.reset_all();
    let restore = {
        let proxy_url = proxy.url();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            proxy_url
        })
    };
    let acquiring = tokio::spawn({
        let reg = reg.clone();
        async move {
            reg.lock("t")
                .wait(Duration::from_secs(8))
                .acquire()
                .await
                .map(|g| g.fencing_token())
        }
    });
    restore.await.expect("timer");
    proxy.set_refuse(false);
    let token = acquiring.await.expect("task");
    assert!(
        token.is_ok(),
        "acquired once the server was back: {token:?}"
    );
}

/// One renewal that fails (WRONGTYPE) does not take the healthy leases of its
/// batch down with it.
#[tokio::test]
async fn one_bad_renewal_does_not_fail_the_batch() {
    let reg = registry(&single_url(), "").await;
    let (bad, good) = (unique("bad"), unique("good"));
    let g_bad = reg.lock(bad.as_str()).acquire().await.expect("acquire");
    let g_good = reg.lock(good.as_str()).acquire().await.expect("acquire");
    let addr = addr_of(&single_url());
    let hash = format!("lock:{{{bad}}}");
    resp_command(&addr, &["DEL", &hash]).expect("DEL");
    resp_command(&addr, &["SET", &hash, "not a hash"]).expect("SET");
    // Three renewal rounds (every 333 ms) and the 1 s lease's end.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert!(g_good.is_held(), "the healthy lease was renewed on its own");
    assert!(!g_bad.is_held(), "the broken one is lost");
    resp_command(&addr, &["DEL", &hash]).expect("DEL");
    g_good.release().await.expect("release");
}

/// When renewals stop getting through, the loss is signalled a margin *before* the
/// lease can run out on the server, not when it does.
#[tokio::test]
async fn lost_is_signalled_before_the_server_expires_the_lease() {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let reg = registry(&proxy.url(), "").await;
    let g = reg.lock("m").acquire().await.expect("acquire");
    // Let a renewal or two through, then cut the client off.
    tokio::time::sleep(Duration::from_millis(400)).await;
    proxy.set_blackhole(true);
    let pttl = match resp_command(&server.addr(), &["PTTL", "lock:{m}"]).expect("PTTL") {
        RespValue::Integer(ms) => ms,
        other => panic!("{other:?}"),
    };
    let server_end = std::time::Instant::now() + Duration::from_millis(pttl as u64);
    let lost = tokio::time::timeout(Duration::from_secs(3), g.lost()).await;
    let signalled = std::time::Instant::now();
    assert!(lost.is_ok(), "lost() resolved");
    assert!(
        signalled + Duration::from_millis(50) <= server_end,
        "signalled {:?} before the server's end of the lease (at least 50 ms wanted)",
        server_end.saturating_duration_since(signalled)
    );
    proxy.set_blackhole(false);
}

/// A fencing counter does not live forever (24 h from when it started), and a
/// counter that vanished (expired, evicted) starts above every token it gave.
#[tokio::test]
async fn fencing_counters_expire_and_restart_above_their_tokens() {
    let reg = registry(&single_url(), "").await;
    let key = unique("counter");
    let addr = addr_of(&single_url());
    // The server's counter (shared by every key on a single server).
    let fence = "lock:{{fence}";
    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
    let t1 = g.fencing_token();
    g.release().await.expect("release");
    match resp_command(&addr, &["PTTL", fence]).expect("PTTL") {
        RespValue::Integer(ms) => assert!(
            ms > 0 && ms <= 24 * 3600 * 1000,
            "the counter has a retention: {ms} ms"
        ),
        other => panic!("{other:?}"),
    }
    resp_command(&addr, &["DEL", fence]).expect("DEL");
    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
    assert!(
        g.fencing_token() > t1,
        "{} after {t1} although the counter was gone",
        g.fencing_token()
    );
    g.release().await.expect("release");
}

/// A release that frees without counting down (`Hold::only_level`: the client knows the level is
/// the owner's only one) run twice: the second run finds the level gone and changes nothing.
#[test]
fn an_only_level_release_run_twice_frees_once() {
    use distlock::__private::scripts::{ACQUIRE, RELEASE};
    let hash = format!("lock:{{{}}}", unique("only-level-twice"));
    let fence = format!("{hash}:fence");
    let first = eval(ACQUIRE, &[&hash, &fence], &[OWNER, "10000", "a1"]);
    assert!(
        matches!(&first, RespValue::Array(a) if a.first() == Some(&RespValue::Integer(1))),
        "{first:?}"
    );
    let args = [OWNER, "ch", "a1", "1"];
    assert_eq!(
        eval(RELEASE, &[&hash], &args),
        RespValue::Integer(0),
        "freed"
    );
    assert_eq!(
        eval(RELEASE, &[&hash], &args),
        RespValue::Integer(-1),
        "run again: not held, nothing changed"
    );
}

/// A release that frees the lock by counting down (not `only_level`) and one that keeps it until
/// `hold:until`, each run twice: the level that frees is checked, not removed first (its
/// mark goes with the `DEL`, or with the fields a kept lock drops), and the second run finds
/// it gone and changes nothing.
#[test]
fn a_freeing_release_and_a_kept_one_run_twice_change_nothing_the_second_time() {
    use distlock::__private::scripts::{ACQUIRE, RELEASE};
    let exists =
        |key: &str| resp_command(&addr_of(&single_url()), &["EXISTS", key]).expect("EXISTS");
    let hash = format!("lock:{{{}}}", unique("count-down-twice"));
    let fence = format!("{hash}:fence");
    eval(ACQUIRE, &[&hash, &fence], &[OWNER, "10000", "outer"]);
    eval(
        ACQUIRE,
        &[&hash, &fence],
        &[OWNER, "10000", "inner", "", "", "1"],
    );
    let release = |level: &str| eval(RELEASE, &[&hash], &[OWNER, "ch", level]);
    assert_eq!(release("inner"), RespValue::Integer(1));
    assert_eq!(release("outer"), RespValue::Integer(0), "freed");
    assert_eq!(
        exists(&hash),
        RespValue::Integer(0),
        "the DEL took the mark with it"
    );
    assert_eq!(
        release("outer"),
        RespValue::Integer(-1),
        "run again: not held"
    );
    assert_eq!(exists(&hash), RespValue::Integer(0), "nothing re-created");

    // hold_at_least 60 s: the release keeps the lock without a holder until then.
    let kept = format!("lock:{{{}}}", unique("kept-twice"));
    let fence = format!("{kept}:fence");
    eval(
        ACQUIRE,
        &[&kept, &fence],
        &[OWNER, "100000", "job", "", "", "", "60000"],
    );
    let release = || eval(RELEASE, &[&kept], &[OWNER, "ch", "job", "1", "", "", "1"]);
    assert_eq!(release(), RespValue::Integer(0), "kept until hold:until");
    let fields = || {
        let mut names: Vec<String> = lock_fields(&addr_of(&single_url()), &kept)
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        fields(),
        vec!["hold:until".to_owned()],
        "no holder, no level mark"
    );
    assert_eq!(release(), RespValue::Integer(-1), "run again: not held");
    assert_eq!(fields(), vec!["hold:until".to_owned()], "nothing changed");
    let pttl = resp_command(&addr_of(&single_url()), &["PTTL", &kept]).expect("PTTL");
    assert!(
        matches!(pttl, RespValue::Integer(ms) if ms > 0 && ms <= 60_000),
        "kept for the rest of hold_at_least: {pttl:?}"
    );
}

/// The release of an outermost hold with no nested hold live frees the lock in two
/// calls (GET, DEL; nobody waits, so no PUBLISH), and a nested acquisition racing that
/// release, in either order, either holds a lock that exists (the release counted it down)
/// or fails with `LeaseLost` (it found the hold gone) — never holds a lock that is gone.
#[tokio::test]
async fn an_outer_release_racing_a_nested_acquisition_never_leaves_it_holding_nothing() {
    let server = RedisProcess::start();
    let addr = server.addr();
    let reg = registry(&server.url(), "").await;
    let info = |addr: &str| match resp_command(addr, &["INFO", "commandstats"]).expect("INFO") {
        RespValue::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("{other:?}"),
    };
    let exists = |key: &str| {
        resp_command(&addr, &["EXISTS", &format!("lock:{{{key}}}")]).expect("EXISTS")
            == RespValue::Integer(1)
    };
    let key = unique("only-level");
    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
    assert_eq!(
        resp_command(&addr, &["CONFIG", "RESETSTAT"]).expect("RESETSTAT"),
        RespValue::Simple("OK".into())
    );
    g.release().await.expect("release");
    let stats = info(&addr);
    let calls = |command: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|v| v.split(',').next()?.parse().ok())
            .unwrap_or(0)
    };
    // The release: GET, DEL (nobody waits: no PUBLISH). A watchdog renewal may land
    // meanwhile: GET, PTTL and perhaps PEXPIRE, a script of its own.
    let renewals = calls("pttl");
    assert_eq!(calls("del"), 1, "{stats}");
    assert_eq!(calls("publish"), 0, "{stats}");
    assert_eq!(calls("get"), 1 + renewals, "{stats}");
    let others: Vec<&str> = stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split([':', '|']).next())
        .filter(|c| {
            ![
                "eval", "evalsha", "fcall", "function", "script", "config", "ping", "info",
            ]
            .contains(c)
                && !["get", "del", "publish", "pttl", "pexpire"].contains(c)
        })
        .collect();
    assert!(others.is_empty(), "no other command: {others:?} in {stats}");

    let (mut held, mut lost) = (0, 0);
    for i in 0..90u32 {
        let key = format!("{key}:{i}");
        let outer = reg
            .lock(key.as_str())
            .lease(Lease::Fixed(Duration::from_secs(10)))
            .acquire()
            .await
            .expect("outer");
        // Either future may go first, each after 0 to 2 yields.
        let (before_nested, before_release) = (i % 3, (i / 3) % 3);
        let nested = outer.scope({
            let (reg, key) = (reg.clone(), key.clone());
            async move {
                for _ in 0..before_nested {
                    tokio::task::yield_now().await;
                }
                reg.lock(key.as_str())
                    .wait(Duration::from_secs(5))
                    .acquire()
                    .await
            }
        });
        let release = async {
            for _ in 0..before_release {
                tokio::task::yield_now().await;
            }
            outer.release().await
        };
        let (n, r) = if i % 2 == 0 {
            tokio::join!(nested, release)
        } else {
            let (r, n) = tokio::join!(release, nested);
            (n, r)
        };
        r.expect("the outer release");
        match n {
            Ok(g) => {
                held += 1;
                assert!(
                    exists(&key),
                    "round {i}: a nested hold of a lock that is gone"
                );
                g.release().await.expect("the nested hold was held");
                assert!(!exists(&key), "round {i}: freed by the nested release");
            }
            Err(LockError::LeaseLost { .. }) => {
                lost += 1;
                assert!(!exists(&key), "round {i}: the outer release freed it");
            }
            Err(e) => panic!("round {i}: {e}"),
        }
    }
    // Both orders happened.
    assert!(held > 0 && lost > 0, "held {held}, lost {lost}");
}
