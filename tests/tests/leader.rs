//! Leader election (`distlock::Leader`) on real servers: three OS processes campaign (on
//! single, cluster and sentinel); the
//! leader is SIGKILLed and a new one leads within the lease and its margin; a resigning
//! leader's successor is woken by pub/sub; observers see every change; the leadership
//! intervals (each process records [elected, lost/resigning], the killed one ends at the
//! kill) never overlap and the epochs grow in the order of election. In-process: on single,
//! cluster, sentinel and memory, the observers, resign, cancellation and bad input.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use common::unique;
use distlock::inspect::LeaderInfo;
use distlock::{LockError, Registry};
use distlock_tests::history::now_ns;
use distlock_tests::{cluster_urls, redlock_urls, sentinel_master_name, sentinel_urls, single_url};
use tokio::sync::{mpsc, watch};

/// The test backends' `watchdog_timeout` (the leader's lease) and its lost-signal margin
/// (a tenth, at least 20 ms).
const LEASE: Duration = Duration::from_secs(1);
const MARGIN: Duration = Duration::from_millis(100);

fn quoted(urls: &[String]) -> String {
    urls.iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn registry(backend: &str) -> Registry {
    Registry::from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\n{backend}\n"
    ))
    .await
    .unwrap_or_else(|e| panic!("connect {backend:?} (scripts/test.sh starts it): {e}"))
}

async fn registries() -> Vec<(&'static str, Registry)> {
    vec![
        (
            "single",
            registry(&format!("mode = \"single\"\nurl = \"{}\"", single_url())).await,
        ),
        (
            "cluster",
            registry(&format!(
                "mode = \"cluster\"\nnodes = [{}]",
                quoted(&cluster_urls())
            ))
            .await,
        ),
        (
            "sentinel",
            registry(&format!(
                "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
                sentinel_master_name(),
                quoted(&sentinel_urls())
            ))
            .await,
        ),
        ("memory", registry("mode = \"memory\"").await),
    ]
}

/// Waits (at most `within`) until the observer's value satisfies `f`; returns how long.
async fn until_seen(
    who: &mut watch::Receiver<Option<LeaderInfo>>,
    within: Duration,
    what: &str,
    f: impl Fn(&Option<LeaderInfo>) -> bool,
) -> Duration {
    let start = Instant::now();
    let seen = tokio::time::timeout(within, async {
        loop {
            if f(&who.borrow_and_update()) {
                return;
            }
            who.changed().await.expect("the observer task runs");
        }
    })
    .await;
    assert!(
        seen.is_ok(),
        "{what}: not seen within {within:?}; last {:?}",
        *who.borrow()
    );
    start.elapsed()
}

fn leads(info: &str) -> impl Fn(&Option<LeaderInfo>) -> bool + '_ {
    move |v| v.as_ref().is_some_and(|l| l.info == info)
}

