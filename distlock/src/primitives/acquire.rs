//! The one acquire engine: every primitive (locks of every kind, semaphores, multi-key locks
//! and leader elections, which take locks) and every format goes through [`acquire`].
//!
//! It owns what every acquisition must get right, once:
//! - the deadline (`wait`, capped at [`crate::Lease::MAX`]'s sibling `MAX_WAIT`) and the
//!   lease's bounds, checked before anything is sent;
//! - the nested and sibling rules: an acquisition inside a hold of the same lock in this
//!   task re-enters it (sibling futures take turns on the hold's one permit), and fails
//!   with the outer hold's loss instead of re-creating a lock that vanished;
//! - the attempt in flight: from the moment a script is sent until a reply says nothing
//!   was taken, dropping the future (or an error) releases what it may have taken, in the
//!   background;
//! - retries of transient backend errors, with backoff, within the wait;
//! - a queued waiter's place (fair and write locks), left on every way out but acquiring;
//! - the wait itself: subscribed to the release channel before the next attempt, woken by
//!   a release or by the holder's lease end, whichever comes first; while the channel is
//!   not confirmed (its subscriber down, too few nodes of a quorum backend), polling with
//!   backoff (10 ms doubling to 1 s) and asking for the subscription again, counted as a
//!   waiter all the same.
//!
//! What differs between primitives is data: the [`LockKeys`] (shape and format) and the
//! [`Request`]'s terms.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::lease::handoff::{Outcome, Place, Waiters};
use crate::lease::heard::InFlight;
use crate::lease::policy::MAX_LEASE;
use crate::lease::state::{Granted, LeaseState};
use crate::primitives::guard::{GuardCore, ReleaseOnDrop};
use crate::primitives::nesting;
use crate::protocol::keys::{LockKeys, Shape};
use crate::protocol::Attempt;
use crate::rt::backoff::Backoff;
use crate::rt::hub::Watch;
use crate::terms::owner::{Hold, OwnerId};
use crate::{Lease, LockError};

/// One acquisition: what to take, where, and on which terms.
pub(crate) struct Request {
    /// The backend to take it on.
    pub(crate) backend: Arc<Backend>,
    /// The lock's (or semaphore's) Redis names, shape and format.
    pub(crate) keys: LockKeys,
    /// The longest wait; zero tries once.
    pub(crate) wait: Duration,
    /// The lease.
    pub(crate) lease: Lease,
    /// The site label (metrics, holder information).
    pub(crate) site: &'static str,
}

/// Acquire what `req` names, or fail. See the module docs for what this owns.
///
/// On a backend being shut down (`crate::upkeep::shutdown`) it fails with `ShuttingDown`:
/// at once when the shutdown began before, and a waiting acquisition as soon as it begins
/// (dropping the attempt undoes what it may have taken, as for any dropped acquisition).
/// A grant that raced with the shutdown is given back at once.
pub(crate) async fn acquire(req: Request) -> Result<GuardCore, LockError> {
    let backend = req.backend.clone();
    let shutting_down = |key: &str| LockError::ShuttingDown {
        key: key.to_owned(),
        backend: backend.name.to_string(),
    };
    if backend.leases.is_closed() {
        return Err(shutting_down(&req.keys.user));
    }
    let key = req.keys.user.clone();
    let held = tokio::select! {
        biased;
        () = backend.leases.closed() => return Err(shutting_down(&key)),
        held = acquire_open(req) => held?,
    };
    // Granted while the shutdown took its list of leases: released (in the background,
    // counted in what the shutdown flushes) instead of handed out.
    if backend.leases.is_closed() {
        drop(held);
        return Err(shutting_down(&key));
    }
    Ok(held)
}

