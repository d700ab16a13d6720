//! A graceful shutdown of one backend ([`shut_down`], what `Registry::shutdown` runs on
//! each of its backends), and the count of the background work it flushes
//! ([`Background`](crate::lease::background::Background)).
//!
//! In order, within one deadline:
//! 1. the backend is closed ([`Leases::close`](crate::lease::state::Leases::close)): the
//!    acquire engine refuses new acquisitions and ends the waiting ones with
//!    `LockError::ShuttingDown` (what they may have taken is undone in the background, as
//!    for any dropped acquisition);
//! 2. every lease held now, of every kind, is signalled lost (`lost()` resolves,
//!    `is_held()` turns false, an annotated body with an auto lease is dropped at its next
//!    `.await`), before anything is released: the holder hears first, as for any loss;
//! 3. the holders are given their lease's loss margin (a tenth of the lease, 20 ms to
//!    2 s) to let go themselves: a guard dropped or released then releases as usual (a
//!    dropped `LeaderGuard` resigns and announces it);
//! 4. the leases still not released are released here, each with its own hold (a
//!    semaphore's holder id, a reentrant level, a read or write hold), a leader's with the
//!    announcement of its resignation;
//! 5. the background work of the backend is awaited (`Background::idle`): the releases
//!    of dropped guards, undos, queue cancels and hand-offs still in flight.
//!
//! A run-once hold (`hold_at_least`) is released as its own release would: the lock stays
//! taken, without a holder, until its `hold_at_least` has passed since it was taken, so
//! the job does not run again elsewhere within its window (it ran, or began to, here).

use std::sync::Arc;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::lease::state::LeaseState;

/// Shut `backend` down (see the module docs), returning by `deadline` whatever Redis
/// does. Safe to call again: a second call finds nothing held and nothing in flight.
pub(crate) async fn shut_down(backend: &Arc<Backend>, deadline: Instant) {
    if backend.leases.close() {
        tracing::info!(backend = %backend.name, "distlock: shutting down: no new acquisitions; giving back every lease held");
    }
    let held = backend.leases.held(|_| true);
    for lease in &held {
        lease.mark_shutting_down();
    }
    // The holders let go themselves within their margin, or the lease is taken over.
    let grace = held.iter().map(|lease| {
        let until = deadline.min(Instant::now() + lease.margin());
        async move {
            let _ = tokio::time::timeout_at(until, lease.released()).await;
        }
    });
    futures_util::future::join_all(grace).await;
    let releases = held
        .iter()
        .filter(|lease| lease.begin_release())
        .map(|lease| release(backend, lease, deadline));
    futures_util::future::join_all(releases).await;
    if tokio::time::timeout_at(deadline, backend.flush_releases())
        .await
        .is_err()
    {
        tracing::warn!(backend = %backend.name, pending = backend.leases.background.running(),
            "distlock: shutting down: background releases still pending at the deadline; their leases run out on their own");
    }
}

/// Release `lease` (its guard still lives and did not let go), by `deadline`.
async fn release(backend: &Arc<Backend>, lease: &Arc<LeaseState>, deadline: Instant) {
    let sent = tokio::time::timeout_at(deadline, backend.release(&lease.keys, lease.hold)).await;
    match sent {
        Ok(Ok(r)) => {
            tracing::debug!(backend = %backend.name, key = %lease.keys.user, result = ?r, "distlock: released at shutdown");
        }
        Ok(Err(e)) => {
            tracing::warn!(backend = %backend.name, key = %lease.keys.user, error = %e,
                "distlock: releasing at shutdown failed; the lease runs out on its own");
            return;
        }
        Err(_) => {
            tracing::warn!(backend = %backend.name, key = %lease.keys.user,
                "distlock: releasing at shutdown did not finish by the deadline; the lease runs out on its own");
            return;
        }
    }
    if let Some(channel) = lease.resign_channel() {
        let announced =
            tokio::time::timeout_at(deadline, backend.announce(&lease.keys, channel, "resigned"))
                .await;
        if !matches!(announced, Ok(Ok(()))) {
            tracing::debug!(backend = %backend.name, key = %lease.keys.user,
                "distlock: announcing a leader's resignation at shutdown failed; observers see it within their poll interval");
        }
    }
}
