//! A held lock's lease, as the guard and the watchdog share it, and the registry of the
//! auto leases of one backend that the watchdog renews.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::lease::handoff::Waiters;
use crate::protocol::keys::LockKeys;
use crate::rt::clock::{from_nanos, to_nanos};
use crate::rt::hub::{Hub, Watch};
use crate::terms::owner::{Hold, OwnerId};
use crate::LockError;

/// How long before a lease can run out on the server its loss is signalled (`is_held()`
/// turns false, `lost()` resolves, an annotated body is cancelled): a tenth of the lease,
/// at least 20 ms and at most 2 s.
///
/// Why: the signal must reach the holder while the lock is still its own, so that it can
/// stop (an annotated body is dropped at its next `.await`) before another process can
/// acquire. The end of the lease is measured from the *send* time of the acquisition or of
/// the last confirmed renewal, so network delay already counts against the holder; what
/// the margin covers is the holder's own reaction (the task being scheduled, a write in
/// flight) and the difference in clock rate between this host and the server (NTP keeps
/// it well under 1 %, i.e. under a tenth of the margin). With the default
/// `watchdog_timeout` of 30 s the margin is 2 s; renewals come every 10 s, so a renewal
/// has three tries (every 250 ms after a failure) for every second before the signal.
pub(crate) fn lost_margin(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_millis(20), Duration::from_secs(2))
}

/// The leases held on one backend, by id: the auto ones are what its watchdog renews;
/// all of them are what a revocation checks (`crate::upkeep::revoke`).
#[derive(Debug, Default)]
pub(crate) struct Leases {
    map: Mutex<HashMap<u64, Arc<LeaseState>>>,
    next_id: AtomicU64,
    /// `Some` on a backend in Redisson's format: each held lease watches its lock's
    /// channel there, where Redisson's own `forceUnlock` publishes (it knows nothing of
    /// the revocation channel).
    channels: Option<Arc<Hub>>,
    /// The backend's local waiters, where it hands off: a lease that ends (released,
    /// lost, revoked) takes the mark "handed to this hold" with it.
    handoffs: Option<Arc<Waiters>>,
    /// The revocations heard while acquisitions were in flight (`crate::upkeep::revoke`).
    pub(crate) heard: Arc<crate::lease::heard::Heard>,
    /// Set once by a shutdown (`crate::upkeep::shutdown`): no acquisition starts on this
    /// backend any more, and the waiting ones end.
    closed: AtomicBool,
    /// Woken when `closed` is set.
    closing: Notify,
    /// The background work of this backend (releases of dropped guards, undos of
    /// acquisitions cut short, queue cancels, hand-offs) still running: what a shutdown
    /// flushes.
    pub(crate) background: Arc<crate::lease::background::Background>,
}

impl Leases {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<LeaseState>>> {
        // Every change is one insert or remove: a poisoned lock is still consistent.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Leases that each watch their lock's channel on `hub` while held (see the field).
    pub(crate) fn watching_channels(hub: Arc<Hub>) -> Leases {
        Leases {
            channels: Some(hub),
            ..Leases::default()
        }
    }

    /// These leases, on a backend that hands locks to its local `waiters`.
    pub(crate) fn handing_off(self, waiters: Option<Arc<Waiters>>) -> Leases {
        Leases {
            handoffs: waiters,
            ..self
        }
    }

    /// The auto leases held now (the watchdog's).
    pub(crate) fn all(&self) -> Vec<Arc<LeaseState>> {
        self.map().values().filter(|l| l.auto).cloned().collect()
    }

    /// Every lease held now, auto or fixed, that `matches`.
    pub(crate) fn held(&self, matches: impl Fn(&LeaseState) -> bool) -> Vec<Arc<LeaseState>> {
        self.map()
            .values()
            .filter(|l| matches(l))
            .cloned()
            .collect()
    }

    /// Refuse acquisitions from now on and wake the waiting ones (they end with
    /// `ShuttingDown`). Returns false when it was closed already.
    pub(crate) fn close(&self) -> bool {
        let first = !self.closed.swap(true, Ordering::SeqCst);
        self.closing.notify_waiters();
        first
    }