/// [`acquire`] on a backend that is not shut down: the terms checked and the enclosing
/// hold entered (the first phase), then attempts — each sent ([`Attempts::try_once`]), its
/// reply judged ([`Attempts::on_reply`]), and a refusal waited out
/// ([`Attempts::wait_for_turn`]) — until one is granted, the wait ends or an error is
/// final.
async fn acquire_open(req: Request) -> Result<GuardCore, LockError> {
    let (t, mut a) = Terms::begin(req).await?;
    // The release channel this waiter listens on, once refused: a wake-up is enabled from
    // it before each attempt, so that a release during the attempt is not missed.
    let mut watch: Option<Watch> = None;
    loop {
        if let Some((token, sent)) = a.take_place_back(&t).await? {
            return Ok(a.grant(&t, token, true, sent));
        }
        if a.leave_stale_queue(&t).await? {
            continue;
        }
        let mut notified = watch.as_ref().map(|w| Box::pin(w.notified()));
        if let Some(n) = notified.as_mut() {
            n.as_mut().enable();
        }
        // Before the first attempt: how many releases the lock's channel has seen, if it
        // is live already (see the wait below).
        let seen = match &watch {
            Some(_) => None,
            None if a.keys.waits_on_its_own_channel() => None,
            None => t.backend.hub.messages(&a.keys.channel),
        };
        let (sent, result) = a.try_once(&t, watch.is_some()).await;
        let ttl = match a.on_reply(&t, result)? {
            Reply::Granted { token, outermost } => return Ok(a.grant(&t, token, outermost, sent)),
            Reply::Refused { ttl } => ttl,
            Reply::Again {
                at,
                new_field,
                busy,
            } => {
                drop(notified);
                if new_field {
                    watch = None;
                }
                let _asleep = busy.then(|| Asleep::new(&t));
                tokio::time::sleep_until(at).await;
                continue;
            }
        };
        let until = a.refused(&t, ttl, sent)?;
        let fresh = watch.is_none();
        let notified = if fresh {
            drop(notified);
            tracing::debug!(backend = %t.backend.name, key = %a.keys.user, ?ttl, "distlock: waiting");
            // Its first subscription is waited for a first pause only.
            a.poll.reset();
            watch = Some(
                t.backend
                    .hub
                    .watch_with(&a.keys.wait_channel(a.hold.owner), one_wakes(&a.keys)),
            );
            watch.as_ref().map(|w| {
                let mut n = Box::pin(w.notified());
                n.as_mut().enable();
                n
            })
        } else {
            notified
        };
        // Both are set by now (a watch made above comes with its wake-up enabled).
        let (Some(w), Some(n)) = (watch.as_ref(), notified) else {
            continue;
        };
        if let Some((token, sent)) = a.wait_for_turn(&t, w, n, fresh, seen, until).await {
            return Ok(a.grant(&t, token, true, sent));
        }
    }
}

/// What stays fixed through one acquisition.
struct Terms {
    backend: Arc<Backend>,
    site: &'static str,
    /// The lease's length, and whether the watchdog renews it.
    lease_len: Duration,
    auto: bool,
    start: Instant,
    deadline: Instant,
    /// The task's enclosing hold a nested acquisition goes under ([`nesting::enter`]).
    outer: Option<Arc<LeaseState>>,
    /// An attempt whose outcome is unknown is retried under a new owner field
    /// ([`crate::protocol::keys::Format::retries_under_a_new_field`]).
    new_field_on_retry: bool,
    /// A nested acquisition whose outcome is unknown (an error, or this future dropped in
    /// flight) is left as it is, not released ([`crate::protocol::keys::Format::keeps_an_unknown_nested_outcome`];
    /// also for a read or write acquisition inside a hold of the other kind: it counts on
    /// the same owner's field). Its possible extra count ends with the lease (documented).
    ambiguous_is_kept: bool,
    /// A fresh acquisition of a lock that hands off waits as a local waiter too: a release
    /// in this process grants it the lock directly (`crate::lease::handoff`).
    handoffs: Option<Arc<Waiters>>,
    /// The revocations heard so far, noted again before each attempt: one heard before the
    /// lease registers (its message came before the attempt's reply) is raised again for
    /// it then (`crate::upkeep::revoke::Heard`).
    in_flight: InFlight,
}

