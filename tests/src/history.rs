//! A history checker for locks under faults.
//!
//! Workers in several OS processes (`torture-worker`) record every critical section they
//! run, one line per event, on the machine's shared `CLOCK_MONOTONIC` ([`now_ns`]): the
//! instant the acquire returned (with the fencing token), the instant `lost()` fired, the
//! unfenced counter update, the fenced read-modify-write of a balance (claim, read, +1,
//! fenced write) and whether the resource accepted it, and the instant the release was
//! sent. The driver of the run adds what it did to the workers
//! (`SIGSTOP`/`SIGCONT` intervals, `SIGKILL` instants). [`check`] then reports:
//!
//! - **unsignalled overlaps**: a later holder got in while an earlier one was still inside
//!   (no release sent, process alive), and the earlier one had not been told: its `lost()`
//!   came after that instant (or never). A holder frozen (`SIGSTOP`) at that instant cannot
//!   be told while frozen: it counts as told when `lost()` fired before its first act after
//!   waking (a write to the resource, or the release; with no act, within
//!   [`RESUME_SLACK`] of running time). Must be 0: anything else is a library bug.
//! - **signalled overlaps**: the earlier holder was told first, and went on (the workers'
//!   bodies do not stop on `lost()`, as a careless application would not): allowed, counted.
//! - **stale writes accepted** by the fenced resource: a write accepted with a token below
//!   that of a write accepted and completed before it started. Must be 0.
//! - **lost updates** on the unfenced counter (`GET`, pause, `SET v+1`): completed updates
//!   minus the final value. Expected > 0 under pauses: why fencing exists.
//! - **lost updates on the fenced balance** ([`fenced_lost_updates`]): fenced `+1` writes
//!   the resource accepted minus the balance's final value. Must be 0, in every scenario:
//!   a holder claims the balance before reading it, so no accepted write is erased.
//! - **token regressions**: sections, in acquire order, whose token is not above the one
//!   before.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// How long a resumed process may run before its `lost()` signal is recorded and still
/// count as told first: the scheduling of its runtime after `SIGCONT`. Generous on a
/// loaded 2-core machine; reported per run as the largest such delay seen.
pub const RESUME_SLACK_NS: u64 = 150_000_000;
/// [`RESUME_SLACK_NS`] as a duration.
pub const RESUME_SLACK: std::time::Duration = std::time::Duration::from_nanos(RESUME_SLACK_NS);

/// What a worker of a torture run takes for each critical section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    /// `registry.lock(key)` of the given kind (every section exclusive).
    Lock(distlock::LockKind),
    /// `registry.lock(key)`, read or write by turns: reader sections are shared.
    ReadWriteMix,
    /// `registry.semaphore(key, 1).acquire(1)`: one permit, so exclusive.
    Semaphore,
    /// `registry.leader(key).campaign()` then `resign()`: a section is one leadership
    /// (the epoch as its token).
    Leader,
}

/// Which sections of a kind may overlap: the checker's rule for the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exclusion {
    /// No two sections may overlap.
    Exclusive,
    /// Shared (reader) sections may overlap each other; an exclusive one overlaps nothing.
    ReadersShare,
}

/// One lock kind of the torture run: how the worker takes it, and the exclusion rule the
/// checker applies. [`KINDS`] is the one list both use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockKindSpec {
    /// The name on the command line and in the table.
    pub name: &'static str,
    /// How each section is taken.
    pub primitive: Primitive,
    /// The backend's `protocol = "redisson"` (Redisson's on-Redis format).
    pub redisson: bool,
    /// Which sections may overlap.
    pub exclusion: Exclusion,
}

