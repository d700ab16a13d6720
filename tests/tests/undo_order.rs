//! An acquisition whose outcome the client never learned (its reply did not come within
//! the response timeout) is undone in the background. The undo can run *before* the
//! acquisition itself: the request sits unread on a connection the client gave up (a
//! paused server, a slow path), and the undo goes out on another. The late acquisition
//! then takes the lock for nobody, for a whole lease. It must be freed within a bound.
//!
//! Private server behind the fault proxy: the connection that carries the acquisition
//! holds its bytes until the undo has run on another connection, then lets them go.

use std::time::{Duration, Instant};

use distlock::{Lease, LockKind, Registry};
use distlock_tests::proxy::Proxy;
use distlock_tests::RedisProcess;

/// The backend's response timeout.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// The lease the late acquisition asks for: far longer than [`BOUND`], so a lock freed by
/// its lease running out cannot pass for one freed by the library.
const LEASE_MS: u64 = 27_183;
/// How soon after the late acquisition runs its lock must be free again (the docs state
/// 3 s; generous here for a loaded machine).
const BOUND: Duration = Duration::from_secs(8);

/// Scripts run on `server` so far (`FCALL`, `EVALSHA` and `EVAL` calls, from `INFO commandstats`).
async fn scripts_run(server: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(server)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| {
            ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The function name of the script that acquires `target` in `protocol` (the server loads
/// distlock's function library), as an `FCALL` carries it: what the proxy holds on (the
/// release, which carries the lease too in Redisson's format, is another script; the
/// library's source, sent once when it is loaded, names it in quotes).
fn acquire_needle(protocol: &str, target: Target) -> String {
    use distlock::__private::scripts as s;
    let source = match (protocol, target) {
        ("redisson", Target::Lock(LockKind::Reentrant)) => s::REDISSON_LOCK,
        ("redisson", Target::Lock(LockKind::Fair)) => s::REDISSON_FAIR_LOCK,
        ("redisson", Target::Lock(LockKind::Read)) => s::REDISSON_READ_LOCK,
        ("redisson", Target::Lock(LockKind::Write)) => s::REDISSON_WRITE_LOCK,
        (_, Target::Lock(LockKind::Reentrant)) => s::ACQUIRE,
        (_, Target::Lock(LockKind::Fair)) => s::FAIR_ACQUIRE,
        (_, Target::Lock(LockKind::Read | LockKind::Write)) => s::RW_ACQUIRE,
        (_, Target::Semaphore) => s::SEM_ACQUIRE,
        (_, Target::Lock(other)) => panic!("no acquire script here for {other:?}"),
    };
    let function = distlock::__private::function_of(source).expect("a script of the protocol");
    format!("\r\n{function}\r\n")
}

/// A private server behind the fault proxy, two registries of `protocol` through the proxy
/// (response timeout [`RESPONSE_TIMEOUT`]), and a connection straight to the server.
struct Setup {
    _server: RedisProcess,
    proxy: Proxy,
    reg: Registry,
    other: Registry,
    direct: redis::aio::MultiplexedConnection,
}

async fn setup(protocol: &str) -> Setup {
    let server = RedisProcess::start();
    let proxy = Proxy::start(&server.addr());
    let config = format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{}\"\nprotocol = \"{protocol}\"\nresponse_timeout = \"{}ms\"\nconnect_timeout = \"300ms\"\n",
        proxy.url(),
        RESPONSE_TIMEOUT.as_millis()
    );
    let reg = Registry::from_str(&config).await.unwrap();
    let other = Registry::from_str(&config).await.unwrap();
    let direct = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    Setup {
        _server: server,
        proxy,
        reg,
        other,
        direct,
    }
}

/// Let the one connection the proxy holds go on to the server, and wait until the script
/// it carries has run (`what` names it in the failure): when that was.
async fn run_the_held_attempt(s: &mut Setup, what: &str) -> Instant {
    let ran = scripts_run(&mut s.direct).await;
    assert_eq!(s.proxy.release_held(), 1, "{what}: one connection held");
    let late = Instant::now();
    while scripts_run(&mut s.direct).await == ran {
        assert!(
            late.elapsed() < Duration::from_secs(5),
            "{what}: the held attempt never ran"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    late
}

/// In a task of its own: acquire `key` as `kind` on `reg` (waiting up to 20 s) with a fixed
/// `lease`, and release it; with `hold_first`, the proxy holds the first attempt, and this
/// returns once it does (the hold is then off for the connections that come after).
async fn acquire_with_the_first_attempt_held(
    s: &Setup,
    reg: &Registry,
    key: &str,
    kind: LockKind,
    lease: Duration,
    needle: &str,
) -> tokio::task::JoinHandle<Result<(), String>> {
    s.proxy.set_hold_on_send(Some(needle.as_bytes()));
    let (reg, key) = (reg.clone(), key.to_owned());
    let task = tokio::spawn(async move {
        let g = reg
            .lock(&key)
            .kind(kind)
            .lease(Lease::Fixed(lease))
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .map_err(|e| e.to_string())?;
        g.release().await.map_err(|e| e.to_string())
    });
    let start = Instant::now();
    while s.proxy.held_flows() == 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "no attempt held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    s.proxy.set_hold_on_send(None);
    task
}

/// What is acquired late, and how a second owner finds it free.
#[derive(Clone, Copy, Debug)]
enum Target {
    Lock(LockKind),
    Semaphore,
}

/// One try of `target` on `key` with the held lease: `Ok(true)` acquired (and released).
async fn try_once(
    reg: &Registry,
    key: &str,
    target: Target,
    lease: Duration,
) -> Result<bool, String> {
    let released = match target {
        Target::Lock(kind) => {
            let lock = reg.lock(key).kind(kind).lease(Lease::Fixed(lease));
            match lock.try_acquire().await.map_err(|e| e.to_string())? {
                Some(g) => g.release().await,
                None => return Ok(false),
            }
        }
        Target::Semaphore => {
            let sem = reg.semaphore(key, 1).lease(Lease::Fixed(lease));
            match sem.try_acquire(1).await.map_err(|e| e.to_string())? {
                Some(g) => g.release().await,
                None => return Ok(false),
            }
        }
    };
    released.map(|()| true).map_err(|e| e.to_string())
}

/// The late acquisition of `target`, on a backend of `protocol`: it must not hold the
/// lock for its lease.
async fn a_late_acquisition_is_undone(protocol: &str, target: Target) {
    let mut s = setup(protocol).await;
    let (reg, other) = (s.reg.clone(), s.other.clone());
    let key = format!("late-{protocol}-{target:?}");
    // Every connection is up and has run the scripts once.
    for r in [&reg, &other] {
        assert_eq!(
            try_once(r, &key, target, Duration::from_secs(5)).await,
            Ok(true)
        );
    }
    // The acquisition's bytes wait in the proxy; the client gives up on it.
    s.proxy
        .set_hold_on_send(Some(acquire_needle(protocol, target).as_bytes()));
    let before = scripts_run(&mut s.direct).await;
    let lease = Duration::from_millis(LEASE_MS);
    let outcome = try_once(&reg, &key, target, lease).await;
    assert!(
        outcome.is_err(),
        "{target:?}: the held acquisition got an answer: {outcome:?}"
    );
    assert_eq!(
        s.proxy.held_flows(),
        1,
        "{target:?}: one connection holds the acquisition"
    );
    // Its undo runs first, on another connection.
    let start = Instant::now();
    while scripts_run(&mut s.direct).await == before {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{target:?}: no undo ran on another connection within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Then the acquisition: it runs, for nobody.
    let late = run_the_held_attempt(&mut s, &format!("{target:?}")).await;
    // A second owner finds the lock free within the bound (a writer for a read lock).
    let probe = match target {
        Target::Lock(LockKind::Read) => Target::Lock(LockKind::Write),
        other => other,
    };
    loop {
        if try_once(&other, &key, probe, Duration::from_secs(5)).await == Ok(true) {
            break;
        }
        assert!(
            late.elapsed() < BOUND,
            "{protocol} {target:?}: the late acquisition still holds the lock {BOUND:?} after it ran \
             (its lease is {LEASE_MS} ms)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "{protocol} {target:?}: free {:?} after the late acquisition ran",
        late.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_run_after_its_undo_is_undone_again() {
    for target in [
        Target::Lock(LockKind::Reentrant),
        Target::Lock(LockKind::Fair),
        Target::Lock(LockKind::Read),
        Target::Lock(LockKind::Write),
        Target::Semaphore,
    ] {
        a_late_acquisition_is_undone("distlock", target).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_format_acquisition_run_after_its_undo_is_undone_again() {
    for target in [
        Target::Lock(LockKind::Reentrant),
        Target::Lock(LockKind::Fair),
        Target::Lock(LockKind::Read),
        Target::Lock(LockKind::Write),
    ] {
        a_late_acquisition_is_undone("redisson", target).await;
    }
}

/// A Redisson-format fair waiter whose attempt got no answer in time goes on under a new
/// owner field and leaves the queue under the old one. The attempt it gave up on can reach
/// the server after that cancel, and queue the old field for the whole wait: every later
/// waiter would then wait behind a place nobody takes. The cancel must catch it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_queue_place_taken_after_its_cancel_is_cancelled_again() {
    let mut s = setup("redisson").await;
    let (reg, other) = (s.reg.clone(), s.other.clone());
    let key = "late-fair-place";
    let fair = Target::Lock(LockKind::Fair);
    for r in [&reg, &other] {
        assert_eq!(
            try_once(r, key, fair, Duration::from_secs(5)).await,
            Ok(true)
        );
    }
    // Another owner holds the lock, so the waiter's attempts queue.
    let held = other
        .lock(key)
        .kind(LockKind::Fair)
        .lease(Lease::Fixed(Duration::from_secs(20)))
        .acquire()
        .await
        .unwrap();
    // The waiter's first attempt waits in the proxy; the waiter gives up on it.
    let before = scripts_run(&mut s.direct).await;
    let needle = acquire_needle("redisson", fair);
    let secs = Duration::from_secs(5);
    let waiter =
        acquire_with_the_first_attempt_held(&s, &reg, key, LockKind::Fair, secs, &needle).await;
    let start = Instant::now();
    // Its cancel (and its attempt under a new field) run first, on other connections.
    while scripts_run(&mut s.direct).await < before + 2 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no cancel ran on another connection within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Then the attempt under the old field: it queues, for nobody.
    let late = run_the_held_attempt(&mut s, "the attempt").await;
    held.release().await.unwrap();
    // The waiter gets the lock and lets it go; then the lock is free for anyone within the
    // bound, not only after the old field's place runs out with the wait.
    let outcome = tokio::time::timeout(BOUND, waiter)
        .await
        .expect("the waiter got the lock within the bound")
        .unwrap();
    assert_eq!(outcome, Ok(()), "the waiter");
    loop {
        if try_once(&other, key, fair, Duration::from_secs(5)).await == Ok(true) {
            break;
        }
        assert!(
            late.elapsed() < BOUND,
            "a place queued after its cancel still blocks the fair lock {BOUND:?} after it ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "fair: free {:?} after the late place was taken",
        late.elapsed()
    );
}

/// An acquisition whose first attempt got no answer in time is retried with the same level,
/// and the retry takes the lock. The first attempt can still reach the server after that
/// hold has been released: on a free lock it takes it again, for nobody, for a whole lease;
/// refused (a write lock another writer holds), it queues the writer's place again, and
/// readers (refused while a writer waits) would wait until its deadline. Either must be
/// undone within the bound.
async fn a_retried_acquisitions_late_first_attempt_is_undone(kind: LockKind, held: bool) {
    let mut s = setup("distlock").await;
    let (reg, other) = (s.reg.clone(), s.other.clone());
    let key = format!("late-retried-{kind:?}-{held}");
    let target = Target::Lock(kind);
    for r in [&reg, &other] {
        assert_eq!(
            try_once(r, &key, target, Duration::from_secs(5)).await,
            Ok(true)
        );
    }
    // The first attempt waits in the proxy; the retry, on another connection, takes the
    // lock, and the hold is released.
    let needle = acquire_needle("distlock", target);
    let lease = Duration::from_millis(LEASE_MS);
    let acquiring = acquire_with_the_first_attempt_held(&s, &reg, &key, kind, lease, &needle).await;
    let outcome = tokio::time::timeout(Duration::from_secs(10), acquiring)
        .await
        .expect("the retry took the lock")
        .unwrap();
    assert_eq!(outcome, Ok(()), "{kind:?}: the retried acquisition");
    // With `held`, another owner holds when the first attempt runs: refused, it queues.
    let holding = match held {
        true => Some(
            other
                .lock(&key)
                .kind(kind)
                .lease(Lease::Fixed(Duration::from_secs(20)))
                .acquire()
                .await
                .unwrap(),
        ),
        false => None,
    };
    let late = run_the_held_attempt(&mut s, &format!("{kind:?}")).await;
    if let Some(g) = holding {
        g.release().await.unwrap();
    }
    // Nobody holds or waits: the lock is free within the bound (a reader gets in where a
    // writer's place would refuse it).
    let probe = match kind {
        LockKind::Write => Target::Lock(LockKind::Read),
        _ => target,
    };
    loop {
        if try_once(&other, &key, probe, Duration::from_secs(5)).await == Ok(true) {
            break;
        }
        assert!(
            late.elapsed() < BOUND,
            "{kind:?} (held: {held}): the late first attempt still keeps the lock from others \
             {BOUND:?} after it ran (its lease is {LEASE_MS} ms)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "{kind:?} (held: {held}): free {:?} after the late first attempt ran",
        late.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_acquisitions_late_first_attempt_takes_nothing_for_long() {
    for (kind, held) in [
        (LockKind::Reentrant, false),
        (LockKind::Write, false),
        (LockKind::Write, true),
        (LockKind::Fair, true),
    ] {
        a_retried_acquisitions_late_first_attempt_is_undone(kind, held).await;
    }
}