/// What changes from one attempt to the next.
struct Attempts {
    /// Shared with the undo armed while an attempt is unanswered, and then with the lease.
    keys: Arc<LockKeys>,
    hold: Hold,
    /// A nested hold's turn on its enclosing hold (given back with the guard).
    permit: Option<OwnedSemaphorePermit>,
    /// The error to answer when the first attempt finds the lock held (a write inside the
    /// task's own read hold; [`nesting::enter`]).
    upgrade: Option<LockError>,
    /// From the moment a script is sent until an answer says it took nothing, the level
    /// (the semaphore's holder id) may be held: if this future is dropped, or ends in an
    /// error, it is released in the background.
    pending: Option<ReleaseOnDrop>,
    /// A fair or write waiter is queued in the backend once refused: on every way out but
    /// acquiring (timeout, error, this future dropped) it leaves the queue again.
    queued: Option<Queued>,
    /// A place left under an old field (Redisson's format, after a transient error): left
    /// before the next attempt, which queues under the new field — else that attempt would
    /// queue behind it, and wait until its deadline (the whole allowance) to be served.
    stale: Option<Queued>,
    /// An attempt got no answer and this acquisition tries again with the same level (see
    /// `Hold::late`): the hold it gets is released again later.
    unanswered: bool,
    /// Its place among the local waiters (`crate::lease::handoff`), and its rank.
    place: Option<Place>,
    rank: Option<u64>,
    backend_retry: Backoff,
    /// The pauses of a waiter that polls while its release channel is not confirmed.
    poll: Backoff,
}

/// What an attempt's reply means for the acquisition.
enum Reply {
    /// Granted (a fresh hold, `outermost`, or a re-entry).
    Granted { token: u64, outermost: bool },
    /// Refused: the holder's lease (a semaphore: the earliest holder's) ends within `ttl`.
    Refused { ttl: Option<Duration> },
    /// Try again at `at` (a transient failure, a quorum not reached), under a new field
    /// when `new_field` (Redisson's format: the release channel changes with it). `busy`:
    /// others hold the lock (a quorum backend's split), so the pause counts as waiting.
    Again {
        at: Instant,
        new_field: bool,
        busy: bool,
    },
}

impl Terms {
    /// The first phase: the terms checked before anything is sent, and the task's
    /// enclosing hold entered.
    async fn begin(req: Request) -> Result<(Terms, Attempts), LockError> {
        let Request {
            backend,
            mut keys,
            wait,
            lease,
            site,
        } = req;
        let (lease_len, auto) = check_terms(&backend, &keys, lease)?;
        let start = Instant::now();
        let deadline = start + wait.min(crate::lease::policy::MAX_WAIT);
        keys.set_allowance(wait.min(crate::lease::policy::MAX_WAIT));
        let entered = match nesting::enter(&backend, &keys, deadline).await {
            Ok(e) => e,
            Err(Some(e)) => return Err(e),
            Err(None) => return Err(timeout(&backend, keys.user, start.elapsed(), None)),
        };
        let new_field_on_retry = keys.format.retries_under_a_new_field();
        let ambiguous_is_kept = keys
            .format
            .keeps_an_unknown_nested_outcome(entered.hold.nested || entered.outer.is_some());
        let handoffs = match &backend.handoffs {
            Some(w) if !entered.hold.nested && crate::lease::handoff::eligible(&keys) => {
                Some(w.clone())
            }
            _ => None,
        };
        // Its refused attempts leave this backend's tag in the lock: the release publishes
        // only when a tag is there (`release.lua`), and a holder's process that hands off
        // lets the lock go free for a waiter of another process once it has waited a turn
        // instead of handing it to one of its own (`acquire.lua`, `handoff.lua`). Every
        // fresh acquisition that can wait for a release leaves it, hand-off or not.
        if !entered.hold.nested && keys.leaves_its_tag() {
            keys.handoff_tag = Some(backend.tag.clone());
        }
        let in_flight = backend.leases.heard.in_flight();
        let attempts = Attempts {
            keys: Arc::new(keys),
            hold: entered.hold,
            permit: entered.permit,
            upgrade: entered.upgrade,
            pending: None,
            queued: None,
            stale: None,
            unanswered: false,
            place: None,
            rank: None,
            backend_retry: Backoff::retry(),
            poll: Backoff::poll(),
        };
        let terms = Terms {
            backend,
            site,
            lease_len,
            auto,
            start,
            deadline,
            outer: entered.outer,
            new_field_on_retry,
            ambiguous_is_kept,
            handoffs,
            in_flight,
        };
        Ok((terms, attempts))
    }
}

