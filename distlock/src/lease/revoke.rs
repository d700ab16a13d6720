//! Revocation heard at once: a lease whose lock was deleted under it (a forced release, a
//! server that restarted or was replaced) is found lost now, not at the next renewal.
//!
//! What tells a backend (its hub hands each to the callback set here):
//!
//! - a forced release (`Lock::force_unlock`, `distlock unlock`) publishes the name of the
//!   lock it deleted on the backend-wide revocation channel `<key_prefix>__revoked` (plain
//!   pub/sub: on a cluster the bus carries it to every node), which every subscriber of
//!   every backend listens on; the memory backend hands it over directly;
//! - in Redisson's format, a message on the channel of a lock held here (Redisson's own
//!   `forceUnlock` publishes there);
//! - a subscriber that connected (the first time too) or connected again: the server may
//!   have restarted (without persistence it lost every lock; its run id, `INFO server`,
//!   tells, for the log) or another one taken over (a sentinel `+switch-master`, a cluster
//!   failover), and a revocation message published while no subscription listened was
//!   missed; on a redlock/multi backend, per node.
//!
//! Then one task per backend checks the leases concerned with one renewal round (the auto
//! ones renewed for the usual lease, the fixed ones asked for what is left of theirs, which
//! changes nothing: every renewal only ever extends): a lease whose lock is gone is marked
//! lost (`LeaseState::mark_lost`: `lost()` resolves, `is_held()` turns false); one still held
//! (re-acquired since, or kept by a replica) stays held. A check that fails (the server
//! still down) leaves the lease to the watchdog.
//!
//! What is left: a lock deleted without a message (`DEL` by hand, eviction, `FLUSHALL`) is
//! found at the next renewal (at most `watchdog_timeout / 3` later), and so is a Redisson
//! fair lock force-unlocked by Redisson itself (it wakes only the queue's head, on a
//! channel of its own).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::lease::held::{LeaseState, Leases};
use crate::rt::hub::{OnRevoked, Revoked};

/// What is to be checked: the locks named (by Redis key or channel), or everything.
#[derive(Debug, Default)]
struct Pending {
    keys: HashSet<String>,
    all: bool,
}

/// Start listening for revocations on `backend` (its hub's callback) and the task that
/// checks them; it ends when the backend is dropped.
pub(crate) fn spawn(backend: &Arc<Backend>) {
    let pending = Arc::new(Mutex::new(Pending::default()));
    // A wake-up for the task (one is enough however many revocations came meanwhile).
    let (wake, woken) = mpsc::channel::<()>(1);
    let leases: Weak<Leases> = Arc::downgrade(&backend.leases);
    let shared = pending.clone();
    backend.hub.on_revoked(OnRevoked(Arc::new(move |what| {
        let Some(leases) = leases.upgrade() else {
            return;
        };
        let mut p = shared.lock().unwrap_or_else(|e| e.into_inner());
        match what {
            // Every lease held when the check runs, not only when the connection came:
            // one whose acquisition ran before the subscription but registered after
            // this call is checked too (one renewal more, at most, for one taken after).
            Revoked::All => p.all = true,
            // Only names of leases held here are kept: the set stays as small as they are.
            Revoked::Key(key) => {
                if !leases.held(|l| concerns(l, key)).is_empty() {
                    p.keys.insert(key.to_owned());
                }
            }
        }
        let due = p.all || !p.keys.is_empty();
        drop(p);
        if due {
            let _ = wake.try_send(());
        }
    })));
    backend
        .runtime
        .spawn(run(Arc::downgrade(backend), pending, woken));
}

/// Whether a revocation of `key` (a lock's Redis key, or its release channel) concerns
/// `lease`.
fn concerns(lease: &LeaseState, key: &str) -> bool {
    lease.keys.hash == key || lease.keys.channel == key
}

async fn run(backend: Weak<Backend>, pending: Arc<Mutex<Pending>>, mut woken: mpsc::Receiver<()>) {
    // Ends when the callback (held by the backend's hub) is gone.
    while woken.recv().await.is_some() {
        let Some(backend) = backend.upgrade() else {
            return;
        };
        let Pending { keys, all } =
            std::mem::take(&mut *pending.lock().unwrap_or_else(|e| e.into_inner()));
        let leases = backend
            .leases
            .held(|l| all || keys.iter().any(|k| concerns(l, k)));
        if leases.is_empty() {
            continue;
        }
        let why = if all {
            "the lock was gone when checked on the subscriber's connection (a server restart, a failover, or a revocation sent while it was not listening)"
        } else {
            "the lock was gone when checked after a revocation message (a forced release)"
        };
        check(&backend, &leases, why).await;
    }
}

/// One renewal round over `leases`: those whose lock is gone are marked lost with `why`.
async fn check(backend: &Backend, leases: &[Arc<LeaseState>], why: &str) {
    let (auto, fixed): (Vec<_>, Vec<_>) = leases.iter().partition(|l| l.auto);
    let lease_len = backend.watchdog_timeout;
    let sent = Instant::now();
    let items: Vec<_> = auto.iter().map(|l| (&l.keys, l.owner)).collect();
    let mut outcomes: Vec<_> = if items.is_empty() {
        Vec::new()
    } else {
        backend
            .renew_each(&items, lease_len)
            .await
            .into_iter()
            .zip(auto.iter().copied())
            .map(|(r, l)| {
                if matches!(r, Ok(true)) {
                    l.renewed_until(sent + backend.validity(lease_len));
                }
                (r, l)
            })
            .collect()
    };
    // A fixed lease is asked with what is left of it: nothing is extended.
    for l in fixed {
        let left = l.expires_at().saturating_duration_since(Instant::now());
        if left.is_zero() {
            continue;
        }
        let left = left.max(Duration::from_millis(1));
        let r = backend
            .renew_each(&[(&l.keys, l.owner)], left)
            .await
            .pop()
            .unwrap_or(Ok(true));
        outcomes.push((r, l));
    }
    for (r, l) in outcomes {
        match r {
            Ok(false) => {
                l.mark_lost(why.to_owned());
            }
            Ok(true) => {}
            Err(e) => {
                tracing::debug!(backend = %backend.name, key = %l.keys.user, error = %e,
                    "distlock: a revocation could not be checked; the watchdog goes on renewing");
            }
        }
    }
}