    /// Whether [`Leases::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Resolves once [`Leases::close`] is called (at once if it was).
    pub(crate) async fn closed(&self) {
        loop {
            let notified = self.closing.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }

    /// How many auto leases there are (for tests and metrics).
    #[cfg(feature = "test-support")]
    pub(crate) fn len(&self) -> usize {
        self.map().values().filter(|l| l.auto).count()
    }
}

/// What an acquisition was granted: the facts a lease starts from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Granted {
    /// The owner and level it holds.
    pub(crate) hold: Hold,
    /// Its fencing token (a re-entry: the enclosing hold's).
    pub(crate) token: u64,
    /// Whether it took the lock (not a re-entry of a hold of this task).
    pub(crate) outermost: bool,
    /// The lease's length.
    pub(crate) lease: Duration,
    /// Whether the watchdog renews it.
    pub(crate) auto: bool,
    /// When it ends on this process's clock, counted from the send of the request that
    /// took it, less the clock drift allowance (`Backend::validity`).
    pub(crate) expires_at: Instant,
    /// The site label.
    pub(crate) site: &'static str,
}

const HELD: u8 = 0;
const RELEASED: u8 = 1;
const LOST: u8 = 2;

/// One acquisition's lease: what the guard and the watchdog share.
#[derive(Debug)]
pub(crate) struct LeaseState {
    pub(crate) id: u64,
    /// The backend's name, for messages.
    pub(crate) backend: Arc<str>,
    /// The registry of the backend's auto leases (this one is in it while `auto` and held).
    leases: Arc<Leases>,
    /// Shared with what releases it in the background (a guard dropped, a release cut
    /// short), which outlives the guard.
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: OwnerId,
    /// The acquisition (owner and level) as the scripts know it.
    pub(crate) hold: Hold,
    pub(crate) token: u64,
    /// Renewed by the watchdog.
    pub(crate) auto: bool,
    /// A new hold (not a re-entry of an enclosing one): its hold time is recorded.
    pub(crate) outermost: bool,
    /// When it was acquired.
    pub(crate) acquired_at: Instant,
    /// The lock site, as the metrics label it.
    pub(crate) site: &'static str,
    state: AtomicU8,
    /// When the lease ends as far as this process knows (nanos on `clock`): the send time
    /// of the acquisition or of the last confirmed renewal, plus the lease's validity.
    expires_at: AtomicU64,
    /// How long before `expires_at` the loss is signalled (see [`lost_margin`]).
    margin: Duration,
    reason: Mutex<Option<String>>,
    changed: Notify,
    /// Nested acquisitions of this lock under this hold take its one permit for as long
    /// as they hold: sibling futures of one task (`join!`, `select!`) exclude each other,
    /// while a nested call inside a nested call takes the inner hold's permit.
    /// Made on the first nested acquisition (most holds have none; every held lease keeps
    /// this).
    nested: std::sync::OnceLock<Arc<tokio::sync::Semaphore>>,
    /// The watch of the lock's channel while held (`Leases::watching_channels`).
    channel: Mutex<Option<Watch>>,
    /// A leader's lease: the election's channel, where a shutdown that releases it
    /// announces the resignation (`LeaderGuard`'s own resign and drop announce theirs).
    resign_channel: std::sync::OnceLock<String>,
    /// Signalled lost by a shutdown: `lost()` resolves even once it is released (by the
    /// shutdown, or by its guard after the signal).
    shut_down: std::sync::atomic::AtomicBool,
}

impl LeaseState {
    /// The state of a lease just granted on the backend `backend`; an auto lease joins that
    /// backend's watched `leases` (renewed by the watchdog).
    pub(crate) fn new(
        backend: Arc<str>,
        leases: &Arc<Leases>,
        keys: Arc<LockKeys>,
        granted: Granted,
    ) -> Arc<LeaseState> {
        let Granted {
            hold,
            token,
            outermost,
            lease: lease_len,
            auto,
            expires_at,
            site,
        } = granted;
        let id = leases.next_id.fetch_add(1, Ordering::Relaxed);
        let channel = leases
            .channels
            .as_ref()
            .map(|hub| hub.watch_held(&keys.channel));
        let state = Arc::new(LeaseState {
            id,
            backend,
            leases: leases.clone(),
            keys,
            owner: hold.owner,
            hold,
            token,
            auto,
            outermost,
            acquired_at: Instant::now(),
            site,
            state: AtomicU8::new(HELD),
            expires_at: AtomicU64::new(to_nanos(expires_at)),
            margin: lost_margin(lease_len),
            reason: Mutex::new(None),
            changed: Notify::new(),
            nested: std::sync::OnceLock::new(),
            channel: Mutex::new(channel),
            resign_channel: std::sync::OnceLock::new(),
            shut_down: std::sync::atomic::AtomicBool::new(false),
        });
        leases.map().insert(id, state.clone());
        state
    }