/// The lease's length and whether it is renewed, once checked: the backend offers the
/// shape; Redis cannot expire a key that far out, a lock held for longer than a day
/// without renewal is a wedge waiting to happen, and a lease under a millisecond is over
/// before its grant arrives; a Redisson-format reader shares its hash's expiry with Java
/// readers, whose watchdog sets it to their own lease: a longer lease than theirs could be
/// cut short unheard.
fn check_terms(
    backend: &Backend,
    keys: &LockKeys,
    lease: Lease,
) -> Result<(Duration, bool), LockError> {
    backend.supports_shape(&keys.shape)?;
    let (lease_len, auto) = match lease {
        Lease::Auto => (backend.watchdog_timeout, true),
        Lease::Fixed(d) => (d, false),
    };
    crate::lease::policy::check_lease(lease, lease_len, &keys.user, &backend.name)?;
    // On redlock and multi a grant is valid for the lease less the clock-drift allowance:
    // a lease with nothing left after it could never be granted.
    if backend.validity(lease_len).is_zero() {
        let shortest = (1..=MAX_LEASE.as_millis() as u64)
            .map(Duration::from_millis)
            .find(|l| !backend.validity(*l).is_zero())
            .unwrap_or(MAX_LEASE);
        return Err(LockError::InvalidDuration {
            key: keys.user.clone(),
            backend: backend.name.to_string(),
            what: "lease (nothing is left of it after the clock-drift allowance, lease × drift_factor + 2 ms)",
            value: lease_len,
            min: shortest,
            limit: MAX_LEASE,
        });
    }
    if let Some(limit) = keys.lease_limit().filter(|l| lease_len > *l) {
        return Err(LockError::InvalidDuration {
            key: keys.user.clone(),
            backend: backend.name.to_string(),
            what: if auto {
                "lease (watchdog_timeout) of a Redisson-format read lock (Redisson's lockWatchdogTimeout)"
            } else {
                "lease of a Redisson-format read lock (Redisson's lockWatchdogTimeout)"
            },
            value: lease_len,
            min: std::time::Duration::from_millis(1),
            limit,
        });
    }
    Ok((lease_len, auto))
}

impl Attempts {
    /// The lease granted (`sent`: when the granting attempt was sent), registered, and
    /// handed to a guard.
    fn grant(self, t: &Terms, token: u64, outermost: bool, sent: Instant) -> GuardCore {
        let backend = &t.backend;
        tracing::debug!(backend = %backend.name, key = %self.keys.user, token, outermost, waited = ?t.start.elapsed(), "distlock: acquired");
        let state = LeaseState::new(
            backend.name.clone(),
            &backend.leases,
            self.keys,
            Granted {
                hold: Hold {
                    late: self.unanswered,
                    ..self.hold
                },
                token,
                outermost,
                lease: t.lease_len,
                auto: t.auto,
                expires_at: sent + backend.validity(t.lease_len),
                site: t.site,
            },
        );
        crate::upkeep::revoke::registered(&t.in_flight, backend, &state);
        GuardCore::new(state, backend.clone(), self.permit)
    }

