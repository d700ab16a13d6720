//! The in-process backend: the same protocol as the Redis scripts, on a mutex-guarded map.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use self::fenced::FencedValues;
use super::capabilities::{Announce, Facts};
use super::topology::{ready, LocalStore, ScriptReplies, Topology};
use crate::check::probe::Probe;
use crate::check::report::ServerReport;
use crate::errors::backend::DriverError;
use crate::protocol::keys::{FenceScope, LockKeys, Shape};
use crate::protocol::{Attempt, Call, HandedOff, Released};
use crate::rt::hub::Hub;
use crate::terms::owner::{Enclosing, Hold, OwnerId};
use crate::LockKind;
use futures_util::future::BoxFuture;

mod fenced;

#[derive(Debug)]
struct HeldLock {
    owners: HashMap<OwnerId, u32>,
    expires_at: Instant,
    /// A run-once job's `hold_at_least` (as `hold:until` in `protocol/acquire.lua`): a
    /// release before this keeps the lock, without owners, until then.
    hold_until: Option<Instant>,
    /// The holder information the acquisition recorded (`LockKeys::holder`: a leader's
    /// `host\tpid\tinfo`) and its fencing token; gone with the lock.
    holder: Option<(Arc<str>, u64)>,
}

/// A read-write lock (as `RW_ACQUIRE` in `scripts.rs`).
#[derive(Debug, Default)]
struct RwState {
    /// The writer: owner, reentrancy count, lease end.
    writer: Option<(OwnerId, u32, Instant)>,
    /// Readers: reentrancy count, own lease end.
    readers: HashMap<OwnerId, (u32, Instant)>,
    /// Waiting writers and their deadlines.
    writers: HashMap<OwnerId, Instant>,
}

impl RwState {
    fn purge(&mut self, now: Instant) {
        if self.writer.is_some_and(|(_, _, e)| e <= now) {
            self.writer = None;
        }
        self.readers.retain(|_, (_, e)| *e > now);
        self.writers.retain(|_, d| *d > now);
    }

    fn is_empty(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty() && self.writers.is_empty()
    }
}

/// The wait queue of a fair lock (as `FAIR_ACQUIRE`); the lock itself is in `locks`.
#[derive(Debug, Default)]
struct FairQueue {
    queue: VecDeque<OwnerId>,
    deadlines: HashMap<OwnerId, Instant>,
}

impl FairQueue {
    /// Drop waiters past their deadline; returns the head.
    fn head(&mut self, now: Instant) -> Option<OwnerId> {
        self.deadlines.retain(|_, d| *d > now);
        let deadlines = &self.deadlines;
        self.queue.retain(|o| deadlines.contains_key(o));
        self.queue.front().copied()
    }

    fn enqueue(&mut self, owner: OwnerId, deadline: Instant) {
        if self.deadlines.insert(owner, deadline).is_none() {
            self.queue.push_back(owner);
        }
    }

    fn remove(&mut self, owner: OwnerId) -> bool {
        let was = self.deadlines.remove(&owner).is_some();
        self.queue.retain(|o| *o != owner);
        was
    }
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<String, HeldLock>,
    /// Fencing counters (and id sequences): value and last use. Like the Redis counters
    /// (`protocol/fence_prologue.lua`) they are forgotten after `FENCE_RETENTION` unused,
    /// and a new one starts from the clock (in µs, + 1), above every token it gave before.
    fences: HashMap<String, (u64, Instant)>,
    rw: HashMap<String, RwState>,
    queues: HashMap<String, FairQueue>,
    ops: u64,
    /// Semaphores (as `protocol/sem_*.lua`): by holders' key, each holder's permits, lease
    /// end and token.
    sems: HashMap<String, HashMap<OwnerId, SemHolder>>,
}

/// One holder of a semaphore's permits.
#[derive(Debug, Clone, Copy)]
struct SemHolder {
    permits: u32,
    expires_at: Instant,
    token: u64,
}

/// Refused until `until` (at least a millisecond from now; a millisecond when unknown).
fn held_until(until: Option<Instant>, now: Instant) -> Attempt {
    Attempt::Held {
        ttl: Some(until.map_or(Duration::from_millis(1), |e| {
            e.saturating_duration_since(now)
                .max(Duration::from_millis(1))
        })),
    }
}

