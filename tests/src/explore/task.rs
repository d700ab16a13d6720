//! The tasks of a schedule: each serves the steps sent to it, nesting every acquisition
//! inside the holds it already has (`LockGuard::scope`), watching each hold's `lost()`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use distlock::{
    LeaderGuard, Lease, LockError, LockGuard, LockKind, MultiLockGuard, Registry, SemaphoreGuard,
};
use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot};

use super::check::{Acquired, Checker, WAIT_SLACK};
use super::model::{name_text, Acquire, Kind, LeaseSpec, NAMES, PERMITS, RUN_ONCE_HOLD_MS};
use super::world::World;
use super::Plant;

/// How long past its `wait` an operation may run before it counts as hung.
pub const HANG: Duration = Duration::from_secs(10);

/// What a task is asked to do.
pub enum Op {
    /// Acquire (nested in what it holds).
    Acquire(Acquire),
    /// Two acquisitions at once (`join!`), each held briefly.
    Siblings(Acquire, Acquire),
    /// Release the innermost hold.
    Release,
    /// A fenced increment under the innermost hold.
    Increment,
    /// Release everything and end.
    Unwind,
}

/// A step for a task, and where to say it is done.
pub struct Cmd {
    /// The step.
    pub op: Op,
    /// Answered when it is done.
    pub done: oneshot::Sender<()>,
}

/// What a task shares with the rest of the schedule.
pub struct TaskCtx {
    /// Owner.
    pub owner: u8,
    /// Task.
    pub task: u8,
    /// Servers and registries.
    pub world: Arc<World>,
    /// The checker.
    pub checker: Arc<Checker>,
    /// The schedule's key prefix.
    pub prefix: String,
    /// A planted bug (self-test).
    pub plant: Plant,
}

impl TaskCtx {
    /// The key of name `n` for `kind`.
    pub fn key(&self, n: u8, kind: Kind) -> String {
        self.world.key(&self.prefix, n, kind)
    }
}

/// The key of name `n` for `kind` under a schedule's prefix.
pub fn key_of(prefix: &str, n: u8, kind: Kind) -> String {
    format!("{prefix}{}", name_text(kind, n))
}

enum Exit {
    Release(oneshot::Sender<()>),
    Unwind(Option<oneshot::Sender<()>>),
}

enum Guard {
    Lock(LockGuard),
    Sem(SemaphoreGuard),
    Multi(MultiLockGuard),
    Leader(Box<LeaderGuard>),
}

impl Guard {
    /// Each name's token (a multi-key lock: every name's, in order).
    fn tokens(&self, name: u8) -> Vec<(u8, u64)> {
        match self {
            Guard::Lock(g) => vec![(name, g.fencing_token())],
            Guard::Sem(g) => vec![(name, g.fencing_token())],
            Guard::Leader(g) => vec![(name, g.epoch())],
            // Keys sorted: `k0`, `k1` (`names_of`).
            Guard::Multi(g) => g
                .fencing_tokens()
                .into_iter()
                .enumerate()
                .map(|(i, (_, t))| (i as u8, t))
                .collect(),
        }
    }

    fn is_held(&self) -> bool {
        match self {
            Guard::Lock(g) => g.is_held(),
            Guard::Sem(g) => g.is_held(),
            Guard::Multi(g) => g.is_held(),
            Guard::Leader(g) => g.is_held(),
        }
    }

    async fn lost(&self) -> LockError {
        match self {
            Guard::Lock(g) => g.lost().await,
            Guard::Sem(g) => g.lost().await,
            Guard::Multi(g) => g.lost().await,
            Guard::Leader(g) => g.lost().await,
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Guard::Lock(g) => g.release().await,
            Guard::Sem(g) => g.release().await,
            Guard::Multi(g) => g.release().await,
            Guard::Leader(g) => g.resign().await,
        }
    }
}