    /// Claimed, and not handed over: the grant to this waiter's level may have been made
    /// and undone, and that undo is sent again a while later (`backend/undo.rs`), so
    /// the next attempt takes a level of its own, which the undo cannot release.
    fn renumber_after_undone_hand_off(&mut self) {
        self.hold = self.hold.renumbered();
    }

    /// A local waiter takes its place back before an attempt of its own; a releaser that
    /// claimed it meanwhile decides for it (its level may be granted already): the token
    /// and send time of a grant handed over.
    async fn take_place_back(&mut self, t: &Terms) -> Result<Option<(u64, Instant)>, LockError> {
        let Some(mut p) = self.place.take() else {
            return Ok(None);
        };
        if p.withdraw() {
            return Ok(None);
        }
        match tokio::time::timeout_at(t.deadline, p.outcome()).await {
            Ok(Outcome::Granted { token, sent, undo }) => {
                undo.disarm();
                Ok(Some((token, sent)))
            }
            Ok(Outcome::Retry) => {
                self.renumber_after_undone_hand_off();
                Ok(None)
            }
            // Its grant, should one come, is released by the releaser.
            Err(_) => Err(timeout(
                &t.backend,
                self.keys.user.clone(),
                t.start.elapsed(),
                None,
            )),
        }
    }

    /// Leave a queue place under an old field ([`Attempts::stale`]). `true`: not through
    /// yet, paused; try again (the same backoff as the attempts, within the wait).
    async fn leave_stale_queue(&mut self, t: &Terms) -> Result<bool, LockError> {
        let Some(q) = self.stale.as_mut() else {
            return Ok(false);
        };
        match t.backend.cancel(&q.keys, q.owner).await {
            Ok(_) => {
                q.armed = false;
                if q.unanswered {
                    t.backend.cancel_again_later(&q.keys, q.owner);
                }
                self.stale = None;
            }
            Err(e) if e.is_transient() && Instant::now() < t.deadline => {
                let pause = self.backend_retry.pause();
                tracing::debug!(backend = %t.backend.name, key = %self.keys.user, error = %e, retry_in = ?pause,
                    "distlock: leaving the wait queue under an old field failed; retrying within the wait");
                tokio::time::sleep_until(t.deadline.min(Instant::now() + pause)).await;
                return Ok(true);
            }
            // Left to the background (the place expires at its deadline at the latest).
            Err(_) => drop(self.stale.take()),
        }
        Ok(false)
    }

    /// One attempt (`watching`: refused before, listening for a release): when it was
    /// sent, and the backend's answer.
    async fn try_once(
        &mut self,
        t: &Terms,
        watching: bool,
    ) -> (Instant, Result<Attempt, LockError>) {
        // A lock this process was handed and holds: a first attempt could only be refused,
        // so it is skipped, and this acquirer waits as a local waiter. So does a waiter
        // woken by a release that let the lock go free for a waiter of another process
        // (`Waiters::yield_to_remote`): else, on a warm runtime, it takes the lock back
        // before that waiter's process has woken, and the other process starves.
        // Only while the wait outlasts the mark: a mark is a hint (its hold may have lost
        // the lock unheard), so the last attempt before the deadline — a try-once's only
        // one — asks the server, and "busy" is never answered from a mark alone.
        let local = match (watching, &t.handoffs) {
            (false, Some(w)) => w.handed_until(&self.keys.hash),
            (true, Some(w)) => w.yielded_until(&self.keys.hash),
            (_, None) => None,
        }
        .filter(|until| *until < t.deadline);
        if local.is_none() {
            t.in_flight.renew();
        }
        let sent = Instant::now();
        let left = t.deadline.saturating_duration_since(sent);
        if self.queued.is_none() && !left.is_zero() && self.keys.shape.queues() {
            self.queued = Some(Queued {
                backend: t.backend.clone(),
                keys: self.keys.clone(),
                owner: self.hold.owner,
                armed: true,
                unanswered: false,
            });
        }
        // A retry after an error sends the same level, so a first run whose reply was lost
        // is found, not counted again ([`Attempts::pending`]).
        if self.pending.is_none() && !t.ambiguous_is_kept && local.is_none() {
            self.pending = Some(ReleaseOnDrop::undo(&t.backend, &self.keys, self.hold));
        }
        let result = match local {
            Some(until) => Ok(Attempt::Held {
                ttl: Some(until.saturating_duration_since(sent)),
            }),
            None => {
                // Marked before it goes: this future may be dropped at the await.
                let queued = self.queued.as_mut();
                let unanswered = queued.map(|q| std::mem::replace(&mut q.unanswered, true));
                let result = t
                    .backend
                    .acquire(&self.keys, self.hold, t.lease_len, left)
                    .await;
                if let (Some(q), Some(before), true) =
                    (self.queued.as_mut(), unanswered, result.is_ok())
                {
                    q.unanswered = before;
                }
                result
            }
        };
        (sent, result)
    }

