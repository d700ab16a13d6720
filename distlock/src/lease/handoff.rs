//! Direct hand-off to a waiter of this process: the local waiters of each lock, in FIFO
//! order, that a releasing holder can hand the lock to with one script
//! (`protocol/handoff.lua`: release the old level, grant the waiter a fresh hold with a
//! new token), telling the waiter in-process instead of publishing the release and letting
//! it send an acquire of its own.
//!
//! - A waiter registers a place ([`Waiters::enter`]) once refused, and keeps its FIFO rank
//!   (its sequence number) when it registers again after an attempt of its own. Its place
//!   goes on every way out ([`Place`]'s drop: acquired, timed out, failed, dropped).
//! - A releaser claims the first place ([`Waiters::claim`]): from then on the waiter no
//!   longer sends attempts of its own ([`Place::withdraw`] says so) but waits for the
//!   outcome ([`Claimed::grant`] or [`Claimed::retry`]): its level may be granted by the
//!   script, and an attempt of its own with that level would find the grant (acquire.lua's
//!   run again) while the releaser, hearing the waiter gone, released it.
//! - A waiter of another process is not starved: its refused attempt leaves its process's
//!   [`Waiters::tag`] in the lock (`acquire.lua`), and once it has waited a
//!   [`TURN`](crate::protocol::TURN) the script frees the lock and publishes instead of
//!   handing it on; this process's acquirers hold off for a moment
//!   ([`Waiters::yield_to_remote`]) so that waiter takes it.
//! - A releaser whose outcome is unknown (its future dropped, a transient error) undoes the
//!   waiter's possible grant before telling it to retry (`guard.rs`); a grant whose waiter
//!   left is released by the releaser. No lock stays held by nobody.
//!
//! Which locks hand off ([`eligible`]): distlock's reentrant lock, fresh (not nested)
//! acquisitions, without `hold_at_least`, on a backend of one master (single, cluster,
//! sentinel without `sync_replicas`). Not the others: a fair lock keeps its order in Redis
//! across processes (a local hand-off would jump that queue); read-write locks and
//! semaphores admit several holders, so a release frees a share rather than the lock;
//! Redisson's format must stay what Redisson's own clients expect (they acquire on the
//! PUBLISH); a quorum backend (redlock, multi) would need the transfer on a majority of
//! nodes at once; a sentinel backend with `sync_replicas` must WAIT for replicas on every
//! grant; a run-once job (`hold_at_least`) keeps its slot after release; the memory
//! backend has no round trip to save (a woken waiter takes it in-process already).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::protocol::keys::LockKeys;
use crate::terms::owner::{Hold, OwnerId};

/// Whether acquisitions and releases of `keys` hand off (see the module docs for why the
/// other shapes, formats and run-once jobs do not).
pub(crate) fn eligible(keys: &LockKeys) -> bool {
    // distlock's reentrant lock, whose record keeps the waiters' tags a hand-off reads.
    keys.leaves_its_tag() && keys.hold_at_least.is_none()
}

/// A lock marked in [`Waiters`]: held by a hold this process was handed, or let go free for
/// a waiter of another process.
#[derive(Debug, Clone, Copy)]
struct Mark {
    until: Instant,
    /// Let go free for a waiter of another process ([`Waiters::yield_to_remote`]).
    yielded: bool,
    /// The owner of the hold the lock was handed to (`None`: a yield): the mark goes when
    /// that hold ends ([`Waiters::hold_ended`]).
    owner: Option<OwnerId>,
}

/// How many marks [`Waiters`] keeps before a new one sweeps those past their time.
const SWEEP_FROM: usize = 64;

/// How long a new acquirer trusts that a lock handed in this process is still held, and
/// waits without an attempt (see [`Waiters::handed_until`]).
pub(crate) const HANDED_TRUST: Duration = Duration::from_millis(50);

/// What a waiter hears from the releaser that claimed its place.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// It holds the lock: its fresh hold was granted with this token, by a script sent at
    /// `sent` (its lease counts from then). `undo` releases the grant unless disarmed: a
    /// grant that reaches no waiter (it left before the send, or before reading it) is
    /// released, not left held by nobody.
    Granted {
        token: u64,
        sent: Instant,
        undo: Undo,
    },
    /// Not handed over (the release did not free it, or its outcome was not known and
    /// was undone): try as usual.
    Retry,
}

