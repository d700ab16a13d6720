//! Semaphores (`Semaphore`, `Registry::semaphore`) on real servers: never more than N
//! holders (counted by the holders, across OS processes and tasks), a SIGKILLed holder's
//! permit back after its lease and not before, shrinking N, prompt wake-up by a release,
//! `try_acquire` when full, a dropped acquire leaving nothing held, scripts run twice
//! counting once, bad input refused, redlock refused (on single, cluster, sentinel and
//! memory unless said otherwise).

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::unique;
use distlock::{Lease, LockError, Registry};
use distlock_tests::{
    addr_of, cluster_urls, redlock_urls, resp_command, sentinel_master_name, sentinel_urls,
    single_url, RespValue,
};

fn quoted(urls: &[String]) -> String {
    urls.iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn connect(name: &str, backend: &str) -> Registry {
    let defaults = "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\n";
    Registry::from_str(&format!("{defaults}{backend}\n"))
        .await
        .unwrap_or_else(|e| panic!("connect the {name} backend (scripts/test.sh starts it): {e}"))
}

/// single, cluster, sentinel and memory, each as backend `main` with a 1 s watchdog.
async fn registries() -> Vec<(&'static str, Registry)> {
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
        ("memory", "mode = \"memory\"".to_owned()),
    ];
    let mut out = Vec::new();
    for (name, backend) in configs {
        out.push((name, connect(name, &backend).await));
    }
    out
}

