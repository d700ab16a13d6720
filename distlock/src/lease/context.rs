//! The task-scoped lock context: which locks the current task holds, innermost first.
//! It makes nested acquisitions of the same lock in one task re-enter (never by thread id),
//! and gives `fencing_token()` and `lease_lost()`. A spawned task starts with an empty
//! context.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::lease::state::LeaseState;
use crate::LockError;

#[derive(Debug)]
pub(crate) struct Frame {
    pub backend: Arc<str>,
    pub key: String,
    pub token: u64,
    pub lease: Arc<LeaseState>,
    /// A multi-key lock: the leases of all of its keys (this frame's among them), which
    /// `lease_lost()` watches together. Empty for a single lock.
    pub group: Arc<[Arc<LeaseState>]>,
    pub parent: Option<Arc<Frame>>,
}

tokio::task_local! {
    static CURRENT: Arc<Frame>;
}

fn current() -> Option<Arc<Frame>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// The innermost enclosing hold of `key` on `backend` in this task.
pub(crate) fn find(backend: &str, key: &str) -> Option<Arc<LeaseState>> {
    let mut frame = current();
    while let Some(f) = frame {
        if &*f.backend == backend && f.key == key {
            return Some(f.lease.clone());
        }
        frame = f.parent.clone();
    }
    None
}

/// Every enclosing hold of `key` on `backend` in this task, of every kind, innermost first.
pub(crate) fn holds(backend: &str, key: &str) -> Vec<Arc<LeaseState>> {
    let mut found = Vec::new();
    let mut frame = current();
    while let Some(f) = frame {
        if &*f.backend == backend && f.key == key {
            found.push(f.lease.clone());
        }
        frame = f.parent.clone();
    }
    found
}

/// Run `fut` with one more held lock in the task's context.
pub(crate) fn scope<F: Future>(lease: Arc<LeaseState>, fut: F) -> impl Future<Output = F::Output> {
    let frame = Arc::new(Frame {
        backend: lease.backend.clone(),
        key: lease.keys.user.clone(),
        token: lease.token,
        lease,
        group: Arc::new([]),
        parent: current(),
    });
    CURRENT.scope(frame, fut)
}

/// Run `fut` with the held locks of a multi-key lock in the task's context, one frame
/// each (the last innermost), every frame knowing the whole group.
pub(crate) fn scope_group<F: Future>(
    leases: Vec<Arc<LeaseState>>,
    fut: F,
) -> impl Future<Output = F::Output> {
    let group: Arc<[Arc<LeaseState>]> = leases.into();
    let mut frame = current();
    for lease in group.iter() {
        frame = Some(Arc::new(Frame {
            backend: lease.backend.clone(),
            key: lease.keys.user.clone(),
            token: lease.token,
            lease: lease.clone(),
            group: group.clone(),
            parent: frame,
        }));
    }
    async move {
        match frame {
            Some(f) => CURRENT.scope(f, fut).await,
            None => fut.await,
        }
    }
}

/// The fencing token of the innermost lock held by the current task, if any.
///
/// Inside a `#[distributed_lock]` function (or `Lock::run`, or `LockGuard::scope`) this is
/// the token of that lock: a number that grows strictly with every new holder of the key.
/// Pass it to the storage you protect and have it refuse writes with an older token.
///
/// ```
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// assert_eq!(distlock::fencing_token(), None);
/// registry.lock("job").run(async {
///     let token = distlock::fencing_token().expect("inside the lock");
///     assert!(token >= 1);
/// }).await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
pub fn fencing_token() -> Option<u64> {
    current().map(|f| f.token)
}

/// The fencing token of the innermost lock on `key` (as the user wrote it, on any
/// backend) held by the current task, if any. Inside a multi-key lock
/// (`Lock::all`, `#[distributed_lock(keys = [..])]`), where [`fencing_token()`] gives the
/// token of the last key taken, this gives each key's own.
///
/// ```
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// registry.lock_all(["from", "to"]).run(async {
///     assert!(distlock::fencing_token_of("from").is_some());
///     assert!(distlock::fencing_token_of("to").is_some());
///     assert_eq!(distlock::fencing_token_of("elsewhere"), None);
/// }).await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
pub fn fencing_token_of(key: &str) -> Option<u64> {
    let mut frame = current();
    while let Some(f) = frame {
        if f.key == key {
            return Some(f.token);
        }
        frame = f.parent.clone();
    }
    None
}