/// Observers see the leader and its changes promptly (announced by pub/sub), epochs grow,
/// a resigning leader wakes the waiting candidate promptly, and `lost()` fires when the
/// leader's lock is deleted.
#[tokio::test]
async fn observe_resign_and_lose() {
    for (mode, reg) in registries().await {
        let name = unique("observe");
        let mut who = reg.leader(name.as_str()).changes().await.expect("observe");
        assert_eq!(*who.borrow(), None, "{mode}: nobody leads yet");
        assert_eq!(
            reg.leader(name.as_str()).current().await.expect("read"),
            None
        );

        let a = reg
            .leader(name.as_str())
            .info("a")
            .campaign()
            .await
            .expect("a leads");
        assert!(a.is_leader());
        let took = until_seen(&mut who, Duration::from_secs(3), mode, leads("a")).await;
        println!("{mode}: elected -> observer updated in {took:?}");
        assert!(
            took < Duration::from_millis(500),
            "{mode}: the observer was not woken by the announce: {took:?}"
        );
        assert_eq!(who.borrow().as_ref().map(|l| l.epoch), Some(a.epoch()));
        let now = reg.leader(name.as_str()).current().await.expect("read");
        assert_eq!(
            now.map(|l| (l.info, l.epoch)),
            Some(("a".to_string(), a.epoch()))
        );

        // A waiting candidate, woken by the resignation.
        let b = {
            let reg = reg.clone();
            let name = name.clone();
            tokio::spawn(async move {
                let g = reg.leader(name.as_str()).info("b").campaign().await;
                (g, Instant::now())
            })
        };
        // b asleep, waiting for a's release.
        let asleep = Instant::now() + Duration::from_secs(5);
        while reg.waiting("main") != Some(1) {
            assert!(Instant::now() < asleep, "{mode}: b never waited");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let a_epoch = a.epoch();
        let resigned = Instant::now();
        a.resign().await.expect("resign");
        let (b, elected) = tokio::time::timeout(Duration::from_secs(5), b)
            .await
            .expect("b elected")
            .expect("task");
        let b = b.expect("b leads");
        let gap = elected.duration_since(resigned);
        println!("{mode}: resign -> next leader elected in {gap:?}");
        assert!(
            gap < Duration::from_millis(500),
            "{mode}: not woken by pub/sub: {gap:?}"
        );
        assert!(b.epoch() > a_epoch, "{mode}: epochs grow");
        until_seen(&mut who, Duration::from_secs(3), mode, leads("b")).await;

        // Deleted under the leader: lost() fires, is_leader() turns false, observers see
        // nobody.
        assert!(reg
            .lock(format!("leader:{name}"))
            .force_unlock()
            .await
            .expect("force"));
        let lost = tokio::time::timeout(Duration::from_secs(3), b.lost())
            .await
            .unwrap_or_else(|_| panic!("{mode}: lost() did not fire"));
        assert!(matches!(lost, LockError::LeaseLost { .. }), "{lost:?}");
        assert!(!b.is_leader());
        until_seen(&mut who, Duration::from_secs(3), mode, Option::is_none).await;
        assert!(matches!(b.resign().await, Err(LockError::NotHeld { .. })));

        // A dropped guard resigns (in the background), announced to observers.
        let c = reg
            .leader(name.as_str())
            .info("c")
            .campaign()
            .await
            .expect("c");
        until_seen(&mut who, Duration::from_secs(3), mode, leads("c")).await;
        drop(c);
        let took = until_seen(&mut who, Duration::from_secs(3), mode, Option::is_none).await;
        assert!(took < Duration::from_millis(500), "{mode}: {took:?}");
    }
}

/// A campaign dropped (timed out, aborted, its `wait` run out) at any point leaves nothing
/// held: the next candidate is elected at once.
#[tokio::test]
async fn a_dropped_campaign_leaves_nothing_held() {
    for (mode, reg) in registries().await {
        let name = unique("drop");
        let a = reg.leader(name.as_str()).campaign().await.expect("a leads");
        let waiting = tokio::time::timeout(
            Duration::from_millis(200),
            reg.leader(name.as_str()).campaign(),
        )
        .await;
        assert!(waiting.is_err(), "{mode}: a leads, the campaign waits");
        let timed_out = reg
            .leader(name.as_str())
            .wait(Duration::from_millis(100))
            .campaign()
            .await;
        assert!(
            matches!(timed_out, Err(LockError::Timeout { .. })),
            "{mode}: {timed_out:?}"
        );
        a.resign().await.expect("resign");
        // Campaigns aborted at every point of their life (before sending, in flight, after
        // winning): each leaves nothing held, once its background release has run.
        for delay_us in [0u64, 200, 500, 1000, 2000, 5000] {
            let task = {
                let (reg, name) = (reg.clone(), name.clone());
                tokio::spawn(async move { reg.leader(name.as_str()).campaign().await })
            };
            tokio::time::sleep(Duration::from_micros(delay_us)).await;
            task.abort();
            let _ = task.await;
            let next = reg
                .leader(name.as_str())
                .wait(Duration::from_secs(3))
                .campaign()
                .await
                .unwrap_or_else(|e| {
                    panic!("{mode}: an aborted campaign (after {delay_us} µs) left it held: {e}")
                });
            next.resign().await.expect("resign");
        }
        assert_eq!(
            reg.leader(name.as_str()).current().await.expect("read"),
            None
        );
    }
}

/// Bad input is an error, never a panic; a redlock backend says leader election is
/// unsupported there, naming the mode.
#[tokio::test]
async fn bad_input_and_unsupported_modes() {
    let reg = registry(&format!("mode = \"single\"\nurl = \"{}\"", single_url())).await;
    let empty = reg.leader("").campaign().await;
    assert!(
        matches!(empty, Err(LockError::InvalidKey { .. })),
        "{empty:?}"
    );
    assert!(matches!(
        reg.leader("").current().await,
        Err(LockError::InvalidKey { .. })
    ));
    let big = reg
        .leader(unique("big"))
        .info("x".repeat(distlock::Leader::MAX_INFO + 1))
        .campaign()
        .await;
    assert!(matches!(big, Err(LockError::InvalidKey { .. })), "{big:?}");
    let long = reg.leader("n".repeat(2000)).campaign().await;
    assert!(
        matches!(long, Err(LockError::InvalidKey { .. })),
        "{long:?}"
    );
    let nobackend = reg.leader("x").backend("nope").campaign().await;
    assert!(
        matches!(nobackend, Err(LockError::NoSuchBackend { .. })),
        "{nobackend:?}"
    );

    let redlock = registry(&format!(
        "mode = \"redlock\"\nnodes = [{}]",
        quoted(&redlock_urls())
    ))
    .await;
    for err in [
        redlock.leader("x").campaign().await.err(),
        redlock.leader("x").current().await.err(),
        redlock.leader("x").changes().await.err(),
    ] {
        match err {
            Some(LockError::Unsupported {
                kind: distlock::Feature::Leader,
                mode: distlock::config::ModeKind::Redlock,
                ..
            }) => {}
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}

/// `Leader::observe_once` / `Leader::observe` on the global registry.
#[tokio::test]
async fn observe_on_the_global_registry() {
    distlock::init_from_str(&format!(
        "[defaults]\nwatchdog_timeout = \"1s\"\n[backends.main]\nmode = \"single\"\nurl = \"{}\"\n",
        single_url()
    ))
    .await
    .expect("init");
    let name = unique("global");
    assert_eq!(
        distlock::Leader::observe_once(name.as_str())
            .await
            .expect("read"),
        None
    );
    let mut who = distlock::Leader::observe(name.as_str())
        .await
        .expect("observe");
    let g = distlock::Leader::new(name.as_str())
        .info("me")
        .campaign()
        .await
        .expect("lead");
    assert_eq!(
        distlock::Leader::observe_once(name.as_str())
            .await
            .expect("read")
            .as_deref(),
        Some("me")
    );
    until_seen(&mut who, Duration::from_secs(3), "global", leads("me")).await;
    g.resign().await.expect("resign");
    until_seen(&mut who, Duration::from_secs(3), "global", Option::is_none).await;
}

// ---- three OS processes ----

#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    what: String,
    id: String,
    epoch: u64,
    t: u64,
}

struct Worker {
    id: String,
    child: Child,
    stdin: ChildStdin,
}

fn spawn_workers(
    mode: &str,
    nodes: &str,
    name: &str,
    n: usize,
) -> (Vec<Worker>, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let workers = (0..n)
        .map(|i| spawn_worker(mode, nodes, name, &format!("w{i}"), &tx))
        .collect();
    (workers, rx)
}

/// One `lock-worker leader` process, its events sent to `tx`.
fn spawn_worker(
    mode: &str,
    nodes: &str,
    name: &str,
    id: &str,
    tx: &mpsc::UnboundedSender<Event>,
) -> Worker {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lock-worker"))
        .args(["leader", mode, nodes, name, "1s", id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn lock-worker");
    let stdout = child.stdout.take().expect("stdout");
    let stdin = child.stdin.take().expect("stdin");
    let tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let parts: Vec<&str> = line.split_whitespace().collect();
            if let [what, id, epoch, t] = parts.as_slice() {
                let _ = tx.send(Event {
                    what: what.to_string(),
                    id: id.to_string(),
                    epoch: epoch.parse().expect("epoch"),
                    t: t.parse().expect("t"),
                });
            }
        }
    });
    Worker {
        id: id.to_owned(),
        child,
        stdin,
    }
}

async fn next_event(
    rx: &mut mpsc::UnboundedReceiver<Event>,
    within: Duration,
    what: &str,
) -> Event {
    tokio::time::timeout(within, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("{what}: no event within {within:?}"))
        .unwrap_or_else(|| panic!("{what}: every worker's output ended"))
}

/// Waits for the next `ELECTED`, keeping every event seen on the way in `log`.
async fn next_elected(
    rx: &mut mpsc::UnboundedReceiver<Event>,
    log: &mut Vec<Event>,
    within: Duration,
    what: &str,
) -> Event {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let e = next_event(rx, left, what).await;
        log.push(e.clone());
        if e.what == "ELECTED" {
            return e;
        }
    }
}