    /// The permit nested acquisitions of this hold take turns on (see the field).
    pub(crate) fn nested(&self) -> Arc<tokio::sync::Semaphore> {
        self.nested
            .get_or_init(|| Arc::new(tokio::sync::Semaphore::new(1)))
            .clone()
    }

    pub(crate) fn expires_at(&self) -> Instant {
        from_nanos(self.expires_at.load(Ordering::Acquire))
    }

    /// The watchdog renewed the lease until `t`.
    pub(crate) fn renewed_until(&self, t: Instant) {
        self.expires_at.fetch_max(to_nanos(t), Ordering::AcqRel);
    }

    /// When the loss is signalled if no renewal comes first: `margin` before the lease can
    /// end on the server.
    pub(crate) fn signal_at(&self) -> Instant {
        self.expires_at()
            .checked_sub(self.margin)
            .unwrap_or_else(|| self.expires_at())
    }

    pub(crate) fn is_held(&self) -> bool {
        self.state.load(Ordering::Acquire) == HELD && Instant::now() < self.signal_at()
    }

    /// This is a leader's lease: a shutdown that releases it announces the resignation
    /// on `channel`.
    pub(crate) fn resign_on_shutdown(&self, channel: String) {
        let _ = self.resign_channel.set(channel);
    }

    /// The election's channel, on a leader's lease.
    pub(crate) fn resign_channel(&self) -> Option<&str> {
        self.resign_channel.get().map(String::as_str)
    }

    /// The lease's loss margin (see [`lost_margin`]).
    pub(crate) fn margin(&self) -> Duration {
        self.margin
    }

    /// Whether it was released (by its guard, or by a shutdown).
    pub(crate) fn is_released(&self) -> bool {
        self.state.load(Ordering::Acquire) == RELEASED
    }

    /// Resolves once it is released.
    pub(crate) async fn released(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_released() {
                return;
            }
            changed.await;
        }
    }

    /// Held → lost. Returns false when it was released or already lost.
    pub(crate) fn mark_lost(&self, reason: String) -> bool {
        self.lose(reason, true)
    }

    /// Held → lost because this process shuts down: the same signal as a loss (`lost()`
    /// resolves, `is_held()` turns false, an annotated body is cancelled), logged at INFO
    /// and not counted as a lost lease in the metrics. Returns false when it was released
    /// or already lost.
    pub(crate) fn mark_shutting_down(&self) -> bool {
        self.shut_down.store(true, Ordering::Release);
        self.lose(
            "the process is shutting down (Registry::shutdown): the lock is being given back"
                .into(),
            false,
        )
    }