/// The fencing tokens of the innermost lock held by the current task, with their keys:
/// for a multi-key lock (`#[distributed_lock(keys = [..])]`, [`MultiLock::run`],
/// [`MultiLockGuard::scope`]) every one of its keys in its keys' order (sorted, without
/// duplicates, as [`MultiLockGuard::fencing_tokens`]); for a single-key lock its one key.
/// `None` outside any lock.
///
/// It gives a multi-key body its tokens without re-building the keys (a typo in a
/// re-built key passed to [`fencing_token_of`] gives `None`, silently). Like
/// [`fencing_token()`] and [`lease_lost()`], it describes the *innermost* lock: inside a
/// single-key lock taken within a multi-key one (a re-entry of one of its keys included)
/// it is that single key's one-element list; the outer keys' tokens stay available
/// through [`fencing_token_of`]. A semaphore is not a lock of the context: inside one,
/// this describes the lock around it.
///
/// [`MultiLock::run`]: crate::MultiLock::run
/// [`MultiLockGuard::scope`]: crate::MultiLockGuard::scope
/// [`MultiLockGuard::fencing_tokens`]: crate::MultiLockGuard::fencing_tokens
///
/// ```
/// use distlock::{distributed_lock, LockError};
///
/// #[distributed_lock(keys = ["account:<to>", "account:<from>"])]
/// async fn transfer(from: u64, to: u64) -> Result<Vec<(String, u64)>, LockError> {
///     let tokens = distlock::fencing_tokens().expect("inside the lock");
///     // ... write each account fenced by its key's token ...
///     Ok(tokens)
/// }
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// # distlock::init_from_str("[backends.m]\nmode = \"memory\"").await?;
/// let tokens = transfer(2, 1).await?;
/// let keys: Vec<&str> = tokens.iter().map(|(k, _)| k.as_str()).collect();
/// assert_eq!(keys, ["account:1", "account:2"]); // the order they are taken in
/// assert_eq!(distlock::fencing_tokens(), None); // outside any lock
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
pub fn fencing_tokens() -> Option<Vec<(String, u64)>> {
    let f = current()?;
    if f.group.is_empty() {
        return Some(vec![(f.key.clone(), f.token)]);
    }
    Some(
        f.group
            .iter()
            .map(|l| (l.keys.user.clone(), l.token))
            .collect(),
    )
}

/// The lease of the innermost lock held by the current task: whether it was lost, and a
/// future that resolves when it is.
///
/// Inside a `#[distributed_lock(on_lost = "signal")]` function (or `Lock::run` with
/// [`OnLost::Signal`](crate::OnLost::Signal)) the body keeps running when the lease is
/// lost; this is how it finds out, so that it does not commit work another holder may now
/// be doing too. Check it before each irreversible step, or race the work against it:
///
/// ```
/// use distlock::{distributed_lock, LockError};
///
/// #[distributed_lock(key = "transfer:<from>", lease = "auto", on_lost = "signal")]
/// async fn transfer(from: u64, to: u64, amount: u64) -> Result<(), LockError> {
///     // ... debit `from` ...
///     distlock::lease_lost().check()?; // Err(LeaseLost) if the lease is gone
///     // ... credit `to` ...
///     Ok(())
/// }
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// # distlock::init_from_str("[backends.m]\nmode = \"memory\"").await?;
/// transfer(1, 2, 10).await?;
/// // Outside any lock there is nothing to lose.
/// assert!(!distlock::lease_lost().is_lost());
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
///
/// Awaiting it resolves with the `LeaseLost` error when the lease is lost (as
/// [`LockGuard::lost`](crate::LockGuard::lost)); it never resolves outside a lock or after
/// the lock was released:
///
/// ```
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// # async fn step() {}
/// registry.lock("job").on_lost(distlock::OnLost::Signal).run(async {
///     tokio::select! {
///         lost = distlock::lease_lost() => Err(lost),
///         done = step() => Ok(done),
///     }
/// }).await??;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
pub fn lease_lost() -> LeaseLost {
    let leases = match current() {
        Some(f) if !f.group.is_empty() => f.group.to_vec(),
        Some(f) => vec![f.lease.clone()],
        None => Vec::new(),
    };
    LeaseLost {
        leases,
        waiting: None,
    }
}

/// The lease of the innermost lock held by a task (all of their leases for a multi-key
/// lock: lost when any of them is), from [`lease_lost()`]: query it with
/// [`is_lost`](LeaseLost::is_lost) or [`check`](LeaseLost::check), or await it (it
/// resolves with the `LeaseLost` error when the lease is lost).
#[must_use = "query it with is_lost()/check(), or await it"]
pub struct LeaseLost {
    leases: Vec<Arc<LeaseState>>,
    waiting: Option<Pin<Box<dyn Future<Output = LockError> + Send>>>,
}

impl std::fmt::Debug for LeaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseLost")
            .field(
                "keys",
                &self.leases.iter().map(|l| &l.keys.user).collect::<Vec<_>>(),
            )
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LeaseLost {
    /// Whether the lease was lost (the watchdog found the lock gone or could not renew it in
    /// time, or a fixed lease ran out). `false` outside a lock.
    pub fn is_lost(&self) -> bool {
        self.leases.iter().any(|l| l.is_lost())
    }

    /// `Err(LockError::LeaseLost { .. })` when the lease was lost, else `Ok(())`.
    pub fn check(&self) -> Result<(), LockError> {
        match self.leases.iter().find(|l| l.is_lost()) {
            Some(l) => Err(l.lost_error()),
            None => Ok(()),
        }
    }
}

impl Future for LeaseLost {
    type Output = LockError;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LockError> {
        let this = &mut *self;
        if this.leases.is_empty() {
            return Poll::Pending;
        }
        let waiting = this.waiting.get_or_insert_with(|| {
            let leases = this.leases.clone();
            Box::pin(crate::lease::state::lost_any(leases))
        });
        waiting.as_mut().poll(cx)
    }
}
