//! Running one schedule: the driver sends each step to its task (or injects the fault),
//! lets it settle, and at the end unwinds every task and checks that every lock used is
//! available again (no leak, recovery after faults).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use distlock::{Lease, LockError};
use tokio::sync::{mpsc, oneshot};

use super::check::{Checker, GRACE, REVOKE_BOUND};
use super::model::{Kind, Step, OWNERS, PERMITS, TASKS};
use super::task::{run_task, Cmd, Op, TaskCtx, HANG};
use super::world::{BackendKind, Format, World};
use super::Plant;

/// After every guard is gone (and the last fault ended), a fresh acquisition of every
/// lock used must succeed within this: the server's reconnection backoff (at most 5 s,
/// docs/design.md "Connections") plus a second. Without faults: the auto lease (1 s)
/// plus a second.
pub const RECOVERY_BOUND: Duration = Duration::from_secs(6);
/// The same without any fault in the schedule.
pub const CLEAN_BOUND: Duration = Duration::from_secs(2);

struct Tasks {
    senders: Vec<mpsc::UnboundedSender<Cmd>>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

fn spawn_tasks(world: &Arc<World>, checker: &Arc<Checker>, prefix: &str, plant: Plant) -> Tasks {
    let mut tasks = Tasks {
        senders: Vec::new(),
        handles: Vec::new(),
    };
    for owner in 0..OWNERS {
        for task in 0..TASKS {
            let (tx, rx) = mpsc::unbounded_channel();
            let ctx = Arc::new(TaskCtx {
                owner,
                task,
                world: world.clone(),
                checker: checker.clone(),
                prefix: prefix.to_owned(),
                plant,
            });
            tasks.senders.push(tx);
            tasks.handles.push(tokio::spawn(run_task(ctx, rx)));
        }
    }
    tasks
}

fn settle(backend: BackendKind) -> Duration {
    match backend {
        BackendKind::Memory => Duration::from_millis(10),
        _ => Duration::from_millis(60),
    }
}

/// Send a step to task `o.t` and give it `settle` to finish (it may go on waiting).
async fn send(tasks: &Tasks, o: u8, t: u8, op: Op, settle: Duration) {
    let (done, rx) = oneshot::channel();
    let i = usize::from(o * TASKS + t);
    if tasks.senders[i].send(Cmd { op, done }).is_ok() {
        let _ = tokio::time::timeout(settle, rx).await;
    }
}

/// Run one schedule; the violations found.
pub async fn run_schedule(
    world: Arc<World>,
    steps: &[Step],
    prefix: &str,
    plant: Plant,
) -> Vec<String> {
    let checker = Checker::for_format(world.format == Format::Redisson);
    if plant == Plant::FenceWithoutCheck {
        checker.fence_unchecked();
    }
    world.schedule_begins(prefix, plant == Plant::HolderTrustsAFlag);
    let tasks = spawn_tasks(&world, &checker, prefix, plant);
    let settle = settle(world.backend);
    let mut used = BTreeSet::new();
    for step in steps {
        step_once(&world, &checker, &tasks, step, prefix, settle, &mut used).await;
    }
    world.fault_end(&checker).await;
    unwind(&checker, tasks).await;
    let deadline = tokio::time::Instant::now() + GRACE.max(REVOKE_BOUND) + Duration::from_secs(1);
    while checker.pending() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bound = if checker.faults() > 0 {
        RECOVERY_BOUND
    } else {
        CLEAN_BOUND
    };
    for (name, family_kind) in used {
        available(&world, &checker, prefix, name, family_kind, bound).await;
    }
    checker.check_fenced();
    world.schedule_ends(checker.faults() > 0);
    checker.violations()
}

async fn step_once(
    world: &Arc<World>,
    checker: &Arc<Checker>,
    tasks: &Tasks,
    step: &Step,
    prefix: &str,
    settle: Duration,
    used: &mut BTreeSet<(u8, KindKey)>,
) {
    match step {
        Step::Acquire(a) => {
            if world.offers(a.kind) {
                used.extend(KindKey::used(a));
            }
            send(tasks, a.owner, a.task, Op::Acquire(a.clone()), settle).await;
        }
        Step::Siblings(a, b) => {
            for x in [a, b].into_iter().filter(|x| world.offers(x.kind)) {
                used.extend(KindKey::used(x));
            }
            send(
                tasks,
                a.owner,
                a.task,
                Op::Siblings(a.clone(), b.clone()),
                settle,
            )
            .await;
        }
        Step::Release { owner, task } => send(tasks, *owner, *task, Op::Release, settle).await,
        Step::Increment { owner, task } => send(tasks, *owner, *task, Op::Increment, settle).await,
        Step::ForceUnlock { owner, name, kind } => {
            force_unlock(world, checker, prefix, *owner, *name, *kind).await
        }
        Step::Sleep(ms) => tokio::time::sleep(Duration::from_millis(u64::from(*ms))).await,
        Step::FaultBegin(f) => world.fault_begin(*f, checker).await,
        Step::FaultEnd => world.fault_end(checker).await,
        Step::Failover => world.failover(checker).await,
        Step::KillClients => world.kill_clients(checker).await,
        Step::ResetConnections { owner, lose_reply } => {
            world.reset_connections(*owner, *lose_reply, checker)
        }
        Step::DeleteKeys(n) => {
            let keys = vec![
                world.key(prefix, *n, Kind::Reentrant),
                world.key(prefix, *n, Kind::Semaphore(1)),
            ];
            world.delete_keys(keys, checker, *n).await;
        }
        Step::DebugSleep(ms) => world.debug_sleep(*ms, checker),
        Step::Differential(e) => super::differ::differential(world, checker, prefix, e).await,
    }
}

async fn force_unlock(
    world: &World,
    checker: &Arc<Checker>,
    prefix: &str,
    owner: u8,
    name: u8,
    kind: Kind,
) {
    // A multi-key lock's and a run-once job's keys are reentrant locks: force_unlock of
    // the name's reentrant lock (which ends a run-once window too).
    let kind = match kind {
        Kind::Multi | Kind::RunOnce => Kind::Reentrant,
        // An election is unlocked as the lock behind it; without elections, nothing to do.
        Kind::Leader if !world.offers(kind) => return,
        k => k,
    };
    if kind == Kind::Reentrant {
        checker.windows_cleared(name);
    }
    let key = world.key(prefix, name, kind);
    let reg = world.owner(owner);
    let live = checker.live_holds(name, kind);
    checker.unlock_sent(name, kind);
    let unoffered = !world.offers(kind);
    let marked = checker.revoking(&live);
    let res = match kind {
        Kind::Semaphore(_) => {
            tokio::time::timeout(HANG, reg.semaphore(&key, PERMITS).force_unlock()).await
        }
        k => {
            tokio::time::timeout(
                HANG,
                reg.lock(&key).kind(super::task_kind(k)).force_unlock(),
            )
            .await
        }
    };
    let who = format!("o{owner} force_unlock {kind} {key}");
    if !matches!(res, Ok(Ok(true))) {
        checker.not_revoked(&marked);
    }
    if unoffered {
        if !matches!(res, Ok(Err(LockError::Unsupported { .. }))) {
            checker.violation(format!(
                "unsupported: {who} on a backend that does not offer it answered {res:?}, not Unsupported"
            ));
        }
        return;
    }
    match res {
        Ok(Ok(true)) => checker.revoked(live),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => checker.error(&who, &e),
        Err(_) => checker.violation(format!("hang: {who} did not return within {HANG:?}")),
    }
}

/// One acquisition per family tells whether all of it is free: write for read-write, every
/// permit for a semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum KindKey {
    Reentrant,
    Fair,
    Rw,
    Semaphore,
    Leader,
}