/// The event `what` of worker `id`: from the log, or the next events read (within 3 s).
async fn logged(
    rx: &mut mpsc::UnboundedReceiver<Event>,
    log: &mut Vec<Event>,
    what: &str,
    id: &str,
) -> Event {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        if let Some(e) = log.iter().find(|e| e.what == what && e.id == id) {
            return e.clone();
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let e = next_event(rx, left, what).await;
        log.push(e);
    }
}

/// The leadership intervals [elected, end] (end: `LOST` or `RESIGNING` of that epoch, else
/// the worker's kill time) are disjoint, and the epochs grow strictly in election order.
fn check_intervals(mode: &str, log: &[Event], killed: &[(String, u64)]) {
    let mut intervals: Vec<(u64, u64, u64, String)> = Vec::new();
    for e in log.iter().filter(|e| e.what == "ELECTED") {
        let end = log
            .iter()
            .find(|x| {
                (x.what == "LOST" || x.what == "RESIGNING") && x.id == e.id && x.epoch == e.epoch
            })
            .map(|x| x.t)
            .or_else(|| killed.iter().find(|(id, _)| *id == e.id).map(|(_, t)| *t))
            .unwrap_or(u64::MAX);
        intervals.push((e.t, end, e.epoch, e.id.clone()));
    }
    intervals.sort();
    for pair in intervals.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a.1 < b.0,
            "{mode}: leaders {} (epoch {}) and {} (epoch {}) overlap: {intervals:?}",
            a.3,
            a.2,
            b.3,
            b.2
        );
        assert!(
            a.2 < b.2,
            "{mode}: epochs do not grow in election order: {intervals:?}"
        );
    }
}

