//! Nested acquisitions of one name across kinds, in one task: every chain of two and of
//! three acquisitions (reentrant, fair, read, write, run-once, multi-key; a semaphore or a
//! leader innermost) either acquires or fails at once with an error that is not a
//! `Timeout` — a task never waits for its own hold — and leaves the name free for every
//! kind afterwards. On a real redis-server, in distlock's format and in Redisson's.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use distlock::{Lease, LockError, LockKind, Registry};

/// The wait of every step: a step that waits for its own task's hold times out after it.
const WAIT: Duration = Duration::from_millis(400);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Lock(LockKind),
    /// A reentrant lock with `hold_at_least` (a run-once job).
    RunOnce,
    /// `lock_all([name])`.
    Multi,
    /// `semaphore(name, 2).acquire(1)`: not a lock of the task's context.
    Semaphore,
    /// A leader campaign (its lock is `leader:NAME`; the chain's name is that lock).
    Leader,
}

/// Steps that can enclose others (they have a scope).
const OUTER: [Step; 6] = [
    Step::Lock(LockKind::Reentrant),
    Step::Lock(LockKind::Fair),
    Step::Lock(LockKind::Read),
    Step::Lock(LockKind::Write),
    Step::RunOnce,
    Step::Multi,
];

/// Every step, innermost too.
const ANY: [Step; 8] = [
    Step::Lock(LockKind::Reentrant),
    Step::Lock(LockKind::Fair),
    Step::Lock(LockKind::Read),
    Step::Lock(LockKind::Write),
    Step::RunOnce,
    Step::Multi,
    Step::Semaphore,
    Step::Leader,
];

/// What one step did: acquired, or failed (how, after how long).
#[derive(Debug)]
struct Outcome {
    step: Step,
    result: Result<(), String>,
    timeout: bool,
    took: Duration,
}

/// A guard of any step, with the scope to run the next step in (`None`: innermost only).
enum Guard {
    Lock(distlock::LockGuard),
    Multi(distlock::MultiLockGuard),
    Semaphore(distlock::SemaphoreGuard),
    Leader(Box<distlock::LeaderGuard>),
}

async fn take(reg: &Registry, name: &str, step: Step) -> Result<Guard, LockError> {
    let lock = |kind| {
        reg.lock(name)
            .kind(kind)
            .wait(WAIT)
            .lease(Lease::Fixed(Duration::from_secs(10)))
    };
    Ok(match step {
        Step::Lock(kind) => Guard::Lock(lock(kind).acquire().await?),
        Step::RunOnce => Guard::Lock(
            lock(LockKind::Reentrant)
                .hold_at_least(Duration::from_millis(1))
                .acquire()
                .await?,
        ),
        Step::Multi => Guard::Multi(reg.lock_all([name]).wait(WAIT).acquire().await?),
        Step::Semaphore => Guard::Semaphore(reg.semaphore(name, 2).wait(WAIT).acquire(1).await?),
        Step::Leader => {
            let election = name.strip_prefix("leader:").expect("a leader's lock name");
            Guard::Leader(Box::new(reg.leader(election).wait(WAIT).campaign().await?))
        }
    })
}

/// Take `steps[0]`, run the rest inside its scope, release it; every step's outcome.
fn chain<'a>(
    reg: &'a Registry,
    name: &'a str,
    steps: &'a [Step],
) -> Pin<Box<dyn Future<Output = Vec<Outcome>> + Send + 'a>> {
    Box::pin(async move {
        let Some((&step, rest)) = steps.split_first() else {
            return Vec::new();
        };
        let start = Instant::now();
        let taken = take(reg, name, step).await;
        let took = start.elapsed();
        let mut out = vec![Outcome {
            step,
            timeout: matches!(taken, Err(LockError::Timeout { .. })),
            result: taken.as_ref().map(|_| ()).map_err(|e| e.to_string()),
            took,
        }];
        let Ok(guard) = taken else {
            return out;
        };
        let inner = match &guard {
            Guard::Lock(g) => Some(g.scope(chain(reg, name, rest)).await),
            Guard::Multi(g) => Some(g.scope(chain(reg, name, rest)).await),
            Guard::Semaphore(_) | Guard::Leader(_) => None,
        };
        out.extend(inner.unwrap_or_default());
        let released = match guard {
            Guard::Lock(g) => g.release().await,
            Guard::Multi(g) => g.release().await,
            Guard::Semaphore(g) => g.release().await,
            Guard::Leader(g) => g.resign().await,
        };
        if let Err(e) = released {
            out.push(Outcome {
                step,
                result: Err(format!("release: {e}")),
                timeout: false,
                took: Duration::ZERO,
            });
        }
        out
    })
}

