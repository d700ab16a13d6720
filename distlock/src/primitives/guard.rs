//! The guards: the held-lease core every guard wraps ([`GuardCore`]), the lock's guard, and the
//! release paths (on drop, on `release()`, and of an attempt in flight).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use crate::backend::Backend;
use crate::lease::handoff::{Claimed, Undo};
use crate::lease::state::LeaseState;
use crate::protocol::keys::{LockKeys, Shape};
use crate::protocol::{HandedOff, Released};
use crate::terms::owner::Hold;
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
    pub(crate) held: GuardCore,
}

impl LockGuard {
    /// The fencing token: it grows strictly with every new holder of this key.
    pub fn fencing_token(&self) -> u64 {
        self.held.state.token
    }

    /// Whether the lock is held, as far as this process knows: not released, not reported
    /// lost by the watchdog, and its lease not past its end.
    pub fn is_held(&self) -> bool {
        self.held.state.is_held()
    }

    /// Resolves when the lease is lost: the watchdog found the lock gone or could not renew
    /// it in time, or a fixed lease ran out, or the registry is shutting down
    /// ([`Registry::shutdown`](crate::Registry::shutdown): it gives the lock back). Returns
    /// the `LeaseLost` error saying why.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only watches the lease; dropping it changes nothing.
    pub async fn lost(&self) -> LockError {
        self.held.state.lost().await
    }

    /// The key, as given.
    pub fn key(&self) -> &str {
        &self.held.state.keys.user
    }

    /// The backend's name.
    pub fn backend(&self) -> &str {
        &self.held.backend.name
    }

    /// Release the lock. `Err(LockError::NotHeld)` when this owner no longer held it
    /// (its lease expired, or the lock was deleted): then nothing was changed.
    ///
    /// # Errors
    ///
    /// `NotHeld` when this owner no longer held it (the lease had ended or the lock was
    /// deleted: nothing was changed); `Backend` when Redis failed. A transient failure
    /// (connection refused or reset, a time-out, a server restarting or failing over;
    /// [`LockError::is_transient`]) means the release was not confirmed: it is sent again
    /// in the background until the server answers, and the lock is free within about a
    /// second after the server answers again, not at the end of its lease (see
    /// docs/design.md, "Re-sends").
    ///
    /// # Cancel safety
    ///
    /// Dropping this future before the reply sends the release again in the background
    /// (a second run changes nothing): the lock is freed either way.
    pub async fn release(self) -> Result<(), LockError> {
        self.held.release().await
    }

    /// Run `fut` inside this lock's task-scoped context: nested acquisitions of the same
    /// key on the same backend re-enter, and `distlock::fencing_token()` returns this lock's token.
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        crate::lease::context::scope(self.held.state.clone(), fut)
    }
}

/// The held-lease core every guard wraps (a lock's, a semaphore's, and through them a
/// multi-key lock's and a leader's): the lease's state, the backend it is held on, and a
/// nested hold's permit. It releases on [`GuardCore::release`] or, in the background, on drop.
#[derive(Debug)]
pub(crate) struct GuardCore {
    pub(crate) state: Arc<LeaseState>,
    pub(crate) backend: Arc<Backend>,
    /// A nested hold: the enclosing hold's permit (see `LeaseState::nested`), given back
    /// when this goes.
    _permit: Option<OwnedSemaphorePermit>,
}

