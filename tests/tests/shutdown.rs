//! A graceful shutdown (`Registry::shutdown`, `distlock::shutdown`) against the shared test
//! servers: on every mode (single, cluster, sentinel, redlock, multi, memory) and both
//! formats, every kind of hold is given back (a peer registry takes each at once), the
//! holders are told first, waits end with `ShuttingDown`, new acquisitions are refused; it
//! is bounded with Redis unreachable, idempotent, and a SIGTERMed holder's peer gets the
//! lock at once where a SIGKILLed one's waits out the lease.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::unique;
use distlock::{Lease, LockError, LockKind, Registry};

/// Generous bounds: a told holder, an ended wait, a peer's take-over.
const SOON: Duration = Duration::from_secs(3);

/// What the backend offers (the rest answers `Unsupported` there).
#[derive(Clone, Copy)]
struct Offers {
    /// Fair, read and write locks.
    queues: bool,
    /// Semaphores.
    semaphores: bool,
    /// Leader elections.
    leaders: bool,
    /// Run-once jobs (`hold_at_least`).
    run_once: bool,
}

const EVERYTHING: Offers = Offers {
    queues: true,
    semaphores: true,
    leaders: true,
    run_once: true,
};
const QUORUM: Offers = Offers {
    queues: false,
    semaphores: false,
    leaders: false,
    run_once: true,
};
const REDISSON: Offers = Offers {
    queues: true,
    semaphores: false,
    leaders: false,
    run_once: false,
};

/// Two registries of one configuration: the process shutting down, and its peer.
async fn pair(toml: &str) -> (Registry, Registry) {
    let a = Registry::from_str(toml)
        .await
        .expect("connect the test backend");
    let b = Registry::from_str(toml)
        .await
        .expect("connect the test backend");
    (a, b)
}

fn config(backend: &str) -> String {
    format!("[defaults]\nwatchdog_timeout = \"1s\"\nwait = \"0s\"\n[backends.main]\n{backend}\n")
}

fn single() -> String {
    config(&format!(
        "mode = \"single\"\nurl = \"{}\"",
        distlock_tests::single_url()
    ))
}

fn cluster() -> String {
    config(&format!(
        "mode = \"cluster\"\nnodes = [{}]",
        common::quoted(&distlock_tests::cluster_urls())
    ))
}

fn sentinel() -> String {
    config(&format!(
        "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
        distlock_tests::sentinel_master_name(),
        common::quoted(&distlock_tests::sentinel_urls())
    ))
}

fn quorum(mode: &str, nodes: usize) -> String {
    let urls: Vec<String> = distlock_tests::redlock_urls()
        .into_iter()
        .take(nodes)
        .collect();
    config(&format!(
        "mode = \"{mode}\"\nnodes = [{}]\nnode_timeout = \"200ms\"\nretry_delay = \"20ms\"",
        common::quoted(&urls)
    ))
}

fn redisson(body: String) -> String {
    format!("{body}protocol = \"redisson\"\n")
}