impl KindKey {
    /// The names and families an acquisition takes.
    fn used(a: &super::model::Acquire) -> Vec<(u8, KindKey)> {
        super::check::names_of(a.name, a.kind)
            .into_iter()
            .map(|n| (n, KindKey::of(a.kind)))
            .collect()
    }

    fn of(k: Kind) -> KindKey {
        match k {
            Kind::Reentrant | Kind::Multi | Kind::RunOnce => KindKey::Reentrant,
            Kind::Leader => KindKey::Leader,
            Kind::Fair => KindKey::Fair,
            Kind::Read | Kind::Write => KindKey::Rw,
            Kind::Semaphore(_) => KindKey::Semaphore,
        }
    }

    fn kind(self) -> Kind {
        match self {
            KindKey::Reentrant => Kind::Reentrant,
            KindKey::Fair => Kind::Fair,
            KindKey::Rw => Kind::Write,
            KindKey::Semaphore => Kind::Semaphore(PERMITS),
            KindKey::Leader => Kind::Leader,
        }
    }
}

/// Every task releases what it holds and ends; one that does not is a hang, one that
/// panicked a violation.
async fn unwind(checker: &Checker, tasks: Tasks) {
    let mut waits = Vec::new();
    for tx in &tasks.senders {
        let (done, rx) = oneshot::channel();
        let _ = tx.send(Cmd {
            op: Op::Unwind,
            done,
        });
        waits.push(rx);
    }
    let limit = Duration::from_millis(1000) + HANG;
    for (i, rx) in waits.into_iter().enumerate() {
        if tokio::time::timeout(limit, rx).await.is_err() {
            checker.violation(format!(
                "hang: task o{}.t{} did not unwind within {limit:?}",
                i / usize::from(TASKS),
                i % usize::from(TASKS)
            ));
        }
    }
    drop(tasks.senders);
    for h in tasks.handles {
        match tokio::time::timeout(Duration::from_secs(1), h).await {
            Ok(Err(e)) if e.is_panic() => checker.violation(format!("panic in a task: {e}")),
            _ => {}
        }
    }
}

