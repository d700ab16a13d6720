//! Helpers shared by the test files: unique keys, the registry of each shared test backend
//! ([`backend`]), the hand-off measurement. The scenarios run on every backend are in
//! `scenarios/` and their table in `matrix.rs`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock::Registry;
use distlock_tests::resp_command;

/// The fields of a lock of `kind` in distlock's format: a reentrant or fair lock's record
/// (`lock_fields`), a read-write lock's hash (HGETALL).
fn hash_fields(addr: &str, key: &str, kind: distlock::LockKind) -> Vec<(String, String)> {
    if matches!(
        kind,
        distlock::LockKind::Reentrant | distlock::LockKind::Fair
    ) {
        return distlock_tests::lock_fields(addr, key);
    }
    let all = resp_command(addr, &["HGETALL", key]).expect("HGETALL");
    let all: Vec<String> = all
        .as_array()
        .expect("HGETALL reply")
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect();
    all.chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

/// A key no other test (or earlier run) uses.
pub fn unique(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "test:{name}:{}:{nanos}:{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub const WATCHDOG: Duration = Duration::from_secs(1);

/// `["a", "b"]` as a TOML array of strings.
pub fn quoted(urls: &[String]) -> String {
    urls.iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A registry whose backend `main` is one of the shared test topologies that
/// `scripts/test.sh` starts, with `watchdog_timeout = "1s"` and short timeouts: the
/// registries the test matrix (`matrix.rs`) and the backends' own test files use.
pub mod backend {
    use distlock::Registry;
    use distlock_tests::{
        cluster_urls, redlock_urls, sentinel_master_name, sentinel_urls, single_url,
    };

    use super::quoted;

    const DEFAULTS: &str = "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\n";
    const TIMEOUTS: &str = "response_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n";

    async fn connect(what: &str, backend: String) -> Registry {
        Registry::from_str(&format!("{DEFAULTS}{backend}"))
            .await
            .unwrap_or_else(|e| {
                panic!("connect to the test {what} (scripts/test.sh starts it): {e}")
            })
    }

    /// One redis-server (`mode = "single"`).
    pub async fn single() -> Registry {
        let url = single_url();
        connect(
            "redis-server",
            format!("mode = \"single\"\nurl = \"{url}\"\n{TIMEOUTS}"),
        )
        .await
    }

    /// The 3-master cluster (`mode = "cluster"`).
    pub async fn cluster() -> Registry {
        let nodes = quoted(&cluster_urls());
        connect(
            "cluster",
            format!("mode = \"cluster\"\nnodes = [{nodes}]\n{TIMEOUTS}"),
        )
        .await
    }

    /// The master behind the 3 sentinels (`mode = "sentinel"`).
    pub async fn sentinel() -> Registry {
        let (master, list) = (sentinel_master_name(), quoted(&sentinel_urls()));
        connect(
            "sentinels' master",
            format!(
                "mode = \"sentinel\"\nmaster_name = \"{master}\"\nsentinels = [{list}]\n{TIMEOUTS}"
            ),
        )
        .await
    }

    /// The 5 independent masters (`mode = "redlock"`).
    pub async fn redlock() -> Registry {
        connect(
            "redlock masters",
            quorum_body("redlock", &redlock_urls(), "200ms"),
        )
        .await
    }

    /// 3 of the independent masters (`mode = "multi"`).
    pub async fn multi() -> Registry {
        connect(
            "multi masters",
            quorum_body("multi", &redlock_urls()[..3], "200ms"),
        )
        .await
    }

    /// The in-process backend (`mode = "memory"`).
    pub async fn memory() -> Registry {
        connect("memory backend", "mode = \"memory\"\n".to_owned()).await
    }

    /// The `[backends.main]` body of a quorum backend of `mode` over `urls`.
    pub fn quorum_body(mode: &str, urls: &[String], node_timeout: &str) -> String {
        format!(
            "mode = \"{mode}\"\nnodes = [{}]\nnode_timeout = \"{node_timeout}\"\nretry_delay = \"20ms\"\n{TIMEOUTS}",
            quoted(urls)
        )
    }

    /// A whole configuration with a quorum backend `main` of `mode` over `urls`.
    pub fn quorum_config(mode: &str, urls: &[String], node_timeout: &str) -> String {
        format!("{DEFAULTS}{}", quorum_body(mode, urls, node_timeout))
    }
}

/// A registry per mode whose backend `main` is the shared test topology of that mode
/// (single, cluster, sentinel, redlock) or memory, each with `watchdog_timeout = "1s"`.
pub async fn every_mode() -> Vec<(&'static str, Registry)> {
    use distlock_tests::{
        cluster_urls, redlock_urls, sentinel_master_name, sentinel_urls, single_url,
    };
    let defaults = "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\n";
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
        (
            "redlock",
            format!(
                "mode = \"redlock\"\nnodes = [{}]\nnode_timeout = \"200ms\"\nretry_delay = \"20ms\"",
                quoted(&redlock_urls())
            ),
        ),
        ("memory", "mode = \"memory\"".to_owned()),
    ];
    let mut out = Vec::new();
    for (name, backend) in configs {
        let reg = Registry::from_str(&format!("{defaults}{backend}\n"))
            .await
            .unwrap_or_else(|e| {
                panic!("connect the {name} backend (scripts/test.sh starts it): {e}")
            });
        out.push((name, reg));
    }
    out
}

/// A waiter gets the lock within a few ms of the release. Returns the hand-off times.
pub async fn hand_off(reg: &Registry, rounds: usize) -> Vec<Duration> {
    let key = unique("handoff");
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let held = reg.lock(key.as_str()).acquire().await.expect("acquire");
        let (reg2, key2) = (reg.clone(), key.clone());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn(async move {
            let lock = reg2.lock(key2.as_str()).wait(Duration::from_secs(10));
            let _ = ready_tx.send(());
            let g = lock.acquire().await.expect("waiter acquire");
            let got = Instant::now();
            g.release().await.expect("waiter release");
            got
        });
        ready_rx.await.expect("waiter started");
        // Let the waiter reach its wait (its first attempt fails, it subscribes, it sleeps).
        wait_for_waiter(reg, &key).await;
        let released = Instant::now();
        held.release().await.expect("release");
        let got = waiter.await.expect("waiter");
        times.push(got.saturating_duration_since(released));
    }
    times
}

/// Until a waiter on the backend is asleep waiting for a release (bounded). Failing, it
/// says what the server shows of `key` (holders, waiters), to tell a waiter that never
/// slept from one that got the lock.
pub async fn wait_for_waiter(reg: &Registry, key: &str) {
    let start = Instant::now();
    while reg.waiting("main").unwrap_or(0) == 0 {
        if start.elapsed() >= Duration::from_secs(5) {
            let shown = reg.inspect(key, None).await;
            panic!("the waiter never started waiting; the server shows {shown:?}");
        }
        tokio::task::yield_now().await;
    }
}

pub fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    let i = ((times.len() as f64 - 1.0) * p).round() as usize;
    times[i]
}

