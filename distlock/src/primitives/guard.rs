//! The guard the user holds for a held lock.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use crate::backend::Backend;
use crate::lease::held::LeaseState;
use crate::lease::owner::Hold;
use crate::protocol::keys::LockKeys;
use crate::protocol::Released;
use crate::LockError;

/// A held lock. Dropping it releases the lock in the background (never blocking, never
/// panicking); `release().await` releases it and tells whether it was still held.
///
/// ```
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// let guard = registry.lock("order:42").acquire().await?;
/// assert!(guard.is_held());
/// let token = guard.fencing_token();
/// assert!(token >= 1);
/// guard.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    pub(crate) state: Arc<LeaseState>,
    pub(crate) backend: Arc<Backend>,
    /// A nested hold: the enclosing hold's permit (see `LeaseState::nested`), given back
    /// when this guard goes.
    pub(crate) _permit: Option<OwnedSemaphorePermit>,
}

impl LockGuard {
    /// The fencing token: it grows strictly with every new holder of this key.
    pub fn fencing_token(&self) -> u64 {
        self.state.token
    }

    /// Whether the lock is held, as far as this process knows: not released, not reported
    /// lost by the watchdog, and its lease not past its end.
    pub fn is_held(&self) -> bool {
        self.state.is_held()
    }

    /// Resolves when the lease is lost: the watchdog found the lock gone or could not renew
    /// it in time, or a fixed lease ran out. Returns the `LeaseLost` error saying why.
    /// Never resolves after the guard is released.
    pub async fn lost(&self) -> LockError {
        self.state.lost().await
    }

    /// The key, as given.
    pub fn key(&self) -> &str {
        &self.state.keys.user
    }

    /// The backend's name.
    pub fn backend(&self) -> &str {
        &self.backend.name
    }

    /// Release the lock. `Err(LockError::NotHeld)` when this owner no longer held it
    /// (its lease expired, or the lock was deleted): then nothing was changed.
    pub async fn release(self) -> Result<(), LockError> {
        let (state, backend) = (self.state.clone(), self.backend.clone());
        // Drop sees the state released and does nothing.
        if !state.begin_release() {
            return Ok(());
        }
        drop(self);
        release_held(&state, &backend).await
    }

    /// Run `fut` inside this lock's task-scoped context: nested acquisitions of the same
    /// key on the same backend re-enter, and `distlock::fencing_token()` returns this lock's token.
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        crate::lease::context::scope(self.state.clone(), fut)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.state.begin_release() {
            let s = &self.state;
            tracing::debug!(backend = %s.backend, key = %s.keys.user, "distlock: guard dropped; releasing in the background");
            self.backend.release_in_background(s.keys.clone(), s.hold);
        }
    }
}

/// Give back what `state` holds (a lock's level, a semaphore's permits), once its guard has
/// begun its release. `Err(LockError::NotHeld)` when it was no longer held: then nothing
/// was changed.
pub(crate) async fn release_held(
    state: &LeaseState,
    backend: &Arc<Backend>,
) -> Result<(), LockError> {
    // Dropped before the reply (a cancelled task, a timeout around this call): the release
    // is sent again in the background; the level (a semaphore's holder id) makes a second
    // run harmless.
    let pending = ReleaseOnDrop::new(backend, &state.keys, state.hold);
    let result = crate::rt::runtime::entered(backend.release(&state.keys, state.hold)).await;
    // A transient failure (the reply lost, the server restarting): sent again in the
    // background; otherwise the outcome is known.
    if !matches!(&result, Err(e) if e.is_transient()) {
        pending.disarm();
    }
    tracing::debug!(backend = %backend.name, key = %state.keys.user, result = ?result, "distlock: released");
    match result? {
        Released::Freed | Released::StillHeld => Ok(()),
        Released::NotHeld => Err(LockError::NotHeld {
            key: state.keys.user.clone(),
            backend: backend.name.to_string(),
        }),
    }
}

/// Releases one acquisition's level in the background when dropped armed: an acquire or a
/// release whose future was dropped after its script may have run. The scripts count each
/// level once, so releasing a level that was never taken, or twice, changes nothing.
pub(crate) struct ReleaseOnDrop {
    armed: Option<(Arc<Backend>, LockKeys, Hold)>,
}

impl ReleaseOnDrop {
    pub(crate) fn new(backend: &Arc<Backend>, keys: &LockKeys, hold: Hold) -> ReleaseOnDrop {
        ReleaseOnDrop {
            armed: Some((backend.clone(), keys.clone(), hold)),
        }
    }

    /// The outcome is known: nothing to undo.
    pub(crate) fn disarm(mut self) {
        self.armed = None;
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some((backend, keys, hold)) = self.armed.take() {
            tracing::debug!(backend = %backend.name, key = %keys.user,
                "distlock: an acquire or release was cancelled after it was sent; releasing its level in the background");
            backend.release_in_background(keys, hold);
        }
    }
}