/// Serve the steps sent to one task until it is told to unwind.
pub async fn run_task(ctx: Arc<TaskCtx>, mut rx: mpsc::UnboundedReceiver<Cmd>) {
    if let Exit::Unwind(Some(done)) = serve(&ctx, &mut rx, Vec::new()).await {
        let _ = done.send(());
    }
}

type Serving<'a> = Pin<Box<dyn Future<Output = Exit> + Send + 'a>>;

fn serve<'a>(
    ctx: &'a TaskCtx,
    rx: &'a mut mpsc::UnboundedReceiver<Cmd>,
    chain: Vec<u64>,
) -> Serving<'a> {
    Box::pin(async move {
        loop {
            let Some(cmd) = rx.recv().await else {
                return Exit::Unwind(None);
            };
            match cmd.op {
                Op::Release if !chain.is_empty() => return Exit::Release(cmd.done),
                Op::Release => {
                    let _ = cmd.done.send(());
                }
                Op::Increment => {
                    if let Some(id) = chain.last() {
                        increment(ctx, *id).await;
                    }
                    let _ = cmd.done.send(());
                }
                Op::Unwind => return Exit::Unwind(Some(cmd.done)),
                Op::Siblings(a, b) => {
                    tokio::join!(sibling(ctx, &a, &chain), sibling(ctx, &b, &chain));
                    let _ = cmd.done.send(());
                }
                Op::Acquire(a) => {
                    let got = acquire(ctx, &a, &chain).await;
                    let _ = cmd.done.send(());
                    let Some((guard, ids)) = got else { continue };
                    let mut inner = chain.clone();
                    inner.extend(&ids);
                    let exit = hold(ctx, &mut *rx, &guard, &ids, inner).await;
                    finish(ctx, guard, &ids, &a).await;
                    match exit {
                        Exit::Release(done) => {
                            let _ = done.send(());
                        }
                        unwind => return unwind,
                    }
                }
            }
        }
    })
}

/// How long a fenced increment waits between its read and its write (long enough for
/// the next step's increment to read in between).
const INCREMENT_PAUSE: Duration = Duration::from_millis(20);

/// A fenced read-modify-write under hold `id`: claim the counter with its token, read it,
/// wait, write it plus one with the same token (refused once a newer token claimed it).
async fn increment(ctx: &TaskCtx, id: u64) {
    let Some((counter, token)) = ctx.checker.fence_of(id) else {
        return;
    };
    let Some(value) = ctx.checker.fence_claim(counter, token) else {
        return;
    };
    tokio::time::sleep(INCREMENT_PAUSE).await;
    ctx.checker.fence_write(counter, value + 1, token, id);
}

/// How long each of two siblings holds.
const SIBLING_HOLD: Duration = Duration::from_millis(30);

/// One of two `join!` siblings: acquire, hold briefly (hearing `lost()`), release.
async fn sibling(ctx: &TaskCtx, a: &Acquire, chain: &[u64]) {
    let Some((guard, ids)) = acquire_as(ctx, a, chain, true).await else {
        return;
    };
    tokio::select! {
        _ = tokio::time::sleep(SIBLING_HOLD) => {}
        _ = guard.lost() => {
            if ctx.plant != Plant::IgnoreLost {
                ids.iter().for_each(|id| ctx.checker.lost(*id));
            }
        }
    }
    finish(ctx, guard, &ids, a).await;
}

/// Serve nested steps inside the hold, recording when its `lost()` fires.
async fn hold(
    ctx: &TaskCtx,
    rx: &mut mpsc::UnboundedReceiver<Cmd>,
    guard: &Guard,
    ids: &[u64],
    chain: Vec<u64>,
) -> Exit {
    let inner = serve(ctx, rx, chain);
    let inner: Serving<'_> = match guard {
        Guard::Lock(g) => Box::pin(g.scope(inner)),
        Guard::Multi(g) => Box::pin(g.scope(inner)),
        Guard::Sem(_) | Guard::Leader(_) => inner,
    };
    let mut inner = inner;
    let lost_all = |ctx: &TaskCtx| ids.iter().for_each(|id| ctx.checker.lost(*id));
    let lost = guard.lost();
    let mut lost = std::pin::pin!(lost);
    let mut heard = false;
    let exit = loop {
        tokio::select! {
            exit = &mut inner => break exit,
            _ = &mut lost, if !heard => {
                heard = true;
                if ctx.plant != Plant::IgnoreLost {
                    lost_all(ctx);
                }
            }
        }
    };
    // Both may have been ready at once: a signal that came is recorded.
    if !heard && ctx.plant != Plant::IgnoreLost && lost.as_mut().now_or_never().is_some() {
        lost_all(ctx);
    }
    exit
}