    fn lose(&self, reason: String, loud: bool) -> bool {
        if self
            .state
            .compare_exchange(HELD, LOST, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        if loud {
            tracing::warn!(backend = %self.backend, key = %self.keys.user, site = self.site, reason = %reason, "distlock: lease lost");
            crate::obs::metrics::lost(&self.backend, self.site);
        } else {
            tracing::info!(backend = %self.backend, key = %self.keys.user, site = self.site, "distlock: shutting down; signalling the holder and giving the lock back");
        }
        *self.reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
        self.leases.map().remove(&self.id);
        self.ended();
        self.unwatch();
        self.changed.notify_waiters();
        true
    }

    /// Held or lost → released, and out of the watchdog: after this no renewal is sent.
    /// Returns false when it was already released.
    pub(crate) fn begin_release(&self) -> bool {
        let was = self.state.swap(RELEASED, Ordering::AcqRel);
        if was == RELEASED {
            return false;
        }
        if was == HELD && self.outermost {
            let held = self.acquired_at.elapsed();
            crate::lease::hold_times::record(&self.backend, held);
            crate::obs::metrics::held(&self.backend, self.site, held);
        }
        self.leases.map().remove(&self.id);
        self.ended();
        self.unwatch();
        self.changed.notify_waiters();
        true
    }

    /// No longer held: a mark saying the lock was handed to this hold goes with it (a
    /// new acquirer of this process then asks the server instead of waiting on it).
    fn ended(&self) {
        if let (Some(w), true) = (&self.leases.handoffs, self.outermost && !self.hold.nested) {
            w.hold_ended(&self.keys.hash, self.owner);
        }
    }

    /// Stop watching the lock's channel (no longer held).
    fn unwatch(&self) {
        drop(
            self.channel
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
    }

    /// Lost (reported, or past its end) and not released.
    pub(crate) fn is_lost(&self) -> bool {
        match self.state.load(Ordering::Acquire) {
            LOST => true,
            HELD => Instant::now() >= self.signal_at(),
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
            backend: self.backend.to_string(),
            reason,
        }
    }

    /// Resolves when the lease is lost (or, for a fixed lease, runs out).
    pub(crate) async fn lost(&self) -> LockError {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.state.load(Ordering::Acquire) {
                LOST => return self.lost_error(),
                // Released after a shutdown's signal: still lost, as far as the holder
                // knows (the shutdown may have released it under a live guard).
                RELEASED if self.shut_down.load(Ordering::Acquire) => return self.lost_error(),
                RELEASED => std::future::pending::<()>().await,
                _ => {}
            }
            let until = self.signal_at();
            if Instant::now() >= until {
                let why = if self.auto {
                    "the watchdog could not renew it before the safety margin ahead of its end"
                        .to_string()
                } else {
                    "the fixed lease is running out (within the safety margin of its end)"
                        .to_string()
                };
                self.mark_lost(why);
                return self.lost_error();
            }
            // The clock is read on every poll, not only when the timer fires: a process
            // paused past `until` (SIGSTOP, a long GC-like stall) and woken by something
            // else first (a reply that arrived meanwhile) must not find this still pending,
            // or its task takes one more step after the loss.
            let past_until = std::future::poll_fn(|_| {
                if Instant::now() >= until {
                    std::task::Poll::Ready(())
                } else {
                    // The timer below wakes this task at `until`.
                    std::task::Poll::Pending
                }
            });
            tokio::select! {
                biased;
                _ = past_until => {}
                _ = changed => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }
}

/// The first of `leases` to be lost.
pub(crate) async fn lost_any(leases: Vec<Arc<LeaseState>>) -> LockError {
    if leases.is_empty() {
        return std::future::pending().await;
    }
    let all = leases.iter().map(|l| {
        let l = l.clone();
        Box::pin(async move { l.lost().await })
    });
    futures_util::future::select_all(all).await.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(hold: Hold, outermost: bool) -> Granted {
        Granted {
            hold,
            token: 1,
            outermost,
            lease: Duration::from_secs(30),
            auto: false,
            expires_at: Instant::now() + Duration::from_secs(30),
            site: "test",
        }
    }

    #[tokio::test]
    async fn a_hand_off_mark_goes_with_the_hold_it_describes() {
        let waiters = Arc::new(Waiters::default());
        let leases = Arc::new(Leases::default().handing_off(Some(waiters.clone())));
        let keys = Arc::new(LockKeys::new("lock:", "k".into()).expect("keys"));
        let until = Instant::now() + Duration::from_secs(30);
        for end in ["lost", "released"] {
            let hold = Hold::fresh();
            waiters.mark_handed(&keys.hash, hold.owner, until);
            let state = LeaseState::new("b".into(), &leases, keys.clone(), granted(hold, true));
            // A nested hold of the same owner ending leaves the mark.
            let nested = Hold::nested(hold.owner);
            let inner = LeaseState::new("b".into(), &leases, keys.clone(), granted(nested, false));
            assert!(inner.begin_release());
            assert!(waiters.handed_until(&keys.hash).is_some(), "{end}: nested");
            match end {
                "lost" => assert!(state.mark_lost("revoked".into())),
                _ => assert!(state.begin_release()),
            }
            assert_eq!(waiters.handed_until(&keys.hash), None, "{end}");
        }
    }
}