    /// What the attempt's answer means: granted, refused, or to be tried again; an error
    /// that is final.
    fn on_reply(
        &mut self,
        t: &Terms,
        result: Result<Attempt, LockError>,
    ) -> Result<Reply, LockError> {
        let attempt = match result {
            Ok(a) => a,
            // A transient failure (connection refused or reset, a time-out, a failover
            // under way: READONLY, LOADING, MASTERDOWN, TRYAGAIN, CLUSTERDOWN) is retried
            // with backoff until the wait ends; then the last error is returned.
            Err(e) if e.is_transient() && !t.ambiguous_is_kept => return self.on_transient(t, e),
            Err(e) => return Err(e),
        };
        self.backend_retry.reset();
        match attempt {
            Attempt::Acquired { token } => Ok(self.granted(token, true)),
            Attempt::Reentered => Ok(self.granted(t.outer.as_ref().map_or(0, |o| o.token), false)),
            // A write inside the task's own read hold: refused by that hold (the script
            // found it there; had it vanished, the answer was "outer lost").
            Attempt::Held { ttl } => {
                self.took_nothing();
                match self.upgrade.take() {
                    Some(refused) => Err(refused),
                    None => Ok(Reply::Refused { ttl }),
                }
            }
            Attempt::OuterLost => {
                self.took_nothing();
                Err(self.outer_lost(t))
            }
            Attempt::NoQuorum {
                granted,
                needed,
                nodes,
                busy,
                retry_in,
            } => {
                self.took_nothing();
                // redlock/multi: everything granted was released again; retry after a
                // random pause, within `wait`.
                let now = Instant::now();
                if now < t.deadline {
                    return Ok(Reply::Again {
                        at: t.deadline.min(now + retry_in),
                        new_field: false,
                        busy,
                    });
                }
                Err(if busy {
                    timeout(&t.backend, self.keys.user.clone(), now - t.start, None)
                } else {
                    LockError::QuorumNotReached {
                        key: self.keys.user.clone(),
                        backend: t.backend.name.to_string(),
                        granted,
                        needed,
                        nodes,
                    }
                })
            }
        }
    }

    /// Granted: nothing to undo, and no queue place to leave.
    fn granted(&mut self, token: u64, outermost: bool) -> Reply {
        if let Some(p) = self.pending.take() {
            p.disarm();
        }
        if let Some(mut q) = self.queued.take() {
            q.armed = false;
        }
        Reply::Granted { token, outermost }
    }

    /// The answer says the attempt took nothing: nothing to undo.
    fn took_nothing(&mut self) {
        if let Some(p) = self.pending.take() {
            p.disarm();
        }
    }