async fn three_processes(mode: &str, nodes: &str, reg: Registry) {
    let name = unique("elect");
    let mut who = reg.leader(name.as_str()).changes().await.expect("observe");
    let (mut workers, mut rx) = spawn_workers(mode, nodes, &name, 3);
    let mut log = Vec::new();

    let first = next_elected(&mut rx, &mut log, Duration::from_secs(15), "first leader").await;
    until_seen(&mut who, Duration::from_secs(3), mode, leads(&first.id)).await;
    assert_eq!(
        who.borrow().as_ref().map(|l| l.epoch),
        Some(first.epoch),
        "{mode}: the observer reports the epoch"
    );

    // SIGKILL the leader: a new one within the lease and its margin (plus scheduling).
    let i = workers
        .iter()
        .position(|w| w.id == first.id)
        .expect("worker");
    let mut dead = workers.remove(i);
    let killed_at = now_ns();
    dead.child.kill().expect("SIGKILL");
    let _ = dead.child.wait();
    let second = next_elected(&mut rx, &mut log, Duration::from_secs(10), "after the kill").await;
    let after_kill = Duration::from_nanos(second.t.saturating_sub(killed_at));
    println!("{mode}: leader SIGKILLed -> next leader elected in {after_kill:?}");
    assert!(
        after_kill < LEASE + MARGIN + Duration::from_millis(900),
        "{mode}: {after_kill:?}"
    );
    assert_ne!(second.id, first.id);
    assert!(second.epoch > first.epoch);
    until_seen(&mut who, Duration::from_secs(3), mode, leads(&second.id)).await;

    // The new leader resigns: the last candidate is woken by pub/sub.
    let j = workers
        .iter()
        .position(|w| w.id == second.id)
        .expect("worker");
    writeln!(workers[j].stdin, "resign").expect("write");
    let third = next_elected(&mut rx, &mut log, Duration::from_secs(10), "after resign").await;
    // Each worker's lines come through a pipe of their own: the resigning worker's may
    // arrive after the new leader's, though it happened first (their times tell).
    let resigning = logged(&mut rx, &mut log, "RESIGNING", &second.id).await.t;
    assert!(
        resigning <= third.t,
        "{mode}: RESIGNING after the next ELECTED"
    );
    let gap = Duration::from_nanos(third.t.saturating_sub(resigning));
    println!("{mode}: leader resigned -> next leader elected in {gap:?}");
    assert!(gap < Duration::from_millis(500), "{mode}: {gap:?}");
    until_seen(&mut who, Duration::from_secs(3), mode, leads(&third.id)).await;

    // The last one resigns: nobody leads, and the observer hears so.
    let k = workers
        .iter()
        .position(|w| w.id == third.id)
        .expect("worker");
    writeln!(workers[k].stdin, "resign").expect("write");
    until_seen(&mut who, Duration::from_secs(3), mode, Option::is_none).await;
    for mut w in workers {
        drop(w.stdin);
        let status = w.child.wait().expect("wait");
        assert!(
            status.success(),
            "{mode}: worker {} failed: {status:?}",
            w.id
        );
    }
    while let Ok(e) = rx.try_recv() {
        log.push(e);
    }
    assert!(
        !log.iter().any(|e| e.what == "LOST"),
        "{mode}: no leader lost its lease here: {log:?}"
    );
    check_intervals(mode, &log, &[(first.id.clone(), killed_at)]);
    assert_eq!(
        reg.leader(name.as_str()).current().await.expect("read"),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_single() {
    let url = single_url();
    let reg = registry(&format!("mode = \"single\"\nurl = \"{url}\"")).await;
    three_processes("single", &url, reg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_cluster() {
    let urls = cluster_urls();
    let reg = registry(&format!("mode = \"cluster\"\nnodes = [{}]", quoted(&urls))).await;
    three_processes("cluster", &urls.join(","), reg).await;
}

/// The leader's link to Redis goes silent (a TCP blackhole: nothing answered, nothing
/// closed): its renewals fail, and its `lost()` fires before the server can expire the
/// lease, so before either other process is elected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_is_told_before_a_successor_leads() {
    let url = single_url();
    let proxy = distlock_tests::proxy::Proxy::start(&distlock_tests::addr_of(&url));
    let name = unique("partition");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut log = Vec::new();
    // w0 through the proxy, elected first; then two candidates straight to Redis.
    let mut workers = vec![spawn_worker("single", &proxy.url(), &name, "w0", &tx)];
    let first = next_elected(&mut rx, &mut log, Duration::from_secs(15), "w0 leads").await;
    assert_eq!(first.id, "w0");
    for id in ["w1", "w2"] {
        workers.push(spawn_worker("single", &url, &name, id, &tx));
    }
    let cut = now_ns();
    proxy.set_blackhole(true);
    let second = next_elected(&mut rx, &mut log, Duration::from_secs(10), "a successor").await;
    assert_ne!(second.id, "w0");
    let lost = log
        .iter()
        .find(|e| e.what == "LOST" && e.id == "w0")
        .unwrap_or_else(|| panic!("w0 was not told before {} was elected: {log:?}", second.id))
        .clone();
    println!(
        "partition: w0 told {:?} after the cut, {:?} before {} was elected",
        Duration::from_nanos(lost.t - cut),
        Duration::from_nanos(second.t.saturating_sub(lost.t)),
        second.id
    );
    assert!(second.epoch > first.epoch);
    check_intervals("partition", &log, &[]);
    for mut w in workers {
        let _ = w.child.kill();
        let _ = w.child.wait();
    }
    proxy.clear();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_sentinel() {
    let (master, sentinels) = (sentinel_master_name(), sentinel_urls());
    let reg = registry(&format!(
        "mode = \"sentinel\"\nmaster_name = \"{master}\"\nsentinels = [{}]",
        quoted(&sentinels)
    ))
    .await;
    let nodes = format!("{master},{}", sentinels.join(","));
    three_processes("sentinel", &nodes, reg).await;
}

/// With its pub/sub silenced (every connection that sends SUBSCRIBE goes half-open), an
/// observer still sees each change within its poll interval (`OBSERVE_POLL`, 1 s) plus a read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_fall_back_to_polling_without_pub_sub() {
    let url = single_url();
    let proxy = distlock_tests::proxy::Proxy::start(&distlock_tests::addr_of(&url));
    proxy.set_silence_on_send(Some(b"SUBSCRIBE"));
    let observer = registry(&format!("mode = \"single\"\nurl = \"{}\"", proxy.url())).await;
    let reg = registry(&format!("mode = \"single\"\nurl = \"{url}\"")).await;
    let name = unique("poll");
    let mut who = observer
        .leader(name.as_str())
        .changes()
        .await
        .expect("observe");
    let bound = distlock::Leader::OBSERVE_POLL + Duration::from_millis(1500);
    for round in 0..2 {
        let info = format!("p{round}");
        let g = reg
            .leader(name.as_str())
            .info(info.as_str())
            .campaign()
            .await
            .expect("lead");
        let took = until_seen(&mut who, bound, "polling", leads(&info)).await;
        println!("without pub/sub: elected -> observer updated in {took:?}");
        g.resign().await.expect("resign");
        let took = until_seen(&mut who, bound, "polling", Option::is_none).await;
        println!("without pub/sub: resigned -> observer updated in {took:?}");
    }
    proxy.clear();
}