/// Release a hold (its end is recorded first: from then on it is not inside).
async fn finish(ctx: &TaskCtx, guard: Guard, ids: &[u64], a: &Acquire) {
    ids.iter().for_each(|id| ctx.checker.ended(*id));
    let key = ctx.key(a.name, a.kind);
    if ctx.plant == Plant::ReleaseWithoutOwnerCheck && a.kind == Kind::Reentrant {
        ctx.world.raw_release(&key);
        // Never released by the library (whose release would notice the hash gone).
        std::mem::forget(guard);
        return;
    }
    let who = format!("o{}.t{} release {} {key}", ctx.owner, ctx.task, a.kind);
    match tokio::time::timeout(HANG, guard.release()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => ctx.checker.error(&who, &e),
        Err(_) => ctx
            .checker
            .violation(format!("hang: {who} did not return within {HANG:?}")),
    }
}

fn lease(l: LeaseSpec) -> Lease {
    match l {
        LeaseSpec::Auto => Lease::Auto,
        LeaseSpec::Fixed(ms) => Lease::Fixed(Duration::from_millis(u64::from(ms))),
    }
}

fn lock_kind(k: Kind) -> LockKind {
    match k {
        Kind::Fair => LockKind::Fair,
        Kind::Read => LockKind::Read,
        Kind::Write => LockKind::Write,
        Kind::Reentrant | Kind::Semaphore(_) | Kind::Multi | Kind::Leader | Kind::RunOnce => {
            LockKind::Reentrant
        }
    }
}

/// The keys of a multi-key lock: every name's reentrant lock.
fn multi_keys(ctx: &TaskCtx) -> Vec<String> {
    (0..NAMES).map(|n| ctx.key(n, Kind::Reentrant)).collect()
}

async fn call(
    ctx: &TaskCtx,
    reg: &Registry,
    a: &Acquire,
    key: &str,
    wait: Duration,
    plant: Plant,
) -> Result<Option<Guard>, LockError> {
    if a.try_once && plant == Plant::TryWithoutServer {
        return Ok(None);
    }
    match a.kind {
        Kind::Semaphore(n) => {
            let s = reg.semaphore(key, PERMITS).wait(wait).lease(lease(a.lease));
            if a.try_once {
                Ok(s.try_acquire(n).await?.map(Guard::Sem))
            } else {
                Ok(Some(Guard::Sem(s.acquire(n).await?)))
            }
        }
        Kind::Multi => {
            let l = reg
                .lock_all(multi_keys(ctx))
                .wait(wait)
                .lease(lease(a.lease));
            if a.try_once {
                Ok(l.try_acquire().await?.map(Guard::Multi))
            } else {
                Ok(Some(Guard::Multi(l.acquire().await?)))
            }
        }
        Kind::Leader => {
            // An election's lock has an auto lease; its name is the key without `leader:`.
            let name = key.strip_prefix("leader:").unwrap_or(key);
            match reg.leader(name).wait(wait).campaign().await {
                Ok(g) => Ok(Some(Guard::Leader(Box::new(g)))),
                Err(LockError::Timeout { .. }) if a.try_once => Ok(None),
                Err(e) => Err(e),
            }
        }
        Kind::RunOnce => {
            let l = reg
                .lock(key)
                .wait(wait)
                .lease(lease(a.lease))
                .hold_at_least(Duration::from_millis(u64::from(RUN_ONCE_HOLD_MS)));
            if a.try_once {
                Ok(l.try_acquire().await?.map(Guard::Lock))
            } else {
                Ok(Some(Guard::Lock(l.acquire().await?)))
            }
        }
        k => {
            let l = reg
                .lock(key)
                .kind(lock_kind(k))
                .wait(wait)
                .lease(lease(a.lease));
            if a.try_once {
                Ok(l.try_acquire().await?.map(Guard::Lock))
            } else {
                Ok(Some(Guard::Lock(l.acquire().await?)))
            }
        }
    }
}

