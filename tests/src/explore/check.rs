//! The model of what the locks promise, checked at every step: who is inside, which
//! tokens were handed out, which faults are on. Every breach is recorded as a violation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::LockError;

use super::model::{Family, Kind, NAMES, PERMITS, RUN_ONCE_HOLD_MS};

/// How late after another holder got in an earlier holder's `lost()` may be recorded
/// (the explorer's own scheduling of the task that watches it).
pub const LOST_SLACK: Duration = Duration::from_millis(100);
/// When an overlap is judged: the earlier holder had this long to be told.
pub const GRACE: Duration = Duration::from_millis(400);
/// How long a holder may take to hear a `force_unlock` ("at once").
pub const REVOKE_BOUND: Duration = Duration::from_millis(500);
/// How long after a fault ended a subscriber it cut may still be reconnecting: its
/// backoff's longest pause (1 s, `distlock/src/rt/backoff.rs`) and some.
pub const RECONNECT_SLACK: Duration = Duration::from_millis(1500);
/// How far an acquisition may outlive its `wait` (2 × `response_timeout` + 500 ms).
pub const WAIT_SLACK: Duration = Duration::from_millis(1500);

/// One hold (a successful acquisition) as the model sees it.
#[derive(Clone, Debug)]
struct Hold {
    owner: u8,
    task: u8,
    name: u8,
    kind: Kind,
    token: u64,
    /// Enclosing holds of the same task (re-entry and nesting).
    ancestors: Vec<u64>,
    lost_at: Option<Instant>,
    /// A fault took its keys (a raw DEL, a restart without persistence): a documented
    /// limit until the holder is told.
    exempt: bool,
    /// Its release (or drop) began: no longer inside.
    ended: bool,
    /// A `force_unlock` deleted its lock then: from that moment a newcomer may get in
    /// before the holder hears of it, which is judged by the revocation bound
    /// ([`REVOKE_BOUND`], [`Checker::revoked`]) instead of the overlap rule.
    revoked_at: Option<Instant>,
    /// A run-once job: nobody else may get in before the first instant (its start plus
    /// `hold_at_least`, on our clock: the server's window ends no earlier), nor is the
    /// lock free before the second (its reply plus `hold_at_least`, plus slack).
    window: Option<(Instant, Instant)>,
    /// The run-once window's keys were lost (a fault, a `force_unlock`): not judged.
    window_lost: bool,
    /// When its acquisition began.
    started_at: Instant,
}

impl Hold {
    fn text(&self, id: u64) -> String {
        format!(
            "o{}.t{} {} (hold #{id}, token {})",
            self.owner, self.task, self.kind, self.token
        )
    }
}

#[derive(Default)]
struct Model {
    holds: HashMap<u64, Hold>,
    next_id: u64,
    max_token: HashMap<(u8, u8), u64>,
    /// Acquisitions started or granted per name and family (a try's "nothing changed
    /// meanwhile").
    started: HashMap<(u8, Family), u64>,
    faults_on: u32,
    faults: u64,
    fault_ended: Option<Instant>,
    /// Redisson's format: a reentrant and a fair lock of one name are one hash, so one
    /// family (docs/redisson.md).
    redisson: bool,
    /// How many times acknowledged writes may have been lost (an uncoordinated
    /// failover): a token drawn across one may be below an earlier one.
    losses: u64,
    /// Uncoordinated failovers under way ([`Checker::losing_writes`]).
    losing: u32,
    /// How many times every key may have been lost (a server restarted empty, a failover):
    /// a fencing counter may have started again, so a token may be handed out twice.
    resets: u64,
    /// The fenced counters (the resource of the fenced read-modify-write check), per
    /// fencing counter ([`name_key`]).
    fenced: HashMap<(u8, u8), FencedCounter>,
    /// Per name, the fault count (`faults`) as of the last time its keys were lost: an
    /// acquisition started before that may have been granted before the loss and heard
    /// of after it.
    lost_keys_at: HashMap<u8, u64>,
    /// Per name, when the last fault that took its keys was done with them
    /// ([`Checker::keys_gone`]): an acquisition started before that may have lost them
    /// on a server the fault reached after its grant.
    lost_keys_until: HashMap<u8, Instant>,
    /// Per name and family, when a `force_unlock` of it was last sent.
    unlocked_at: HashMap<(u8, Family), Instant>,
    /// The fenced resource skips its token checks (a planted bug).
    fence_unchecked: bool,
}