/// The live holders of the semaphore `hash` (the expired ones removed; an empty one is
/// forgotten by the caller).
fn sem_live<'a>(
    sems: &'a mut HashMap<String, HashMap<OwnerId, SemHolder>>,
    hash: &str,
    now: Instant,
) -> &'a mut HashMap<OwnerId, SemHolder> {
    let holders = sems.entry(hash.to_owned()).or_default();
    holders.retain(|_, h| h.expires_at > now);
    holders
}

impl State {
    fn next_token(&mut self, fence: &str) -> u64 {
        let now = Instant::now();
        let entry = self
            .fences
            .entry(fence.to_owned())
            .or_insert_with(|| (clock_seed(), now));
        entry.0 += 1;
        entry.1 = now;
        entry.0
    }
}

/// How long an unused fencing counter is kept (as on Redis).
const FENCE_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Where a new fencing counter starts: the clock in microseconds (its first token is one
/// more), as `protocol/fence_prologue.lua` seeds a lost counter on Redis.
fn clock_seed() -> u64 {
    let us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    u64::try_from(us).unwrap_or(u64::MAX / 2)
}

/// Locks held in this process only.
#[derive(Debug)]
pub(super) struct MemoryDriver {
    state: Mutex<State>,
    /// Fenced values (`crate::ops::fence`).
    fenced: FencedValues,
    hub: Arc<Hub>,
}

impl MemoryDriver {
    pub(super) fn new(hub: Arc<Hub>) -> MemoryDriver {
        MemoryDriver {
            state: Mutex::new(State::default()),
            fenced: FencedValues::default(),
            hub,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change below is completed before any code that could panic runs.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock's entry, if it exists and has not expired (an expired one is removed).
    fn live<'a>(state: &'a mut State, hash: &str, now: Instant) -> Option<&'a mut HeldLock> {
        if state.locks.get(hash).is_some_and(|h| h.expires_at <= now) {
            state.locks.remove(hash);
        }
        state.locks.get_mut(hash)
    }

    fn acquire(&self, keys: &LockKeys, hold: Hold, lease: Duration, wait: Duration) -> Attempt {
        let owner = hold.owner;
        let now = Instant::now();
        let mut st = self.state();
        st.ops += 1;
        if st.ops.is_multiple_of(4096) {
            st.locks.retain(|_, h| h.expires_at > now);
            st.fences
                .retain(|_, (_, used)| now.saturating_duration_since(*used) < FENCE_RETENTION);
            st.rw.retain(|_, rw| {
                rw.purge(now);
                !rw.is_empty()
            });
            st.queues.retain(|_, q| {
                q.head(now);
                !q.queue.is_empty()
            });
            st.sems.retain(|_, holders| {
                holders.retain(|_, h| h.expires_at > now);
                !holders.is_empty()
            });
        }
        match &keys.shape {
            Shape::Semaphore(sem) => {
                let (attempt, wake) =
                    Self::sem_acquire(&mut st, keys, sem, owner, lease, wait, now);
                drop(st);
                if wake {
                    // The next waiter may fit in what is left (as the script's publish).
                    self.hub.deliver(&keys.channel);
                }
                return attempt;
            }
            Shape::Read | Shape::Write => {
                return Self::rw_acquire(&mut st, keys, hold, lease, wait, now)
            }
            Shape::Fair => {
                let (held, reentrant) = match Self::live(&mut st, &keys.hash, now) {
                    Some(h) => (true, h.owners.contains_key(&owner)),
                    None => (false, false),
                };
                let q = st.queues.entry(keys.hash.clone()).or_default();
                let head = q.head(now);
                if held {
                    if !reentrant && !wait.is_zero() {
                        q.enqueue(owner, later(now, wait));
                    }
                } else if head.is_some_and(|h| h != owner) {
                    if !wait.is_zero() {
                        q.enqueue(owner, later(now, wait));
                    }
                    let head_deadline = head.and_then(|h| q.deadlines.get(&h).copied());
                    return Attempt::Held {
                        ttl: head_deadline.map(|d| d - now),
                    };
                } else if head == Some(owner) {
                    q.remove(owner);
                }
                // Held (the path below re-enters or refuses), or free and ours to take.
            }
            Shape::Reentrant => {}
        }
        if hold.nested
            && !Self::live(&mut st, &keys.hash, now).is_some_and(|h| h.owners.contains_key(&owner))
        {
            return Attempt::OuterLost;
        }
        match Self::live(&mut st, &keys.hash, now) {
            None => {
                let token = st.next_token(&keys.fence());
                st.locks.insert(
                    keys.hash.clone(),
                    HeldLock {
                        owners: HashMap::from([(owner, 1)]),
                        expires_at: later(now, lease),
                        hold_until: keys.hold_at_least.map(|h| later(now, h)),
                        holder: keys.holder.as_ref().map(|h| (h.clone(), token)),
                    },
                );
                Attempt::Acquired { token }
            }
            Some(held) => match held.owners.get_mut(&owner) {
                Some(count) => {
                    *count += 1;
                    held.expires_at = held.expires_at.max(later(now, lease));
                    Attempt::Reentered
                }
                None => Attempt::Held {
                    ttl: Some(held.expires_at - now),
                },
            },
        }
    }

    /// As `protocol/sem_acquire.lua` (and `sem_fair_acquire.lua` for a fair one): a holder
    /// found again extends its lease to a full one from now; a new one is admitted when
    /// the holders' total plus its permits fits the limit it carries (and, fair, when it is
    /// the head of the queue or nobody waits). With it: whether to wake the waiters (a fair
    /// head admitted with permits left and waiters behind it).
    fn sem_acquire(
        st: &mut State,
        keys: &LockKeys,
        sem: &crate::protocol::keys::SemKeys,
        owner: OwnerId,
        lease: Duration,
        wait: Duration,
        now: Instant,
    ) -> (Attempt, bool) {
        let holders = sem_live(&mut st.sems, &keys.hash, now);
        if let Some(h) = holders.get_mut(&owner) {
            h.expires_at = h.expires_at.max(later(now, lease));
            return (Attempt::Acquired { token: h.token }, false);
        }
        let used: u64 = holders.values().map(|h| u64::from(h.permits)).sum();
        let first = holders.values().map(|h| h.expires_at).min();
        let fits = used + u64::from(sem.permits) <= u64::from(sem.limit);
        let mut wake = false;
        if sem.fair {
            let q = st.queues.entry(keys.hash.clone()).or_default();
            let head = q.head(now);
            if !fits || head.is_some_and(|h| h != owner) {
                if !wait.is_zero() {
                    q.enqueue(owner, later(now, wait));
                }
                let head_deadline = head.and_then(|h| q.deadlines.get(&h).copied());
                // Not its turn: until the head takes its permits (or its deadline);
                // too few free: until a holder's lease ends.
                let until = if fits { head_deadline.or(first) } else { first };
                return (held_until(until, now), false);
            }
            q.remove(owner);
            wake = used + u64::from(sem.permits) < u64::from(sem.limit) && !q.queue.is_empty();
        } else if !fits {
            return (held_until(first, now), false);
        }
        let token = st.next_token(&keys.fence());
        st.sems.entry(keys.hash.clone()).or_default().insert(
            owner,
            SemHolder {
                permits: sem.permits,
                expires_at: later(now, lease),
                token,
            },
        );
        (Attempt::Acquired { token }, wake)
    }

    /// As `protocol/sem_release.lua`.
    fn sem_release(&self, keys: &LockKeys, owner: OwnerId) -> Released {
        let now = Instant::now();
        let mut st = self.state();
        let holders = sem_live(&mut st.sems, &keys.hash, now);
        let was = holders.remove(&owner).is_some();
        if holders.is_empty() {
            st.sems.remove(&keys.hash);
        }
        drop(st);
        if !was {
            return Released::NotHeld;
        }
        self.hub.deliver(&keys.channel);
        Released::Freed
    }

    fn rw_acquire(
        st: &mut State,
        keys: &LockKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
        now: Instant,
    ) -> Attempt {
        let owner = hold.owner;
        let rw = st.rw.entry(keys.hash.clone()).or_default();
        rw.purge(now);
        let held = |until: Instant| Attempt::Held {
            ttl: Some((until - now).max(Duration::from_millis(1))),
        };
        let writer = rw.writer;
        // A nested acquisition requires the owner's enclosing hold (as rw_acquire.lua's
        // ARGV[6]); without it the outer is lost and nothing is created.
        let writes = writer.is_some_and(|(w, _, _)| w == owner);
        let reads = rw.readers.contains_key(&owner);
        let enclosing = match (hold.nested, hold.enclosing, keys.shape.is(LockKind::Read)) {
            (false, _, _) => true,
            (true, Enclosing::Same, true) => reads,
            (true, Enclosing::Same, false) | (true, Enclosing::Write, _) => writes,
            (true, Enclosing::Read, _) => writes || reads,
        };
        if !enclosing {
            if rw.is_empty() {
                st.rw.remove(&keys.hash);
            }
            return Attempt::OuterLost;
        }
        if keys.shape.is(LockKind::Read) {
            if let Some((count, until)) = rw.readers.get_mut(&owner) {
                *count += 1;
                *until = (*until).max(later(now, lease));
                return Attempt::Reentered;
            }
            match writer {
                Some((w, _, until)) if w != owner => return held(until),
                None => {
                    if let Some(first) = rw.writers.values().min() {
                        return held(*first);
                    }
                }
                _ => {}
            }
            rw.readers.insert(owner, (1, later(now, lease)));
        } else {
            if let Some((w, count, until)) = rw.writer.as_mut() {
                if *w == owner {
                    *count += 1;
                    *until = (*until).max(later(now, lease));
                    return Attempt::Reentered;
                }
            }
            let busy = match writer {
                Some((_, _, until)) => Some(until),
                None => rw.readers.values().map(|(_, e)| *e).max(),
            };
            if let Some(until) = busy {
                if !wait.is_zero() {
                    rw.writers.insert(owner, later(now, wait));
                }
                return held(until);
            }
            rw.writers.remove(&owner);
            rw.writer = Some((owner, 1, later(now, lease)));
        }
        Attempt::Acquired {
            token: st.next_token(&keys.fence()),
        }
    }

    fn rw_release(&self, keys: &LockKeys, owner: OwnerId) -> Released {
        let now = Instant::now();
        let mut st = self.state();
        let Some(rw) = st.rw.get_mut(&keys.hash) else {
            return Released::NotHeld;
        };
        rw.purge(now);
        let announce = if keys.shape.is(LockKind::Write) {
            match rw.writer.as_mut() {
                Some((w, count, _)) if *w == owner => {
                    *count -= 1;
                    if *count > 0 {
                        return Released::StillHeld;
                    }
                    rw.writer = None;
                    true
                }
                _ => return Released::NotHeld,
            }
        } else {
            match rw.readers.get_mut(&owner) {
                Some((count, _)) => {
                    *count -= 1;
                    if *count > 0 {
                        return Released::StillHeld;
                    }
                    rw.readers.remove(&owner);
                    rw.writer.is_none() && rw.readers.is_empty()
                }
                None => return Released::NotHeld,
            }
        };
        if rw.is_empty() {
            st.rw.remove(&keys.hash);
        }
        drop(st);
        if announce {
            self.hub.deliver(&keys.channel);
        }
        Released::Freed
    }

    /// A fair or write waiter (or a fair semaphore's) gives up; returns whether it was queued.
    fn cancel(&self, keys: &LockKeys, owner: OwnerId) -> bool {
        let now = Instant::now();
        let mut st = self.state();
        let was = match &keys.shape {
            Shape::Write => st
                .rw
                .get_mut(&keys.hash)
                .is_some_and(|rw| rw.writers.remove(&owner).is_some()),
            Shape::Fair => {
                let was = st
                    .queues
                    .get_mut(&keys.hash)
                    .is_some_and(|q| q.remove(owner));
                was && Self::live(&mut st, &keys.hash, now).is_none()
            }
            Shape::Semaphore(sem) if sem.fair => st
                .queues
                .get_mut(&keys.hash)
                .is_some_and(|q| q.remove(owner)),
            Shape::Reentrant | Shape::Read | Shape::Semaphore(_) => false,
        };
        drop(st);
        if was {
            self.hub.deliver(&keys.channel);
        }
        was
    }

    fn release(&self, keys: &LockKeys, hold: Hold) -> Released {
        let owner = hold.owner;
        match &keys.shape {
            Shape::Semaphore(_) => return self.sem_release(keys, owner),
            Shape::Read | Shape::Write => return self.rw_release(keys, owner),
            Shape::Reentrant | Shape::Fair => {}
        }
        let now = Instant::now();
        let mut st = self.state();
        let Some(held) = Self::live(&mut st, &keys.hash, now) else {
            return Released::NotHeld;
        };
        let Some(count) = held.owners.get_mut(&owner) else {
            return Released::NotHeld;
        };
        *count -= 1;
        if *count > 0 {
            return Released::StillHeld;
        }
        // Kept unless this release undoes the acquisition that set it (`Hold::undo`).
        let undo = hold.undo && !hold.nested;
        if let Some(until) = held.hold_until.filter(|u| *u > now && !undo) {
            // Kept, without owners, until `hold_at_least` has passed: nothing to wake.
            held.owners.clear();
            held.holder = None;
            held.expires_at = until;
            return Released::Freed;
        }
        st.locks.remove(&keys.hash);
        drop(st);
        self.hub.deliver(&keys.channel);
        Released::Freed
    }

    fn renew(&self, items: &[(&LockKeys, OwnerId)], lease: Duration) -> Vec<bool> {
        let now = Instant::now();
        let mut st = self.state();
        items
            .iter()
            .map(|(keys, owner)| {
                if let Shape::Semaphore(_) = &keys.shape {
                    let holders = sem_live(&mut st.sems, &keys.hash, now);
                    return match holders.get_mut(owner) {
                        Some(h) => {
                            h.expires_at = h.expires_at.max(later(now, lease));
                            true
                        }
                        None => false,
                    };
                }
                if keys.shape.is_rw() {
                    let Some(rw) = st.rw.get_mut(&keys.hash) else {
                        return false;
                    };
                    rw.purge(now);
                    return match (&keys.shape, rw.writer.as_mut(), rw.readers.get_mut(owner)) {
                        (Shape::Write, Some((w, _, until)), _) if w == owner => {
                            *until = (*until).max(later(now, lease));
                            true
                        }
                        (Shape::Read, _, Some((_, until))) => {
                            *until = (*until).max(later(now, lease));
                            true
                        }
                        _ => false,
                    };
                }
                Self::renew_plain(&mut st, keys, *owner, lease, now)
            })
            .collect()
    }

    fn renew_plain(
        st: &mut State,
        keys: &LockKeys,
        owner: OwnerId,
        lease: Duration,
        now: Instant,
    ) -> bool {
        match Self::live(st, &keys.hash, now) {
            Some(h) if h.owners.contains_key(&owner) => {
                // Only ever extends (a nested auto lease inside a longer fixed one).
                h.expires_at = h.expires_at.max(later(now, lease));
                true
            }
            _ => false,
        }
    }

    /// A counter outside the lock layout (ids).
    fn next_sequence(&self, key: &str) -> u64 {
        let now = Instant::now();
        let mut st = self.state();
        let entry = st.fences.entry(key.to_owned()).or_insert((0, now));
        entry.0 += 1;
        entry.1 = now;
        entry.0
    }

    fn force_release(&self, keys: &LockKeys) -> bool {
        let now = Instant::now();
        let mut st = self.state();
        // One semaphore holder only (`Semaphore::force_unlock_holder`).
        if let Shape::Semaphore(sem) = &keys.shape {
            if let Some(only) = &sem.only_holder {
                let holders = sem_live(&mut st.sems, &keys.hash, now);
                let before = holders.len();
                holders.retain(|owner, _| owner.hex().as_slice() != only.as_bytes());
                let freed = holders.len() < before;
                if holders.is_empty() {
                    st.sems.remove(&keys.hash);
                }
                drop(st);
                if freed {
                    self.hub.deliver(&keys.channel);
                }
                return freed;
            }
        }
        let mut existed = Self::live(&mut st, &keys.hash, now).is_some();
        st.locks.remove(&keys.hash);
        existed |= st.rw.remove(&keys.hash).is_some();
        existed |= st.queues.remove(&keys.hash).is_some();
        existed |= st
            .sems
            .remove(&keys.hash)
            .is_some_and(|h| h.values().any(|s| s.expires_at > now));
        drop(st);
        if existed {
            self.hub.deliver(&keys.channel);
        }
        existed
    }
}

impl Topology for MemoryDriver {
    fn facts(&self) -> Facts {
        Facts {
            fence_scope: FenceScope::Key,
            hand_off: false,
            quorum: None,
            announce: Announce::Deliver,
            cluster: false,
            reply_addresses: None,
        }
    }

    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Attempt, DriverError>> {
        ready(Ok(MemoryDriver::acquire(self, keys, hold, lease, wait)))
    }

    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
    ) -> BoxFuture<'a, Result<Released, DriverError>> {
        ready(Ok(MemoryDriver::release(self, keys, hold)))
    }

    /// Not offered: no waiter of this process is behind a round trip.
    fn hand_off<'a>(
        &'a self,
        _keys: &'a LockKeys,
        _hold: Hold,
        _to: Hold,
        _lease: Duration,
        _holder: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<HandedOff>, DriverError>> {
        ready(Ok(None))
    }

    fn cancel<'a>(
        &'a self,
        keys: &'a LockKeys,
        owner: OwnerId,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        ready(Ok(MemoryDriver::cancel(self, keys, owner)))
    }

    fn renew_each<'a>(
        &'a self,
        items: &'a [(&'a LockKeys, OwnerId)],
        lease: Duration,
    ) -> BoxFuture<'a, Vec<Result<bool, DriverError>>> {
        ready(self.renew(items, lease).into_iter().map(Ok).collect())
    }

    /// Every holder is in this process: the backend marks their leases lost.
    fn force_release<'a>(
        &'a self,
        keys: &'a LockKeys,
        _revocation: &'a str,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        ready(Ok(MemoryDriver::force_release(self, keys)))
    }

    fn next_sequence<'a>(
        &'a self,
        key: &'a str,
        _ttl: Duration,
    ) -> BoxFuture<'a, Result<u64, DriverError>> {
        ready(Ok(MemoryDriver::next_sequence(self, key)))
    }

    fn scan<'a>(
        &'a self,
        _pattern: &'a str,
        _limit: usize,
    ) -> Option<BoxFuture<'a, Result<Vec<String>, DriverError>>> {
        None
    }

    fn probe<'a>(
        &'a self,
        _probe: &'a Probe,
    ) -> Option<BoxFuture<'a, Vec<Result<ServerReport, DriverError>>>> {
        None
    }

    fn run_script<'a>(&'a self, _call: &'a Call) -> Option<BoxFuture<'a, ScriptReplies>> {
        None
    }

    fn local(&self) -> Option<&dyn LocalStore> {
        Some(self)
    }
}