/// Poll `fut` through `turns` turns of the runtime, then drop it: `None` when it was not
/// done by then. (A timer cannot cut it: Tokio's timers round up to the millisecond.)
pub async fn cut_after<F: std::future::Future>(turns: usize, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    for _ in 0..=turns {
        let polled = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match fut.as_mut().poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await;
        if polled.is_some() {
            return polled;
        }
        tokio::task::yield_now().await;
    }
    None
}

/// Every lock kind.
pub const LOCK_KINDS: [distlock::LockKind; 4] = [
    distlock::LockKind::Reentrant,
    distlock::LockKind::Fair,
    distlock::LockKind::Read,
    distlock::LockKind::Write,
];

/// Acquisitions and releases cut short at every point of their round trip (after 0 to
/// 399 turns of the runtime, most of them on the connection the calling task drives
/// itself, `backend/direct.rs`) leave nothing held: each cut acquisition's undo runs after
/// it (its reply is drained first), so the lock is free at once, not at the end of its
/// 20 s lease (a Redisson read lock's lease is at most 30 s); and no later request reads an earlier one's reply: every acquisition that
/// completes has the token its script drew (its level's mark in the lock's hash). `addr_of_hash`: the `host:port`
/// of the server that holds a lock hash (by its name). `redisson`: the registry speaks
/// Redisson's format (the hash is the key itself; its tokens are not checked here).
/// `kind`: the lock kind taken (its hash: `lock:{KEY}`, `:fair`, `:rw`; in Redisson's
/// format the key itself for every kind).
pub async fn cut_requests_leave_nothing_held(
    reg: &Registry,
    key: &str,
    redisson: bool,
    kind: distlock::LockKind,
    addr_of_hash: impl Fn(&str) -> String,
) {
    use distlock::LockKind;
    let lock_key = match (redisson, kind) {
        (true, _) => key.to_owned(),
        (false, LockKind::Reentrant) => format!("lock:{{{key}}}"),
        (false, LockKind::Fair) => format!("lock:{{{key}}}:fair"),
        (false, LockKind::Read | LockKind::Write) => format!("lock:{{{key}}}:rw"),
        (false, other) => panic!("the cut test knows no hash of {other:?}"),
    };
    // The hash fields that hold the token a hold's script drew.
    let holds_token = move |field: &str| match kind {
        LockKind::Reentrant | LockKind::Fair => field.starts_with("l:"),
        LockKind::Read => field.starts_with("rt:"),
        LockKind::Write => field == "wt",
        _ => false,
    };
    let addr = addr_of_hash(&lock_key);
    let take = || {
        reg.lock(key)
            .kind(kind)
            .lease(distlock::Lease::Fixed(Duration::from_secs(20)))
            .wait(Duration::from_secs(5))
            .acquire()
    };
    let free = |what: String| {
        let (addr, lock_key) = (addr.clone(), lock_key.clone());
        async move {
            let start = Instant::now();
            loop {
                let v = resp_command(&addr, &["EXISTS", &lock_key]).expect("EXISTS");
                if v.as_int() == Some(0) {
                    return;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(3),
                    "still held 3 s after {what}: a cut request's undo ran before it"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    // The direct connection is made in the background after the first calls.
    for _ in 0..20 {
        take()
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
    }
    let (mut completed, mut cut) = (0, 0);
    for i in 0..400usize {
        match cut_after(i, take()).await {
            Some(guard) => {
                let guard = guard.expect("acquire");
                if !redisson {
                    // The lock's one hold keeps the token its script drew.
                    let token = guard.fencing_token().to_string();
                    let fields = hash_fields(&addr, &lock_key, kind);
                    assert!(
                        fields.iter().any(|(f, v)| holds_token(f) && *v == token),
                        "round {i}: the token {token} is the one its script drew: {fields:?}"
                    );
                }
                completed += 1;
                // The release cut short too (it is sent again in the background).
                let _ = cut_after(i % 50, guard.release()).await;
            }
            None => cut += 1,
        }
        free(format!("round {i} (cut after {i} turns)")).await;
    }
    eprintln!("completed {completed}, cut {cut}");
    assert!(completed > 0 && cut > 0, "completed {completed}, cut {cut}");
}