/// An in-process resource that takes a read-modify-write only with a fencing token at
/// least the highest it has seen (claimed or written), claimed before it is read.
#[derive(Default, Debug)]
struct FencedCounter {
    /// The highest token claimed or written.
    claimed: u64,
    /// The value.
    value: u64,
    /// How many increments it accepted.
    accepted: u64,
    /// The token and hold of the last accepted write.
    last: Option<(u64, u64)>,
}

impl Model {
    fn family(&self, k: Kind) -> Family {
        match k {
            Kind::Fair if self.redisson => Family::Reentrant,
            k => k.family(),
        }
    }

    fn incompatible(&self, a: Kind, b: Kind) -> bool {
        self.family(a) == self.family(b)
            && !matches!((a, b), (Kind::Read, Kind::Read))
            && self.family(a) != Family::Semaphore
    }
}

/// A snapshot taken when an acquisition starts.
#[derive(Clone, Copy, Debug)]
pub struct Started {
    /// Per name, the largest token its counter handed out.
    max_token: [u64; NAMES as usize],
    generation: u64,
    faults: u64,
    losses: u64,
    /// Whether an uncoordinated failover was under way.
    losing: bool,
    at: Instant,
}

/// The checker shared by a schedule's tasks and driver.
#[derive(Default)]
pub struct Checker {
    model: Mutex<Model>,
    violations: Mutex<Vec<String>>,
    /// Checks still waiting for their grace to pass.
    pending: std::sync::atomic::AtomicUsize,
}

/// Which fencing counter a name's tokens come from: lock names and semaphore names are
/// distinct; in Redisson's format the read-write kinds have names of their own
/// (`World::key`), and Redisson's counter is per name (`redisson_lock_token:{name}`), so
/// their tokens are compared with their own only.
fn name_key(m: &Model, name: u8, kind: Kind) -> (u8, u8) {
    match kind {
        Kind::Semaphore(_) => (name, 1),
        Kind::Leader => (name, 3),
        Kind::Read | Kind::Write if m.redisson => (name, 2),
        _ => (name, 0),
    }
}

impl Checker {
    /// A new checker for Redisson's format (`redisson`) or distlock's.
    pub fn for_format(redisson: bool) -> Arc<Checker> {
        let c = Checker::default();
        c.model().redisson = redisson;
        Arc::new(c)
    }

    /// Record a violation.
    pub fn violation(&self, text: String) {
        self.violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(text);
    }

