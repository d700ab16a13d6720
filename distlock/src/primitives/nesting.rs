//! The nested and sibling rules of the acquire engine: which of the task's holds a nested
//! acquisition goes under (re-entry across kinds, docs/design.md "Reentrancy"), and the
//! turn that sibling futures of one task take on that hold.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::lease::state::LeaseState;
use crate::protocol::keys::LockKeys;
use crate::terms::owner::{Enclosing, Hold};
use crate::{LockError, LockKind};

/// A nested acquisition entered: the hold it sends, the enclosing hold (its token answers a
/// re-entry; its loss answers "outer lost"), the enclosing hold's permit while a sibling
/// future cannot take it, and the error to answer should the first attempt find the lock
/// held (a write inside the task's own read hold).
pub(super) struct Entered {
    pub(super) hold: Hold,
    pub(super) outer: Option<Arc<LeaseState>>,
    pub(super) permit: Option<OwnedSemaphorePermit>,
    pub(super) upgrade: Option<LockError>,
}

/// Enter the task's enclosing hold of lock `keys`, if any: an acquisition nested in a hold
/// of the same lock counts a level of it (the scripts answer "outer lost", creating
/// nothing, when the hold is gone), and sibling futures of the task take turns (the hold's
/// one permit, within the wait until `deadline`; `Err(None)` when it passes first). A
/// semaphore has no enclosing hold: each acquisition is a holder of its own.
pub(super) async fn enter(
    backend: &Backend,
    keys: &LockKeys,
    deadline: Instant,
) -> Result<Entered, Option<LockError>> {
    let (outer, under, upgrade) = match keys.shape.lock_kind() {
        Some(kind) => enclosing(backend, keys, kind).map_err(Some)?,
        None => (None, None, None),
    };
    let mut permit = None;
    let hold = match (&outer, under) {
        (Some(o), Some(under)) => {
            match tokio::time::timeout_at(deadline, o.nested().acquire_owned()).await {
                Ok(Ok(p)) => permit = Some(p),
                _ => return Err(None),
            }
            if o.is_lost() {
                return Err(Some(o.lost_error()));
            }
            Hold::nested_in(o.owner, under)
        }
        _ => Hold::fresh(),
    };
    Ok(Entered {
        hold,
        outer,
        permit,
        upgrade,
    })
}

/// The task's enclosing hold a nested acquisition of `kind` (lock `keys`) goes under, and
/// how: the rule of re-entry across kinds (docs/design.md, "Reentrancy"). Among the task's
/// holds of this name on this backend, innermost first:
///
/// 1. a reentrant or fair lock: the innermost hold of the same kind, re-entered
///    (`Enclosing::Same`) wherever it is in the nesting — holds of other kinds in between are
///    other locks, and do not hide it; in Redisson's format a reentrant and a fair lock of
///    one name are one hash, one lock: the innermost hold of either;
/// 2. a read or write lock: the innermost hold of the read-write lock, in either mode
///    (holds of other kinds in between do not hide it): of the same mode, re-entered; a
///    write hold for a read, which goes under it (`Enclosing::Write`, a downgrade); a read
///    hold for a write: under it (`Enclosing::Read`) when the task holds the write lock
///    further out, else refused after one attempt (`NestedKind`; `LeaseLost` if that
///    attempt finds the read hold gone): there is no upgrade, and the writer would wait
///    for its own task's read hold to leave;
/// 3. in Redisson's format, a hold of the other layout on the same hash (a reentrant or
///    fair lock and a read-write lock of one name): refused at once (`NestedKind`);
/// 4. else (holds of other kinds only, which are other locks with keys of their own): a
///    fresh acquisition, with an owner of its own, as from a task that holds nothing of the
///    name. Sharing the innermost hold's owner would let a script that re-enters by owner
///    (a write lock finding the owner writing) or the memory backend take a second
///    acquisition of that other lock as a re-entry: two `join!` siblings inside at once.
///
/// `(None, None, None)` when the task holds nothing of this name, or only other locks. The third is the error
/// to answer when the first attempt finds the lock held (the write inside the task's own
/// read hold).
fn enclosing(backend: &Backend, keys: &LockKeys, kind: LockKind) -> Result<Found, LockError> {
    let holds = crate::lease::context::holds(&backend.name, &keys.user);
    if holds.is_empty() {
        return Ok((None, None, None));
    }
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
            let same = if keys.format.is_redisson() {
                holds.iter().find(|h| {
                    h.keys.shape.is(LockKind::Reentrant) || h.keys.shape.is(LockKind::Fair)
                })
            } else {
                of(kind)
            };
            if let Some(same) = same {
                return Ok((Some(same.clone()), Some(Enclosing::Same), None));
            }
        }
        // A read-write lock is one lock in two modes: the innermost hold of either mode.
        LockKind::Read | LockKind::Write => {
            if let Some(rw) = holds.iter().find(|h| h.keys.shape.is_rw()) {
                let under = match (rw.keys.shape.lock_kind(), kind) {
                    (Some(held), asked) if held == asked => Enclosing::Same,
                    (_, LockKind::Read) => Enclosing::Write,
                    // A write inside the task's read hold re-enters only when the task
                    // holds the write lock further out (the script finds the owner
                    // writing); else it could only wait for its own read hold.
                    _ if of(LockKind::Write).is_some() => Enclosing::Read,
                    // Else one attempt finds whether the read hold is still there
                    // ("outer lost" if not); refused by it, the call fails at once.
                    _ => {
                        let e = refused(
                            rw,
                            "a read hold is not upgraded: the write lock waits until every reader has left, this task's own read hold included (take the write lock first: a read inside it re-enters)",
                        );
                        return Ok((Some(rw.clone()), Some(Enclosing::Read), Some(e)));
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
    Ok((None, None, None))
}

/// The hold a nested acquisition goes under (or takes its owner from), how, and the error
/// to answer should the first attempt find the lock held (see [`enclosing`]).
type Found = (
    Option<Arc<LeaseState>>,
    Option<Enclosing>,
    Option<LockError>,
);