/// Every lock kind of the torture run; the first is the default.
pub const KINDS: &[LockKindSpec] = &[
    LockKindSpec {
        name: "reentrant",
        primitive: Primitive::Lock(distlock::LockKind::Reentrant),
        redisson: false,
        exclusion: Exclusion::Exclusive,
    },
    LockKindSpec {
        name: "write",
        primitive: Primitive::Lock(distlock::LockKind::Write),
        redisson: false,
        exclusion: Exclusion::Exclusive,
    },
    LockKindSpec {
        name: "read-write",
        primitive: Primitive::ReadWriteMix,
        redisson: false,
        exclusion: Exclusion::ReadersShare,
    },
    LockKindSpec {
        name: "semaphore",
        primitive: Primitive::Semaphore,
        redisson: false,
        exclusion: Exclusion::Exclusive,
    },
    LockKindSpec {
        name: "leader",
        primitive: Primitive::Leader,
        redisson: false,
        exclusion: Exclusion::Exclusive,
    },
    LockKindSpec {
        name: "redisson",
        primitive: Primitive::Lock(distlock::LockKind::Reentrant),
        redisson: true,
        exclusion: Exclusion::Exclusive,
    },
    LockKindSpec {
        name: "redisson-rw",
        primitive: Primitive::ReadWriteMix,
        redisson: true,
        exclusion: Exclusion::ReadersShare,
    },
];

/// The kind named `name`, if any.
pub fn kind(name: &str) -> Option<&'static LockKindSpec> {
    KINDS.iter().find(|k| k.name == name)
}

impl Exclusion {
    /// Whether sections `a` and `b`, both inside at once, break the rule.
    pub fn conflict(self, a: &Section, b: &Section) -> bool {
        match self {
            Exclusion::Exclusive => true,
            Exclusion::ReadersShare => !(a.shared && b.shared),
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process of the machine
/// (unlike `std::time::Instant`, whose values cannot be compared across processes).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Appends a worker's events to its history file, one line per event, each written with
/// one `write` call (so a `SIGKILL` loses at most the event being written).
pub struct Recorder {
    file: File,
}

impl Recorder {
    /// Create (truncate) the history file at `path`.
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(path)?;
        Ok(Recorder { file })
    }

    fn line(&mut self, s: String) {
        // A failed write would make the history wrong: stop the worker loudly.
        self.file
            .write_all(s.as_bytes())
            .unwrap_or_else(|e| panic!("history write: {e}"));
    }

    /// The acquire returned with `token` at `t`.
    pub fn acquired(&mut self, token: u64, t: u64) {
        self.line(format!("A {token} {t}\n"));
    }

    /// A shared (reader) acquire returned with `token` at `t`.
    pub fn acquired_shared(&mut self, token: u64, t: u64) {
        self.line(format!("A {token} {t} S\n"));
    }

    /// `lost()` fired at `t`.
    pub fn lost(&mut self, token: u64, t: u64) {
        self.line(format!("L {token} {t}\n"));
    }

    /// The unfenced counter's `SET v+1`, sent at `t`, completed.
    pub fn unfenced(&mut self, token: u64, t: u64) {
        self.line(format!("U {token} {t}\n"));
    }

    /// The fenced write (or a refused claim, which ends the section's read-modify-write)
    /// ran from `t0` to `t1`; the resource accepted it or not.
    pub fn fenced(&mut self, token: u64, t0: u64, t1: u64, accepted: bool) {
        self.line(format!("W {token} {t0} {t1} {}\n", u8::from(accepted)));
    }

    /// The release is about to be sent, at `t`.
    pub fn releasing(&mut self, token: u64, t: u64) {
        self.line(format!("R {token} {t}\n"));
    }

    /// An acquire failed (`what`: the error's kind).
    pub fn failed(&mut self, what: &str) {
        self.line(format!("E {}\n", what.replace(char::is_whitespace, "_")));
    }
}

/// One critical section, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The worker process.
    pub pid: u32,
    /// Its fencing token.
    pub token: u64,
    /// When the acquire returned.
    pub acquired: u64,
    /// A shared (reader) section.
    pub shared: bool,
    /// When `lost()` fired, if it did.
    pub lost: Option<u64>,
    /// When the release was sent (`None`: the process died or the run ended first).
    pub released: Option<u64>,
    /// Whether the unfenced update completed.
    pub unfenced: bool,
    /// When the unfenced update was sent (if it completed).
    pub unfenced_at: Option<u64>,
    /// The fenced write: start, end, accepted.
    pub fenced: Option<(u64, u64, bool)>,
}

impl Section {
    /// The first thing the holder did to the resource, or its release, at or after `t`.
    fn first_act_after(&self, t: u64) -> Option<u64> {
        [
            self.unfenced_at,
            self.fenced.map(|(t0, _, _)| t0),
            self.released,
        ]
        .into_iter()
        .flatten()
        .filter(|&x| x >= t)
        .min()
    }
}

/// A worker's history file, parsed. Also returns the failed acquires by kind.
pub fn parse(pid: u32, text: &str) -> (Vec<Section>, HashMap<String, u64>) {
    let mut sections: Vec<Section> = Vec::new();
    let mut errors = HashMap::new();
    // A line without its newline was torn by a kill: ignored.
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let f: Vec<&str> = line.trim_end().split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        match (f.first().copied(), num(1)) {
            (Some("A"), Some(token)) => {
                if let Some(t) = num(2) {
                    sections.push(Section {
                        pid,
                        token,
                        acquired: t,
                        shared: f.get(3) == Some(&"S"),
                        lost: None,
                        released: None,
                        unfenced: false,
                        unfenced_at: None,
                        fenced: None,
                    });
                }
            }
            (Some("E"), _) => {
                *errors
                    .entry(f.get(1).unwrap_or(&"?").to_string())
                    .or_insert(0) += 1;
            }
            (Some(kind), Some(token)) => {
                let Some(s) = sections.last_mut().filter(|s| s.token == token) else {
                    continue;
                };
                match kind {
                    "L" => s.lost = num(2),
                    "U" => {
                        s.unfenced = true;
                        s.unfenced_at = num(2);
                    }
                    "W" => {
                        if let (Some(t0), Some(t1), Some(a)) = (num(2), num(3), num(4)) {
                            s.fenced = Some((t0, t1, a == 1));
                        }
                    }
                    "R" => s.released = num(2),
                    _ => {}
                }
            }
            // A torn last line (the process was killed while writing it).
            _ => {}
        }
    }
    (sections, errors)
}