    /// The violations so far.
    pub fn violations(&self) -> Vec<String> {
        self.violations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An acquisition starts.
    pub fn started(&self, name: u8, kind: Kind) -> Started {
        let mut m = self.model();
        let family = m.family(kind);
        for n in names_of(name, kind) {
            *m.started.entry((n, family)).or_default() += 1;
        }
        let mut max_token = [0; NAMES as usize];
        for (n, max) in max_token.iter_mut().enumerate() {
            let n = n as u8;
            *max = m
                .max_token
                .get(&name_key(&m, n, kind))
                .copied()
                .unwrap_or(0);
        }
        Started {
            max_token,
            generation: generation(&m, name, kind),
            faults: m.faults,
            losses: m.losses,
            losing: m.losing > 0,
            at: Instant::now(),
        }
    }

    /// Whether nothing could have taken `name` since `s`: no other acquisition of its
    /// family started or was granted (a waiter that started earlier may take the lock
    /// and release it again while a try runs), no fault began, none is on and the last
    /// ended a while ago.
    pub fn quiet_since(&self, s: &Started, name: u8, kind: Kind) -> bool {
        let m = self.model();
        let settled = m
            .fault_ended
            .is_none_or(|t| t.elapsed() > Duration::from_millis(500));
        generation(&m, name, kind) == s.generation
            && m.faults == s.faults
            && m.faults_on == 0
            && settled
    }

    /// Whether a fault is on, or began since `s`.
    pub fn faulted_since(&self, s: &Started) -> bool {
        let m = self.model();
        m.faults_on > 0 || m.faults != s.faults
    }

    /// The holds enclosing a task's next acquisition that it re-enters for `kind` on
    /// `name`, live and never told of a loss since a fault-free acquisition.
    pub fn reentered_by(&self, ancestors: &[u64], name: u8, kind: Kind) -> Option<String> {
        let m = self.model();
        if kind == Kind::Multi {
            return None;
        }
        ancestors.iter().find_map(|id| {
            let h = m.holds.get(id)?;
            let same = h.name == name && m.family(h.kind) == m.family(kind);
            let clean = h.lost_at.is_none() && !h.exempt && !h.ended && m.faults_on == 0;
            (same && clean && h.kind.reenters(kind)).then(|| h.text(*id))
        })
    }

    /// An acquisition succeeded: check tokens and exclusion; returns the hold's id.
    pub fn acquired(self: &Arc<Self>, a: Acquired<'_>) -> u64 {
        let now = Instant::now();
        let mut m = self.model();
        let family = m.family(a.kind);
        for n in names_of(a.name, a.kind) {
            *m.started.entry((n, family)).or_default() += 1;
        }
        let reentry = a.ancestors.iter().any(|id| {
            m.holds
                .get(id)
                .is_some_and(|h| h.name == a.name && m.family(h.kind) == m.family(a.kind))
        });
        let who = format!(
            "o{}.t{} {} {}",
            a.owner,
            a.task,
            a.kind,
            super::model::name_text(a.kind, a.name)
        );
        // Across a loss of acknowledged writes (an uncoordinated failover, a documented
        // limit: docs/fault-testing.md "sentinel-failover") the new master's counter may
        // be behind tokens the old one handed out: not judged.
        let lossless = m.losses == a.started.losses && m.losing == 0 && !a.started.losing;
        let before = a.started.max_token[usize::from(a.name)];
        if !reentry && lossless && a.token <= before {
            self.violation(format!(
                "token: {who} got token {} after a holder of that name had {before} (tokens must grow strictly per key)",
                a.token
            ));
        }
        if !reentry {
            self.judge_windows(&m, &a, &who, now);
        }
        let counter = name_key(&m, a.name, a.kind);
        let max = m.max_token.entry(counter).or_default();
        *max = (*max).max(a.token);
        let id = m.next_id;
        m.next_id += 1;
        let lost_in_flight = m
            .lost_keys_at
            .get(&a.name)
            .is_some_and(|f| *f > a.started.faults)
            || m.lost_keys_until
                .get(&a.name)
                .is_some_and(|t| *t >= a.started.at);
        let unlocked_in_flight = m
            .unlocked_at
            .get(&(a.name, m.family(a.kind)))
            .is_some_and(|t| *t >= a.started.at);
        let hold = Hold {
            owner: a.owner,
            task: a.task,
            name: a.name,
            kind: a.kind,
            token: a.token,
            ancestors: a.ancestors.to_vec(),
            lost_at: None,
            // Its keys may have been lost after the server granted it and before its
            // reply came back: exempt, as the holds of that name were.
            exempt: lost_in_flight,
            ended: false,
            revoked_at: None,
            window: (a.kind == Kind::RunOnce && !reentry).then(|| {
                let hold = Duration::from_millis(u64::from(RUN_ONCE_HOLD_MS));
                // The server's window starts when its script ran: after the call began,
                // before its reply; its clock counts in milliseconds.
                let min = a.started.at + hold - Duration::from_millis(5);
                (min, now + hold + Duration::from_millis(50))
            }),
            // A `force_unlock` sent while it was in flight may have deleted its window's
            // keys (a grant handed over, or on its way back, as they went).
            window_lost: lost_in_flight || unlocked_in_flight,
            started_at: a.started.at,
        };
        let mut rivals = rivals(&m, &hold);
        // A rival with a higher token of the same counter was granted after this hold's
        // grant: a `force_unlock` took this one's lock away first while its acquisition
        // was still under way (a multi-key lock waiting for its next key). Then it is this
        // hold that must hear of its loss, within the revocation bound; the rival is not
        // the one judged. Only when a `force_unlock` of that lock was sent since this
        // acquisition began: any other loss before an overlap stays judged by the overlap
        // rule.
        let unlocked = m
            .unlocked_at
            .get(&(hold.name, m.family(hold.kind)))
            .is_some_and(|t| *t >= a.started.at);
        let superseded = unlocked
            && rivals
                .iter()
                .any(|(_, r)| name_key(&m, r.name, r.kind) == counter && r.token > hold.token);
        if superseded {
            rivals
                .retain(|(_, r)| name_key(&m, r.name, r.kind) != counter || r.token <= hold.token);
        }
        // The mirror case: a rival with a lower token of the same counter whose
        // acquisition was under way when a `force_unlock` of that lock was sent (a grant
        // handed over, or on its way back, as the lock was deleted) was not among the live
        // holds the `force_unlock` marked. It is judged by the revocation bound, as they
        // are: told within it unless it ended first.
        let unlocked_at = m
            .unlocked_at
            .get(&(hold.name, m.family(hold.kind)))
            .copied();
        let in_flight_then: Vec<u64> = rivals
            .iter()
            .filter(|(_, r)| {
                name_key(&m, r.name, r.kind) == counter
                    && r.token < hold.token
                    && r.revoked_at.is_none()
                    && unlocked_at.is_some_and(|t| t >= r.started_at)
            })
            .map(|(id, _)| *id)
            .collect();
        rivals.retain(|(id, _)| !in_flight_then.contains(id));
        m.holds.insert(id, hold.clone());
        drop(m);
        if superseded {
            self.revoked(vec![id]);
        }
        self.revoked(in_flight_then);
        if !rivals.is_empty() {
            let text = hold.text(id);
            let sem = match hold.kind {
                Kind::Semaphore(n) => Some(n),
                _ => None,
            };
            self.later(GRACE, move |me| me.judge_overlap(&rivals, now, &text, sem));
        }
        id
    }

    fn judge_overlap(&self, rivals: &[(u64, Hold)], at: Instant, newcomer: &str, sem: Option<u32>) {
        let m = self.model();
        // Revoked before the newcomer got in: the revocation bound judges it.
        let revoked = |id: &u64| {
            m.holds
                .get(id)
                .and_then(|h| h.revoked_at)
                .is_some_and(|t| t <= at)
        };
        let untold = |id: &u64, old: &Hold| {
            let h = m.holds.get(id);
            let lost_at = h.and_then(|h| h.lost_at).or(old.lost_at);
            lost_at.is_none_or(|t| t > at + LOST_SLACK)
                && !h.is_some_and(|h| h.exempt)
                && !revoked(id)
        };
        if let Some(n) = sem {
            let taken: u32 = rivals
                .iter()
                .filter(|(id, old)| untold(id, old))
                .map(|(_, h)| match h.kind {
                    Kind::Semaphore(k) => k,
                    _ => 0,
                })
                .sum();
            if taken + n <= PERMITS {
                return;
            }
        }
        for (id, old) in rivals {
            let lost_at = m.holds.get(id).and_then(|h| h.lost_at).or(old.lost_at);
            let exempt = m.holds.get(id).is_some_and(|h| h.exempt);
            let told = lost_at.is_some_and(|t| t <= at + LOST_SLACK);
            if !told && !exempt && !revoked(id) {
                let when = match lost_at {
                    Some(t) => format!(
                        "its lost() fired {:?} after that",
                        t.saturating_duration_since(at)
                    ),
                    None => format!("its lost() had not fired {GRACE:?} later"),
                };
                self.violation(format!(
                    "overlap: {newcomer} got in while {} was inside and not told; {when}",
                    old.text(*id)
                ));
            }
        }
    }

    /// Run `check` after `delay` (counted in [`Checker::pending`]).
    fn later(self: &Arc<Self>, delay: Duration, check: impl FnOnce(&Checker) + Send + 'static) {
        use std::sync::atomic::Ordering;
        self.pending.fetch_add(1, Ordering::SeqCst);
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            check(&me);
            me.pending.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// How many delayed checks have not run yet.
    pub fn pending(&self) -> usize {
        self.pending.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A hold's `lost()` fired.
    pub fn lost(&self, id: u64) {
        if let Some(h) = self.model().holds.get_mut(&id) {
            h.lost_at.get_or_insert(Instant::now());
        }
    }

    /// A hold ends (its release or drop begins).
    pub fn ended(&self, id: u64) {
        if let Some(h) = self.model().holds.get_mut(&id) {
            h.ended = true;
        }
    }

    /// The live holds of `name` in `kind`'s family not told of a loss (before a
    /// `force_unlock`).
    pub fn live_holds(&self, name: u8, kind: Kind) -> Vec<u64> {
        let m = self.model();
        m.holds
            .iter()
            .filter(|(_, h)| {
                h.name == name
                    && m.family(h.kind) == m.family(kind)
                    && h.lost_at.is_none()
                    && !h.ended
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// A `force_unlock` of `name` in `kind`'s family is about to be sent.
    pub fn unlock_sent(&self, name: u8, kind: Kind) {
        let mut m = self.model();
        let family = m.family(kind);
        m.unlocked_at.insert((name, family), Instant::now());
    }

    /// Whether a `force_unlock` of `name`'s lock in `kind`'s family was sent since
    /// `started`.
    pub fn unlocked_since(&self, started: &Started, name: u8, kind: Kind) -> bool {
        let m = self.model();
        m.unlocked_at
            .get(&(name, m.family(kind)))
            .is_some_and(|t| *t >= started.at)
    }

    /// A `force_unlock` of the holds `ids` is about to be sent: from now on a newcomer may
    /// get in for its sake, before its reply is back (the server deletes the lock first).
    /// Returns the holds marked so, for [`Checker::not_revoked`] should nothing be deleted.
    pub fn revoking(&self, ids: &[u64]) -> Vec<u64> {
        let at = Instant::now();
        let mut m = self.model();
        ids.iter()
            .copied()
            .filter(|id| match m.holds.get_mut(id) {
                Some(h) if h.revoked_at.is_none() => {
                    h.revoked_at = Some(at);
                    true
                }
                _ => false,
            })
            .collect()
    }

    /// The `force_unlock` marked by [`Checker::revoking`] deleted nothing (or failed).
    pub fn not_revoked(&self, marked: &[u64]) {
        let mut m = self.model();
        for id in marked {
            if let Some(h) = m.holds.get_mut(id) {
                h.revoked_at = None;
            }
        }
    }

    /// A `force_unlock` deleted the lock: each of `ids` (live before it) must hear it
    /// within [`REVOKE_BOUND`] unless it ended first. A newcomer may get in before the
    /// message reaches the holder (at once with the subscriber connected; after its
    /// reconnect when a fault had just cut it), so an overlap with a revoked hold is
    /// judged by this bound, not by the overlap rule.
    pub fn revoked(self: &Arc<Self>, ids: Vec<u64>) {
        if ids.is_empty() {
            return;
        }
        let at = Instant::now();
        let (faults_then, reconnecting) = {
            let mut m = self.model();
            for id in &ids {
                if let Some(h) = m.holds.get_mut(id) {
                    h.revoked_at.get_or_insert(at);
                }
            }
            let reconnecting = m.fault_ended.is_some_and(|t| t.elapsed() < RECONNECT_SLACK);
            (m.faults, reconnecting)
        };
        self.later(REVOKE_BOUND, move |me| {
            let m = me.model();
            // A fault within the bound (the server paused, every client killed) holds the
            // message back, or cuts the subscriber that was to carry it; so does one that
            // ended just before, whose subscriber may still be reconnecting. The holder
            // then hears it when its subscriber is back (a check of every lease held),
            // which this bound does not time.
            if m.faults_on > 0 || m.faults != faults_then || reconnecting {
                return;
            }
            for id in ids {
                if let Some(h) = m
                    .holds
                    .get(&id)
                    .filter(|h| h.lost_at.is_none() && !h.exempt && !h.ended)
                {
                    me.violation(format!(
                        "revocation unheard: {} still not told {:?} after force_unlock",
                        h.text(id),
                        at.elapsed()
                    ));
                }
            }
        });
    }

    /// A fault took the keys of `name` (`None`: of every name): their holds are exempt,
    /// and run-once windows (of ended holds too) are not judged.
    pub fn keys_lost(&self, name: Option<u8>) {
        let mut m = self.model();
        if name.is_none() {
            m.resets += 1;
        }
        for h in m.holds.values_mut() {
            if name.is_none_or(|n| n == h.name) {
                h.window_lost = true;
                if !h.ended {
                    h.exempt = true;
                }
            }
        }
        let faults = m.faults;
        for n in (0..NAMES).filter(|n| name.is_none_or(|name| name == *n)) {
            m.lost_keys_at.insert(n, faults);
        }
    }

    /// The keys of `name` a fault took are gone from every server (its raw `DEL`s are
    /// done): a hold granted meanwhile, or whose acquisition started before this, may
    /// have lost them too (granted on a server before the `DEL` reached it).
    pub fn keys_gone(&self, name: u8) {
        let mut m = self.model();
        for h in m.holds.values_mut().filter(|h| h.name == name) {
            h.window_lost = true;
            if !h.ended {
                h.exempt = true;
            }
        }
        m.lost_keys_until.insert(name, Instant::now());
    }

    /// A `force_unlock` of `name`'s reentrant lock is sent: it deletes a run-once
    /// window's keys too, so from then on the windows of `name` are not judged.
    pub fn windows_cleared(&self, name: u8) {
        for h in self.model().holds.values_mut() {
            if h.name == name {
                h.window_lost = true;
            }
        }
    }

    /// Whether a run-once window on `name` may have kept its lock after `s` began (a busy
    /// answer then is the window's, not a lock held by nobody).
    pub fn window_open(&self, name: u8, s: &Started) -> bool {
        self.model()
            .holds
            .values()
            .any(|h| h.name == name && h.window.is_some_and(|(_, max)| max > s.at))
    }

    /// A run-once job's window: a newcomer of its lock (not its own task's re-entry) that
    /// got in before the window can have ended.
    fn judge_windows(&self, m: &Model, a: &Acquired<'_>, who: &str, now: Instant) {
        if m.family(a.kind) != Family::Reentrant {
            return;
        }
        for (id, h) in &m.holds {
            let Some((min, _)) = h.window else { continue };
            let revoked = h.revoked_at.is_some_and(|t| t <= now);
            if h.name == a.name
                && now < min
                && !h.window_lost
                && !revoked
                && !a.ancestors.contains(id)
            {
                self.violation(format!(
                    "run-once: {who} got in while the run-once job {} had run less than its hold_at_least ({RUN_ONCE_HOLD_MS} ms) ago ({:?} before its window can end)",
                    h.text(*id),
                    min.saturating_duration_since(now)
                ));
            }
        }
    }

    /// The fenced resource skips its token checks (a planted bug the checks must catch).
    pub fn fence_unchecked(&self) {
        self.model().fence_unchecked = true;
    }

    /// The hold's fencing counter and token (the fenced resource it increments).
    pub fn fence_of(&self, id: u64) -> Option<((u8, u8), u64)> {
        let m = self.model();
        let h = m.holds.get(&id)?;
        Some((name_key(&m, h.name, h.kind), h.token))
    }

    /// Claim the fenced counter with `token` before reading it: refused (`None`) below the
    /// highest token it has seen; else its value.
    pub fn fence_claim(&self, counter: (u8, u8), token: u64) -> Option<u64> {
        let mut m = self.model();
        let unchecked = m.fence_unchecked;
        let c = m.fenced.entry(counter).or_default();
        if token < c.claimed && !unchecked {
            return None;
        }
        c.claimed = c.claimed.max(token);
        Some(c.value)
    }

    /// Write `value` to the fenced counter with `token` (hold `id`'s): accepted when
    /// `token` is at least the highest seen. An accepted write with a token below the
    /// last accepted one, or with its token from another hold, is a violation.
    pub fn fence_write(&self, counter: (u8, u8), value: u64, token: u64, id: u64) -> bool {
        let mut m = self.model();
        let unchecked = m.fence_unchecked;
        let judged = m.resets == 0 && m.losses == 0;
        let c = m.fenced.entry(counter).or_default();
        if token < c.claimed && !unchecked {
            return false;
        }
        let last = c.last;
        c.claimed = c.claimed.max(token);
        c.value = value;
        c.accepted += 1;
        c.last = Some((token, id));
        // A re-entry shares its enclosing hold's token: two holds are one holder when one
        // encloses the other, or both re-enter one hold of that token (siblings nested in
        // it, one after the other).
        let chain = |x: u64| {
            let mut c = m
                .holds
                .get(&x)
                .map(|h| h.ancestors.clone())
                .unwrap_or_default();
            c.push(x);
            c
        };
        let related = last.is_some_and(|(t, other)| {
            let theirs = chain(other);
            chain(id)
                .iter()
                .any(|x| theirs.contains(x) && m.holds.get(x).is_some_and(|h| h.token == t))
        });
        drop(m);
        match last {
            Some((t, _)) if token < t && judged => self.violation(format!(
                "fenced: counter {counter:?} accepted token {token} after token {t} (tokens must increase per key)"
            )),
            Some((t, other)) if token == t && other != id && !related && judged => self.violation(format!(
                "fenced: counter {counter:?} accepted token {token} from hold #{id} and from hold #{other} (each holder has a token of its own)"
            )),
            _ => {}
        }
        true
    }

    /// At the end: no lost update (each counter's value is the number of increments it
    /// accepted), unless a fault may have handed a token out twice (a documented limit).
    pub fn check_fenced(&self) {
        let m = self.model();
        if m.resets > 0 || m.losses > 0 {
            return;
        }
        let mut lost: Vec<String> = m
            .fenced
            .iter()
            .filter(|(_, c)| c.value != c.accepted)
            .map(|(k, c)| {
                format!(
                    "lost update: fenced counter {k:?} holds {} after {} accepted increments (claim before read, fenced write)",
                    c.value, c.accepted
                )
            })
            .collect();
        drop(m);
        lost.sort();
        for v in lost {
            self.violation(v);
        }
    }

    /// Acknowledged writes may have been lost (an uncoordinated failover: a promoted
    /// replica behind its master, an old master demoted with what it took meanwhile;
    /// documented limits, docs/fault-testing.md "sentinel-failover", "cluster-kill"):
    /// every live hold is exempt from exclusion, and tokens drawn across it are not
    /// compared with earlier ones. Called when such a fault begins and again when the
    /// servers have settled, so holds taken in between are exempt too.
    pub fn writes_lost(&self) {
        self.keys_lost(None);
        let mut m = self.model();
        m.losses += 1;
        m.max_token.clear();
    }

    /// An uncoordinated failover is under way (`on`: from the fault's begin) or settled
    /// (`false`, after the last [`Checker::writes_lost`]). The replica may be promoted at
    /// any moment in between, behind the counter its master handed tokens from: a token
    /// granted, or asked for, inside the window is not compared with earlier ones.
    pub fn losing_writes(&self, on: bool) {
        let mut m = self.model();
        if on {
            m.losing += 1;
        } else {
            m.losing = m.losing.saturating_sub(1);
        }
    }

    /// A fault begins (`lasting`: until `fault_end`).
    pub fn fault_begin(&self, lasting: bool) {
        let mut m = self.model();
        m.faults += 1;
        if lasting {
            m.faults_on += 1;
        } else {
            m.fault_ended = Some(Instant::now());
        }
    }

    /// The lasting fault ended.
    pub fn fault_end(&self) {
        let mut m = self.model();
        m.faults_on = m.faults_on.saturating_sub(1);
        m.fault_ended = Some(Instant::now());
    }

    /// How many faults happened.
    pub fn faults(&self) -> u64 {
        self.model().faults
    }

    /// Check a failure: typed, naming key and backend.
    pub fn error(&self, who: &str, e: &LockError) {
        let named = e.backend().is_some()
            && (e.key().is_some() || matches!(e, LockError::Unsupported { .. }));
        if !named {
            self.violation(format!(
                "error: {who} failed with an error that names no key or backend: {e}"
            ));
        }
    }
}

/// What a successful acquisition reports to the checker.
pub struct Acquired<'a> {
    /// Owner.
    pub owner: u8,
    /// Task.
    pub task: u8,
    /// Name.
    pub name: u8,
    /// Kind.
    pub kind: Kind,
    /// Its token.
    pub token: u64,
    /// The holds enclosing it in its task.
    pub ancestors: &'a [u64],
    /// What was seen when it started.
    pub started: Started,
}

/// The live holds that exclude `new` and are not told yet (semaphores: the permits taken
/// beyond [`PERMITS`]).
fn rivals(m: &Model, new: &Hold) -> Vec<(u64, Hold)> {
    // An election has one leader: a task that leads is not let in again either.
    let leader = new.kind == Kind::Leader;
    let live = m.holds.iter().filter(|(id, h)| {
        h.name == new.name
            && (leader || !new.ancestors.contains(id))
            && h.lost_at.is_none()
            && !h.exempt
            && !h.ended
    });
    if let Kind::Semaphore(n) = new.kind {
        let held: Vec<(u64, Hold)> = live
            .filter(|(_, h)| matches!(h.kind, Kind::Semaphore(_)))
            .map(|(id, h)| (*id, h.clone()))
            .collect();
        let taken: u32 = held
            .iter()
            .map(|(_, h)| match h.kind {
                Kind::Semaphore(k) => k,
                _ => 0,
            })
            .sum();
        return if taken + n > PERMITS {
            held
        } else {
            Vec::new()
        };
    }
    live.filter(|(_, h)| m.incompatible(h.kind, new.kind))
        .map(|(id, h)| (*id, h.clone()))
        .collect()
}

impl Started {
    /// When the acquisition started.
    pub fn at(&self) -> Instant {
        self.at
    }
}

/// The names a kind takes: every name for a multi-key lock, else its own.
pub fn names_of(name: u8, kind: Kind) -> Vec<u8> {
    match kind {
        Kind::Multi => (0..NAMES).collect(),
        _ => vec![name],
    }
}

/// How many acquisitions of `kind`'s family began or were granted on the names it takes.
fn generation(m: &Model, name: u8, kind: Kind) -> u64 {
    let family = m.family(kind);
    names_of(name, kind)
        .into_iter()
        .map(|n| m.started.get(&(n, family)).copied().unwrap_or(0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::{Acquired, Checker, Kind, GRACE};

    /// Wait (up to `within`) until every pending check has run; none found a violation.
    async fn no_violation_once_judged(c: &Checker, within: std::time::Duration, what: &str) {
        let deadline = tokio::time::Instant::now() + within;
        while c.pending() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(c.pending(), 0, "{what}");
        assert_eq!(c.violations(), Vec::<String>::new());
    }

    fn acquired(
        c: &std::sync::Arc<Checker>,
        task: u8,
        kind: Kind,
        token: u64,
        started: super::Started,
    ) -> u64 {
        c.acquired(Acquired {
            owner: 0,
            task,
            name: 0,
            kind,
            token,
            ancestors: &[],
            started,
        })
    }

    /// A raw `DEL` of a name's keys takes a while on several servers: an acquisition that
    /// starts after it began and before it is done may be granted on servers it has not
    /// reached yet, and lose its keys to it on the others. Such a hold is exempt, like one
    /// whose grant was in flight when the `DEL` began.
    #[tokio::test]
    async fn a_hold_started_while_its_keys_were_being_deleted_is_exempt() {
        let c = Checker::for_format(false);
        c.fault_begin(false);
        c.keys_lost(Some(0));
        let first = c.started(0, Kind::RunOnce);
        c.keys_gone(0);
        acquired(&c, 1, Kind::RunOnce, 10, first);
        let second = c.started(0, Kind::Reentrant);
        acquired(&c, 2, Kind::Reentrant, 11, second);
        // The overlap is judged GRACE later, by a check of its own.
        no_violation_once_judged(&c, GRACE * 4, "the overlap was judged").await;
    }

    /// Between the begin and the end of an uncoordinated failover the replica may be
    /// promoted at any moment without the counter's last increments: two acquisitions
    /// both started and granted inside that window may draw one token twice (a documented
    /// limit), which is not judged.
    #[tokio::test]
    async fn tokens_drawn_inside_an_uncoordinated_failover_are_not_compared() {
        let c = Checker::for_format(false);
        c.fault_begin(true);
        c.losing_writes(true);
        let first = c.started(0, Kind::Reentrant);
        let id = acquired(&c, 1, Kind::Reentrant, 10, first);
        c.ended(id);
        let second = c.started(0, Kind::Reentrant);
        acquired(&c, 2, Kind::Reentrant, 10, second);
        c.losing_writes(false);
        c.fault_end();
        assert_eq!(c.violations(), Vec::<String>::new());
    }

    /// A fault that cut the connections just before a `force_unlock` (a reset, a
    /// `CLIENT KILL`) may leave the holder's subscriber reconnecting, within its backoff
    /// (at most 1 s), when the message goes out: the holder hears of it when the
    /// subscriber is back, which the revocation bound does not time.
    #[tokio::test]
    async fn a_revocation_just_after_connections_were_cut_is_not_timed() {
        let c = Checker::for_format(false);
        c.fault_begin(false);
        let started = c.started(0, Kind::Reentrant);
        let id = acquired(&c, 1, Kind::Reentrant, 10, started);
        c.revoked(vec![id]);
        no_violation_once_judged(&c, super::REVOKE_BOUND * 4, "the revocation was judged").await;
    }

    /// Two re-entries of one hold, one after the other in its task, write with its token:
    /// one holder, not two.
    #[tokio::test]
    async fn re_entries_of_one_hold_share_its_token_at_the_fenced_resource() {
        let c = Checker::for_format(false);
        let outer = acquired(&c, 0, Kind::Reentrant, 10, c.started(0, Kind::Reentrant));
        let started = c.started(0, Kind::RunOnce);
        let first = c.acquired(Acquired {
            owner: 0,
            task: 0,
            name: 0,
            kind: Kind::RunOnce,
            token: 10,
            ancestors: &[outer],
            started,
        });
        assert!(c.fence_write((0, 0), 1, 10, first));
        c.ended(first);
        let started = c.started(0, Kind::Reentrant);
        let second = c.acquired(Acquired {
            owner: 0,
            task: 0,
            name: 0,
            kind: Kind::Reentrant,
            token: 10,
            ancestors: &[outer],
            started,
        });
        assert!(c.fence_write((0, 0), 2, 10, second));
        assert_eq!(c.violations(), Vec::<String>::new());
    }

    /// A hold handed over (or granted) while a `force_unlock` of its lock was on its way
    /// registers after the driver marked the live holds revoked: the newcomer that gets in
    /// once the lock is gone is judged by the revocation bound for it too, and a holder
    /// that releases before the message reaches it is not told (it is no longer inside).
    #[tokio::test]
    async fn a_hold_in_flight_when_its_lock_was_force_released_is_judged_as_revoked() {
        let c = Checker::for_format(false);
        let first = c.started(0, Kind::Reentrant);
        c.unlock_sent(0, Kind::Reentrant);
        let id = acquired(&c, 2, Kind::Reentrant, 10, first);
        let second = c.started(0, Kind::Reentrant);
        acquired(&c, 1, Kind::Reentrant, 11, second);
        c.ended(id);
        no_violation_once_judged(&c, super::REVOKE_BOUND * 2, "the checks ran").await;
    }
}