/// Wait until `registry` has a waiter asleep on its backend `main`.
async fn until_waiting(registry: &Registry) {
    let start = Instant::now();
    while registry.waiting("main").unwrap_or(0) == 0 {
        assert!(start.elapsed() < SOON, "no waiter fell asleep");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every kind of hold the backend offers, held by `a`; a wait of `a` on a lock its
/// peer (or, on memory, another task) holds; then `a.shutdown()`: everything held is given
/// back (checked by `b`, or on memory by the store), the holders are told, the wait ends
/// with `ShuttingDown`, new acquisitions are refused.
async fn gives_back_everything(mode: &str, a: Registry, b: Option<Registry>, offers: Offers) {
    let key = |what: &str| unique(&format!("shutdown-{mode}-{what}"));
    let (k_re, k_fixed, k_wait, k_body) = (key("re"), key("fixed"), key("wait"), key("body"));
    let (k_fair, k_read, k_write, k_sem) = (key("fair"), key("read"), key("write"), key("sem"));
    let (k_m1, k_m2, k_once, election) = (key("m1"), key("m2"), key("once"), key("leader"));

    let reentrant = a.lock(k_re.as_str()).acquire().await.expect("reentrant");
    let nested = reentrant
        .scope(a.lock(k_re.as_str()).acquire())
        .await
        .expect("a nested level");
    let fixed = a
        .lock(k_fixed.as_str())
        .lease(Lease::Fixed(Duration::from_secs(60)))
        .acquire()
        .await
        .expect("a fixed lease");
    let multi = a
        .lock_all([k_m1.as_str(), k_m2.as_str()])
        .acquire()
        .await
        .expect("multi-key");
    let mut guards = vec![reentrant, nested, fixed];
    if offers.queues {
        for (k, kind) in [
            (&k_fair, LockKind::Fair),
            (&k_read, LockKind::Read),
            (&k_write, LockKind::Write),
        ] {
            guards.push(
                a.lock(k.as_str())
                    .kind(kind)
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("{kind:?}: {e}")),
            );
        }
    }
    let permit = if offers.semaphores {
        Some(
            a.semaphore(k_sem.as_str(), 1)
                .acquire(1)
                .await
                .expect("a permit"),
        )
    } else {
        None
    };
    let leader = if offers.leaders {
        Some(
            a.leader(election.as_str())
                .info("shutting-down")
                .campaign()
                .await
                .expect("elected"),
        )
    } else {
        None
    };
    let once = if offers.run_once {
        Some(
            a.lock(k_once.as_str())
                .lease(Lease::Fixed(Duration::from_secs(60)))
                .hold_at_least(Duration::from_secs(60))
                .acquire()
                .await
                .expect("a run-once job"),
        )
    } else {
        None
    };
    // A locked section (auto lease) that never ends by itself: dropped at the shutdown.
    let body = tokio::spawn({
        let a = a.clone();
        let k = k_body.clone();
        async move { a.lock(k.as_str()).run(std::future::pending::<()>()).await }
    });
    // A wait on a lock held elsewhere (the peer; on memory, this task).
    let blocker = match &b {
        Some(b) => b
            .lock(k_wait.as_str())
            .acquire()
            .await
            .expect("the peer holds it"),
        None => a.lock(k_wait.as_str()).acquire().await.expect("held"),
    };
    let waiter = tokio::spawn({
        let a = a.clone();
        let k = k_wait.clone();
        async move {
            a.lock(k.as_str())
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    until_waiting(&a).await;
    // The locked section is running (its lease registered).
    let start = Instant::now();
    while a.watched_leases("main").unwrap_or(0) < 2 {
        assert!(start.elapsed() < SOON, "the locked section did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let start = Instant::now();
    a.shutdown().await;
    let took = start.elapsed();
    assert!(
        took < Registry::SHUTDOWN_BOUND,
        "{mode}: shutdown took {took:?}"
    );
    assert!(a.is_shut_down());

    // The holders were told.
    for g in guards.iter().chain(multi.guards()).chain(once.iter()) {
        assert!(!g.is_held(), "{mode}: {} still held", g.key());
        let lost = tokio::time::timeout(SOON, g.lost()).await;
        assert!(
            matches!(&lost, Ok(LockError::LeaseLost { reason, .. }) if reason.contains("shutting down")),
            "{mode}: {} lost() → {lost:?}",
            g.key()
        );
    }
    assert!(!multi.is_held());
    if let Some(p) = &permit {
        assert!(!p.is_held(), "{mode}: the permit is still held");
        tokio::time::timeout(SOON, p.lost())
            .await
            .expect("permit lost()");
    }
    if let Some(l) = &leader {
        assert!(!l.is_leader(), "{mode}: still leading");
        tokio::time::timeout(SOON, l.lost())
            .await
            .expect("leader lost()");
    }
    // The locked section was dropped; the wait ended; nothing new is taken.
    let ran = tokio::time::timeout(SOON, body)
        .await
        .expect("body ended")
        .unwrap();
    assert!(
        matches!(ran, Err(LockError::LeaseLost { .. })),
        "{mode}: the locked section → {ran:?}"
    );
    let waited = tokio::time::timeout(SOON, waiter)
        .await
        .expect("wait ended")
        .unwrap();
    assert!(
        matches!(&waited, Err(LockError::ShuttingDown { key, backend, .. }) if *key == k_wait && backend == "main"),
        "{mode}: the wait → {waited:?}"
    );
    let refused = a.lock(key("new").as_str()).try_acquire().await;
    assert!(
        matches!(refused, Err(LockError::ShuttingDown { .. })),
        "{mode}: a new acquisition → {refused:?}"
    );
    if offers.semaphores {
        let refused = a.semaphore(key("sem-new").as_str(), 2).acquire(1).await;
        assert!(
            matches!(refused, Err(LockError::ShuttingDown { .. })),
            "{refused:?}"
        );
    }
    if offers.leaders {
        let refused = a.leader(key("leader-new").as_str()).campaign().await;
        assert!(
            matches!(refused, Err(LockError::ShuttingDown { .. })),
            "{refused:?}"
        );
    }

    match &b {
        Some(b) => {
            // The peer takes every one of them at once.
            let take = |k: &str, kind: LockKind| b.lock(k).kind(kind).try_acquire();
            for (k, kind) in [
                (&k_re, LockKind::Reentrant),
                (&k_fixed, LockKind::Reentrant),
                (&k_body, LockKind::Reentrant),
                (&k_m1, LockKind::Reentrant),
                (&k_m2, LockKind::Reentrant),
            ] {
                let got = take(k, kind).await;
                assert!(matches!(got, Ok(Some(_))), "{mode}: peer on {k}: {got:?}");
            }
            if offers.queues {
                for k in [&k_fair, &k_read, &k_write] {
                    let kind = if k == &k_fair {
                        LockKind::Fair
                    } else {
                        LockKind::Write
                    };
                    let got = take(k, kind).await;
                    assert!(matches!(got, Ok(Some(_))), "{mode}: peer on {k}: {got:?}");
                }
            }
            if offers.semaphores {
                let got = b.semaphore(k_sem.as_str(), 1).try_acquire(1).await;
                assert!(matches!(got, Ok(Some(_))), "{mode}: peer's permit: {got:?}");
            }
            if offers.leaders {
                assert_eq!(
                    b.leader(election.as_str()).current().await.expect("read"),
                    None,
                    "{mode}: the leader resigned"
                );
                let next = b
                    .leader(election.as_str())
                    .wait(Duration::ZERO)
                    .campaign()
                    .await;
                assert!(
                    next.is_ok(),
                    "{mode}: the peer is elected at once: {next:?}"
                );
            }
            if offers.run_once {
                // Kept until its hold_at_least: the job does not run again elsewhere early.
                let again = b
                    .lock(k_once.as_str())
                    .lease(Lease::Fixed(Duration::from_secs(60)))
                    .hold_at_least(Duration::from_secs(60))
                    .try_acquire()
                    .await;
                assert!(matches!(again, Ok(None)), "{mode}: run-once: {again:?}");
            }
            drop(blocker);
        }
        None => {
            drop(blocker);
            // Only the run-once job's slot is kept (until its hold_at_least).
            assert_eq!(
                a.memory_holders("main"),
                Some(usize::from(offers.run_once)),
                "{mode}: holders left in the store"
            );
        }
    }

    // The guards released by the shutdown: release() is Ok, nothing is sent again.
    for g in guards {
        g.release().await.expect("released by the shutdown");
    }
    drop((multi, permit, leader, once));
    // Idempotent, and quick the second time.
    let start = Instant::now();
    a.shutdown().await;
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "a second shutdown waited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_gives_back_every_kind() {
    let (a, b) = pair(&single()).await;
    gives_back_everything("single", a, Some(b), EVERYTHING).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_gives_back_every_kind() {
    let (a, b) = pair(&cluster()).await;
    gives_back_everything("cluster", a, Some(b), EVERYTHING).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_gives_back_every_kind() {
    let (a, b) = pair(&sentinel()).await;
    gives_back_everything("sentinel", a, Some(b), EVERYTHING).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_gives_back_every_kind() {
    let (a, b) = pair(&quorum("redlock", 5)).await;
    gives_back_everything("redlock", a, Some(b), QUORUM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_gives_back_every_kind() {
    let (a, b) = pair(&quorum("multi", 3)).await;
    gives_back_everything("multi", a, Some(b), QUORUM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_gives_back_every_kind() {
    let a = Registry::from_str(&config("mode = \"memory\""))
        .await
        .expect("memory");
    gives_back_everything("memory", a, None, EVERYTHING).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_format_gives_back_every_kind() {
    for (mode, toml) in [
        ("single-redisson", redisson(single())),
        ("cluster-redisson", redisson(cluster())),
        ("sentinel-redisson", redisson(sentinel())),
    ] {
        let (a, b) = pair(&toml).await;
        gives_back_everything(mode, a, Some(b), REDISSON).await;
    }
}

/// The global registry: `distlock::shutdown()` (no-op before init, then as the registry's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_shutdown_gives_back_the_global_registrys_locks() {
    // Before init: nothing to do.
    distlock::shutdown().await;
    distlock::init_from_str(&single()).await.expect("init");
    let key = unique("shutdown-global");
    let guard = distlock::Lock::new(key.as_str())
        .acquire()
        .await
        .expect("held");
    distlock::shutdown().await;
    assert!(!guard.is_held());
    let peer = Registry::from_str(&single()).await.expect("peer");
    assert!(matches!(
        peer.lock(key.as_str()).try_acquire().await,
        Ok(Some(_))
    ));
    let refused = distlock::Lock::new(unique("shutdown-global-new").as_str())
        .acquire()
        .await;
    assert!(
        matches!(refused, Err(LockError::ShuttingDown { .. })),
        "{refused:?}"
    );
}

/// Acquisitions racing with the shutdown: each ends acquired-then-told or refused, and
/// nothing stays held (the peer takes the key at once afterwards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_racing_the_shutdown_leave_nothing_held() {
    let (a, b) = pair(&single()).await;
    let key = unique("shutdown-race");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (a, key) = (a.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut rounds = 0u32;
            loop {
                match a
                    .lock(key.as_str())
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
                {
                    Ok(g) => {
                        rounds += 1;
                        tokio::task::yield_now().await;
                        drop(g);
                    }
                    Err(LockError::ShuttingDown { .. }) => return rounds,
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.shutdown().await;
    let mut rounds = 0;
    for t in tasks {
        rounds += tokio::time::timeout(SOON, t).await.expect("ended").unwrap();
    }
    assert!(rounds > 0, "the tasks never acquired: the test did nothing");
    let got = b.lock(key.as_str()).try_acquire().await;
    assert!(matches!(got, Ok(Some(_))), "left held: {got:?}");
}

/// With Redis unreachable (a blackholed link, replies never come), shutdown still returns
/// within its bound; the holders are told all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_is_bounded_with_redis_unreachable() {
    let upstream = distlock_tests::addr_of(&distlock_tests::single_url());
    let proxy = distlock_tests::proxy::Proxy::start(&upstream);
    let toml = format!(
        "[defaults]\nwatchdog_timeout = \"30s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\nresponse_timeout = \"60s\"\n",
        proxy.url()
    );
    let a = Registry::from_str(&toml)
        .await
        .expect("connect through the proxy");
    let held = a
        .lock(unique("shutdown-down-held").as_str())
        .acquire()
        .await
        .expect("held");
    let dropped = a
        .lock(unique("shutdown-down-dropped").as_str())
        .acquire()
        .await
        .expect("held");
    proxy.set_blackhole(true);
    // A release in the background that cannot finish.
    drop(dropped);
    let start = Instant::now();
    a.shutdown().await;
    let took = start.elapsed();
    assert!(
        took <= Registry::SHUTDOWN_BOUND + Duration::from_secs(1),
        "shutdown took {took:?} with Redis unreachable"
    );
    assert!(!held.is_held());
    proxy.set_blackhole(false);
}

/// One `lock-worker hold-graceful` process holding `key` on the single server; returns it
/// once it printed `HELD`, with its stdout lines.
fn graceful_holder(
    key: &str,
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lock-worker"))
        .args(["hold-graceful", &distlock_tests::single_url(), key])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn lock-worker");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("read");
    assert!(first.starts_with("HELD "), "{first}");
    (child, lines)
}

/// How long after `signal` a peer (another process's registry, waiting already) gets
/// `key`.
async fn peer_takes_over(key: &str, child: &std::process::Child, signal: i32) -> Duration {
    let peer = Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        distlock_tests::single_url()
    ))
    .await
    .expect("peer");
    let busy = peer.lock(key).try_acquire().await.expect("asked");
    assert!(busy.is_none(), "the holder does not hold it");
    let waiting = tokio::spawn({
        let (peer, key) = (peer.clone(), key.to_owned());
        async move {
            peer.lock(key.as_str())
                .wait(Duration::from_secs(90))
                .acquire()
                .await
        }
    });
    until_waiting(&peer).await;
    let pid = i32::try_from(child.id()).expect("pid");
    let start = Instant::now();
    // SAFETY: a plain kill(2) of the child this test started.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill");
    let guard = waiting.await.unwrap().expect("the peer gets the lock");
    let took = start.elapsed();
    guard.release().await.expect("released");
    took
}

/// The figure the graceful shutdown is for: with an auto lease and the default
/// `watchdog_timeout` (30 s), a peer waiting for the lock gets it within moments of the
/// holder's SIGTERM (the holder calls `distlock::shutdown()`), and only when the lease
/// runs out after a SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigtermed_holder_gives_the_lock_back_at_once_a_sigkilled_one_after_its_lease() {
    let key = unique("shutdown-sigterm");
    let (mut child, mut lines) = graceful_holder(&key);
    let term = peer_takes_over(&key, &child, libc::SIGTERM).await;
    let status = child.wait().expect("wait");
    assert!(status.success(), "the holder exited with {status}");
    let reported = lines
        .find_map(|l| {
            l.ok()
                .and_then(|l| l.strip_prefix("SHUTDOWN ").map(str::to_owned))
        })
        .expect("SHUTDOWN line");
    println!(
        "SIGTERM: the peer got the lock after {term:?} (the holder's shutdown took {reported} ms)"
    );
    assert!(term < Duration::from_secs(5), "after SIGTERM: {term:?}");

    let key = unique("shutdown-sigkill");
    let (mut child, _lines) = graceful_holder(&key);
    let kill = peer_takes_over(&key, &child, libc::SIGKILL).await;
    let _ = child.wait();
    println!("SIGKILL: the peer got the lock after {kill:?}");
    assert!(
        kill > Duration::from_secs(20),
        "after SIGKILL the lease (30 s) must run out first: {kill:?}"
    );
}
