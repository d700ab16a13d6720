//! A release (or a hand-off's undo, or a fair or write waiter leaving its queue) that fails
//! because Redis is down is sent again once Redis answers: the lock is free within a
//! bound after the restart, not at the end of its lease. Private servers with the
//! append-only file on (they are killed, and a restart keeps the locks).

use std::time::{Duration, Instant};

use distlock::{Lease, LockKind, Registry};
use distlock_tests::RedisProcess;

/// The lease of every hold here: far longer than the bound, so a lock freed by its lease
/// running out cannot pass for one freed by the re-sent release.
const LEASE: Duration = Duration::from_secs(60);
/// How soon after the restart a second process must find every lock free (the docs state
/// 1 s after the server answers; generous here for a loaded machine).
const BOUND: Duration = Duration::from_secs(5);

/// The lease of a hold of `kind`: [`LEASE`], but within 30 s for a read lock (Redisson's
/// format takes no longer one for it).
fn lease(kind: LockKind) -> Duration {
    if kind == LockKind::Read {
        LEASE / 3
    } else {
        LEASE
    }
}

/// A private server keeping its data across a restart (`appendfsync always`: what was
/// acknowledged before the kill is there after it).
fn persistent_server() -> RedisProcess {
    RedisProcess::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"])
}

fn backend(body: &str) -> String {
    format!("[backends.main]\n{body}\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n")
}

fn single(url: &str, protocol: &str) -> String {
    backend(&format!(
        "mode = \"single\"\nurl = \"{url}\"\nprotocol = \"{protocol}\""
    ))
}

/// One lock to free, and how a second process tries it.
#[derive(Clone, Copy, Debug)]
enum Probe {
    Lock(LockKind),
    Semaphore,
    Leader,
}

