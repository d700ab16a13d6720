//! A held lock: its lease state (shared with the watchdog) and the guard the user holds.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{Backend, Released};
use crate::keys::LockKeys;
use crate::owner::OwnerId;
use crate::LockError;

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST: u8 = 2;

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn to_nanos(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

/// One acquisition's lease: what the guard and the watchdog share.
#[derive(Debug)]
pub(crate) struct LeaseState {
    pub id: u64,
    pub backend: Arc<Backend>,
    pub keys: LockKeys,
    pub owner: OwnerId,
    pub token: u64,
    /// Renewed by the watchdog.
    pub auto: bool,
    /// A new hold (not a re-entry of an enclosing one): its hold time is recorded.
    pub outermost: bool,
    /// When it was acquired.
    pub acquired_at: Instant,
    state: AtomicU8,
    /// When the lease ends as far as this process knows (nanos since `EPOCH`).
    expires_at: AtomicU64,
    reason: Mutex<Option<String>>,
    changed: Notify,
}

impl LeaseState {
    pub fn new(
        backend: Arc<Backend>,
        keys: LockKeys,
        owner: OwnerId,
        token: u64,
        auto: bool,
        outermost: bool,
        expires_at: Instant,
    ) -> Arc<LeaseState> {
        let id = backend.watchdog.next_id();
        let _ = &*EPOCH;
        let state = Arc::new(LeaseState {
            id,
            backend,
            keys,
            owner,
            token,
            auto,
            outermost,
            acquired_at: Instant::now(),
            state: AtomicU8::new(HELD),
            expires_at: AtomicU64::new(to_nanos(expires_at)),
            reason: Mutex::new(None),
            changed: Notify::new(),
        });
        if auto {
            state.backend.watchdog.add(state.clone());
        }
        state
    }

    pub fn expires_at(&self) -> Instant {
        *EPOCH + Duration::from_nanos(self.expires_at.load(Ordering::Acquire))
    }

    /// The watchdog renewed the lease until `t`.
    pub fn renewed_until(&self, t: Instant) {
        self.expires_at.fetch_max(to_nanos(t), Ordering::AcqRel);
    }

    pub fn is_held(&self) -> bool {
        self.state.load(Ordering::Acquire) == HELD && Instant::now() < self.expires_at()
    }

    /// Held → lost. Returns false when it was released or already lost.
    pub fn mark_lost(&self, reason: String) -> bool {
        if self
            .state
            .compare_exchange(HELD, LOST, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        tracing::warn!(backend = %self.backend.name, key = %self.keys.user, reason = %reason, "distlock: lease lost");
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
        self.backend.watchdog.remove(self.id);
        self.changed.notify_waiters();
        true
    }

    /// Held or lost → released, and out of the watchdog: after this no renewal is sent.
    /// Returns false when it was already released.
    fn begin_release(&self) -> bool {
        let was = self.state.swap(RELEASED, Ordering::AcqRel);
        if was == RELEASED {
            return false;
        }
        if was == HELD && self.outermost {
            crate::holds::record(&self.backend.name, self.acquired_at.elapsed());
        }
        if self.auto {
            self.backend.watchdog.remove(self.id);
        }
        self.changed.notify_waiters();
        true
    }

    /// Lost (reported, or past its end) and not released.
    pub fn is_lost(&self) -> bool {
        match self.state.load(Ordering::Acquire) {
            LOST => true,
            HELD => Instant::now() >= self.expires_at(),
            _ => false,
        }
    }

    pub(crate) fn lost_error(&self) -> LockError {
        let reason = self
            .reason
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| "the lease expired".into());
        LockError::LeaseLost {
            key: self.keys.user.clone(),
            backend: self.backend.name.to_string(),
            reason,
        }
    }

    /// Resolves when the lease is lost (or, for a fixed lease, runs out).
    pub async fn lost(&self) -> LockError {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.state.load(Ordering::Acquire) {
                LOST => return self.lost_error(),
                RELEASED => std::future::pending::<()>().await,
                _ => {}
            }
            let until = self.expires_at();
            if Instant::now() >= until {
                let why = if self.auto {
                    "the lease expired before the watchdog could renew it".to_string()
                } else {
                    "the fixed lease ran out".to_string()
                };
                self.mark_lost(why);
                return self.lost_error();
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }
}

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
        &self.state.backend.name
    }

    /// Release the lock. `Err(LockError::NotHeld)` when this owner no longer held it
    /// (its lease expired, or the lock was deleted): then nothing was changed.
    pub async fn release(self) -> Result<(), LockError> {
        let state = self.state.clone();
        // Drop sees the state released and does nothing.
        if !state.begin_release() {
            return Ok(());
        }
        drop(self);
        let result = crate::runtime::entered(state.backend.release(&state.keys, state.owner)).await;
        tracing::debug!(backend = %state.backend.name, key = %state.keys.user, result = ?result, "distlock: released");
        match result? {
            Released::Freed | Released::StillHeld => Ok(()),
            Released::NotHeld => Err(LockError::NotHeld {
                key: state.keys.user.clone(),
                backend: state.backend.name.to_string(),
            }),
        }
    }

    /// Run `fut` inside this lock's task-scoped context: nested acquisitions of the same
    /// key on the same backend re-enter, and `distlock::fencing_token()` returns this lock's token.
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        crate::context::scope(self.state.clone(), fut)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.state.begin_release() {
            let s = &self.state;
            tracing::debug!(backend = %s.backend.name, key = %s.keys.user, "distlock: guard dropped; releasing in the background");
            s.backend.release_in_background(s.keys.clone(), s.owner);
        }
    }
}
