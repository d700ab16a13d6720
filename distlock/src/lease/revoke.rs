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
//! yet. It is remembered ([`Heard`]) until every acquisition in flight when it came has
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

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::lease::held::{LeaseState, Leases};
use crate::rt::backoff::Backoff;
use crate::rt::hub::{OnRevoked, Revoked};

/// What is to be checked: the locks named (by Redis key or channel), or everything.
#[derive(Debug, Default)]
struct Pending {
    keys: HashSet<String>,
    all: bool,
}

/// How many revocations [`Heard`] keeps for the acquisitions in flight; past that the
/// oldest go, and an acquisition that noted less than they cover checks its lease anyway.
const HEARD_MAX: usize = 1024;

/// The revocations heard while acquisitions were in flight (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Heard {
    log: Mutex<HeardLog>,
    /// `HeardLog::seq`, readable without the lock: an attempt after which nothing was
    /// heard notes nothing new.
    seq: AtomicU64,
}

#[derive(Debug, Default)]
struct HeardLog {
    /// How many revocations were heard so far.
    seq: u64,
    /// Those heard while an acquisition was in flight and not yet checked by every one
    /// of them, by number: the lock's Redis key or channel, `None` for every lock.
    log: VecDeque<(u64, Option<String>)>,
    /// The number of the last one dropped for room (see [`HEARD_MAX`]).
    dropped: u64,
    /// The acquisitions in flight, by the number they noted.
    in_flight: BTreeMap<u64, usize>,
}

impl HeardLog {
    fn enter(&mut self) -> u64 {
        *self.in_flight.entry(self.seq).or_default() += 1;
        self.seq
    }

    /// The acquisition that noted `at` is done with it: what no acquisition in flight can
    /// need any more is forgotten.
    fn leave(&mut self, at: u64) {
        if let Some(n) = self.in_flight.get_mut(&at) {
            *n -= 1;
            if *n == 0 {
                self.in_flight.remove(&at);
            }
        }
        match self.in_flight.keys().next() {
            None => self.log.clear(),
            Some(&oldest) => {
                while self.log.front().is_some_and(|(n, _)| *n <= oldest) {
                    self.log.pop_front();
                }
            }
        }
    }
}

impl Heard {
    fn log(&self) -> std::sync::MutexGuard<'_, HeardLog> {
        // Every change leaves the log consistent: a poisoned lock is still usable.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A revocation of `key` (`None`: of every lock) was heard.
    fn record(&self, key: Option<&str>) {
        let mut log = self.log();
        log.seq += 1;
        self.seq.store(log.seq, Ordering::Release);
        if log.in_flight.is_empty() {
            return;
        }
        let n = log.seq;
        log.log.push_back((n, key.map(str::to_owned)));
        if log.log.len() > HEARD_MAX {
            if let Some((n, _)) = log.log.pop_front() {
                log.dropped = n;
            }
        }
    }

    /// An acquisition starts: it notes the revocations heard so far (again before each
    /// attempt: [`InFlight::renew`]) until it is dropped.
    pub(crate) fn in_flight(self: &Arc<Self>) -> InFlight {
        let at = self.log().enter();
        InFlight {
            heard: self.clone(),
            at: AtomicU64::new(at),
        }
    }
}

/// An acquisition in flight, as [`Heard`] counts it.
#[derive(Debug)]
pub(crate) struct InFlight {
    heard: Arc<Heard>,
    /// The number of revocations heard when it last noted them.
    at: AtomicU64,
}

impl InFlight {
    /// Before an attempt: what was heard until now cannot concern what it takes.
    pub(crate) fn renew(&self) {
        // Nothing heard since it last noted (the common case): nothing to note. (One heard
        // just now is counted as after: checked once more at worst.)
        if self.heard.seq.load(Ordering::Acquire) == self.at.load(Ordering::Acquire) {
            return;
        }
        let mut log = self.heard.log();
        let now = log.enter();
        log.leave(self.at.swap(now, Ordering::AcqRel));
    }

    /// Whether a revocation that may concern `lease` (just registered) was heard since
    /// the attempt that took it was sent: one of its lock, of every lock, or one whose
    /// record was dropped for room.
    fn revoked_since(&self, lease: &LeaseState) -> bool {
        let at = self.at.load(Ordering::Acquire);
        let log = self.heard.log();
        log.dropped > at
            || log
                .log
                .iter()
                .any(|(n, key)| *n > at && key.as_deref().is_none_or(|k| concerns(lease, k)))
    }

    /// `lease` was just registered by the acquisition this notes: if a revocation that may
    /// concern it came meanwhile (when no lease could hear it), it is raised again for it.
    pub(crate) fn registered(&self, backend: &Backend, lease: &LeaseState) {
        if self.revoked_since(lease) {
            tracing::debug!(backend = %backend.name, key = %lease.keys.user,
                "distlock: a revocation came while the acquisition was in flight; checking the lease");
            backend.hub.revoked(Revoked::Key(&lease.keys.hash));
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.heard.log().leave(*self.at.get_mut());
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
        leases.heard.record(match what {
            Revoked::All => None,
            Revoked::Key(key) => Some(key),
        });
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
    let items: Vec<_> = auto.iter().map(|(l, _)| (&l.keys, l.owner)).collect();
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
    use crate::lease::held::{Granted, Leases};
    use crate::lease::owner::Hold;
    use crate::protocol::keys::LockKeys;

    fn lease(leases: &Arc<Leases>, key: &str) -> Arc<LeaseState> {
        let keys = LockKeys::new("lock:", key.into()).expect("keys");
        LeaseState::new(
            "b".into(),
            leases,
            keys,
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
        let log = heard.log();
        (log.log.len(), log.in_flight.len())
    }

    #[tokio::test]
    async fn a_revocation_is_remembered_while_an_acquisition_is_in_flight_only() {
        let leases = Arc::new(Leases::default());
        let k = lease(&leases, "k");
        let heard = Arc::new(Heard::default());
        heard.record(Some("lock:{k}"));
        assert_eq!(remembered(&heard), (0, 0), "nothing in flight: not kept");
        let a = heard.in_flight();
        assert!(!a.revoked_since(&k), "heard before it noted");
        heard.record(Some("lock:{other}"));
        assert!(!a.revoked_since(&k), "another lock");
        heard.record(Some("lock:{k}:released"));
        assert!(a.revoked_since(&k), "its lock (by channel)");
        a.renew();
        assert!(!a.revoked_since(&k), "before its next attempt");
        assert_eq!(remembered(&heard).0, 0, "nothing older is needed");
        let b = heard.in_flight();
        heard.record(None);
        assert!(a.revoked_since(&k) && b.revoked_since(&k), "every lock");
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
            c.revoked_since(&k),
            "one dropped for room: not known, checked"
        );
        drop(c);
        assert_eq!(remembered(&heard), (0, 0));
    }
}
