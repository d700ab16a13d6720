//! The reentrant lock on one real redis-server (`mode = "single"`).
//! Needs the test servers: `scripts/test.sh` (or `scripts/servers.sh start`).
//! The shared scenarios (exclusion, timeouts, leases, tokens, reentrancy, ...) run on this
//! backend from the table in `matrix.rs`; this file has the tests of this backend only.

mod common;
#[allow(dead_code)]
mod scenarios;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use distlock::{LockError, Registry};
use distlock_tests::{addr_of, resp_command, single_url, RedisProcess};
use scenarios::dropped_guard_frees;

fn config(url: &str) -> String {
    format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n"
    )
}

async fn registry() -> Registry {
    backend::single().await
}

#[tokio::test]
async fn lost_when_keys_deleted_with_raw_del() {
    let reg = registry().await;
    let key = unique("rawdel");
    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
    let deleted = resp_command(
        &addr_of(&single_url()),
        &["DEL", &format!("lock:{{{key}}}")],
    )
    .expect("DEL");
    assert_eq!(deleted.as_int(), Some(1), "the lock hash is lock:{{KEY}}");
    let start = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(2), g.lost())
        .await
        .expect("noticed");
    assert!(
        start.elapsed() <= Duration::from_millis(1300),
        "after {:?}",
        start.elapsed()
    );
    assert!(err.to_string().contains(&key), "{err}");
}

#[tokio::test]
async fn keys_layout_in_redis() {
    let reg = registry().await;
    let key = unique("layout");
    let g = reg.lock(key.as_str()).acquire().await.expect("acquire");
    let addr = addr_of(&single_url());
    let ttl = resp_command(&addr, &["PTTL", &format!("lock:{{{key}}}")]).expect("PTTL");
    assert!(ttl.as_int().is_some_and(|t| t > 0 && t <= 1000), "{ttl:?}");
    // The server's counter, shared by every key: at or past this lock's token.
    let fence = resp_command(&addr, &["GET", "lock:{{fence}"]).expect("GET");
    let counter: Option<u64> = fence.as_str().and_then(|v| v.parse().ok());
    assert!(counter.is_some_and(|c| c >= g.fencing_token()), "{fence:?}");
    let own = resp_command(&addr, &["EXISTS", &format!("lock:{{{key}}}:fence")]).expect("EXISTS");
    assert_eq!(own.as_int(), Some(0), "no counter of its own");
    g.release().await.expect("release");
    let exists = resp_command(&addr, &["EXISTS", &format!("lock:{{{key}}}")]).expect("EXISTS");
    assert_eq!(
        exists.as_int(),
        Some(0),
        "released locks leave no hash behind"
    );
}

fn worker() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lock-worker"))
}

/// Two OS processes x 8 tasks doing non-atomic read-modify-writes under one key.
#[test]
fn two_processes_never_overlap() {
    let url = single_url();
    let key = unique("procs");
    let counter = unique("procs-counter");
    let children: Vec<_> = (0..2)
        .map(|_| {
            worker()
                .args(["count", &url, &key, &counter, "8", "40"])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn lock-worker")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("lock-worker");
        assert!(out.status.success(), "lock-worker failed: {:?}", out.status);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout.trim(), "DONE 0", "a worker saw overlapping holders");
    }
    let v = resp_command(&addr_of(&url), &["GET", &counter]).expect("GET");
    assert_eq!(
        v.as_str(),
        Some("640"),
        "2 processes x 8 tasks x 40 increments"
    );
}

/// A SIGKILLed holder's auto lease frees the lock within watchdog_timeout.
#[tokio::test]
async fn killed_holder_frees_within_watchdog_timeout() {
    use std::io::BufRead;
    let reg = registry().await;
    let key = unique("killed");
    let mut child = worker()
        .args(["hold", &single_url(), &key, "1s"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn lock-worker");
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
    assert!(
        reg.lock(key.as_str())
            .try_acquire()
            .await
            .expect("try")
            .is_none(),
        "held by the worker"
    );
    child.kill().expect("SIGKILL the holder");
    let _ = child.wait();
    let killed = Instant::now();
    let g = reg
        .lock(key.as_str())
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("free once the dead holder's lease runs out");
    let took = killed.elapsed();
    println!("single: killed holder's lease freed after {took:?}");
    assert!(
        took <= Duration::from_millis(1200),
        "freed after {took:?} (watchdog_timeout 1s)"
    );
    g.release().await.expect("release");
}

/// Redis stopped mid-run: calls fail with `Backend` errors once their wait (retrying the
/// transient failure) runs out (no hang, no panic); restarted: calls work again in the
/// same process.
#[tokio::test]
async fn redis_restart_mid_run() {
    let mut server = RedisProcess::start();
    let reg = Registry::from_str(&config(&server.url()))
        .await
        .expect("connect");
    let key = unique("restart");
    let held = reg.lock(key.as_str()).acquire().await.expect("acquire");
    server.kill();

    let start = Instant::now();
    let err = reg
        .lock(unique("down").as_str())
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .expect_err("server down");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "no hang: {:?}",
        start.elapsed()
    );
    match &err {
        LockError::Backend {
            backend, address, ..
        } => {
            assert_eq!(backend, "main");
            assert_eq!(address, &server.addr());
        }
        other => panic!("expected a Backend error, got {other}"),
    }
    // The auto lease cannot be renewed while the server is down: reported lost.
    let lost = tokio::time::timeout(Duration::from_secs(3), held.lost())
        .await
        .expect("lost while down");
    assert!(matches!(lost, LockError::LeaseLost { .. }), "{lost}");

    server.restart();
    // The connection comes back on its own; scripts are re-sent after NOSCRIPT.
    let start = Instant::now();
    let g = loop {
        match reg.lock(unique("up").as_str()).acquire().await {
            Ok(g) => break g,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "still failing after restart: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    println!(
        "single: working again {:?} after the restart",
        start.elapsed()
    );
    g.release().await.expect("release");
}

/// Dropping a guard on a current_thread runtime releases it in the background.
#[test]
fn drop_on_current_thread_runtime_releases() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async { dropped_guard_frees(&registry().await).await });
}