/// Until every probe of `keys` succeeds from `reg` (a try_acquire, released at once), or
/// `BOUND` after `from`: the keys still taken.
async fn still_taken(reg: &Registry, keys: &[(String, Probe)], from: Instant) -> Vec<String> {
    let mut left: Vec<(String, Probe)> = keys.to_vec();
    loop {
        let mut next = Vec::new();
        for (key, probe) in left {
            let free = match probe {
                // A read lock is probed by a writer: it is refused while any reader holds.
                Probe::Lock(kind) => {
                    let kind = match kind {
                        LockKind::Read => LockKind::Write,
                        other => other,
                    };
                    match reg.lock(key.as_str()).kind(kind).try_acquire().await {
                        Ok(Some(g)) => {
                            let _ = g.release().await;
                            true
                        }
                        Ok(None) => false,
                        Err(e) => {
                            eprintln!("probe {key}: {e}");
                            false
                        }
                    }
                }
                Probe::Semaphore => match reg.semaphore(key.as_str(), 1).try_acquire(1).await {
                    Ok(Some(g)) => {
                        let _ = g.release().await;
                        true
                    }
                    Ok(None) | Err(_) => false,
                },
                Probe::Leader => match reg
                    .leader(key.as_str())
                    .wait(Duration::ZERO)
                    .campaign()
                    .await
                {
                    Ok(g) => {
                        let _ = g.resign().await;
                        true
                    }
                    Err(_) => false,
                },
            };
            if !free {
                next.push((key, probe));
            }
        }
        if next.is_empty() || from.elapsed() >= BOUND {
            return next.into_iter().map(|(k, _)| k).collect();
        }
        left = next;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Hold one lock of each of `probes` on `config`, kill the server, release them all (each
/// release fails), restart it, and check that a second registry finds them all free
/// within `BOUND`. `hand_off`: also a reentrant lock released to a local waiter (the
/// hand-off fails and is undone), a fair lock with a queued waiter that gives up while
/// the server is down, a multi-key lock and a leadership.
async fn released_while_down_is_free_after_restart(
    servers: &mut [RedisProcess],
    config: &str,
    probes: &[Probe],
    hand_off: bool,
) {
    let reg = Registry::from_str(config).await.unwrap();
    let mut keys = Vec::new();
    let mut guards = Vec::new();
    let mut semaphores = Vec::new();
    for (i, probe) in probes.iter().enumerate() {
        let key = format!("resend:{i}:{probe:?}");
        match probe {
            Probe::Lock(kind) => guards.push(
                reg.lock(key.as_str())
                    .kind(*kind)
                    .lease(Lease::Fixed(lease(*kind)))
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("acquire {key}: {e}")),
            ),
            Probe::Semaphore => semaphores.push(
                reg.semaphore(key.as_str(), 1)
                    .lease(Lease::Fixed(LEASE))
                    .acquire(1)
                    .await
                    .unwrap_or_else(|e| panic!("acquire {key}: {e}")),
            ),
            Probe::Leader => unreachable!("leaders are taken with the hand-off extras"),
        }
        keys.push((key, *probe));
    }
    // A local waiter for a hand-off, and a fair waiter queued behind the holder.
    let mut waiters = Vec::new();
    let (mut multi, mut leader) = (None, None);
    if hand_off {
        for (key, kind) in [
            ("resend:handoff", LockKind::Reentrant),
            ("resend:queued", LockKind::Fair),
        ] {
            guards.push(
                reg.lock(key)
                    .kind(kind)
                    .lease(Lease::Fixed(LEASE))
                    .acquire()
                    .await
                    .unwrap(),
            );
            let (reg2, key2) = (reg.clone(), key.to_owned());
            waiters.push(tokio::spawn(async move {
                reg2.lock(key2.as_str())
                    .kind(kind)
                    .lease(Lease::Fixed(LEASE))
                    .wait(LEASE)
                    .acquire()
                    .await
            }));
            keys.push((key.to_owned(), Probe::Lock(kind)));
        }
        // A multi-key lock and a leadership (its lease is the watchdog's, 30 s).
        let keys2 = ["resend:multi:a", "resend:multi:b"];
        multi = Some(
            reg.lock_all(keys2)
                .lease(Lease::Fixed(LEASE))
                .acquire()
                .await
                .unwrap(),
        );
        keys.extend(keys2.map(|k| (k.to_owned(), Probe::Lock(LockKind::Reentrant))));
        leader = Some(reg.leader("resend:leader").campaign().await.unwrap());
        keys.push(("resend:leader".to_owned(), Probe::Leader));
        let start = Instant::now();
        while reg.waiting("main").unwrap_or(0) < 2 {
            assert!(start.elapsed() < BOUND, "the waiters never started waiting");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    for s in servers.iter_mut() {
        s.kill();
    }
    let mut failed = Vec::new();
    for g in guards {
        let key = g.key().to_owned();
        if let Err(e) = g.release().await {
            failed.push(format!("{key}: {e}"));
        }
    }
    for g in semaphores {
        let key = g.key().to_owned();
        if let Err(e) = g.release().await {
            failed.push(format!("{key}: {e}"));
        }
    }
    if let Some(g) = multi.take() {
        if let Err(e) = g.release().await {
            failed.push(format!("multi-key: {e}"));
        }
    }
    if let Some(g) = leader.take() {
        if let Err(e) = g.resign().await {
            failed.push(format!("leader: {e}"));
        }
    }
    // The fair waiter gives up while the server is down (its queue entry stays); the
    // local waiter goes too (its grant, if any, would be its own hold).
    for w in &waiters {
        w.abort();
    }
    for w in waiters {
        let _ = w.await;
    }
    eprintln!("releases while the server was down: {failed:?}");
    assert!(
        !failed.is_empty(),
        "the releases were expected to fail with the server down"
    );

    for s in servers.iter_mut() {
        s.restart();
    }
    let back = Instant::now();
    // A second process (a server still loading its data refuses the connection at first).
    let other = loop {
        match Registry::from_str(config).await {
            Ok(r) => break r,
            Err(e) if back.elapsed() < BOUND => {
                eprintln!("connecting after the restart: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("connecting after the restart: {e}"),
        }
    };
    let taken = still_taken(&other, &keys, back).await;
    assert!(
        taken.is_empty(),
        "still taken {BOUND:?} after the server was back (leases {LEASE:?}): {taken:?}"
    );
    eprintln!("all free {:?} after the restart", back.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_that_failed_while_redis_was_down_free_every_kind_once_it_is_back() {
    let mut servers = [persistent_server()];
    let config = single(&servers[0].url(), "distlock");
    let probes = [
        Probe::Lock(LockKind::Reentrant),
        Probe::Lock(LockKind::Fair),
        Probe::Lock(LockKind::Read),
        Probe::Lock(LockKind::Write),
        Probe::Semaphore,
    ];
    released_while_down_is_free_after_restart(&mut servers, &config, &probes, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_format_releases_that_failed_while_redis_was_down_are_sent_again() {
    let mut servers = [persistent_server()];
    let config = single(&servers[0].url(), "redisson");
    let probes = [
        Probe::Lock(LockKind::Reentrant),
        Probe::Lock(LockKind::Fair),
        Probe::Lock(LockKind::Read),
        Probe::Lock(LockKind::Write),
    ];
    released_while_down_is_free_after_restart(&mut servers, &config, &probes, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_releases_that_failed_while_every_node_was_down_are_sent_again() {
    for mode in ["redlock", "multi"] {
        let mut servers = [
            persistent_server(),
            persistent_server(),
            persistent_server(),
        ];
        let urls: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.url())).collect();
        let config = backend(&format!(
            "mode = \"{mode}\"\nnodes = [{}]\nnode_timeout = \"200ms\"\nretry_delay = \"20ms\"",
            urls.join(", ")
        ));
        let probes = [Probe::Lock(LockKind::Reentrant)];
        released_while_down_is_free_after_restart(&mut servers, &config, &probes, false).await;
    }
}