/// What the driver did to the workers.
#[derive(Debug, Clone, Default)]
pub struct Interventions {
    /// `pid -> [(stopped from, until)]`: recorded after `SIGSTOP` returned and before
    /// `SIGCONT` was sent, so inside the time the process really was stopped.
    pub paused: HashMap<u32, Vec<(u64, u64)>>,
    /// `pid -> when SIGKILL was sent`.
    pub killed: HashMap<u32, u64>,
}

impl Interventions {
    /// The pause of `pid` under way at `t`, if any.
    fn paused_at(&self, pid: u32, t: u64) -> Option<(u64, u64)> {
        self.paused
            .get(&pid)?
            .iter()
            .copied()
            .find(|&(s, e)| s <= t && t < e)
    }

    /// The pause of `pid` under way at `t`, or one it woke from at most `slack` of running
    /// time before `t` (too soon to have heard of anything since).
    fn stopped_near(&self, pid: u32, t: u64, slack: u64) -> Option<(u64, u64)> {
        self.paused_at(pid, t).or_else(|| {
            self.paused
                .get(&pid)?
                .iter()
                .copied()
                .filter(|&(_, e)| e <= t && self.running(pid, e, t) <= slack)
                .max_by_key(|&(_, e)| e)
        })
    }

    /// How long `pid` was able to run within `[a, b)`.
    fn running(&self, pid: u32, a: u64, b: u64) -> u64 {
        if b <= a {
            return 0;
        }
        let mut stopped = 0;
        for &(s, e) in self.paused.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            let (s, e) = (s.max(a), e.min(b));
            if e > s {
                stopped += e - s;
            }
        }
        if let Some(&k) = self.killed.get(&pid) {
            if k < b {
                stopped += b - k.max(a);
            }
        }
        (b - a).saturating_sub(stopped)
    }
}

/// The checker's findings for one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Critical sections entered.
    pub sections: u64,
    /// Sections overlapped by a later holder without a signal to them first: must be 0.
    pub unsignalled_overlaps: u64,
    /// Sections overlapped by a later holder, told first each time.
    pub signalled_overlaps: u64,
    /// Shared (reader) sections overlapped by a later reader: allowed by the kind's rule;
    /// shows the readers did share.
    pub shared_overlaps: u64,
    /// Fenced writes accepted although a larger token's write had completed before: must be 0.
    pub stale_writes_accepted: u64,
    /// Fenced writes refused as stale.
    pub stale_writes_refused: u64,
    /// Unfenced updates lost (completed updates minus the counter's final value).
    pub lost_updates_unfenced: u64,
    /// Accepted fenced `+1` writes of the balance minus its final value
    /// ([`fenced_lost_updates`]): must be 0.
    pub lost_updates_fenced: u64,
    /// Sections whose token is not above the previous section's (in acquire order).
    pub token_regressions: u64,
    /// Smallest time from an earlier holder's `lost()` to a later holder's acquire, over
    /// the overlaps where the signal came first (ns): how early the warning came.
    pub min_signal_lead_ns: Option<u64>,
    /// Failed acquires by error kind.
    pub acquire_errors: Vec<(String, u64)>,
    /// Details of the unsignalled overlaps and stale writes (for the log).
    pub details: Vec<String>,
}

