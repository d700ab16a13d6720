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
//! (re-acquired since, or kept by a replica) stays held. A check that fails for a
//! transient reason (the server still down, or restarting and answering `LOADING` while
//! it loads its data) is made again after a pause that doubles from 20 ms up to a second,
//! for as long as the lease is held: the holder hears within about a second of the server
//! answering, whether or not a renewal is due (a fixed lease has none).
//!
//! A revocation heard while an acquisition of the lock is in flight (the message came
//! before the acquisition's reply: a slow link, a busy runtime) finds no lease to check
//! yet. It is remembered ([`Heard`](crate::lease::heard::Heard)) until every acquisition in flight when it came has
//! registered its lease or given up: each notes the revocations heard so far before each
//! attempt ([`InFlight`]), and one whose lease registers after a revocation of its lock
//! (or of every lock: a reconnect; or one it cannot tell, its record dropped for room)
//! raises that revocation again for its own lease, which is then checked like any other.
//! Nothing is remembered while no acquisition is in flight.
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
use crate::lease::heard::InFlight;
use crate::lease::state::{LeaseState, Leases};
use crate::rt::backoff::Backoff;
use crate::rt::hub::{OnRevoked, Revoked};

/// What is to be checked: the locks named (by Redis key or channel), or everything.
#[derive(Debug, Default)]
struct Pending {
    keys: HashSet<String>,
    all: bool,
}