/// With every guard gone, the lock must be available within `bound`.
async fn available(
    world: &World,
    checker: &Checker,
    prefix: &str,
    name: u8,
    k: KindKey,
    bound: Duration,
) {
    let kind = k.kind();
    let key = world.key(prefix, name, kind);
    let reg = world.owner(0);
    let fixed = Lease::Fixed(Duration::from_secs(2));
    let started = std::time::Instant::now();
    // Available means acquired: a release that fails for a transient reason right after a
    // fault is sent again in the background (documented), not a lock refused.
    let released = |r: Result<(), LockError>| match r {
        Err(e) if e.is_transient() => Ok(()),
        r => r,
    };
    let res: Result<(), LockError> = match kind {
        Kind::Semaphore(n) => match reg
            .semaphore(&key, PERMITS)
            .wait(bound)
            .lease(fixed)
            .acquire(n)
            .await
        {
            Ok(g) => released(g.release().await),
            Err(e) => Err(e),
        },
        Kind::Leader => {
            let name = key.strip_prefix("leader:").unwrap_or(&key);
            match reg.leader(name).wait(bound).campaign().await {
                Ok(g) => released(g.resign().await),
                Err(e) => Err(e),
            }
        }
        k => match reg
            .lock(&key)
            .kind(super::task_kind(k))
            .wait(bound)
            .lease(fixed)
            .acquire()
            .await
        {
            Ok(g) => released(g.release().await),
            Err(e) => Err(e),
        },
    };
    if let Err(e) = res {
        let shown = world.describe(&key).await;
        checker.violation(format!(
            "not available: with every guard gone, a fresh acquire of {kind} {key} with wait {bound:?} failed after {:?}: {e} (server shows: [{shown}])",
            started.elapsed()
        ));
    }
}
