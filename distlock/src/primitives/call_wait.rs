//! A per-call `wait` for `#[distributed_lock]` functions: [`with_wait`].

use std::future::Future;
use std::time::Duration;

tokio::task_local! {
    /// `Some`: the wait of the annotated calls made directly in a `with_wait` scope; `None`
    /// inside their bodies (the override is not passed on).
    static WAIT: Option<Duration>;
}

/// Run `fut` with `wait` as the wait of every `#[distributed_lock]` call made directly in
/// it: fail fast in one handler or one test (`Duration::ZERO`: try once, `Timeout` at once
/// when the lock is held) without a second annotated function.
///
/// - **Precedence**: the override wins over the attribute's `wait = ".."` and over
///   `[defaults].wait`. An inner `with_wait` wins over an outer one.
/// - **Reach**: the annotated calls awaited directly inside `fut`, whatever their lock
///   (`key`, `keys = [..]`, any `kind`, semaphores). The bodies of those functions run
///   without it: the annotated calls they make (to other keys, or re-entering theirs) wait
///   as their own attributes say. The builders ([`Lock::new`](crate::Lock::new), ...)
///   ignore it: pass them `.wait(..)`.
/// - Task-scoped like [`Registry::scope`](crate::Registry::scope): a task spawned inside
///   `fut` does not inherit it.
///
/// A wait longer than [`MAX_WAIT`](crate::Lock::MAX_WAIT) is cut to it, as the attribute's.
///
/// ```
/// use distlock::{distributed_lock, with_wait, LockError};
/// use std::time::Duration;
///
/// #[distributed_lock(key = "order:<user_id>", wait = "5s")]
/// async fn place_order(user_id: u64) -> Result<u64, LockError> {
///     Ok(user_id)
/// }
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// # distlock::init_from_str("[backends.m]\nmode = \"memory\"").await?;
/// let held = distlock::Lock::new("order:7").acquire().await?;
/// // Not 5 s: a busy lock answers at once.
/// let err = with_wait(Duration::ZERO, place_order(7)).await.unwrap_err();
/// assert!(matches!(err, LockError::Timeout { .. }));
/// held.release().await?;
/// assert_eq!(with_wait(Duration::ZERO, place_order(7)).await?, 7);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
pub fn with_wait<F: Future>(wait: Duration, fut: F) -> impl Future<Output = F::Output> {
    WAIT.scope(Some(wait), fut)
}

/// The wait `with_wait` set for the annotated calls here, if any.
pub(crate) fn current() -> Option<Duration> {
    WAIT.try_with(|w| *w).ok().flatten()
}

/// Run an annotated function's body without the override of its call.
pub(crate) fn outside<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    WAIT.scope(None, fut)
}