/// `lease` was just registered by the acquisition `in_flight` notes: if a revocation that
/// may concern it came meanwhile (when no lease could hear it), it is raised again for it.
pub(crate) fn registered(in_flight: &InFlight, backend: &Backend, lease: &LeaseState) {
    if in_flight.revoked_since(|k| concerns(lease, k)) {
        tracing::debug!(backend = %backend.name, key = %lease.keys.user,
            "distlock: a revocation came while the acquisition was in flight; checking the lease");
        backend.hub.revoked(Revoked::Registered(&lease.keys.hash));
    }
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
        // First remembered for the acquisitions in flight: one whose lease is not among
        // those looked at below registers after this, and finds it then.
        match what {
            Revoked::All => leases.heard.record(None),
            Revoked::Key(key) => leases.heard.record(Some(key)),
            // Remembered when it was heard: remembered again, every acquisition of a hot
            // key in flight now would check its lease again, and so on for ever.
            Revoked::Registered(_) => {}
        }
        let mut p = shared.lock().unwrap_or_else(|e| e.into_inner());
        match what {
            // Every lease held when the check runs, not only when the connection came:
            // one whose acquisition ran before the subscription but registered after
            // this call is checked too (one renewal more, at most, for one taken after).
            Revoked::All => p.all = true,
            // Only names of leases held here are kept: the set stays as small as they are.
            Revoked::Key(key) | Revoked::Registered(key) => {
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

/// Check `leases` on the server now, as a revocation message would have them checked (one
/// renewal round): those whose lock is gone are marked lost. For an acquisition that holds
/// some leases already and heard a revocation that may concern them (a multi-key lock
/// waiting for its next key). A check that fails changes nothing here; the revocation's
/// own check goes on.
pub(crate) async fn confirm(backend: &Backend, leases: &[Arc<LeaseState>]) {
    let why = "the lock was gone when checked after a revocation message (a forced release)";
    let held: Vec<(Arc<LeaseState>, Why)> = leases
        .iter()
        .filter(|l| l.is_held())
        .map(|l| (l.clone(), why))
        .collect();
    if !held.is_empty() {
        let _ = check(backend, &held).await;
    }
}

/// Whether a revocation of `key` (a lock's Redis key, or its release channel) concerns
/// `lease`.
pub(crate) fn concerns(lease: &LeaseState, key: &str) -> bool {
    lease.keys.hash == key || lease.keys.channel == key
}

/// Why a lease is checked, for its loss's reason.
type Why = &'static str;

async fn run(backend: Weak<Backend>, pending: Arc<Mutex<Pending>>, mut woken: mpsc::Receiver<()>) {
    // Leases whose check failed (the server restarting: `LOADING`, a reconnect under
    // way), checked again after a pause that doubles up to a second, for as long as they
    // are held: until the server answers, not only at their next renewal (a fixed lease
    // has none).
    let mut retry: Vec<(Arc<LeaseState>, Why)> = Vec::new();
    let mut retry_at: Option<Instant> = None;
    let mut backoff = Backoff::reconnect();
    loop {
        tokio::select! {
            // Ends when the callback (held by the backend's hub) is gone.
            w = woken.recv() => if w.is_none() { return },
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {}
        }
        let Some(backend) = backend.upgrade() else {
            return;
        };
        let Pending { keys, all } =
            std::mem::take(&mut *pending.lock().unwrap_or_else(|e| e.into_inner()));
        let why = if all {
            "the lock was gone when checked on the subscriber's connection (a server restart, a failover, or a revocation sent while it was not listening)"
        } else {
            "the lock was gone when checked after a revocation message (a forced release)"
        };
        let mut leases: Vec<(Arc<LeaseState>, Why)> = backend
            .leases
            .held(|l| all || keys.iter().any(|k| concerns(l, k)))
            .into_iter()
            .map(|l| (l, why))
            .collect();
        // A retry is due (or comes along with this round): those still held go too.
        if retry_at.is_some_and(|t| t <= Instant::now()) || !leases.is_empty() {
            retry_at = None;
            for (l, why) in std::mem::take(&mut retry) {
                if l.is_held() && !leases.iter().any(|(m, _)| m.id == l.id) {
                    leases.push((l, why));
                }
            }
        }
        if leases.is_empty() {
            continue;
        }
        let failed = check(&backend, &leases).await;
        retry.extend(failed);
        if retry.is_empty() {
            backoff.reset();
            retry_at = None;
        } else if retry_at.is_none() {
            let pause = backoff.pause();
            tracing::debug!(backend = %backend.name, leases = retry.len(), retry_in = ?pause,
                "distlock: a revocation could not be checked; checking again");
            retry_at = Some(Instant::now() + pause);
        }
    }
}

/// One renewal round over `leases`: those whose lock is gone are marked lost with their
/// reason. Returns those that could not be checked for a transient failure (to check
/// again); another failure leaves the lease to the watchdog.
async fn check(
    backend: &Backend,
    leases: &[(Arc<LeaseState>, Why)],
) -> Vec<(Arc<LeaseState>, Why)> {
    let (auto, fixed): (Vec<_>, Vec<_>) = leases.iter().partition(|(l, _)| l.auto);
    let lease_len = backend.watchdog_timeout;
    let sent = Instant::now();
    let items: Vec<_> = auto.iter().map(|(l, _)| (&*l.keys, l.owner)).collect();
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
                    l.0.renewed_until(sent + backend.validity(lease_len));
                }
                (r, l)
            })
            .collect()
    };
    // A fixed lease is asked with what is left of it: nothing is extended.
    for l in fixed {
        let left = l.0.expires_at().saturating_duration_since(Instant::now());
        if left.is_zero() {
            continue;
        }
        let left = left.max(Duration::from_millis(1));
        let r = backend
            .renew_each(&[(&l.0.keys, l.0.owner)], left)
            .await
            .pop()
            .unwrap_or(Ok(true));
        outcomes.push((r, l));
    }
    let mut failed = Vec::new();
    for (r, (l, why)) in outcomes {
        match r {
            Ok(false) => {
                l.mark_lost((*why).to_owned());
            }
            Ok(true) => {}
            Err(e) if e.is_transient() => {
                tracing::debug!(backend = %backend.name, key = %l.keys.user, error = %e,
                    "distlock: a revocation could not be checked yet; checking again");
                failed.push((l.clone(), *why));
            }
            Err(e) => {
                tracing::debug!(backend = %backend.name, key = %l.keys.user, error = %e,
                    "distlock: a revocation could not be checked; the watchdog goes on renewing");
            }
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::heard::{Heard, HEARD_MAX};
    use crate::lease::state::{Granted, Leases};
    use crate::protocol::keys::LockKeys;
    use crate::terms::owner::Hold;

    fn lease(leases: &Arc<Leases>, key: &str) -> Arc<LeaseState> {
        let keys = LockKeys::new("lock:", key.into()).expect("keys");
        LeaseState::new(
            "b".into(),
            leases,
            Arc::new(keys),
            Granted {
                hold: Hold::fresh(),
                token: 1,
                outermost: true,
                lease: Duration::from_secs(30),
                auto: false,
                expires_at: Instant::now() + Duration::from_secs(30),
                site: "test",
            },
        )
    }

    fn remembered(heard: &Heard) -> (usize, usize) {
        heard.remembered()
    }

    #[tokio::test]
    async fn a_revocation_is_remembered_while_an_acquisition_is_in_flight_only() {
        let leases = Arc::new(Leases::default());
        let k = lease(&leases, "k");
        let heard = Arc::new(Heard::default());
        heard.record(Some("lock:{k}"));
        assert_eq!(remembered(&heard), (0, 0), "nothing in flight: not kept");
        let a = heard.in_flight();
        assert!(
            !a.revoked_since(|x| concerns(&k, x)),
            "heard before it noted"
        );
        heard.record(Some("lock:{other}"));
        assert!(!a.revoked_since(|x| concerns(&k, x)), "another lock");
        heard.record(Some("lock:{k}:released"));
        assert!(
            a.revoked_since(|x| concerns(&k, x)),
            "its lock (by channel)"
        );
        a.renew();
        assert!(
            !a.revoked_since(|x| concerns(&k, x)),
            "before its next attempt"
        );
        assert_eq!(remembered(&heard).0, 0, "nothing older is needed");
        let b = heard.in_flight();
        heard.record(None);
        assert!(
            a.revoked_since(|x| concerns(&k, x)) && b.revoked_since(|x| concerns(&k, x)),
            "every lock"
        );
        drop(a);
        assert_eq!(remembered(&heard), (1, 1), "b still needs it");
        drop(b);
        assert_eq!(remembered(&heard), (0, 0), "nothing in flight: forgotten");
        let c = heard.in_flight();
        for _ in 0..=HEARD_MAX {
            heard.record(Some("lock:{other}"));
        }
        assert_eq!(remembered(&heard).0, HEARD_MAX, "bounded");
        assert!(
            c.revoked_since(|x| concerns(&k, x)),
            "one dropped for room: not known, checked"
        );
        drop(c);
        assert_eq!(remembered(&heard), (0, 0));
    }
}