/// 12 tasks x 20 rounds on a semaphore of 3: never more than 3 inside (counted by the
/// holders), and 3 reached.
#[tokio::test]
async fn never_more_than_n_holders_in_one_process() {
    for (name, reg) in registries().await {
        let key = unique("sem-n");
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..12 {
            let (sem, inside, max) = (
                reg.semaphore(key.as_str(), 3).wait(Duration::from_secs(30)),
                inside.clone(),
                max.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..20 {
                    let g = sem.acquire(1).await.expect("acquire");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        let max = max.load(Ordering::SeqCst);
        assert!(max <= 3, "{name}: {max} holders of 3 permits at once");
        assert_eq!(max, 3, "{name}: the 3 permits were used together");
        // Several permits per acquisition count as several.
        let sem = reg.semaphore(key.as_str(), 3);
        let two = sem.acquire(2).await.expect("2 of 3");
        assert!(sem.try_acquire(2).await.expect("try").is_none(), "{name}");
        let one = sem.try_acquire(1).await.expect("try").expect("the third");
        assert!(
            sem.try_acquire(1).await.expect("try").is_none(),
            "{name}: full"
        );
        assert!(one.fencing_token() > two.fencing_token(), "{name}");
        two.release().await.expect("release");
        one.release().await.expect("release");
    }
}

fn worker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lock-worker"))
}

/// 3 OS processes x 4 tasks x 25 rounds on a semaphore of 3: the holders count themselves
/// in and out on a separate Redis counter; it never exceeds 3.
fn across_processes(mode: &str, nodes: &str) {
    let counter_url = single_url();
    let key = unique(&format!("sem-procs-{mode}"));
    let start = Instant::now();
    let children: Vec<_> = (0..3)
        .map(|_| {
            worker()
                .args(["sem", mode, nodes, &counter_url, &key, "3", "4", "25"])
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
            "{mode}: lock-worker failed: {:?}",
            out.status
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.trim(),
            "DONE 0",
            "{mode}: more than 3 holders at once"
        );
    }
    let max = resp_command(&addr_of(&counter_url), &["GET", &format!("{key}:max")]).expect("GET");
    let max: u32 = max.as_str().and_then(|s| s.parse().ok()).expect("a max");
    assert!(max <= 3, "{mode}: {max} holders at once");
    assert!(max >= 2, "{mode}: the permits were shared ({max} at most)");
    println!(
        "{mode}: 3 processes x 4 tasks x 25 rounds on 3 permits in {:?}, at most {max} inside",
        start.elapsed()
    );
}

#[test]
fn never_more_than_n_holders_across_processes_single() {
    across_processes("single", &single_url());
}

#[test]
fn never_more_than_n_holders_across_processes_cluster() {
    across_processes("cluster", &cluster_urls().join(","));
}

#[test]
fn never_more_than_n_holders_across_processes_sentinel() {
    let nodes = format!("{}|{}", sentinel_master_name(), sentinel_urls().join(","));
    across_processes("sentinel", &nodes);
}

/// A SIGKILLed holder (auto lease, watchdog_timeout 1 s) keeps its permit until its lease
/// ends on the server, then it comes back by itself.
fn killed_holder(mode: &str, nodes: &str, reg: Registry) -> impl std::future::Future<Output = ()> {
    let key = unique(&format!("sem-killed-{mode}"));
    let mut child = worker()
        .args(["sem-hold", mode, nodes, &key, "1", "1s"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn lock-worker");
    let mode = mode.to_owned();
    async move {
        let stdout = child.stdout.take().expect("stdout");
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            std::io::BufReader::new(stdout)
                .read_line(&mut line)
                .map(|_| line)
        })
        .await
        .expect("reader")
        .expect("read");
        assert!(line.starts_with("HELD "), "worker said {line:?}");
        let sem = reg.semaphore(key.as_str(), 1);
        assert!(
            sem.try_acquire(1).await.expect("try").is_none(),
            "{mode}: held by the worker"
        );
        // Let the worker's watchdog renew at least once more, then kill it.
        tokio::time::sleep(Duration::from_millis(400)).await;
        child.kill().expect("SIGKILL the holder");
        let _ = child.wait();
        let killed = Instant::now();
        // On single: the dead holder's lease end on the server's clock (no renewal comes now).
        let holders = format!("lock:{{{key}}}:sem");
        let server_ms = |args: &[&str]| -> Option<u64> {
            match resp_command(&addr_of(&single_url()), args).ok()? {
                RespValue::Array(v) if args[0] == "TIME" => {
                    let s: u64 = v.first()?.as_str()?.parse().ok()?;
                    let us: u64 = v.get(1)?.as_str()?.parse().ok()?;
                    Some(s * 1000 + us / 1000)
                }
                RespValue::Array(v) => v.get(1)?.as_str()?.parse::<f64>().ok().map(|f| f as u64),
                _ => None,
            }
        };
        let lease_end = (mode == "single")
            .then(|| server_ms(&["ZRANGE", &holders, "0", "-1", "WITHSCORES"]))
            .flatten();
        assert!(
            sem.try_acquire(1).await.expect("try").is_none(),
            "{mode}: the dead holder's lease has not ended yet"
        );
        let g = sem
            .wait(Duration::from_secs(5))
            .acquire(1)
            .await
            .expect("the permit comes back after the dead holder's lease");
        let took = killed.elapsed();
        println!("{mode}: a SIGKILLed holder's permit came back after {took:?} (lease 1 s)");
        if mode == "single" {
            // Not before its lease ended, on the server's clock.
            let end = lease_end.expect("the dead holder's lease end");
            let now = server_ms(&["TIME"]).expect("TIME");
            assert!(
                now >= end,
                "{mode}: given back {} ms before the lease ended",
                end - now
            );
        }
        // Renewed every third of the 1 s lease: well over 200 ms of it was left at the kill.
        assert!(
            took >= Duration::from_millis(200),
            "{mode}: back too early, {took:?}"
        );
        assert!(took <= Duration::from_millis(1500), "{mode}: {took:?}");
        g.release().await.expect("release");
    }
}

#[tokio::test]
async fn a_killed_holders_permit_returns_after_its_lease_single() {
    let reg = connect(
        "single",
        &format!("mode = \"single\"\nurl = \"{}\"", single_url()),
    )
    .await;
    killed_holder("single", &single_url(), reg).await;
}

#[tokio::test]
async fn a_killed_holders_permit_returns_after_its_lease_cluster() {
    let urls = cluster_urls();
    let reg = connect(
        "cluster",
        &format!("mode = \"cluster\"\nnodes = [{}]", quoted(&urls)),
    )
    .await;
    killed_holder("cluster", &urls.join(","), reg).await;
}

/// Full at 4; an acquisition carrying 2 permits is admitted only once fewer than 2 are
/// held, while one carrying 4 is admitted as soon as one is free.
#[tokio::test]
async fn shrinking_n_while_full_admits_no_one_until_below() {
    for (name, reg) in registries().await {
        let key = unique("sem-shrink");
        let four = reg.semaphore(key.as_str(), 4);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(four.acquire(1).await.expect("one of 4"));
        }
        assert!(
            four.try_acquire(1).await.expect("try").is_none(),
            "{name}: full"
        );
        let two = four.clone().set_permits(2);
        for left in [3, 2] {
            held.pop()
                .expect("a holder")
                .release()
                .await
                .expect("release");
            assert!(
                two.try_acquire(1).await.expect("try").is_none(),
                "{name}: {left} held, shrunk to 2: nobody admitted"
            );
        }
        // The old number still admits its own acquisitions (documented).
        let again = four.try_acquire(1).await.expect("try").expect("3 of 4");
        again.release().await.expect("release");
        held.pop()
            .expect("a holder")
            .release()
            .await
            .expect("release");
        let g = two
            .try_acquire(1)
            .await
            .expect("try")
            .expect("1 held: below 2");
        assert!(
            two.try_acquire(1).await.expect("try").is_none(),
            "{name}: 2 of 2"
        );
        g.release().await.expect("release");
        drop(held);
    }
}

/// A waiter sleeping on a full semaphore (holders with 30 s leases) gets the permit within
/// 500 ms of a release.
#[tokio::test]
async fn a_waiter_is_woken_promptly_by_a_release() {
    for (name, reg) in registries().await {
        let key = unique("sem-wake");
        let sem = reg
            .semaphore(key.as_str(), 2)
            .lease(Lease::Fixed(Duration::from_secs(30)));
        let a = sem.acquire(1).await.expect("a");
        let b = sem.acquire(1).await.expect("b");
        let waiter = {
            let sem = sem.clone().wait(Duration::from_secs(20));
            tokio::spawn(async move {
                let g = sem.acquire(1).await;
                (Instant::now(), g)
            })
        };
        // The waiter has tried, found it full, and is asleep on the channel.
        let asleep = Instant::now();
        while reg.waiting("main") != Some(1) {
            assert!(
                asleep.elapsed() < Duration::from_secs(10),
                "{name}: the waiter sleeps"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!waiter.is_finished(), "{name}: the waiter waits");
        let released = Instant::now();
        a.release().await.expect("release");
        let (got, g) = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("woken")
            .expect("task");
        let g = g.expect("acquired");
        let took = got - released;
        println!("{name}: a semaphore waiter was woken {took:?} after a release");
        assert!(took < Duration::from_millis(500), "{name}: {took:?}");
        drop((b, g));
    }
}

/// An acquisition dropped while it waits leaves nothing held: once the holder goes, the
/// one permit is free.
#[tokio::test]
async fn dropping_an_acquire_mid_wait_leaves_nothing_held() {
    for (name, reg) in registries().await {
        let key = unique("sem-drop");
        let sem = reg.semaphore(key.as_str(), 1);
        let holder = sem.acquire(1).await.expect("hold");
        for _ in 0..5 {
            let r = tokio::time::timeout(
                Duration::from_millis(50),
                sem.clone().wait(Duration::from_secs(10)).acquire(1),
            )
            .await;
            assert!(r.is_err(), "{name}: still waiting when dropped");
        }
        holder.release().await.expect("release");
        let g = sem
            .clone()
            .wait(Duration::from_secs(2))
            .acquire(1)
            .await
            .unwrap_or_else(|e| panic!("{name}: the dropped waiters hold nothing: {e}"));
        g.release().await.expect("release");
    }
}

/// A guard dropped without release gives its permits back in the background.
#[tokio::test]
async fn a_dropped_guard_gives_its_permits_back() {
    for (name, reg) in registries().await {
        let key = unique("sem-guard-drop");
        let sem = reg.semaphore(key.as_str(), 2);
        drop(sem.acquire(2).await.expect("both"));
        let g = sem
            .clone()
            .wait(Duration::from_secs(2))
            .acquire(2)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(g.is_held(), "{name}");
        g.release().await.expect("release");
    }
}

/// The watchdog keeps an auto lease alive past watchdog_timeout; when the holder's entry is
/// gone on the server, the guard hears it (lost, is_held false) and its release says
/// NotHeld.
#[tokio::test]
async fn auto_leases_are_renewed_and_a_deleted_holder_is_lost() {
    let url = single_url();
    let reg = connect("single", &format!("mode = \"single\"\nurl = \"{url}\"")).await;
    let key = unique("sem-renew");
    let sem = reg.semaphore(key.as_str(), 1).lease(Lease::Auto);
    let g = sem.acquire(1).await.expect("acquire");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(g.is_held(), "renewed past watchdog_timeout");
    assert!(
        sem.try_acquire(1).await.expect("try").is_none(),
        "still held"
    );
    resp_command(&addr_of(&url), &["DEL", &format!("lock:{{{key}}}:sem")]).expect("DEL");
    let lost = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("the watchdog finds it gone");
    assert!(matches!(lost, LockError::LeaseLost { .. }), "{lost:?}");
    assert!(!g.is_held());
    let released = g.release().await;
    assert!(
        matches!(released, Err(LockError::NotHeld { .. })),
        "{released:?}"
    );
}

/// Redis leaves nothing behind: the holders' keys expire with the last lease.
#[tokio::test]
async fn keys_expire_with_the_last_lease() {
    let url = single_url();
    let reg = connect("single", &format!("mode = \"single\"\nurl = \"{url}\"")).await;
    let key = unique("sem-expire");
    let sem = reg
        .semaphore(key.as_str(), 2)
        .lease(Lease::Fixed(Duration::from_secs(5)));
    let g = sem.acquire(1).await.expect("acquire");
    let addr = addr_of(&url);
    for name in [
        format!("lock:{{{key}}}:sem"),
        format!("lock:{{{key}}}:sem:n"),
    ] {
        let ttl = resp_command(&addr, &["PTTL", &name])
            .expect("PTTL")
            .as_int();
        assert!(
            ttl.is_some_and(|t| t > 0 && t <= 5000),
            "{name} expires with the lease: {ttl:?}"
        );
    }
    g.release().await.expect("release");
    let left = resp_command(
        &addr,
        &[
            "EXISTS",
            &format!("lock:{{{key}}}:sem"),
            &format!("lock:{{{key}}}:sem:n"),
        ],
    )
    .expect("EXISTS");
    assert_eq!(
        left.as_int(),
        Some(0),
        "nothing left after the last release"
    );
}

fn eval(addr: &str, script: &str, keys: &[&str], args: &[&str]) -> RespValue {
    let n = keys.len().to_string();
    let mut cmd = vec!["EVAL", script, n.as_str()];
    cmd.extend_from_slice(keys);
    cmd.extend_from_slice(args);
    resp_command(addr, &cmd).expect("EVAL")
}

fn pair(v: &RespValue) -> (i64, i64) {
    match v {
        RespValue::Array(items) => match items.as_slice() {
            [a, b] => (a.as_int().expect("int"), b.as_int().expect("int")),
            other => panic!("a pair: {other:?}"),
        },
        other => panic!("a pair: {other:?}"),
    }
}

/// Each script run twice (a client or proxy retrying after a lost reply) counts once: the
/// same acquisition answers the same token and takes no second permit; a second release
/// changes nothing.
#[test]
fn scripts_run_twice_count_once() {
    use distlock::__private::scripts::{SEM_ACQUIRE, SEM_RELEASE};
    let addr = addr_of(&single_url());
    let key = unique("sem-twice");
    let (holders, counts, fence) = (
        format!("lock:{{{key}}}:sem"),
        format!("lock:{{{key}}}:sem:n"),
        format!("lock:{{{key}}}:fence"),
    );
    let keys = [holders.as_str(), counts.as_str(), fence.as_str()];
    let a = "a".repeat(32);
    let score = || -> f64 {
        let v = resp_command(&addr, &["ZSCORE", &holders, &a]).expect("ZSCORE");
        v.as_str().and_then(|s| s.parse().ok()).expect("a score")
    };
    let first = pair(&eval(&addr, SEM_ACQUIRE, &keys, &[&a, "1", "2", "30000"]));
    let first_end = score();
    std::thread::sleep(Duration::from_millis(20));
    let again = pair(&eval(&addr, SEM_ACQUIRE, &keys, &[&a, "1", "2", "30000"]));
    assert!(
        score() > first_end,
        "run again: a full lease from the run again"
    );
    // A shorter lease run again never shortens it.
    let short = pair(&eval(&addr, SEM_ACQUIRE, &keys, &[&a, "1", "2", "1000"]));
    assert_eq!(short, first);
    assert!(score() > first_end, "only ever extended");
    assert_eq!(first.0, 1, "acquired");
    assert_eq!(first, again, "run again: the same answer, the same token");
    let card = resp_command(&addr, &["ZCARD", &holders]).expect("ZCARD");
    assert_eq!(card.as_int(), Some(1), "one holder");
    let b = "b".repeat(32);
    assert_eq!(
        pair(&eval(&addr, SEM_ACQUIRE, &keys, &[&b, "1", "2", "30000"])).0,
        1,
        "the second permit"
    );
    let c = "c".repeat(32);
    let refused = pair(&eval(&addr, SEM_ACQUIRE, &keys, &[&c, "1", "2", "30000"]));
    assert_eq!(refused.0, 0, "full");
    assert!(
        refused.1 > 29_000 && refused.1 <= 30_000,
        "ms to the earliest lease end: {refused:?}"
    );
    let release = [holders.as_str(), counts.as_str()];
    let channel = format!("lock:{{{key}}}:sem:released");
    let r1 = eval(&addr, SEM_RELEASE, &release, &[&a, &channel, "publish"]);
    let r2 = eval(&addr, SEM_RELEASE, &release, &[&a, &channel, "publish"]);
    assert_eq!(r1.as_int(), Some(0), "released");
    assert_eq!(
        r2.as_int(),
        Some(-1),
        "run again: nothing to release, nothing changed"
    );
    let card = resp_command(&addr, &["ZCARD", &holders]).expect("ZCARD");
    assert_eq!(card.as_int(), Some(1), "b still holds");
    // Bad arguments: an error reply, nothing written.
    for args in [
        ["0", "2", "30000"],
        ["3", "2", "30000"],
        ["1", "0", "30000"],
        ["1", "2", "0"],
        ["1", "2", "86400001"],
    ] {
        let d = "d".repeat(32);
        let mut all = vec![d.as_str()];
        all.extend_from_slice(&args);
        let v = eval(&addr, SEM_ACQUIRE, &keys, &all);
        assert!(matches!(v, RespValue::Error(_)), "{args:?}: {v:?}");
    }
    let card = resp_command(&addr, &["ZCARD", &holders]).expect("ZCARD");
    assert_eq!(card.as_int(), Some(1), "no write by a refused call");
    // The counts gone apart from the holders (deleted, evicted): b counts as holding every
    // permit until its lease ends, so nobody is admitted beyond the limit.
    resp_command(&addr, &["DEL", &counts]).expect("DEL");
    let e = "e".repeat(32);
    let refused = pair(&eval(&addr, SEM_ACQUIRE, &keys, &[&e, "1", "2", "30000"]));
    assert_eq!(refused.0, 0, "b's count is unknown: full");
}

/// Bad input is a `LockError`, never a panic; redlock and multi refuse semaphores, naming
/// the mode.
#[tokio::test]
async fn bad_input_and_unsupported_modes() {
    let reg = connect("memory", "mode = \"memory\"").await;
    for (permits, n) in [(0, 1), (4, 0), (4, 5)] {
        let r = reg.semaphore("bad", permits).acquire(n).await;
        assert!(
            matches!(r, Err(LockError::InvalidPermits { .. })),
            "{permits}/{n}: {r:?}"
        );
        let r = reg.semaphore("bad", permits).try_acquire(n).await;
        assert!(
            matches!(r, Err(LockError::InvalidPermits { .. })),
            "{permits}/{n}: {r:?}"
        );
    }
    let r = reg
        .semaphore("bad", 1)
        .lease(Lease::Fixed(Duration::MAX))
        .acquire(1)
        .await;
    assert!(matches!(r, Err(LockError::InvalidDuration { .. })), "{r:?}");
    let r = reg.semaphore("", 1).acquire(1).await;
    assert!(matches!(r, Err(LockError::InvalidKey { .. })), "{r:?}");
    let r = reg.semaphore("bad", 1).backend("nope").acquire(1).await;
    assert!(matches!(r, Err(LockError::NoSuchBackend { .. })), "{r:?}");
    for mode in ["redlock", "multi"] {
        let reg = connect(
            mode,
            &format!("mode = \"{mode}\"\nnodes = [{}]", quoted(&redlock_urls())),
        )
        .await;
        match reg.semaphore("x", 2).acquire(1).await {
            Err(e @ LockError::Unsupported { .. }) => {
                let LockError::Unsupported {
                    kind,
                    mode: refused_on,
                    ..
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!(*kind, distlock::Feature::Semaphore, "{e}");
                assert_eq!(refused_on.name(), mode, "{e}");
                assert!(e.to_string().contains(&format!("mode = \"{mode}\"")), "{e}");
            }
            other => panic!("{mode}: {other:?}"),
        }
        let r = reg.semaphore("x", 2).try_acquire(1).await;
        assert!(
            matches!(r, Err(LockError::Unsupported { .. })),
            "{mode}: {r:?}"
        );
    }
}

/// No overlap without the signal first: a fixed lease's holder hears `lost()` before a
/// waiter can take its permit (the margin ahead of the lease's end on the server).
#[tokio::test]
async fn a_fixed_lease_is_signalled_lost_before_its_permit_is_taken() {
    for (name, reg) in registries().await {
        let key = unique("sem-margin");
        let sem = reg.semaphore(key.as_str(), 1);
        let g = sem
            .clone()
            .lease(Lease::Fixed(Duration::from_millis(600)))
            .acquire(1)
            .await
            .expect("hold");
        let waiter = {
            let sem = sem.clone().wait(Duration::from_secs(5));
            tokio::spawn(async move {
                let got = sem.acquire(1).await;
                (Instant::now(), got)
            })
        };
        let lost = g.lost().await;
        let signalled = Instant::now();
        assert!(
            matches!(lost, LockError::LeaseLost { .. }),
            "{name}: {lost:?}"
        );
        assert!(!g.is_held(), "{name}");
        let (taken, got) = waiter.await.expect("task");
        let got = got.unwrap_or_else(|e| panic!("{name}: the permit comes back: {e}"));
        assert!(
            signalled < taken,
            "{name}: the holder heard of the loss {:?} after its permit was taken",
            signalled - taken
        );
        println!(
            "{name}: lost signalled {:?} before the permit was taken",
            taken - signalled
        );
        drop(g);
        got.release().await.expect("release");
    }
}

#[distlock::distributed_lock(
    key = "sem-attr:<id>",
    kind = "semaphore",
    permits = 2,
    backend = "semq",
    wait = "10s"
)]
async fn limited(
    id: String,
    inside: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
) -> Result<(), LockError> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    max.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    let _ = id;
    Ok(())
}