/// Acquire as `a` says, checking the answer; the guard and its hold id on success.
async fn acquire(ctx: &TaskCtx, a: &Acquire, chain: &[u64]) -> Option<(Guard, Vec<u64>)> {
    acquire_as(ctx, a, chain, false).await
}

/// [`acquire`]; a `sibling` may find its sibling inside (re-entry then waits its turn).
async fn acquire_as(
    ctx: &TaskCtx,
    a: &Acquire,
    chain: &[u64],
    sibling: bool,
) -> Option<(Guard, Vec<u64>)> {
    let key = ctx.key(a.name, a.kind);
    let who = format!(
        "o{}.t{} {} {} {key}",
        a.owner,
        a.task,
        if a.try_once { "try_acquire" } else { "acquire" },
        a.kind
    );
    let wait = Duration::from_millis(u64::from(if a.try_once { 0 } else { a.wait_ms }));
    if !ctx.world.offers(a.kind) {
        unoffered(ctx, a, &key, &who, wait).await;
        return None;
    }
    let once = wait.is_zero();
    let free_before = if once {
        is_free(ctx, a, &key).await
    } else {
        None
    };
    let started = ctx.checker.started(a.name, a.kind);
    let reentry = ctx
        .checker
        .reentered_by(chain, a.name, a.kind)
        .filter(|_| !sibling);
    let fut = call(ctx, ctx.world.owner(a.owner), a, &key, wait, ctx.plant);
    let limit = wait + HANG;
    let budget = a
        .drop_after_ms
        .map(|ms| Duration::from_millis(u64::from(ms)));
    let res = match tokio::time::timeout(budget.unwrap_or(limit).min(limit), fut).await {
        Ok(r) => r,
        Err(_) if budget.is_some_and(|b| b < limit) => return None,
        Err(_) => {
            ctx.checker
                .violation(format!("hang: {who} did not return within wait + {HANG:?}"));
            return None;
        }
    };
    let took = started.at().elapsed();
    if took > wait + WAIT_SLACK && !ctx.checker.faulted_since(&started) {
        ctx.checker.violation(format!(
            "wait: {who} wait={wait:?} returned after {took:?} (bound: wait + {WAIT_SLACK:?})"
        ));
    }
    match res {
        Ok(Some(guard)) => {
            // A multi-key guard is handed out holding every key: one with a key whose
            // loss the library knew before it returned (revoked while the next key was
            // awaited) is a lock the caller does not have. It is looked at in the poll that
            // returned it. A fixed lease may run out on a slow reply (spent into its loss
            // margin), and a fault may have cut it: not judged.
            let spent = match a.lease {
                LeaseSpec::Fixed(ms) => took * 10 >= Duration::from_millis(u64::from(ms)) * 9,
                LeaseSpec::Auto => false,
            };
            // A `force_unlock` of one of its keys since it began may have taken a key
            // right after the library's own look and before this one (another thread
            // marks it lost): told at once, and any overlap is judged by the revocation
            // bound.
            let unlocked =
                (0..NAMES).any(|n| ctx.checker.unlocked_since(&started, n, Kind::Reentrant));
            if matches!(guard, Guard::Multi(_))
                && !guard.is_held()
                && !spent
                && !unlocked
                && !ctx.checker.faulted_since(&started)
            {
                ctx.checker.violation(format!(
                    "lost at return: {who} returned a guard already lost (is_held() false), with no fault since it began"
                ));
            }
            let ids = guard
                .tokens(a.name)
                .into_iter()
                .map(|(name, token)| {
                    ctx.checker.acquired(Acquired {
                        owner: a.owner,
                        task: a.task,
                        name,
                        kind: a.kind,
                        token,
                        ancestors: chain,
                        started,
                    })
                })
                .collect();
            Some((guard, ids))
        }
        Ok(None) | Err(LockError::Timeout { .. } | LockError::Skipped { .. }) => {
            busy(ctx, a, &key, &who, chain, reentry, free_before, &started).await;
            if let Err(e) = &res {
                ctx.checker.error(&who, e);
            }
            None
        }
        Err(e) => {
            ctx.checker.error(&who, &e);
            None
        }
    }
}