/// What undoes a grant, run when dropped armed (see [`Outcome::Granted`]).
pub(crate) struct Undo(Option<Box<dyn FnOnce() + Send>>);

impl Undo {
    pub(crate) fn new(f: impl FnOnce() + Send + 'static) -> Undo {
        Undo(Some(Box::new(f)))
    }

    /// The waiter took the grant: nothing to undo.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

impl std::fmt::Debug for Undo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Undo(armed)"
        } else {
            "Undo"
        })
    }
}

/// One waiter's registration.
#[derive(Debug)]
struct Registration {
    hold: Hold,
    lease: Duration,
    holder: Option<Arc<str>>,
    tx: oneshot::Sender<Outcome>,
}

/// The local waiters of one backend, by lock hash key.
#[derive(Debug)]
pub(crate) struct Waiters {
    /// This backend's tag (random, 16 hex digits): what its refused attempts leave in the
    /// lock's field `w` (`acquire.lua`), so that a hand-off by the holder's process can
    /// tell a waiter of another process from one of its own (`handoff.lua`).
    tag: Arc<str>,
    map: Mutex<HashMap<String, BTreeMap<u64, Registration>>>,
    next: AtomicU64,
    /// The locks handed to a waiter of this process, until that grant's lease end: held
    /// here, so a new acquirer's first attempt could only be refused; it skips it and
    /// waits as a local waiter (the holder's release hands it on, or publishes). Removed
    /// when that holder releases ([`Waiters::claim`]), its hold ends in any other way
    /// (lost, revoked, dropped: [`Waiters::hold_ended`]) or its grant is undone; an entry
    /// past its time is dropped when looked at (a hint, never a guarantee: a wrong one
    /// costs a pause of [`HANDED_TRUST`] at worst, and never a "busy" answer without
    /// asking the server).
    handed: Mutex<HashMap<String, Mark>>,
    /// How many locks have local waiters (keys of `map`) and how many are marked handed
    /// (entries of `handed`), kept under their locks: a release or an acquisition on a
    /// backend where nobody waits and nothing was handed takes no lock here. (Read without
    /// the lock, a count can be late by one registration: as if that waiter had come a
    /// moment later, which a release must allow anyway — it then publishes.)
    queued: AtomicUsize,
    marked: AtomicUsize,
}

impl Default for Waiters {
    fn default() -> Waiters {
        Waiters {
            tag: format!("{:016x}", rand::random::<u64>()).into(),
            map: Mutex::default(),
            next: AtomicU64::default(),
            handed: Mutex::default(),
            queued: AtomicUsize::default(),
            marked: AtomicUsize::default(),
        }
    }
}

