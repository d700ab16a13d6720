//! The model of what the locks promise, checked at every step: who is inside, which
//! tokens were handed out, which faults are on. Every breach is recorded as a violation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::LockError;

use super::model::{Family, Kind, PERMITS};

/// How late after another holder got in an earlier holder's `lost()` may be recorded
/// (the explorer's own scheduling of the task that watches it).
pub const LOST_SLACK: Duration = Duration::from_millis(100);
/// When an overlap is judged: the earlier holder had this long to be told.
pub const GRACE: Duration = Duration::from_millis(400);
/// How long a holder may take to hear a `force_unlock` ("at once").
pub const REVOKE_BOUND: Duration = Duration::from_millis(500);
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
    /// Acquisitions started per name and family (a try's "nothing changed meanwhile").
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
    max_token: u64,
    generation: u64,
    faults: u64,
    losses: u64,
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
        *m.started.entry((name, family)).or_default() += 1;
        Started {
            max_token: m
                .max_token
                .get(&name_key(&m, name, kind))
                .copied()
                .unwrap_or(0),
            generation: m.started[&(name, family)],
            faults: m.faults,
            losses: m.losses,
            at: Instant::now(),
        }
    }

    /// Whether nothing could have taken `name` since `s`: no other acquisition of its
    /// family started, no fault began, none is on and the last ended a while ago.
    pub fn quiet_since(&self, s: &Started, name: u8, kind: Kind) -> bool {
        let m = self.model();
        let settled = m
            .fault_ended
            .is_none_or(|t| t.elapsed() > Duration::from_millis(500));
        m.started.get(&(name, m.family(kind))).copied() == Some(s.generation)
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
        let lossless = m.losses == a.started.losses;
        if !reentry && lossless && a.token <= a.started.max_token {
            self.violation(format!(
                "token: {who} got token {} after a holder of that name had {} (tokens must grow strictly per key)",
                a.token, a.started.max_token
            ));
        }
        let counter = name_key(&m, a.name, a.kind);
        let max = m.max_token.entry(counter).or_default();
        *max = (*max).max(a.token);
        let id = m.next_id;
        m.next_id += 1;
        let hold = Hold {
            owner: a.owner,
            task: a.task,
            name: a.name,
            kind: a.kind,
            token: a.token,
            ancestors: a.ancestors.to_vec(),
            lost_at: None,
            exempt: false,
            ended: false,
            revoked_at: None,
        };
        let rivals = rivals(&m, &hold);
        m.holds.insert(id, hold.clone());
        drop(m);
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
        {
            let mut m = self.model();
            for id in &ids {
                if let Some(h) = m.holds.get_mut(id) {
                    h.revoked_at.get_or_insert(at);
                }
            }
        }
        self.later(REVOKE_BOUND, move |me| {
            let m = me.model();
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

    /// A fault took the keys of `name` (`None`: of every name): their holds are exempt.
    pub fn keys_lost(&self, name: Option<u8>) {
        for h in self.model().holds.values_mut() {
            if name.is_none_or(|n| n == h.name) && !h.ended {
                h.exempt = true;
            }
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
    let live = m.holds.iter().filter(|(id, h)| {
        h.name == new.name
            && !new.ancestors.contains(id)
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