    /// A transient failure of an attempt: tried again after a pause, within the wait.
    fn on_transient(&mut self, t: &Terms, e: LockError) -> Result<Reply, LockError> {
        let now = Instant::now();
        if now >= t.deadline {
            return Err(e);
        }
        let new_field = t.new_field_on_retry;
        // Under a new field, the old one's undo and queue cancel (sent again later) cover
        // the attempt that got no answer; under the same level, the hold it gets does.
        self.unanswered |= !new_field;
        if new_field {
            // The field this attempt may have taken is released in the background (a
            // field of this acquisition alone, so nothing else is touched), and the retry
            // is a fresh acquisition with a field of its own.
            drop(self.pending.take());
            self.hold = Hold::fresh();
            // A queued fair waiter leaves the queue under its old field before it queues
            // again, and listens on the new field's channel.
            self.stale = self.queued.take();
        }
        let pause = self.backend_retry.pause();
        tracing::debug!(backend = %t.backend.name, key = %self.keys.user, error = %e, retry_in = ?pause,
            "distlock: backend failed while waiting; retrying within the wait");
        Ok(Reply::Again {
            at: t.deadline.min(now + pause),
            new_field,
            busy: false,
        })
    }

    /// The enclosing hold's lock is gone: the outer guard hears of it now, and this
    /// acquisition fails instead of re-creating the lock under it.
    fn outer_lost(&self, t: &Terms) -> LockError {
        let reason =
            "a nested acquisition found the lock gone (expired, deleted or lost in a failover)";
        match &t.outer {
            Some(o) => {
                o.mark_lost(reason.into());
                o.lost_error()
            }
            None => LockError::LeaseLost {
                key: self.keys.user.clone(),
                backend: t.backend.name.to_string(),
                reason: reason.into(),
            },
        }
    }

    /// Refused: `Timeout` when the wait is over; else until when to wait (the holder's
    /// lease end, `ttl` after the attempt, or the deadline), with a place among the local
    /// waiters where the lock hands off.
    fn refused(
        &mut self,
        t: &Terms,
        ttl: Option<Duration>,
        sent: Instant,
    ) -> Result<Instant, LockError> {
        let now = Instant::now();
        if now >= t.deadline {
            // The holder's remaining lease as this attempt reported it.
            let holder = ttl.map(|d| (d, sent));
            return Err(timeout(
                &t.backend,
                self.keys.user.clone(),
                now - t.start,
                holder,
            ));
        }
        if let Some(w) = &t.handoffs {
            let holder = self.keys.holder.clone();
            let p = w.enter(&self.keys.hash, self.rank, self.hold, t.lease_len, holder);
            self.rank = Some(p.rank());
            self.place = Some(p);
        }
        // The holder's (a semaphore: the earliest holder's) lease end: the lock or a
        // permit comes back then at the latest.
        Ok(ttl.map_or(t.deadline, |d| t.deadline.min(now + d)))
    }

