//! The revocations heard while acquisitions were in flight (see `crate::upkeep::revoke`):
//! a revocation that came before an acquisition's reply found no lease to check, so it is
//! remembered until every acquisition in flight when it came has registered its lease (and
//! checked it) or given up.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How many revocations [`Heard`] keeps for the acquisitions in flight; past that the
/// oldest go, and an acquisition that noted less than they cover checks its lease anyway.
pub(crate) const HEARD_MAX: usize = 1024;

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
    pub(crate) fn record(&self, key: Option<&str>) {
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

    /// How many revocations are remembered, and for how many distinct notes in flight.
    #[cfg(test)]
    pub(crate) fn remembered(&self) -> (usize, usize) {
        let log = self.log();
        (log.log.len(), log.in_flight.len())
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

    /// Whether a revocation that may concern a lease just registered was heard since the
    /// attempt that took it was sent: one of a lock `concerns` says is its, of every lock,
    /// or one whose record was dropped for room.
    pub(crate) fn revoked_since(&self, concerns: impl Fn(&str) -> bool) -> bool {
        let at = self.at.load(Ordering::Acquire);
        let log = self.heard.log();
        log.dropped > at
            || log
                .log
                .iter()
                .any(|(n, key)| *n > at && key.as_deref().is_none_or(&concerns))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.heard.log().leave(*self.at.get_mut());
    }
}
