//! The task-scoped lock context: which locks the current task holds, innermost first.
//! It makes nested acquisitions of the same lock in one task re-enter (never by thread id),
//! and gives `fencing_token()` and `lease_lost()`. A spawned task starts with an empty
//! context.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::held::LeaseState;
use crate::LockError;

#[derive(Debug)]
pub(crate) struct Frame {
    pub backend: Arc<str>,
    pub key: String,
    pub token: u64,
    pub lease: Arc<LeaseState>,
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

/// Run `fut` with one more held lock in the task's context.
pub(crate) fn scope<F: Future>(lease: Arc<LeaseState>, fut: F) -> impl Future<Output = F::Output> {
    let frame = Arc::new(Frame {
        backend: lease.backend.clone(),
        key: lease.keys.user.clone(),
        token: lease.token,
        lease,
        parent: current(),
    });
    CURRENT.scope(frame, fut)
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
    LeaseLost {
        lease: current().map(|f| f.lease.clone()),
        waiting: None,
    }
}

/// The lease of the innermost lock held by a task, from [`lease_lost()`]: query it with
/// [`is_lost`](LeaseLost::is_lost) or [`check`](LeaseLost::check), or await it (it
/// resolves with the `LeaseLost` error when the lease is lost).
#[must_use = "query it with is_lost()/check(), or await it"]
pub struct LeaseLost {
    lease: Option<Arc<LeaseState>>,
    waiting: Option<Pin<Box<dyn Future<Output = LockError> + Send>>>,
}

impl std::fmt::Debug for LeaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseLost")
            .field("key", &self.lease.as_ref().map(|l| &l.keys.user))
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LeaseLost {
    /// Whether the lease was lost (the watchdog found the lock gone or could not renew it in
    /// time, or a fixed lease ran out). `false` outside a lock.
    pub fn is_lost(&self) -> bool {
        self.lease.as_ref().is_some_and(|l| l.is_lost())
    }

    /// `Err(LockError::LeaseLost { .. })` when the lease was lost, else `Ok(())`.
    pub fn check(&self) -> Result<(), LockError> {
        match &self.lease {
            Some(l) if l.is_lost() => Err(l.lost_error()),
            _ => Ok(()),
        }
    }
}

impl Future for LeaseLost {
    type Output = LockError;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<LockError> {
        let this = &mut *self;
        let Some(lease) = &this.lease else {
            return Poll::Pending;
        };
        let waiting = this.waiting.get_or_insert_with(|| {
            let lease = lease.clone();
            Box::pin(async move { lease.lost().await })
        });
        waiting.as_mut().poll(cx)
    }
}