impl Report {
    /// Whether the run broke a safety property (an unsignalled overlap, an accepted
    /// stale write or a lost update on the fenced balance).
    pub fn failed(&self) -> bool {
        self.unsignalled_overlaps > 0 || self.stale_writes_accepted > 0 || self.fencing_broken()
    }

    /// Whether fencing failed to protect the balance's read-modify-write (a lost update
    /// on it): a failure in every scenario, documented limits included.
    pub fn fencing_broken(&self) -> bool {
        self.lost_updates_fenced > 0
    }
}

/// Updates of the fenced balance lost: the fenced writes the resource accepted (each
/// wrote the balance it read after its claim, + 1) minus the balance's final value
/// (`balance`). A write whose worker was killed before it recorded the outcome is not
/// counted, so the figure is a lower bound only when workers were killed mid-write.
pub fn fenced_lost_updates(sections: &[Section], balance: u64) -> u64 {
    let accepted = sections
        .iter()
        .filter(|s| matches!(s.fenced, Some((_, _, true))))
        .count() as u64;
    accepted.saturating_sub(balance)
}

/// Check the sections of all workers under `exclusion` (the kind's rule). `end`: when the
/// run ended (for sections never released by a live process); `counter`: the unfenced
/// counter's final value.
pub fn check(
    exclusion: Exclusion,
    mut sections: Vec<Section>,
    errors: HashMap<String, u64>,
    done: &Interventions,
    end: u64,
    counter: u64,
) -> Report {
    sections.sort_by_key(|s| (s.acquired, s.token));
    let mut r = Report {
        sections: sections.len() as u64,
        ..Report::default()
    };
    let close = |s: &Section| -> u64 {
        let mut t = s.released.unwrap_or(end);
        if let Some(&k) = done.killed.get(&s.pid) {
            t = t.min(k.max(s.acquired));
        }
        t
    };
    // Per earlier section: overlapped by any later holder? told first every time?
    for (i, a) in sections.iter().enumerate() {
        let a_end = close(a);
        let mut overlapped = false;
        let mut shared = false;
        let mut unsignalled: Option<&Section> = None;
        for b in &sections[i + 1..] {
            if b.acquired >= a_end {
                break;
            }
            if b.pid == a.pid {
                continue;
            }
            if !exclusion.conflict(a, b) {
                shared = true;
                continue;
            }
            overlapped = true;
            // `b` got in while `a` was inside. Was `a` told first?
            let told = match (
                a.lost,
                done.stopped_near(a.pid, b.acquired, RESUME_SLACK_NS),
            ) {
                (None, _) => false,
                // Running: the signal must have come before `b` got in.
                (Some(l), None) => l <= b.acquired,
                // Frozen (or woken too little before `b` got in to have heard of it): it
                // must learn before it acts again after waking (its next write or
                // release); with no act after waking, within RESUME_SLACK of running time.
                (Some(l), Some((_, woke))) => match a.first_act_after(woke) {
                    Some(act) => l <= act,
                    None => done.running(a.pid, b.acquired, l) <= RESUME_SLACK_NS,
                },
            };
            if !told && unsignalled.is_none() {
                unsignalled = Some(b);
            }
            if let Some(l) = a.lost.filter(|l| *l <= b.acquired) {
                let lead = b.acquired - l;
                r.min_signal_lead_ns = Some(r.min_signal_lead_ns.map_or(lead, |m| m.min(lead)));
            }
        }
        r.shared_overlaps += u64::from(shared);
        match (overlapped, unsignalled) {
            (false, _) => {}
            (true, None) => r.signalled_overlaps += 1,
            (true, Some(b)) => {
                r.unsignalled_overlaps += 1;
                if r.details.len() < 20 {
                    let ms = |t: u64| t as f64 / 1e6;
                    let mut d = String::new();
                    let _ = write!(
                        d,
                        "unsignalled overlap: pid {} token {} [{:.1} ms .. {:.1} ms, lost {:?}] and pid {} token {} from {:.1} ms; the first ran {:.1} ms after that",
                        a.pid,
                        a.token,
                        ms(a.acquired),
                        ms(a_end),
                        a.lost.map(ms),
                        b.pid,
                        b.token,
                        ms(b.acquired),
                        ms(done.running(a.pid, b.acquired, a.lost.unwrap_or(a_end)))
                    );
                    r.details.push(d);
                }
            }
        }
    }
    // Tokens grow with every exclusive holder (readers share theirs).
    let exclusive: Vec<&Section> = sections.iter().filter(|s| !s.shared).collect();
    for w in exclusive.windows(2) {
        if w[1].token <= w[0].token {
            r.token_regressions += 1;
        }
    }
    // Fenced writes: accepted ones, by completion.
    let mut accepted: Vec<(u64, u64, u64)> = Vec::new(); // (t0, t1, token)
    for s in &sections {
        match s.fenced {
            Some((t0, t1, true)) => accepted.push((t0, t1, s.token)),
            Some((_, _, false)) => r.stale_writes_refused += 1,
            None => {}
        }
    }
    let mut by_end = accepted.clone();
    by_end.sort_by_key(|w| w.1);
    for &(t0, _, token) in &accepted {
        // Largest token among writes accepted and completed before this one started.
        let before = by_end.iter().take_while(|w| w.1 < t0).map(|w| w.2).max();
        if let Some(m) = before {
            if token < m {
                r.stale_writes_accepted += 1;
                if r.details.len() < 40 {
                    r.details.push(format!(
                        "stale write accepted: token {token} after token {m} had been accepted"
                    ));
                }
            }
        }
    }
    let updates = sections.iter().filter(|s| s.unfenced).count() as u64;
    r.lost_updates_unfenced = updates.saturating_sub(counter);
    let mut errors: Vec<(String, u64)> = errors.into_iter().collect();
    errors.sort();
    r.acquire_errors = errors;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec(pid: u32, token: u64, acq: u64, lost: Option<u64>, rel: Option<u64>) -> Section {
        Section {
            pid,
            token,
            acquired: acq,
            shared: false,
            lost,
            released: rel,
            unfenced: false,
            unfenced_at: None,
            fenced: None,
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn sequential_sections_are_clean() {
        let s = vec![
            sec(1, 1, 0, None, Some(10 * MS)),
            sec(2, 2, 11 * MS, None, Some(20 * MS)),
        ];
        let r = check(
            Exclusion::Exclusive,
            s,
            HashMap::new(),
            &Interventions::default(),
            100 * MS,
            0,
        );
        assert_eq!((r.unsignalled_overlaps, r.signalled_overlaps), (0, 0));
        assert_eq!(r.token_regressions, 0);
    }

    #[test]
    fn overlap_without_signal_is_caught() {
        let s = vec![
            sec(1, 1, 0, None, Some(50 * MS)),
            sec(2, 2, 20 * MS, None, Some(60 * MS)),
        ];
        let r = check(
            Exclusion::Exclusive,
            s,
            HashMap::new(),
            &Interventions::default(),
            100 * MS,
            0,
        );
        assert_eq!(r.unsignalled_overlaps, 1);
        assert!(r.failed());
    }

    #[test]
    fn signal_before_the_overlap_is_allowed() {
        let s = vec![
            sec(1, 1, 0, Some(15 * MS), Some(50 * MS)),
            sec(2, 2, 20 * MS, None, Some(60 * MS)),
        ];
        let r = check(
            Exclusion::Exclusive,
            s,
            HashMap::new(),
            &Interventions::default(),
            100 * MS,
            0,
        );
        assert_eq!((r.unsignalled_overlaps, r.signalled_overlaps), (0, 1));
    }

    #[test]
    fn a_paused_holder_told_on_waking_is_signalled_a_running_one_is_not() {
        let s = || {
            vec![
                sec(1, 1, 0, Some(3_010 * MS), Some(3_050 * MS)),
                sec(2, 2, 1_500 * MS, None, Some(1_600 * MS)),
            ]
        };
        let mut done = Interventions::default();
        done.paused.insert(1, vec![(100 * MS, 3_000 * MS)]);
        let r = check(
            Exclusion::Exclusive,
            s(),
            HashMap::new(),
            &done,
            4_000 * MS,
            0,
        );
        assert_eq!((r.unsignalled_overlaps, r.signalled_overlaps), (0, 1));
        // Not paused: it ran 1.5 s past the other's acquire before hearing of it.
        let r = check(
            Exclusion::Exclusive,
            s(),
            HashMap::new(),
            &Interventions::default(),
            4_000 * MS,
            0,
        );
        assert_eq!(r.unsignalled_overlaps, 1);
    }

    /// The newcomer got in 40 µs after the holder woke (its lease had run out while it was
    /// stopped, and other holders came and went meanwhile; the next one's acquire happened
    /// to return just after the wake): the holder had no running time to hear of it, so it
    /// is judged as a stopped one, by whether it learned before it acted again.
    #[test]
    fn a_holder_woken_just_before_the_newcomer_got_in_is_judged_as_stopped() {
        let s = |lost: u64| {
            vec![
                sec(1, 1, 0, Some(lost), Some(3_002 * MS)),
                sec(2, 2, 3_000 * MS + 40_000, None, Some(3_100 * MS)),
            ]
        };
        let mut done = Interventions::default();
        done.paused.insert(1, vec![(100 * MS, 3_000 * MS)]);
        // Told 0.4 ms after waking, before its release: signalled.
        let r = check(
            Exclusion::Exclusive,
            s(3_000 * MS + 400_000),
            HashMap::new(),
            &done,
            4_000 * MS,
            0,
        );
        assert_eq!((r.unsignalled_overlaps, r.signalled_overlaps), (0, 1));
        // Running for 200 ms (past the resume slack) when the newcomer got in: the rule of
        // a running holder.
        done.paused.insert(1, vec![(100 * MS, 2_800 * MS)]);
        let r = check(
            Exclusion::Exclusive,
            s(3_000 * MS + 400_000),
            HashMap::new(),
            &done,
            4_000 * MS,
            0,
        );
        assert_eq!(r.unsignalled_overlaps, 1);
    }

    #[test]
    fn running_holder_told_late_is_unsignalled_even_by_a_millisecond() {
        let s = vec![
            sec(1, 1, 0, Some(21 * MS), Some(50 * MS)),
            sec(2, 2, 20 * MS, None, Some(60 * MS)),
        ];
        let r = check(
            Exclusion::Exclusive,
            s,
            HashMap::new(),
            &Interventions::default(),
            100 * MS,
            0,
        );
        assert_eq!(r.unsignalled_overlaps, 1);
    }

    #[test]
    fn a_woken_holder_must_learn_before_it_acts() {
        let mk = |lost: u64| {
            let mut a = sec(1, 1, 0, Some(lost), Some(3_400 * MS));
            a.unfenced = true;
            a.unfenced_at = Some(3_300 * MS);
            vec![a, sec(2, 2, 1_500 * MS, None, Some(1_600 * MS))]
        };
        let mut done = Interventions::default();
        done.paused.insert(1, vec![(100 * MS, 3_000 * MS)]);
        // Starved for 250 ms after waking, but told before its write: signalled.
        let r = check(
            Exclusion::Exclusive,
            mk(3_250 * MS),
            HashMap::new(),
            &done,
            4_000 * MS,
            0,
        );
        assert_eq!((r.unsignalled_overlaps, r.signalled_overlaps), (0, 1));
        // Wrote before it was told: unsignalled.
        let r = check(
            Exclusion::Exclusive,
            mk(3_350 * MS),
            HashMap::new(),
            &done,
            4_000 * MS,
            0,
        );
        assert_eq!(r.unsignalled_overlaps, 1);
    }

    #[test]
    fn a_killed_holder_is_out_when_killed() {
        let s = vec![
            sec(1, 1, 0, None, None),
            sec(2, 2, 1_500 * MS, None, Some(1_600 * MS)),
        ];
        let mut done = Interventions::default();
        done.killed.insert(1, 100 * MS);
        let r = check(
            Exclusion::Exclusive,
            s,
            HashMap::new(),
            &done,
            4_000 * MS,
            0,
        );
        assert_eq!((r.unsignalled_overlaps, r.signalled_overlaps), (0, 0));
    }

    #[test]
    fn readers_share_writers_do_not() {
        let mut r1 = sec(1, 1, 0, None, Some(50 * MS));
        r1.shared = true;
        let mut r2 = sec(2, 1, 10 * MS, None, Some(60 * MS));
        r2.shared = true;
        let w = sec(3, 2, 20 * MS, None, Some(70 * MS));
        let r = check(
            Exclusion::ReadersShare,
            vec![r1.clone(), r2.clone()],
            HashMap::new(),
            &Interventions::default(),
            100 * MS,
            0,
        );
        assert_eq!((r.unsignalled_overlaps, r.token_regressions), (0, 0));
        assert_eq!(r.shared_overlaps, 1);
        // A writer inside with readers: both readers overlapped without a signal.
        let r = check(
            Exclusion::ReadersShare,
            vec![r1.clone(), r2.clone(), w],
            HashMap::new(),
            &Interventions::default(),
            100 * MS,
            0,
        );
        assert_eq!(r.unsignalled_overlaps, 2);
        // Under the exclusive rule, the two readers alone already overlap.
        let r = check(
            Exclusion::Exclusive,
            vec![r1, r2],
            HashMap::new(),
            &Interventions::default(),
            100 * MS,
            0,
        );
        assert_eq!(r.unsignalled_overlaps, 1);
        assert_eq!(
            kind("read-write").unwrap().exclusion,
            Exclusion::ReadersShare
        );
    }

    #[test]
    fn stale_writes_and_lost_updates() {
        let mut a = sec(1, 5, 0, None, Some(10 * MS));
        a.fenced = Some((MS, 2 * MS, true));
        a.unfenced = true;
        let mut b = sec(2, 4, 20 * MS, None, Some(30 * MS));
        b.fenced = Some((21 * MS, 22 * MS, true));
        b.unfenced = true;
        let r = check(
            Exclusion::Exclusive,
            vec![a, b],
            HashMap::new(),
            &Interventions::default(),
            100 * MS,
            1,
        );
        assert_eq!(r.stale_writes_accepted, 1);
        assert_eq!(r.lost_updates_unfenced, 1);
        assert_eq!(r.token_regressions, 1);
    }

    #[test]
    fn lost_updates_on_the_fenced_balance() {
        let write = |pid, token, accepted| {
            let mut s = sec(pid, token, 0, None, Some(10 * MS));
            s.fenced = Some((MS, 2 * MS, accepted));
            s
        };
        let s = vec![write(1, 1, true), write(2, 2, true), write(3, 3, false)];
        assert_eq!(fenced_lost_updates(&s, 2), 0);
        assert_eq!(fenced_lost_updates(&s, 1), 1);
        let r = Report {
            lost_updates_fenced: 1,
            ..Report::default()
        };
        assert!(r.failed() && r.fencing_broken());
    }

    #[test]
    fn parse_round_trip() {
        let dir = std::env::temp_dir().join(format!("distlock-history-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("w.log");
        let mut rec = Recorder::create(&path).unwrap();
        rec.acquired(7, 100);
        rec.lost(7, 150);
        rec.unfenced(7, 155);
        rec.fenced(7, 160, 170, false);
        rec.releasing(7, 200);
        rec.failed("timeout x");
        rec.acquired_shared(9, 300);
        let text = std::fs::read_to_string(&path).unwrap() + "R 9 4"; // torn: ignored
        let (s, e) = parse(42, &text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].lost, Some(150));
        assert_eq!(s[0].fenced, Some((160, 170, false)));
        assert_eq!(s[0].released, Some(200));
        assert!(s[0].unfenced);
        assert_eq!(s[0].unfenced_at, Some(155));
        assert_eq!(e.get("timeout_x"), Some(&1));
        assert_eq!(s[1].released, None);
        assert!(!s[0].shared && s[1].shared);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(now_ns() > 0);
    }
}