/// A kind the backend does not offer (a quorum mode's fair, read-write and semaphores;
/// Redisson's semaphores): it must be refused with `Unsupported`, at once.
async fn unoffered(ctx: &TaskCtx, a: &Acquire, key: &str, who: &str, wait: Duration) {
    let fut = call(ctx, ctx.world.owner(a.owner), a, key, wait, Plant::None);
    match tokio::time::timeout(HANG, fut).await {
        Ok(Err(e @ LockError::Unsupported { .. })) => ctx.checker.error(who, &e),
        Ok(Err(e)) => ctx.checker.violation(format!(
            "unsupported: {who} on a backend that does not offer it failed with {e}, not Unsupported"
        )),
        Ok(Ok(g)) => {
            ctx.checker.violation(format!(
                "unsupported: {who} on a backend that does not offer it answered {} instead of Unsupported",
                if g.is_some() { "a guard" } else { "busy" }
            ));
            if let Some(g) = g {
                let _ = g.release().await;
            }
        }
        Err(_) => ctx
            .checker
            .violation(format!("hang: {who} did not return within {HANG:?}")),
    }
}

/// The lock answered busy: was it the task's own hold, or a lock the server does not hold?
#[allow(clippy::too_many_arguments)]
async fn busy(
    ctx: &TaskCtx,
    a: &Acquire,
    key: &str,
    who: &str,
    chain: &[u64],
    reentry: Option<String>,
    free_before: Option<bool>,
    started: &super::check::Started,
) {
    if let Some(outer) = reentry {
        if ctx.checker.reentered_by(chain, a.name, a.kind).is_some()
            && !ctx.checker.faulted_since(started)
        {
            ctx.checker.violation(format!(
                "self-deadlock: {who} answered busy although its task holds {outer}, which it re-enters (docs/design.md, Reentrancy)"
            ));
        }
    }
    let window = |ctx: &TaskCtx| {
        super::check::names_of(a.name, a.kind)
            .into_iter()
            .any(|n| ctx.checker.window_open(n, started))
    };
    if free_before == Some(true) && ctx.checker.quiet_since(started, a.name, a.kind) && !window(ctx)
    {
        let after = is_free(ctx, a, key).await;
        if after == Some(true) && ctx.checker.quiet_since(started, a.name, a.kind) && !window(ctx) {
            let shown = ctx.world.describe(key).await;
            ctx.checker.violation(format!(
                "free but busy: {who} answered busy while the server held no key of it before and after (no fault on; server shows: [{shown}])"
            ));
        }
    }
}

/// Whether the server holds nothing of what `a` asks for (a multi-key lock: of any of its
/// keys); `None` where the explorer cannot tell.
async fn is_free(ctx: &TaskCtx, a: &Acquire, key: &str) -> Option<bool> {
    if a.kind != Kind::Multi {
        return ctx.world.is_free(key, a.kind).await;
    }
    for k in multi_keys(ctx) {
        match ctx.world.is_free(&k, Kind::Reentrant).await {
            Some(true) => {}
            other => return other,
        }
    }
    Some(true)
}