impl GuardCore {
    pub(crate) fn new(
        state: Arc<LeaseState>,
        backend: Arc<Backend>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> GuardCore {
        GuardCore {
            state,
            backend,
            _permit: permit,
        }
    }

    /// Release: `Err(NotHeld)` when this owner no longer held it; `Ok` when it was already
    /// released.
    pub(crate) async fn release(self) -> Result<(), LockError> {
        let (state, backend) = (self.state.clone(), self.backend.clone());
        // Counted as the backend's background work from before the lease reads released
        // until the release has run: a shutdown that sees it released waits for it too.
        let _releasing = backend.leases.background.start();
        // Drop sees the state released and does nothing.
        if !state.begin_release() {
            return Ok(());
        }
        drop(self);
        release_held(&state, &backend).await
    }

    /// Run `body` holding this lease, then release it: with an auto lease and `cancel_on_lost`
    /// a lost lease drops `body` at its next `.await` and returns `LeaseLost`. A failed
    /// release after the body finished is logged, not returned: the body's result stands.
    pub(crate) async fn run<F: Future>(
        self,
        body: F,
        cancel_on_lost: bool,
    ) -> Result<F::Output, LockError> {
        let output = if self.state.auto && cancel_on_lost {
            tokio::pin!(body);
            tokio::select! {
                // The loss first: a body woken together with it (after a pause past the
                // lease) does not take one more step.
                biased;
                lost = self.state.lost() => return Err(lost),
                out = &mut body => out,
            }
        } else {
            body.await
        };
        let (key, backend) = (self.state.keys.user.clone(), self.backend.name.clone());
        if self.state.is_lost() {
            tracing::warn!(backend = %backend, key = %key,
                "distlock: the body ran to its end after its lease was lost");
        }
        if let Err(e) = self.release().await {
            tracing::warn!(backend = %backend, key = %key, error = %e, "distlock: release after the locked section failed");
        }
        Ok(output)
    }
}

impl Drop for GuardCore {
    fn drop(&mut self) {
        // Released is final: a guard released explicitly (`release` above) has nothing
        // left to queue, and need not be counted.
        if self.state.is_released() {
            return;
        }
        // Counted as the backend's background work from before the lease reads released
        // until its release is queued (and counted on its own): a shutdown that sees the
        // lease released also waits for that release, however slow this thread is in
        // between.
        let _queueing = self.backend.leases.background.start();
        if self.state.begin_release() {
            let s = &self.state;
            let (nested_permit, hold) = only_level_hold(s);
            if let Some(claimed) = claim_waiter(s, &self.backend) {
                tracing::debug!(backend = %s.backend, key = %s.keys.user, "distlock: guard dropped; handing the lock to a local waiter in the background");
                let (backend, keys) = (self.backend.clone(), s.keys.clone());
                // On a runtime that is shutting down the task is dropped: the waiter hears
                // "retry" and the lease runs out on its own.
                let spawner = backend.clone();
                spawner.spawn_background(async move {
                    if let Err(e) = hand_off(&backend, &keys, hold, claimed, nested_permit).await {
                        tracing::warn!(backend = %backend.name, key = %keys.user, error = %e,
                            "distlock: background release failed; the lease will run out");
                    }
                });
                return;
            }
            tracing::debug!(backend = %s.backend, key = %s.keys.user, "distlock: guard dropped; releasing in the background");
            self.backend
                .release_in_background_holding(s.keys.clone(), hold, nested_permit);
        }
    }
}

/// The first local waiter of this lock to hand it to on this release, if it hands off
/// (`crate::lease::handoff`): an outermost hold of an eligible lock, on a backend that
/// hands off.
fn claim_waiter(state: &LeaseState, backend: &Backend) -> Option<Claimed> {
    if !state.outermost || state.hold.nested || !crate::lease::handoff::eligible(&state.keys) {
        return None;
    }
    backend
        .handoffs
        .as_ref()?
        .claim(&state.keys.hash, state.owner)
}

/// The hold to release, and the permit that makes it the owner's only level (`Hold::only_level`):
/// an outermost hold of a reentrant or fair lock in distlock's format takes its nested
/// permit (`LeaseState::nested`) when no nested hold has it. Kept until the release has run
/// on the server (through its background re-send, if it comes to that), a nested
/// acquisition of this hold waits for it and then finds the hold gone; one that had the
/// permit first has run before this release (its level counts) or was dropped (its undo
/// finds the lock freed).
fn only_level_hold(state: &LeaseState) -> (Option<OwnedSemaphorePermit>, Hold) {
    let eligible = state.outermost
        && !state.hold.nested
        && !state.keys.format.is_redisson()
        && matches!(state.keys.shape, Shape::Reentrant | Shape::Fair);
    let permit = eligible
        .then(|| state.nested().try_acquire_owned().ok())
        .flatten();
    let hold = Hold {
        only_level: permit.is_some(),
        ..state.hold
    };
    (permit, hold)
}

/// Release `hold` and hand the lock to the `claimed` waiter in one script. The waiter
/// hears the grant (or, when the release did not free the lock, "retry"); a grant whose
/// waiter left is released in the background; an outcome not known (a transient error,
/// this future dropped) is undone in the background (the old level released, the
/// waiter's possible grant too) before the waiter is told to retry.
async fn hand_off(
    backend: &Arc<Backend>,
    keys: &Arc<LockKeys>,
    hold: Hold,
    claimed: Claimed,
    nested_permit: Option<OwnedSemaphorePermit>,
) -> Result<(), LockError> {
    let (to, lease, holder) = (claimed.hold, claimed.lease, claimed.holder.clone());
    let pending = UndoHandOff {
        armed: Some((backend.clone(), keys.clone(), hold, claimed)),
        nested_permit,
    };
    let sent = tokio::time::Instant::now();
    let result = backend
        .hand_off(keys, hold, to, lease, holder.as_deref())
        .await;
    tracing::debug!(backend = %backend.name, key = %keys.user, result = ?result, "distlock: released (hand-off)");
    let released = match result {
        Ok(Some(HandedOff::To { token })) => {
            // Held here now: a new acquirer of this process waits without an attempt
            // (the releasing task, acquiring again at once, first of all).
            if let Some(w) = &backend.handoffs {
                w.mark_handed(&keys.hash, to.owner, sent + backend.validity(lease));
            }
            // A grant that reaches no waiter (it left meanwhile) is released.
            let (b, k) = (backend.clone(), keys.clone());
            let undo = Undo::new(move || {
                if let Some(w) = &b.handoffs {
                    w.clear_handed(&k.hash);
                }
                b.release_in_background(k, to.undoing());
            });
            match pending.disarm().0 {
                Some(c) => c.grant(token, sent, undo),
                None => drop(undo),
            }
            return Ok(());
        }
        Ok(Some(HandedOff::Released(r))) => {
            // Freed instead of handed on: a waiter of another process was refused it
            // meanwhile (`handoff.lua`). This process's acquirers, the claimed waiter
            // first, hold off for a moment so that waiter can take it.
            if let (Released::Freed, Some(w)) = (&r, &backend.handoffs) {
                w.yield_to_remote(&keys.hash);
            }
            if let Some(c) = pending.disarm().0 {
                c.retry();
            }
            r
        }
        // Not known whether it ran: undone in the background (`pending`'s drop).
        Err(e) if e.is_transient() => return Err(e),
        // Refused before anything was written (the script checks first): the waiter tries
        // as usual, and this is an ordinary release.
        Ok(None) | Err(_) => {
            let (claimed, nested_permit) = pending.disarm();
            if let Some(c) = claimed {
                c.retry();
            }
            return release_plain(keys, hold, backend, nested_permit).await;
        }
    };
    released_result(released, keys, backend)
}

/// Undoes a hand-off whose outcome is not known, when dropped armed: in the background,
/// the old level is released (a second run changes nothing) and the waiter's possible
/// grant too, then the waiter is told to retry (after the undo, so its own attempt cannot
/// find a grant that is about to go).
struct UndoHandOff {
    armed: Option<(Arc<Backend>, Arc<LockKeys>, Hold, Claimed)>,
    /// The released hold's nested permit (`only_level_hold`), kept through the undo.
    nested_permit: Option<OwnedSemaphorePermit>,
}

impl UndoHandOff {
    /// The outcome is known: the claimed waiter, to tell it (armed until disarmed), and
    /// the permit, to keep for as long as the caller's release may still run.
    fn disarm(mut self) -> (Option<Claimed>, Option<OwnedSemaphorePermit>) {
        (
            self.armed.take().map(|(_, _, _, claimed)| claimed),
            self.nested_permit.take(),
        )
    }
}

impl Drop for UndoHandOff {
    fn drop(&mut self) {
        if let Some((backend, keys, hold, claimed)) = self.armed.take() {
            tracing::debug!(backend = %backend.name, key = %keys.user,
                "distlock: a hand-off was cancelled after it was sent; undoing it in the background");
            let claimed_hold = claimed.hold;
            // Both releases, until the server answers (`backend/resend.rs`; each is safe
            // to run twice); then the waiter tries again.
            let nested_permit = self.nested_permit.take();
            let (b, k) = (backend.clone(), keys.clone());
            backend.resend(
                "undoing a hand-off",
                &keys,
                move || {
                    let (b, k) = (b.clone(), k.clone());
                    async move {
                        for h in [hold, claimed_hold.undoing()] {
                            b.release(&k, h).await?;
                        }
                        b.release_again_later(&k, claimed_hold.undoing());
                        Ok(())
                    }
                },
                move || {
                    drop(nested_permit);
                    claimed.retry();
                },
            );
        }
    }
}

async fn release_held(state: &LeaseState, backend: &Arc<Backend>) -> Result<(), LockError> {
    let (nested_permit, hold) = only_level_hold(state);
    if let Some(claimed) = claim_waiter(state, backend) {
        return hand_off(backend, &state.keys, hold, claimed, nested_permit).await;
    }
    release_plain(&state.keys, hold, backend, nested_permit).await
}

/// Release `hold`; `only_level`, its nested permit when it frees without counting down
/// (`only_level_hold`), is kept until the release has run.
async fn release_plain(
    keys: &Arc<LockKeys>,
    hold: Hold,
    backend: &Arc<Backend>,
    nested_permit: Option<OwnedSemaphorePermit>,
) -> Result<(), LockError> {
    // Dropped before the reply (a cancelled task, a timeout around this call): the release
    // is sent again in the background; the level (a semaphore's holder id) makes a second
    // run harmless.
    let mut pending = ReleaseOnDrop::new(backend, keys, hold);
    pending.permit = nested_permit;
    let result = backend.release(keys, hold).await;
    // A transient failure (the reply lost, the server restarting): sent again in the
    // background; otherwise the outcome is known.
    if !matches!(&result, Err(e) if e.is_transient()) {
        pending.disarm();
    }
    tracing::debug!(backend = %backend.name, key = %keys.user, result = ?result, "distlock: released");
    released_result(result?, keys, backend)
}

fn released_result(r: Released, keys: &LockKeys, backend: &Backend) -> Result<(), LockError> {
    match r {
        Released::Freed | Released::StillHeld => Ok(()),
        Released::NotHeld => Err(LockError::NotHeld {
            key: keys.user.clone(),
            backend: backend.name.to_string(),
        }),
    }
}

/// Releases one acquisition's level in the background when dropped armed: an acquire or a
/// release whose future was dropped after its script may have run. The scripts count each
/// level once, so releasing a level that was never taken, or twice, changes nothing.
pub(crate) struct ReleaseOnDrop {
    armed: Option<(Arc<Backend>, Arc<LockKeys>, Hold)>,
    /// A released hold's nested permit (`only_level_hold`), kept through the background re-send.
    permit: Option<OwnedSemaphorePermit>,
}

impl ReleaseOnDrop {
    pub(crate) fn new(backend: &Arc<Backend>, keys: &Arc<LockKeys>, hold: Hold) -> ReleaseOnDrop {
        ReleaseOnDrop {
            armed: Some((backend.clone(), keys.clone(), hold)),
            permit: None,
        }
    }

    /// Undoes the acquisition `hold` in the background when dropped armed: sent, its
    /// outcome unknown, no guard handed out (see `Hold::undo`: a run-once job's slot is
    /// freed, not kept until its `hold:until`).
    pub(crate) fn undo(backend: &Arc<Backend>, keys: &Arc<LockKeys>, hold: Hold) -> ReleaseOnDrop {
        ReleaseOnDrop::new(backend, keys, hold.undoing())
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
            backend.release_in_background_holding(keys, hold, self.permit.take());
        }
    }
}