/// `#[distributed_lock(kind = "semaphore", permits = 2)]` on single and cluster: at most 2
/// bodies at once; its site is checked at init (a redlock backend fails it, naming the mode).
#[tokio::test]
async fn the_attribute_limits_bodies_and_its_site_is_checked() {
    let backends = [
        (
            "single",
            format!("mode = \"single\"\nurl = \"{}\"", single_url()),
        ),
        (
            "cluster",
            format!("mode = \"cluster\"\nnodes = [{}]", quoted(&cluster_urls())),
        ),
    ];
    for (name, backend) in backends {
        let reg = Registry::from_str(&format!("[backends.semq]\n{backend}\n"))
            .await
            .unwrap_or_else(|e| panic!("connect {name}: {e}"));
        reg.check_sites()
            .expect("a semaphore site on {name} is fine");
        let id = unique("attr");
        let (inside, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let calls: Vec<_> = (0..6)
            .map(|_| {
                let call = limited(id.clone(), inside.clone(), max.clone());
                tokio::spawn(reg.scope(call))
            })
            .collect();
        for c in calls {
            c.await.expect("task").expect("call");
        }
        assert_eq!(
            max.load(Ordering::SeqCst),
            2,
            "{name}: 2 bodies at once, never more"
        );
    }
    let redlock = Registry::from_str(&format!(
        "[backends.semq]\nmode = \"redlock\"\nnodes = [{}]\n",
        quoted(&redlock_urls())
    ))
    .await
    .expect("connect redlock");
    let err = redlock
        .check_sites()
        .expect_err("semaphores are not offered on redlock");
    let text = err.to_string();
    assert!(
        text.contains("limited") && text.contains("redlock"),
        "{text}"
    );
}

/// An acquisition dropped while its script is in flight (the server stalled by `DEBUG
/// SLEEP`, private server) leaves nothing held: the permit it may have taken is released in
/// the background right behind it.
#[tokio::test]
async fn an_acquire_dropped_in_flight_leaves_nothing_held() {
    let server =
        distlock_tests::RedisProcess::start_with_args(&["--enable-debug-command", "local"]);
    let reg = connect(
        "private single",
        &format!("mode = \"single\"\nurl = \"{}\"", server.url()),
    )
    .await;
    let key = unique("sem-in-flight");
    // A 30 s lease: only a release frees it within the 5 s looked at below.
    let sem = reg
        .semaphore(key.as_str(), 1)
        .lease(Lease::Fixed(Duration::from_secs(30)));
    // Warm: connected, scripts loaded.
    sem.acquire(1)
        .await
        .expect("warm")
        .release()
        .await
        .expect("release");
    let addr = server.addr();
    let sleeper = {
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || {
            distlock_tests::resp_command_timeout(
                &addr,
                &["DEBUG", "SLEEP", "0.6"],
                Duration::from_secs(5),
            )
        })
    };
    // Until the server is asleep: a PING gets no answer within 50 ms.
    let start = Instant::now();
    loop {
        let a = addr.clone();
        let ping = tokio::task::spawn_blocking(move || {
            distlock_tests::resp_command_timeout(&a, &["PING"], Duration::from_millis(50))
        })
        .await
        .expect("ping");
        if ping.is_err() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "DEBUG SLEEP never started"
        );
    }
    let r = tokio::time::timeout(Duration::from_millis(100), sem.acquire(1)).await;
    assert!(
        r.is_err(),
        "dropped while its script waits on the stalled server"
    );
    sleeper.await.expect("sleeper").expect("DEBUG SLEEP");
    let holders = format!("lock:{{{key}}}:sem");
    distlock_tests::wait_until(
        Duration::from_secs(5),
        "the in-flight permit released",
        || {
            resp_command(&addr, &["ZCARD", &holders])
                .ok()
                .and_then(|v| v.as_int())
                == Some(0)
        },
    );
    let g = sem.try_acquire(1).await.expect("try").expect("free");
    g.release().await.expect("release");
}