impl Waiters {
    /// This backend's tag (see the field).
    pub(crate) fn tag(&self) -> &Arc<str> {
        &self.tag
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, BTreeMap<u64, Registration>>> {
        // Every change is one insert or remove: a poisoned lock is still consistent.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register a waiter of `key` (the lock's hash key) with the fresh acquisition `hold`
    /// it would make, its lease and its holder information. `rank`: the rank of its
    /// earlier place (it keeps its turn), `None` for a new one (the last).
    pub(crate) fn enter(
        self: &Arc<Self>,
        key: &str,
        rank: Option<u64>,
        hold: Hold,
        lease: Duration,
        holder: Option<Arc<str>>,
    ) -> Place {
        let rank = rank.unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        let slot = Registration {
            hold,
            lease,
            holder,
            tx,
        };
        let mut map = self.map();
        let queue = map.entry(key.to_owned()).or_insert_with(|| {
            self.queued.fetch_add(1, Ordering::Release);
            BTreeMap::new()
        });
        queue.insert(rank, slot);
        drop(map);
        Place {
            waiters: self.clone(),
            key: key.to_owned(),
            rank,
            rx,
            registered: true,
        }
    }

    fn handed(&self) -> std::sync::MutexGuard<'_, HashMap<String, Mark>> {
        self.handed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `key` was handed to the hold of `owner`, a waiter of this process, whose lease ends
    /// at `until`. The mark goes when that hold ends ([`Waiters::hold_ended`]), its time
    /// is up, or the lock is released or handed on here ([`Waiters::claim`]).
    pub(crate) fn mark_handed(&self, key: &str, owner: OwnerId, until: Instant) {
        self.mark(
            key,
            Mark {
                until,
                yielded: false,
                owner: Some(owner),
            },
        );
    }

    /// The hold of `owner` on `key` ended, however (released, lost, revoked, dropped): a
    /// mark saying the lock was handed to it goes too (a mark of another hold stays).
    pub(crate) fn hold_ended(&self, key: &str, owner: OwnerId) {
        if self.marked.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut handed = self.handed();
        if handed.get(key).is_some_and(|m| m.owner == Some(owner)) {
            handed.remove(key);
            self.marked.fetch_sub(1, Ordering::Release);
        }
    }

    fn mark(&self, key: &str, mark: Mark) {
        let mut handed = self.handed();
        if handed.len() >= SWEEP_FROM {
            // Marks of keys nobody looked at again: dropped once past their time, so the
            // map holds at most the live ones (a hand-off's lasts its lease, a yield's
            // HANDED_TRUST).
            let now = Instant::now();
            let before = handed.len();
            handed.retain(|_, m| m.until > now);
            self.marked
                .fetch_sub(before - handed.len(), Ordering::Release);
        }
        if handed.insert(key.to_owned(), mark).is_none() {
            self.marked.fetch_add(1, Ordering::Release);
        }
    }

    /// The hand-off of `key` was undone.
    pub(crate) fn clear_handed(&self, key: &str) {
        if self.marked.load(Ordering::Acquire) == 0 {
            return;
        }
        if self.handed().remove(key).is_some() {
            self.marked.fetch_sub(1, Ordering::Release);
        }
    }

    /// Until when a new acquirer of `key` may wait without an attempt, if `key` is held by
    /// a hold this process was handed: the grant's lease end, but at most
    /// [`HANDED_TRUST`] from now (the hold may have lost the lock without a message: a
    /// server restart, a failover; the acquirer then tries after that long). A hint only:
    /// an acquirer whose wait ends before then asks the server instead (`acquire.rs`), so
    /// no answer "busy" rests on a mark alone.
    pub(crate) fn handed_until(&self, key: &str) -> Option<Instant> {
        if self.marked.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut handed = self.handed();
        let until = handed.get(key)?.until;
        let now = Instant::now();
        if until > now {
            return Some(until.min(now + HANDED_TRUST));
        }
        if handed.remove(key).is_some() {
            self.marked.fetch_sub(1, Ordering::Release);
        }
        None
    }

    /// A release of `key` lets it go free for a waiter of another process: this process's
    /// acquirers of it (its local waiters, woken by that release, and new ones) wait
    /// without an attempt for [`HANDED_TRUST`] at most — long enough for that waiter,
    /// woken by the release's PUBLISH, to take it — and then try as usual.
    pub(crate) fn yield_to_remote(&self, key: &str) {
        self.mark(
            key,
            Mark {
                until: Instant::now() + HANDED_TRUST,
                yielded: true,
                owner: None,
            },
        );
    }

    /// Until when a waiter of `key` woken by a release waits without an attempt: while
    /// that release let the lock go free for a waiter of another process
    /// ([`Waiters::yield_to_remote`], at most [`HANDED_TRUST`] after it). Not for a lock
    /// handed in this process: a woken waiter of one tries, as its hold may be gone.
    pub(crate) fn yielded_until(&self, key: &str) -> Option<Instant> {
        if self.marked.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut handed = self.handed();
        let mark = *handed.get(key)?;
        if mark.until > Instant::now() {
            return mark.yielded.then_some(mark.until);
        }
        if handed.remove(key).is_some() {
            self.marked.fetch_sub(1, Ordering::Release);
        }
        None
    }

    /// Take the first waiter of `key` still waiting, but not of `owner` (the releaser's):
    /// the releaser hands the lock to it, and must tell it the outcome. Called on every
    /// release that could hand off: the lock is no longer [`Waiters::handed_until`].
    pub(crate) fn claim(&self, key: &str, owner: OwnerId) -> Option<Claimed> {
        self.clear_handed(key);
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut map = self.map();
        let queue = map.get_mut(key)?;
        let mut found = None;
        let mut gone = Vec::new();
        for (rank, slot) in queue.iter() {
            if slot.tx.is_closed() {
                gone.push(*rank);
            } else if slot.hold.owner != owner {
                found = Some(*rank);
                break;
            }
        }
        for rank in gone {
            queue.remove(&rank);
        }
        let claimed = found.and_then(|rank| queue.remove(&rank));
        if queue.is_empty() {
            map.remove(key);
            self.queued.fetch_sub(1, Ordering::Release);
        }
        claimed.map(|s| Claimed {
            hold: s.hold,
            lease: s.lease,
            holder: s.holder,
            tx: Some(s.tx),
        })
    }

    /// How many locks have local waiters registered or are marked handed (tests: no
    /// per-key state forever).
    #[cfg(test)]
    fn len(&self) -> usize {
        let (map, handed) = (self.map().len(), self.handed().len());
        // The counts that let the common path skip the locks agree with the maps.
        assert_eq!(self.queued.load(Ordering::Acquire), map, "queued");
        assert_eq!(self.marked.load(Ordering::Acquire), handed, "marked");
        map + handed
    }
}

/// A waiter's place: removed when withdrawn or dropped.
#[derive(Debug)]
pub(crate) struct Place {
    waiters: Arc<Waiters>,
    key: String,
    rank: u64,
    rx: oneshot::Receiver<Outcome>,
    registered: bool,
}

impl Place {
    /// Its FIFO rank, to register again with the same turn.
    pub(crate) fn rank(&self) -> u64 {
        self.rank
    }

    /// Take the place back before an attempt of the waiter's own: `true` when it was
    /// still registered (the attempt may go); `false` when a releaser claimed it (the
    /// waiter must await [`Place::outcome`] instead).
    pub(crate) fn withdraw(&mut self) -> bool {
        if !self.registered {
            return false;
        }
        self.registered = false;
        let mut map = self.waiters.map();
        let Some(queue) = map.get_mut(&self.key) else {
            return false;
        };
        let removed = queue.remove(&self.rank).is_some();
        if queue.is_empty() {
            map.remove(&self.key);
            self.waiters.queued.fetch_sub(1, Ordering::Release);
        }
        removed
    }

    /// The outcome a releaser sends; [`Outcome::Retry`] when it went without one.
    /// Cancel-safe: awaiting it again after a drop gets the same.
    pub(crate) async fn outcome(&mut self) -> Outcome {
        (&mut self.rx).await.unwrap_or(Outcome::Retry)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.registered {
            self.withdraw();
        }
    }
}

/// A waiter's place claimed by a releaser: what to grant it, and the way to tell it. Dropped
/// without an outcome, the waiter hears [`Outcome::Retry`].
#[derive(Debug)]
pub(crate) struct Claimed {
    /// The waiter's fresh acquisition.
    pub(crate) hold: Hold,
    /// Its lease.
    pub(crate) lease: Duration,
    /// Its holder information (`host\tpid\tsite`), when recorded.
    pub(crate) holder: Option<Arc<str>>,
    tx: Option<oneshot::Sender<Outcome>>,
}

impl Claimed {
    /// Tell the waiter it holds the lock. A waiter that left (now, or before it reads
    /// this) drops the grant, and `undo` releases it.
    pub(crate) fn grant(mut self, token: u64, sent: Instant, undo: Undo) {
        if let Some(tx) = self.tx.take() {
            // Refused: the waiter left; the outcome, dropped here, runs `undo`.
            let _ = tx.send(Outcome::Granted { token, sent, undo });
        }
    }

    /// Tell the waiter to try as usual.
    pub(crate) fn retry(mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Outcome::Retry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn fifo_claims_skip_the_releaser_and_leave_no_state() {
        let w = Arc::new(Waiters::default());
        let (ha, hb) = (Hold::fresh(), Hold::fresh());
        let mut a = w.enter("k", None, ha, D, None);
        let b = w.enter("k", None, hb, D, None);
        let first = w.claim("k", ha.owner).expect("b: a's own owner is skipped");
        assert_eq!(first.hold, hb);
        assert!(w.claim("k", ha.owner).is_none());
        let second = w.claim("k", OwnerId::random()).expect("a");
        assert_eq!(second.hold, ha);
        assert!(!a.withdraw(), "a claimed place is not withdrawn");
        let undone = Arc::new(AtomicU64::new(0));
        let undo = || {
            let u = undone.clone();
            Undo::new(move || {
                u.fetch_add(1, Ordering::SeqCst);
            })
        };
        second.grant(7, Instant::now(), undo());
        match a.outcome().await {
            Outcome::Granted { token, undo, .. } => {
                assert_eq!(token, 7);
                undo.disarm();
            }
            Outcome::Retry => panic!("granted"),
        }
        assert_eq!(undone.load(Ordering::SeqCst), 0, "taken: not undone");
        drop(b);
        first.grant(8, Instant::now(), undo());
        assert_eq!(undone.load(Ordering::SeqCst), 1, "b left: undone");
        let c = w.enter("k", None, ha, D, None);
        let claimed = w.claim("k", OwnerId::random()).expect("c");
        claimed.grant(9, Instant::now(), undo());
        assert_eq!(undone.load(Ordering::SeqCst), 1, "sent, not read yet");
        drop(c);
        assert_eq!(undone.load(Ordering::SeqCst), 2, "dropped unread: undone");
        assert_eq!(w.len(), 0);
    }

    #[tokio::test]
    async fn a_handed_mark_lasts_until_the_release_or_its_time() {
        let w = Arc::new(Waiters::default());
        let later = Instant::now() + D;
        w.mark_handed("k", OwnerId::random(), later);
        let trusted = w.handed_until("k").expect("held");
        assert!(trusted < later, "at most HANDED_TRUST from now");
        assert_eq!(w.handed_until("other"), None);
        assert!(w.claim("k", OwnerId::random()).is_none());
        assert_eq!(w.handed_until("k"), None, "released");
        w.mark_handed("k", OwnerId::random(), Instant::now());
        assert_eq!(w.handed_until("k"), None, "past its time");
        w.mark_handed("k", OwnerId::random(), later);
        w.clear_handed("k");
        assert_eq!(w.len(), 0);
        let (b, c) = (OwnerId::random(), OwnerId::random());
        w.mark_handed("k", b, later);
        w.hold_ended("k", c);
        assert!(w.handed_until("k").is_some(), "another hold ended: kept");
        w.hold_ended("k", b);
        assert_eq!(
            w.handed_until("k"),
            None,
            "its hold ended (lost, revoked, dropped)"
        );
        assert_eq!(w.len(), 0);
    }

    #[tokio::test]
    async fn a_yield_holds_off_woken_waiters_for_a_moment_and_old_marks_are_swept() {
        let w = Arc::new(Waiters::default());
        w.mark_handed("handed", OwnerId::random(), Instant::now() + D);
        assert_eq!(
            w.yielded_until("handed"),
            None,
            "a lock handed here: a woken waiter tries"
        );
        w.yield_to_remote("k");
        let until = w.yielded_until("k").expect("yielded");
        assert!(until <= Instant::now() + HANDED_TRUST);
        assert!(w.handed_until("k").is_some(), "new acquirers hold off too");
        // Marks of keys nobody looks at again do not pile up.
        for i in 0..4 * SWEEP_FROM {
            w.mark_handed(&format!("gone{i}"), OwnerId::random(), Instant::now());
        }
        assert!(w.handed().len() <= SWEEP_FROM + 3, "{}", w.handed().len());
        assert_eq!(w.marked.load(Ordering::Acquire), w.handed().len());
    }

    #[tokio::test]
    async fn a_withdrawn_place_keeps_its_rank_and_a_dropped_one_goes() {
        let w = Arc::new(Waiters::default());
        let (ha, hb) = (Hold::fresh(), Hold::fresh());
        let mut a = w.enter("k", None, ha, D, None);
        let b = w.enter("k", None, hb, D, None);
        assert!(a.withdraw());
        let again = w.enter("k", Some(a.rank()), ha, D, None);
        let claimed = w.claim("k", OwnerId::random()).expect("a");
        assert_eq!(claimed.hold, ha, "a keeps its turn before b");
        drop(again);
        claimed.retry();
        drop(b);
        assert_eq!(w.len(), 0);
        let mut c = w.enter("k", None, ha, D, None);
        w.claim("k", OwnerId::random()).expect("c").retry();
        assert!(matches!(c.outcome().await, Outcome::Retry));
        let mut d = w.enter("k", None, hb, D, None);
        drop(w.claim("k", OwnerId::random()));
        assert!(
            matches!(d.outcome().await, Outcome::Retry),
            "claimed, then dropped: retry"
        );
        assert_eq!(w.len(), 0);
    }
}
