//! The task-scoped lock context: which locks the current task holds, innermost first.
//! It makes nested acquisitions of the same lock in one task re-enter (never by thread id),
//! and gives `fencing_token()`. A spawned task starts with an empty context.

use std::future::Future;
use std::sync::Arc;

use crate::owner::OwnerId;

#[derive(Debug)]
pub(crate) struct Frame {
    pub backend: Arc<str>,
    pub key: String,
    pub owner: OwnerId,
    pub token: u64,
    pub parent: Option<Arc<Frame>>,
}

tokio::task_local! {
    static CURRENT: Arc<Frame>;
}

fn current() -> Option<Arc<Frame>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// The owner and token of an enclosing hold of `key` on `backend` in this task.
pub(crate) fn find(backend: &str, key: &str) -> Option<(OwnerId, u64)> {
    let mut frame = current();
    while let Some(f) = frame {
        if &*f.backend == backend && f.key == key {
            return Some((f.owner, f.token));
        }
        frame = f.parent.clone();
    }
    None
}

/// Run `fut` with one more held lock in the task's context.
pub(crate) fn scope<F: Future>(
    backend: Arc<str>,
    key: String,
    owner: OwnerId,
    token: u64,
    fut: F,
) -> impl Future<Output = F::Output> {
    let frame = Arc::new(Frame {
        backend,
        key,
        owner,
        token,
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