    /// Wait for a turn on the release channel `w` (`n`: its wake-up, enabled before the
    /// attempt; `fresh`: just subscribed; `seen`: the channel's releases before the
    /// attempt) until `until`: `Some` with a grant handed over by a local releaser, `None`
    /// to try again.
    async fn wait_for_turn(
        &mut self,
        t: &Terms,
        w: &Watch,
        n: std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>>,
        fresh: bool,
        seen: Option<u64>,
        until: Instant,
    ) -> Option<(u64, Instant)> {
        let heard = if w.is_live() {
            self.poll.reset();
            // Just subscribed (here or by another waiter of this process) after the refused
            // attempt: try again at once, as a release in between was not heard — unless
            // the channel was live before that attempt (other waiters of this process keep
            // it subscribed) and has seen no release since, counted after this wake-up was
            // enabled: nothing was missed, so sleep now.
            if fresh && !matches!(seen, Some(before) if w.messages() == Some(before)) {
                return None;
            }
            let _asleep = Asleep::new(t);
            tokio::select! {
                _ = n => None,
                _ = tokio::time::sleep_until(until) => None,
                o = handed(self.place.as_mut()) => Some(o),
            }
        } else {
            // Releases may not reach this process: the channel is not subscribed yet, its
            // subscriber is down, or too few nodes of a quorum backend confirmed it. The
            // waiter asks for the subscription (again) and polls meanwhile: it tries again
            // after a pause that grows from a few ms to a second (bounded by the holder's
            // lease end and the wait), or as soon as the channel is confirmed, a message
            // arrives anyway (from a node that did confirm it) or a reconnect wakes it —
            // never asleep until the lease's end without hearing a release. It counts as a
            // waiter then, but for its first subscription (a few ms at most).
            let _asleep = (!fresh).then(|| Asleep::new(t));
            let wake = until.min(Instant::now() + self.poll.pause());
            tokio::select! {
                _ = n => None,
                _ = tokio::time::sleep_until(wake) => None,
                true = w.subscribe(wake) => None,
                o = handed(self.place.as_mut()) => Some(o),
            }
        };
        match heard {
            Some(Outcome::Granted { token, sent, undo }) => {
                undo.disarm();
                Some((token, sent))
            }
            // Claimed, not handed over: the place is gone; try as usual.
            Some(Outcome::Retry) => {
                self.place = None;
                self.renumber_after_undone_hand_off();
                None
            }
            None => None,
        }
    }
}

/// What the releaser that claimed this waiter's place says; never resolves without a place.
async fn handed(place: Option<&mut Place>) -> Outcome {
    match place {
        Some(p) => p.outcome().await,
        None => std::future::pending().await,
    }
}

/// Whether a release wakes one waiter of this process (the next attempt can only admit
/// one) or all of them: a reentrant lock, and Redisson's fair lock (each waiter on its own
/// channel), wake one; a read-write lock (several readers may enter) and a semaphore (a
/// release may free enough permits for several) wake all.
fn one_wakes(keys: &LockKeys) -> bool {
    if keys.waits_on_its_own_channel() {
        return true;
    }
    match &keys.shape {
        Shape::Reentrant => true,
        Shape::Fair | Shape::Read | Shape::Write | Shape::Semaphore(_) => false,
    }
}

/// A `Timeout` with what was measured: the holder's remaining lease as last reported
/// (counted down to now), and the recent hold times on this backend.
pub(crate) fn timeout(
    backend: &Backend,
    key: String,
    waited: Duration,
    holder: Option<(Duration, Instant)>,
) -> LockError {
    LockError::Timeout {
        key,
        backend: backend.name.to_string(),
        waited,
        holder_lease: holder.map(|(ttl, seen)| ttl.saturating_sub(seen.elapsed())),
        recent_hold: crate::lease::hold_times::typical(&backend.name),
        held_by: crate::errors::HeldBy::Unknown,
    }
}

/// A waiter's place in a fair or write queue, left when dropped armed.
struct Queued {
    backend: Arc<Backend>,
    keys: Arc<LockKeys>,
    owner: OwnerId,
    armed: bool,
    /// An attempt of this place got no answer (an error, or its future dropped in flight):
    /// it may still reach the server after the place is left, and queue it again, so
    /// leaving it is sent again a while later (`Backend::cancel_again_later`).
    unanswered: bool,
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.armed {
            self.backend
                .cancel_in_background(self.keys.clone(), self.owner, self.unanswered);
        }
    }
}

/// Counts a waiter as asleep while it lives: in its backend's count (`Registry::waiting`)
/// and in the `distlock_waiters` gauge.
struct Asleep<'a> {
    count: &'a std::sync::atomic::AtomicUsize,
    _gauge: crate::obs::metrics::Waiting,
}

impl<'a> Asleep<'a> {
    fn new(t: &'a Terms) -> Asleep<'a> {
        let count = &t.backend.waiting;
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Asleep {
            count,
            _gauge: crate::obs::metrics::Waiting::new(&t.backend.name, t.site),
        }
    }
}

impl Drop for Asleep<'_> {
    fn drop(&mut self) {
        self.count
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