/// Every kind can take the name afresh, from another task (another owner), within a
/// short wait (a run-once step keeps the lock for its 1 ms `hold_at_least`).
async fn free_for_every_kind(reg: &Registry, name: &str) -> Vec<String> {
    let mut busy = Vec::new();
    for kind in [
        LockKind::Reentrant,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ] {
        let (reg, name) = (reg.clone(), name.to_owned());
        let got = tokio::spawn(async move {
            let lock = reg.lock(name.as_str()).kind(kind);
            match lock.wait(Duration::from_millis(200)).acquire().await {
                Ok(g) => g.release().await.map(|_| true).map_err(|e| e.to_string()),
                Err(LockError::Timeout { .. }) => Ok(false),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
        .expect("task");
        if got != Ok(true) {
            busy.push(format!("{kind:?}: {got:?}"));
        }
    }
    busy
}

/// Every chain of two and of three steps on `reg`; panics listing every chain where a
/// step timed out on its own task's hold, or after which the name stayed taken.
async fn every_chain(reg: &Registry, format: &str) {
    let mut chains: Vec<Vec<Step>> = Vec::new();
    for a in OUTER {
        for b in ANY {
            chains.push(vec![a, b]);
        }
        for b in OUTER {
            for c in ANY {
                chains.push(vec![a, b, c]);
            }
        }
    }
    let mut bad = Vec::new();
    let (mut acquired, mut refused) = (0usize, 0usize);
    for steps in &chains {
        let name = format!("leader:{}", common::unique("nested-kinds"));
        let outcomes = chain(reg, &name, steps).await;
        for o in &outcomes {
            match &o.result {
                Ok(()) => acquired += 1,
                Err(_) => refused += 1,
            }
            if o.timeout || (o.result.is_err() && o.took >= WAIT) {
                bad.push(format!(
                    "{steps:?}: {:?} waited for its own task ({:?}): {:?}",
                    o.step, o.took, o.result
                ));
            }
            if let Err(e) = &o.result {
                if e.starts_with("release") {
                    bad.push(format!("{steps:?}: {:?} {e}", o.step));
                }
            }
        }
        let busy = free_for_every_kind(reg, &name).await;
        if !busy.is_empty() {
            bad.push(format!("{steps:?}: taken afterwards: {busy:?}"));
        }
    }
    println!(
        "{format}: {} chains, {acquired} steps acquired, {refused} refused at once",
        chains.len()
    );
    assert!(acquired > 0, "{format}: no step acquired anything");
    assert!(
        bad.is_empty(),
        "{format}: {} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

async fn single_with(extra: &str) -> Registry {
    let url = distlock_tests::single_url();
    Registry::from_str(&format!(
        "[backends.main]\nmode = \"single\"\nurl = \"{url}\"\nresponse_timeout = \"2s\"\n{extra}"
    ))
    .await
    .expect("connect the test redis-server (scripts/test.sh starts it)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_kinds_never_wait_for_their_own_task_distlock_format() {
    every_chain(&single_with("").await, "distlock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_kinds_never_wait_for_their_own_task_redisson_format() {
    every_chain(&single_with("protocol = \"redisson\"\n").await, "redisson").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_kinds_never_wait_for_their_own_task_memory() {
    let reg = Registry::from_str("[backends.main]\nmode = \"memory\"\n")
        .await
        .expect("memory backend");
    every_chain(&reg, "memory").await;
}

/// Two `join!` siblings of one task, each taking the same kind of lock of a name inside
/// the task's hold of another kind of that name: never both inside at once (they take it
/// in turns, or the second is refused). Every outer kind, every inner kind that nests.
async fn siblings_across_kinds_exclude(reg: &Registry, format: &str) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let kinds = [
        LockKind::Reentrant,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ];
    let mut bad = Vec::new();
    for outer_kind in kinds {
        for inner in kinds {
            if inner == LockKind::Read {
                continue; // readers share
            }
            let name = common::unique("siblings-across-kinds");
            let Ok(outer) = reg.lock(name.as_str()).kind(outer_kind).acquire().await else {
                continue;
            };
            let inside = Arc::new(AtomicU32::new(0));
            let most = Arc::new(AtomicU32::new(0));
            let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
            let section = || {
                let (reg, name, inside, most, tokens) = (
                    reg.clone(),
                    name.clone(),
                    inside.clone(),
                    most.clone(),
                    tokens.clone(),
                );
                async move {
                    let Ok(g) = reg
                        .lock(name.as_str())
                        .kind(inner)
                        .wait(WAIT)
                        .acquire()
                        .await
                    else {
                        return;
                    };
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokens.lock().unwrap().push(g.fencing_token());
                    // the section's work (not a synchronisation): a sibling must not come in
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let _ = g.release().await;
                }
            };
            outer
                .scope(async { tokio::join!(section(), section()) })
                .await;
            let most = most.load(Ordering::SeqCst);
            if most > 1 {
                bad.push(format!(
                    "{format}: {inner:?} siblings inside {outer_kind:?}: {most} inside at once, tokens {:?}",
                    tokens.lock().unwrap()
                ));
            }
            let _ = outer.release().await;
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn siblings_across_kinds_exclude_memory() {
    let reg = Registry::from_str("[backends.main]\nmode = \"memory\"\n")
        .await
        .expect("memory backend");
    siblings_across_kinds_exclude(&reg, "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn siblings_across_kinds_exclude_distlock_format() {
    siblings_across_kinds_exclude(&single_with("").await, "distlock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn siblings_across_kinds_exclude_redisson_format() {
    siblings_across_kinds_exclude(&single_with("protocol = \"redisson\"\n").await, "redisson")
        .await;
}
