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
use crate::lease::held::{Granted, LeaseState};
use crate::lease::owner::{Hold, OwnerId, Under};
use crate::primitives::guard::{Held, ReleaseOnDrop};
use crate::primitives::handoff::{Outcome, Place};
use crate::protocol::keys::{Format, LockKeys, Shape};
use crate::protocol::Attempt;
use crate::rt::backoff::Backoff;
use crate::rt::hub::Watch;
use crate::{Lease, LockError, LockKind};

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
/// On a backend being shut down (`crate::lease::shutdown`) it fails with `ShuttingDown`:
/// at once when the shutdown began before, and a waiting acquisition as soon as it begins
/// (dropping the attempt undoes what it may have taken, as for any dropped acquisition).
/// A grant that raced with the shutdown is given back at once.
pub(crate) async fn acquire(req: Request) -> Result<Held, LockError> {
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

/// [`acquire`] on a backend that is not shut down.
async fn acquire_open(req: Request) -> Result<Held, LockError> {
    let Request {
        backend,
        mut keys,
        wait,
        lease,
        site,
    } = req;
    backend.supports_shape(&keys.shape)?;
    let (lease_len, auto) = match lease {
        Lease::Auto => (backend.watchdog_timeout, true),
        Lease::Fixed(d) => (d, false),
    };
    // Checked before anything is sent: Redis cannot expire a key that far out, a lock held
    // for longer than a day without renewal is a wedge waiting to happen, and a lease under
    // a millisecond is over before its grant arrives.
    crate::lease::terms::check_lease(lease, lease_len, &keys.user, &backend.name)?;
    // A Redisson-format reader shares its hash's expiry with Java readers, whose watchdog
    // sets it to their own lease: a longer lease than theirs could be cut short unheard.
    if let Some(limit) = keys.lease_limit().filter(|l| lease_len > *l) {
        return Err(LockError::InvalidDuration {
            key: keys.user,
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
    let start = Instant::now();
    let deadline = start + wait.min(crate::lease::terms::MAX_WAIT);
    if let Format::Redisson(r) = &mut keys.format {
        // A Redisson fair waiter's place in the queue lasts its allowance: its wait, as
        // Redisson's `tryLock(waitTime, ...)` passes it (try-once: fairLockWaitTimeout).
        if !wait.is_zero() {
            r.allowance = wait.min(crate::lease::terms::MAX_WAIT);
        }
    }
    let kind = keys.shape.lock_kind();
    // An enclosing hold of this lock in this task: a nested acquisition re-enters it, of
    // every kind alike (`enclosing`: the rule for every pair of kinds). It counts a level
    // of that hold (the scripts answer "outer lost", creating nothing, when the hold is
    // gone), and sibling futures of the task take turns (the hold's one permit, within
    // `wait`). A semaphore has no enclosing hold: each acquisition is a holder of its own.
    let (outer, under, mut upgrade) = match kind {
        Some(kind) => enclosing(&backend, &keys, kind)?,
        None => (None, None, None),
    };
    let mut permit: Option<OwnedSemaphorePermit> = None;
    let base = match (&outer, under) {
        (Some(o), Some(under)) => {
            match tokio::time::timeout_at(deadline, o.nested().acquire_owned()).await {
                Ok(Ok(p)) => permit = Some(p),
                _ => return Err(timeout(&backend, keys.user, start.elapsed(), None)),
            }
            if o.is_lost() {
                return Err(o.lost_error());
            }
            Hold::nested_under(o.owner, under)
        }
        (Some(o), None) => Hold {
            nested: false,
            ..Hold::nested(o.owner)
        },
        (None, _) => Hold::fresh(),
    };
    let mut hold = base;
    // Redisson's format counts a re-entry on the owner's field, shared with the outer hold,
    // and has no level marks: a nested acquisition whose outcome is unknown (an error, or
    // this future dropped in flight) must not be "released" — that could take the outer
    // hold's count instead. Its possible extra count ends with the lease (documented).
    // (Also for a read or write acquisition inside a hold of the other kind: it counts on
    // the same owner's field, so a "release to be safe" could take the outer's count.)
    let redisson = keys.format.is_redisson();
    let ambiguous_is_kept = redisson && (hold.nested || outer.is_some());
    let outer_token = outer.as_ref().map(|o| o.token);
    let mut pending: Option<ReleaseOnDrop> = None;
    let mut watch: Option<Watch> = None;
    let mut backend_retry = Backoff::retry();
    // The pauses of a waiter that polls while its release channel is not confirmed.
    let mut poll = Backoff::poll();
    // A fair or write waiter is queued in the backend once refused: on every way out but
    // acquiring (timeout, error, this future dropped) it leaves the queue again.
    let mut queued: Option<Queued> = None;
    // A place left under an old field (Redisson's format, after a transient error): left
    // before the next attempt, which queues under the new field — else that attempt would
    // queue behind it, and wait until its deadline (the whole allowance) to be served.
    let mut stale: Option<Queued> = None;
    // A fresh acquisition of a lock that hands off waits as a local waiter too: a release
    // in this process grants it the lock directly (`crate::primitives::handoff`).
    let handoffs = match &backend.handoffs {
        Some(w) if !hold.nested && crate::primitives::handoff::eligible(&keys) => Some(w.clone()),
        _ => None,
    };
    // Its refused attempts tell the holder's process that a waiter of another process is
    // there: it lets the lock go free for it at its next release instead of handing it to
    // one of its own once it has waited a turn (`acquire.lua`, `handoff.lua`).
    if let Some(w) = &handoffs {
        keys.handoff_tag = Some(w.tag().clone());
    }
    let mut place: Option<Place> = None;
    let mut rank: Option<u64> = None;
    // The revocations heard so far, noted again before each attempt: one heard before the
    // lease below registers (its message came before the attempt's reply) is raised again
    // for it then (`crate::lease::revoke::Heard`).
    let in_flight = backend.leases.heard.in_flight();
    let grant = |keys: LockKeys, hold: Hold, token: u64, outermost: bool, sent: Instant, permit| {
        tracing::debug!(backend = %backend.name, key = %keys.user, token, outermost, waited = ?start.elapsed(), "distlock: acquired");
        let state = LeaseState::new(
            backend.name.clone(),
            &backend.leases,
            keys,
            Granted {
                hold,
                token,
                outermost,
                lease: lease_len,
                auto,
                expires_at: sent + backend.validity(lease_len),
                site,
            },
        );
        crate::lease::revoke::registered(&in_flight, &backend, &state);
        Held::new(state, backend.clone(), permit)
    };
    loop {
        // A local waiter takes its place back before an attempt of its own; a releaser
        // that claimed it meanwhile decides for it (its level may be granted already).
        if let Some(mut p) = place.take() {
            if !p.withdraw() {
                match tokio::time::timeout_at(deadline, p.outcome()).await {
                    Ok(Outcome::Granted { token, sent, undo }) => {
                        undo.disarm();
                        return Ok(grant(keys, hold, token, true, sent, permit));
                    }
                    Ok(Outcome::Retry) => {}
                    // Its grant, should one come, is released by the releaser.
                    Err(_) => return Err(timeout(&backend, keys.user, start.elapsed(), None)),
                }
            }
        }
        if let Some(q) = stale.as_mut() {
            match crate::rt::runtime::entered(backend.cancel(&q.keys, q.owner)).await {
                Ok(_) => {
                    q.armed = false;
                    stale = None;
                }
                // Not through yet: the same backoff as the attempts, within the wait.
                Err(e) if e.is_transient() && Instant::now() < deadline => {
                    let pause = backend_retry.pause();
                    tracing::debug!(backend = %backend.name, key = %keys.user, error = %e, retry_in = ?pause,
                        "distlock: leaving the wait queue under an old field failed; retrying within the wait");
                    tokio::time::sleep_until(deadline.min(Instant::now() + pause)).await;
                    continue;
                }
                // Left to the background (the place expires at its deadline at the latest).
                Err(_) => drop(stale.take()),
            }
        }
        let mut notified = watch.as_ref().map(|w| Box::pin(w.notified()));
        if let Some(n) = notified.as_mut() {
            n.as_mut().enable();
        }
        // Before the first attempt: how many releases the lock's channel has seen, if it
        // is live already (see the wait below).
        let seen = match (&watch, &keys.format, &keys.shape) {
            (Some(_), _, _) | (None, Format::Redisson(_), Shape::Fair) => None,
            (None, _, _) => backend.hub.messages(&keys.channel),
        };
        // A lock this process was handed and holds: a first attempt could only be refused,
        // so it is skipped, and this acquirer waits as a local waiter. So does a waiter woken
        // by a release that let the lock go free for a waiter of another process
        // (`Waiters::yield_to_remote`): else, on a warm runtime, it takes the lock back
        // before that waiter's process has woken, and the other process starves.
        // Only while the wait outlasts the mark: a mark is a hint (its hold may have lost
        // the lock unheard), so the last attempt before the deadline — a try-once's only
        // one — asks the server, and "busy" is never answered from a mark alone.
        let local = match (&watch, &handoffs) {
            (None, Some(w)) => w.handed_until(&keys.hash),
            (Some(_), Some(w)) => w.yielded_until(&keys.hash),
            (_, None) => None,
        }
        .filter(|until| *until < deadline);
        if local.is_none() {
            in_flight.renew();
        }
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        if queued.is_none() && !left.is_zero() && queues(&keys.shape) {
            queued = Some(Queued {
                backend: backend.clone(),
                keys: keys.clone(),
                owner: hold.owner,
                armed: true,
            });
        }
        // From the moment a script is sent until an answer says it took nothing, the level
        // (the semaphore's holder id) may be held: if this future is dropped, or ends in an
        // error, it is released in the background. A retry after an error sends the same
        // level, so a first run whose reply was lost is found, not counted again.
        if pending.is_none() && !ambiguous_is_kept && local.is_none() {
            pending = Some(ReleaseOnDrop::undo(&backend, &keys, hold));
        }
        let result = match local {
            Some(until) => Ok(Attempt::Held {
                ttl: Some(until.saturating_duration_since(sent)),
            }),
            None => {
                crate::rt::runtime::entered(backend.acquire(&keys, hold, lease_len, left)).await
            }
        };
        let attempt = match result {
            Ok(a) => {
                if !matches!(a, Attempt::Acquired { .. } | Attempt::Reentered) {
                    if let Some(p) = pending.take() {
                        p.disarm();
                    }
                }
                backend_retry.reset();
                a
            }
            // A transient failure (connection refused or reset, a time-out, a failover under
            // way: READONLY, LOADING, MASTERDOWN, TRYAGAIN, CLUSTERDOWN) is retried with
            // backoff until the wait ends; then the last error is returned.
            Err(e) if e.is_transient() && !ambiguous_is_kept => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(e);
                }
                drop(notified);
                if redisson {
                    // Redisson's format cannot tell a retry from a re-entry: the field
                    // this attempt may have taken is released in the background (a field
                    // of this acquisition alone, so nothing else is touched), and the
                    // retry is a fresh acquisition with a field of its own.
                    drop(pending.take());
                    hold = Hold::fresh();
                    // A queued fair waiter leaves the queue under its old field before it
                    // queues again (below), and listens on the new field's channel.
                    stale = queued.take();
                    watch = None;
                }
                let pause = backend_retry.pause();
                tracing::debug!(backend = %backend.name, key = %keys.user, error = %e, retry_in = ?pause,
                    "distlock: backend failed while waiting; retrying within the wait");
                tokio::time::sleep_until(deadline.min(now + pause)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let ttl = match attempt {
            Attempt::Acquired { .. } | Attempt::Reentered => {
                if let Some(p) = pending.take() {
                    p.disarm();
                }
                if let Some(mut q) = queued.take() {
                    q.armed = false;
                }
                let outermost = matches!(attempt, Attempt::Acquired { .. });
                let token = match attempt {
                    Attempt::Acquired { token } => token,
                    _ => outer_token.unwrap_or(0),
                };
                return Ok(grant(keys, hold, token, outermost, sent, permit));
            }
            // A write inside the task's own read hold: refused by that hold (the script
            // found it there; had it vanished, the answer was "outer lost").
            Attempt::Held { ttl } => match upgrade.take() {
                Some(refused) => return Err(refused),
                None => ttl,
            },
            Attempt::OuterLost => {
                // The enclosing hold's lock is gone: the outer guard hears of it now, and
                // this acquisition fails instead of re-creating the lock under it.
                let reason = "a nested acquisition found the lock gone (expired, deleted or lost in a failover)";
                return Err(match &outer {
                    Some(o) => {
                        o.mark_lost(reason.into());
                        o.lost_error()
                    }
                    None => LockError::LeaseLost {
                        key: keys.user,
                        backend: backend.name.to_string(),
                        reason: reason.into(),
                    },
                });
            }
            Attempt::NoQuorum {
                granted,
                needed,
                nodes,
                busy,
                retry_in,
            } => {
                // redlock/multi: everything granted was released again; retry after a
                // random pause, within `wait`.
                let now = Instant::now();
                if now >= deadline {
                    return Err(if busy {
                        timeout(&backend, keys.user, now - start, None)
                    } else {
                        LockError::QuorumNotReached {
                            key: keys.user,
                            backend: backend.name.to_string(),
                            granted,
                            needed,
                            nodes,
                        }
                    });
                }
                drop(notified);
                tokio::time::sleep_until(deadline.min(now + retry_in)).await;
                continue;
            }
        };
        let now = Instant::now();
        if now >= deadline {
            // The holder's remaining lease as this attempt reported it.
            let holder = ttl.map(|t| (t, sent));
            return Err(timeout(&backend, keys.user, now - start, holder));
        }
        // The holder's (a semaphore: the earliest holder's) lease end: the lock or a permit
        // comes back then at the latest.
        let until = ttl.map_or(deadline, |t| deadline.min(now + t));
        if let Some(w) = &handoffs {
            let holder = keys.holder.clone();
            let p = w.enter(&keys.hash, rank, hold, lease_len, holder);
            rank = Some(p.rank());
            place = Some(p);
        }
        let fresh = watch.is_none();
        if fresh {
            tracing::debug!(backend = %backend.name, key = %keys.user, ?ttl, "distlock: waiting");
            drop(notified);
            // Its first subscription is waited for a first pause only.
            poll.reset();
            watch = Some(
                backend
                    .hub
                    .watch_with(&keys.wait_channel(hold.owner), one_wakes(&keys)),
            );
            notified = watch.as_ref().map(|w| {
                let mut n = Box::pin(w.notified());
                n.as_mut().enable();
                n
            });
        }
        // Both are set by now (a watch made above comes with its wake-up enabled).
        let (Some(w), Some(n)) = (watch.as_ref(), notified) else {
            continue;
        };
        let heard = if w.is_live() {
            poll.reset();
            // Just subscribed (here or by another waiter of this process) after the refused
            // attempt: try again at once, as a release in between was not heard — unless
            // the channel was live before that attempt (other waiters of this process keep
            // it subscribed) and has seen no release since, counted after this wake-up was
            // enabled: nothing was missed, so sleep now.
            if fresh && !matches!(seen, Some(before) if w.messages() == Some(before)) {
                continue;
            }
            let _asleep = Asleep::new(&backend.waiting);
            let _gauge = crate::ops::metrics::Waiting::new(&backend.name, site);
            tokio::select! {
                _ = n => None,
                _ = tokio::time::sleep_until(until) => None,
                o = handed(place.as_mut()) => Some(o),
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
            let _asleep = (!fresh).then(|| Asleep::new(&backend.waiting));
            let _gauge = (!fresh).then(|| crate::ops::metrics::Waiting::new(&backend.name, site));
            let wake = until.min(Instant::now() + poll.pause());
            tokio::select! {
                _ = n => None,
                _ = tokio::time::sleep_until(wake) => None,
                true = w.subscribe(wake) => None,
                o = handed(place.as_mut()) => Some(o),
            }
        };
        match heard {
            Some(Outcome::Granted { token, sent, undo }) => {
                undo.disarm();
                return Ok(grant(keys, hold, token, true, sent, permit));
            }
            // Claimed, not handed over: the place is gone; try as usual.
            Some(Outcome::Retry) => place = None,
            None => {}
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

/// The task's enclosing hold a nested acquisition of `kind` (lock `keys`) goes under, and
/// how: the rule of re-entry across kinds (docs/design.md, "Reentrancy"). Among the task's
/// holds of this name on this backend, innermost first:
///
/// 1. a reentrant or fair lock: the innermost hold of the same kind, re-entered
///    (`Under::Same`) wherever it is in the nesting — holds of other kinds in between are
///    other locks, and do not hide it;
/// 2. a read or write lock: the innermost hold of the read-write lock, in either mode
///    (holds of other kinds in between do not hide it): of the same mode, re-entered; a
///    write hold for a read, which goes under it (`Under::Write`, a downgrade); a read
///    hold for a write: under it (`Under::Read`) when the task holds the write lock
///    further out, else refused after one attempt (`NestedKind`; `LeaseLost` if that
///    attempt finds the read hold gone): there is no upgrade, and the writer would wait
///    for its own task's read hold to leave;
/// 3. in Redisson's format, a hold of the other layout on the same hash (a reentrant or
///    fair lock and a read-write lock of one name): refused at once (`NestedKind`);
/// 4. else (holds of other kinds only, which are other locks): a fresh acquisition, under
///    the innermost hold's owner (in Redisson's format a reentrant and a fair lock of one
///    name are one hash, where that owner's field re-enters).
///
/// `(None, None, None)` when the task holds nothing of this name. The third is the error
/// to answer when the first attempt finds the lock held (the write inside the task's own
/// read hold).
fn enclosing(backend: &Backend, keys: &LockKeys, kind: LockKind) -> Result<Enclosing, LockError> {
    let holds = crate::lease::context::holds(&backend.name, &keys.user);
    let Some(innermost) = holds.first() else {
        return Ok((None, None, None));
    };
    let refused = |held: &LeaseState, reason: &'static str| LockError::NestedKind {
        key: keys.user.clone(),
        backend: backend.name.to_string(),
        held: held.keys.shape.lock_kind().unwrap_or(kind),
        asked: kind,
        reason,
    };
    let of = |k: LockKind| holds.iter().find(|h| h.keys.shape.is(k));
    match kind {
        LockKind::Reentrant | LockKind::Fair => {
            if let Some(same) = of(kind) {
                return Ok((Some(same.clone()), Some(Under::Same), None));
            }
        }
        // A read-write lock is one lock in two modes: the innermost hold of either mode.
        LockKind::Read | LockKind::Write => {
            if let Some(rw) = holds.iter().find(|h| h.keys.shape.is_rw()) {
                let under = match (rw.keys.shape.lock_kind(), kind) {
                    (Some(held), asked) if held == asked => Under::Same,
                    (_, LockKind::Read) => Under::Write,
                    // A write inside the task's read hold re-enters only when the task
                    // holds the write lock further out (the script finds the owner
                    // writing); else it could only wait for its own read hold.
                    _ if of(LockKind::Write).is_some() => Under::Read,
                    // Else one attempt finds whether the read hold is still there
                    // ("outer lost" if not); refused by it, the call fails at once.
                    _ => {
                        let e = refused(
                            rw,
                            "a read hold is not upgraded: the write lock waits until every reader has left, this task's own read hold included (take the write lock first: a read inside it re-enters)",
                        );
                        return Ok((Some(rw.clone()), Some(Under::Read), Some(e)));
                    }
                };
                return Ok((Some(rw.clone()), Some(under), None));
            }
        }
    }
    if keys.format.is_redisson() {
        let rw = keys.shape.is_rw();
        if let Some(other) = holds.iter().find(|h| h.keys.shape.is_rw() != rw) {
            return Err(refused(
                other,
                "in Redisson's format a reentrant or fair lock and a read-write lock of one name are one Redis hash in two layouts (give one of them another name)",
            ));
        }
    }
    Ok((Some(innermost.clone()), None, None))
}

/// The hold a nested acquisition goes under (or takes its owner from), how, and the error
/// to answer should the first attempt find the lock held (see [`enclosing`]).
type Enclosing = (Option<Arc<LeaseState>>, Option<Under>, Option<LockError>);

/// Whether a waiter of this shape queues in the backend (and must leave the queue).
fn queues(shape: &Shape) -> bool {
    match shape {
        Shape::Semaphore(sem) => sem.fair,
        Shape::Reentrant | Shape::Fair | Shape::Read | Shape::Write => {
            shape.lock_kind().is_some_and(LockKind::queues)
        }
    }
}

/// Whether a release wakes one waiter of this process (the next attempt can only admit
/// one) or all of them: a reentrant lock, and Redisson's fair lock (each waiter on its own
/// channel), wake one; a read-write lock (several readers may enter) and a semaphore (a
/// release may free enough permits for several) wake all.
fn one_wakes(keys: &LockKeys) -> bool {
    match (&keys.shape, &keys.format) {
        (Shape::Reentrant, _) | (Shape::Fair, Format::Redisson(_)) => true,
        (Shape::Fair, Format::Distlock)
        | (Shape::Read | Shape::Write, _)
        | (Shape::Semaphore(_), _) => false,
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
        recent_hold: crate::lease::holds::typical(&backend.name),
        held_by: crate::errors::HeldBy::Unknown,
    }
}

/// A waiter's place in a fair or write queue, left when dropped armed.
struct Queued {
    backend: Arc<Backend>,
    keys: LockKeys,
    owner: OwnerId,
    armed: bool,
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.armed {
            self.backend
                .cancel_in_background(self.keys.clone(), self.owner);
        }
    }
}

/// Counts a waiter as asleep while it lives.
pub(crate) struct Asleep<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Asleep<'a> {
    pub(crate) fn new(n: &'a std::sync::atomic::AtomicUsize) -> Asleep<'a> {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Asleep(n)
    }
}

impl Drop for Asleep<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