/// Guards dropped while their runtime shuts down, or after it is gone, neither block nor
/// panic; their leases run out on their own.
#[test]
fn drop_during_and_after_runtime_shutdown() {
    let key = unique("shutdown");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (reg, outlives) = rt.block_on(async {
        let reg = registry().await;
        let outlives = reg
            .lock(format!("{key}:outlives"))
            .lease(distlock::Lease::Fixed(Duration::from_millis(300)))
            .acquire()
            .await
            .expect("acquire");
        // A task holding a guard when the runtime shuts down: the guard drops during shutdown.
        let (reg2, key2) = (reg.clone(), key.clone());
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _g = reg2.lock(key2.as_str()).acquire().await.expect("acquire");
            let _ = held_tx.send(());
            std::future::pending::<()>().await;
        });
        held_rx.await.expect("the task holds the lock");
        (reg, outlives)
    });
    let start = Instant::now();
    rt.shutdown_timeout(Duration::from_secs(5));
    drop(outlives); // after the runtime is gone: no runtime to release on
    drop(reg);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "shutdown blocked: {:?}",
        start.elapsed()
    );

    // The locks were not released (no runtime), so they expire: auto after 1 s, fixed after 300 ms.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let reg = registry().await;
        for k in [key.clone(), format!("{key}:outlives")] {
            let g = reg
                .lock(k.as_str())
                .wait(Duration::from_secs(3))
                .acquire()
                .await
                .expect("lease ran out");
            g.release().await.expect("release");
        }
    });
}

/// Acquisitions and releases cut short at every point of their round trip leave nothing
/// held and no reply misread ([`cut_requests_leave_nothing_held`]), most of them on the
/// connection the calling task drives itself (`backend/direct.rs`).
#[tokio::test]
async fn requests_cut_at_any_point_leave_nothing_held_and_no_reply_misread() {
    let reg = registry().await;
    for kind in LOCK_KINDS {
        cut_requests_leave_nothing_held(&reg, &unique("cut"), false, kind, |_| {
            addr_of(&single_url())
        })
        .await;
    }
}

/// `tcp_nodelay` either way (the command connection with Nagle's algorithm on, the default,
/// and with `TCP_NODELAY`): two processes' worth of registries, 16 tasks each on 4 keys,
/// never two holders of a key at once, every token above the last one of its key.
#[tokio::test]
async fn tcp_nodelay_either_way_excludes_and_orders_tokens() {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let url = single_url();
    let mut regs = Vec::new();
    for nodelay in [false, true] {
        let cfg = format!(
            "[backends.main]\nmode = \"single\"\nurl = \"{url}\"\ntcp_nodelay = {nodelay}\n"
        );
        regs.push(
            Registry::from_str(&cfg)
                .await
                .unwrap_or_else(|e| panic!("tcp_nodelay = {nodelay}: {e}")),
        );
    }
    let base = unique("nodelay");
    let keys: Vec<String> = (0..4).map(|k| format!("{base}:{k}")).collect();
    let inside: Arc<Vec<AtomicBool>> = Arc::new((0..4).map(|_| AtomicBool::new(false)).collect());
    let last: Arc<Mutex<HashMap<usize, u64>>> = Arc::default();
    let mut tasks = Vec::new();
    for reg in &regs {
        for t in 0..16usize {
            let (reg, keys, inside, last) =
                (reg.clone(), keys.clone(), inside.clone(), last.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..20usize {
                    let k = (t + round) % 4;
                    let g = reg
                        .lock(keys[k].as_str())
                        .wait(Duration::from_secs(20))
                        .acquire()
                        .await
                        .expect("acquire");
                    assert!(
                        !inside[k].swap(true, Ordering::SeqCst),
                        "two holders of {}",
                        keys[k]
                    );
                    let token = g.fencing_token();
                    {
                        let mut last = last.lock().expect("tokens");
                        let before = last.insert(k, token).unwrap_or(0);
                        assert!(
                            token > before,
                            "token {token} after {before} on {}",
                            keys[k]
                        );
                    }
                    tokio::task::yield_now().await;
                    inside[k].store(false, Ordering::SeqCst);
                    g.release().await.expect("release");
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
}