impl LocalStore for MemoryDriver {
    fn release_now(&self, keys: &LockKeys, hold: Hold) {
        MemoryDriver::release(self, keys, hold);
    }

    fn cancel_now(&self, keys: &LockKeys, owner: OwnerId) {
        MemoryDriver::cancel(self, keys, owner);
    }

    fn deliver(&self, channel: &str) {
        self.hub.deliver(channel);
    }

    fn fenced_set(&self, name: &str, value: &[u8], token: u64, ttl: Option<Duration>) -> bool {
        self.fenced.set(name, value, token, ttl)
    }

    fn fenced_claim(&self, name: &str, token: u64, ttl: Option<Duration>) -> bool {
        self.fenced.claim(name, token, ttl)
    }

    fn fenced_get(&self, name: &str) -> Option<(Vec<u8>, u64)> {
        self.fenced.get(name)
    }

    /// The recorded holder information of the reentrant lock `keys`, its fencing token and
    /// what is left of its lease, while it is held (the leader election's observers).
    fn holder(&self, keys: &LockKeys) -> Option<(Arc<str>, u64, Duration)> {
        let now = Instant::now();
        let mut st = self.state();
        let held = Self::live(&mut st, &keys.hash, now)?;
        let (text, token) = held.holder.clone()?;
        Some((text, token, held.expires_at - now))
    }

    /// How many holders it keeps now (unexpired): owners of reentrant and fair locks,
    /// readers and writers, semaphore holders; a run-once lock kept without owners until
    /// its `hold_at_least` counts as one. For tests (feature `test-support`).
    #[cfg(feature = "test-support")]
    fn holders(&self) -> usize {
        let now = Instant::now();
        let state = self.state();
        let locks: usize = state
            .locks
            .values()
            .filter(|h| h.expires_at > now)
            .map(|h| h.owners.len().max(1))
            .sum();
        let rw: usize = state
            .rw
            .values()
            .map(|r| {
                usize::from(r.writer.is_some_and(|(_, _, e)| e > now))
                    + r.readers.values().filter(|(_, e)| *e > now).count()
            })
            .sum();
        let sems: usize = state
            .sems
            .values()
            .map(|h| h.values().filter(|s| s.expires_at > now).count())
            .sum();
        locks + rw + sems
    }
}

/// `now + d`, saturating far in the future instead of panicking on an absurd duration (the
/// lock builder refuses leases over `MAX_LEASE` and caps waits at `MAX_WAIT`; this keeps
/// the backend itself from panicking whatever it is given).
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(crate::lease::policy::MAX_WAIT))
        .unwrap_or(now)
}
