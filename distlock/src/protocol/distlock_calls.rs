//! The calls of distlock's own format, one arm per [`Shape`]: the reentrant, fair and
//! read-write locks' scripts and the semaphore's.

use std::time::Duration;

use crate::protocol::call::Call;
use crate::protocol::keys::{LockKeys, SemKeys, Shape};
use crate::protocol::script::{millis, Publish, Script};
use crate::terms::owner::{Hold, OwnerId};
use crate::LockKind;

/// The acquire call. `wait`: how long the caller may still wait (fair and write locks and
/// fair semaphores queue for that long). A refused fresh acquisition of a lock that hands off leaves its
/// process's tag in the lock (`LockKeys::handoff_tag`, `acquire.lua`).
pub(crate) fn acquire(
    keys: &LockKeys,
    hold: Hold,
    lease: Duration,
    wait: Duration,
    publish: Publish,
) -> Call {
    let wait = wait.as_millis().min(i64::MAX as u128).to_string();
    let nested = hold.nested_arg();
    let mut call = match &keys.shape {
        Shape::Semaphore(sem) if sem.fair => {
            return sem_fair_acquire(keys, sem, hold, lease, wait, publish)
        }
        Shape::Semaphore(sem) => return sem_acquire(keys, sem, hold, lease),
        Shape::Reentrant => Call::on(Script::Acquire, keys)
            .arg(hold.owner.hex())
            .arg(millis(lease))
            .arg(hold.level_hex())
            .arg(nested)
            .arg(keys.hold_at_least.map_or_else(|| "0".to_owned(), millis)),
        Shape::Fair => Call::on(Script::FairAcquire, keys)
            .arg(hold.owner.hex())
            .arg(millis(lease))
            .arg(wait)
            .arg(hold.level_hex())
            .arg(nested),
        Shape::Read | Shape::Write => Call::on(Script::RwAcquire, keys)
            .arg(hold.owner.hex())
            .arg(millis(lease))
            .arg(rw_mode(&keys.shape))
            .arg(wait)
            .arg(hold.level_hex())
            .arg(nested),
    };
    push_fence(&mut call, keys);
    match (&keys.shape, keys.holder.as_deref()) {
        (Shape::Reentrant, _) => {}
        (Shape::Fair, Some(holder)) => return call.arg(since(holder)),
        (Shape::Read | Shape::Write | Shape::Semaphore(_), Some(holder)) => {
            return call.arg(holder)
        }
        (Shape::Fair | Shape::Read | Shape::Write | Shape::Semaphore(_), None) => return call,
    }
    // acquire.lua's optional ARGV[6..8], '' where one before a given one is not given.
    let tag = keys.handoff_tag.as_deref().filter(|_| !hold.nested);
    let floor = keys.seed_floor.filter(|_| !hold.nested);
    if keys.holder.is_some() || tag.is_some() || floor.is_some() {
        call = call.arg(keys.holder.as_deref().map_or_else(String::new, since));
    }
    if tag.is_some() || floor.is_some() {
        call = call.arg(tag.unwrap_or(""));
    }
    if let Some(floor) = floor {
        call = call.arg(floor.get().to_string());
    }
    call
}

/// Holder information as a lock's record keeps it (`record.lua`): `host\tpid\tsite` and
/// `since`, this process's clock in ms now (0 before 1970).
fn since(holder: &str) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{holder}\t{ms}")
}

/// The fencing counter's keys, last of an acquiring call's keys: the counter, and the key's
/// own counter of earlier builds when the counter is another (`fence_prologue.lua`).
fn push_fence(call: &mut Call, keys: &LockKeys) {
    let (fence, own) = keys.counters();
    call.keys.push(fence);
    call.keys.extend(own);
}

fn sem_acquire(keys: &LockKeys, sem: &SemKeys, hold: Hold, lease: Duration) -> Call {
    let mut call = Call::raw(
        Script::SemAcquire,
        vec![keys.hash.clone(), sem.counts.clone()],
        Vec::new(),
    );
    push_fence(&mut call, keys);
    let call = call
        .arg(hold.owner.hex())
        .arg(sem.permits.to_string())
        .arg(sem.limit.to_string())
        .arg(millis(lease));
    match &keys.holder {
        Some(holder) => call.arg(&**holder),
        None => call,
    }
}

fn sem_fair_acquire(
    keys: &LockKeys,
    sem: &SemKeys,
    hold: Hold,
    lease: Duration,
    wait: String,
    publish: Publish,
) -> Call {
    let [queue, deadlines] = keys.extra();
    let mut call = Call::raw(
        Script::SemFairAcquire,
        vec![keys.hash.clone(), sem.counts.clone(), queue, deadlines],
        Vec::new(),
    );
    push_fence(&mut call, keys);
    let call = call
        .arg(hold.owner.hex())
        .arg(sem.permits.to_string())
        .arg(sem.limit.to_string())
        .arg(millis(lease))
        .arg(wait)
        .arg(&keys.channel)
        .arg(publish.verb());
    match &keys.holder {
        Some(holder) => call.arg(&**holder),
        None => call,
    }
}

/// The release call of one level.
pub(crate) fn release(keys: &LockKeys, hold: Hold, publish: Publish) -> Call {
    match &keys.shape {
        Shape::Semaphore(sem) => Call::raw(
            Script::SemRelease,
            vec![keys.hash.clone(), sem.counts.clone()],
            Vec::new(),
        )
        .arg(hold.owner.hex())
        .arg(&keys.channel)
        .arg(publish.verb()),
        Shape::Reentrant | Shape::Fair => Call::on(Script::Release, keys)
            .only_hash()
            .arg(hold.owner.hex())
            .arg(&keys.channel)
            .arg(publish.verb())
            .arg(hold.level_hex())
            .arg(if hold.undo && !hold.nested {
                // The undo of the acquisition that created the lock (and set its
                // `hold:until`): the job never ran, so the slot is freed.
                "undo"
            } else if keys.hold_at_least.is_some() || hold.nested {
                "1"
            } else {
                "0"
            })
            .arg(if hold.only_level { "1" } else { "0" }),
        Shape::Read | Shape::Write => Call::on(Script::RwRelease, keys)
            .arg(hold.owner.hex())
            .arg(rw_mode(&keys.shape))
            .arg(&keys.channel)
            .arg(publish.verb())
            .arg(hold.level_hex()),
    }
}

/// The hand-off call: release `hold` (an outermost hold of a reentrant lock) and, when that
/// frees the lock, grant it to the waiter's fresh acquisition `to` with `lease`, recording
/// `holder` (its `host\tpid\tsite`) when it records holder information. `None` for the shapes
/// that do not hand off (see `crate::lease::handoff`).
pub(crate) fn handoff(
    keys: &LockKeys,
    hold: Hold,
    to: Hold,
    lease: Duration,
    holder: Option<&str>,
    publish: Publish,
) -> Option<Call> {
    match &keys.shape {
        Shape::Reentrant => {}
        Shape::Fair | Shape::Read | Shape::Write | Shape::Semaphore(_) => return None,
    }
    let mut call = Call::raw(Script::Handoff, vec![keys.hash.clone()], Vec::new());
    push_fence(&mut call, keys);
    call = call
        .arg(hold.owner.hex())
        .arg(&keys.channel)
        .arg(publish.verb())
        .arg(hold.level_hex())
        .arg(to.owner.hex())
        .arg(millis(lease))
        .arg(to.level_hex())
        .arg(if hold.only_level { "1" } else { "0" });
    // The new holder's information, when it records it (the old holder's goes with its
    // hold, in the lock's record); this process's tag and the turn: the lock goes free
    // instead when a waiter of another process was refused it a turn ago or more.
    call = call
        .arg(holder.map_or_else(String::new, since))
        .arg(keys.handoff_tag.as_deref().unwrap_or(""))
        .arg(millis(super::TURN));
    Some(call)
}

/// The renew call of one lease.
pub(crate) fn renew(keys: &LockKeys, owner: OwnerId, lease: Duration) -> Call {
    match &keys.shape {
        Shape::Semaphore(sem) => Call::raw(
            Script::SemRenew,
            vec![keys.hash.clone(), sem.counts.clone()],
            Vec::new(),
        )
        .arg(owner.hex())
        .arg(millis(lease)),
        Shape::Reentrant | Shape::Fair => Call::on(Script::Renew, keys)
            .only_hash()
            .arg(owner.hex())
            .arg(millis(lease)),
        Shape::Read | Shape::Write => Call::on(Script::RwRenew, keys)
            .arg(owner.hex())
            .arg(millis(lease))
            .arg(rw_mode(&keys.shape)),
    }
}

/// The call by which a fair or write waiter (or a fair semaphore's) leaves the queue;
/// `None` for the shapes that do not queue.
pub(crate) fn cancel(keys: &LockKeys, owner: OwnerId, publish: Publish) -> Option<Call> {
    let call = match &keys.shape {
        Shape::Fair => Call::on(Script::FairCancel, keys),
        Shape::Write => Call::on(Script::RwCancel, keys),
        Shape::Semaphore(sem) if sem.fair => {
            Call::raw(Script::SemFairCancel, keys.extra().into(), Vec::new())
        }
        Shape::Reentrant | Shape::Read | Shape::Semaphore(_) => return None,
    };
    Some(call.arg(owner.hex()).arg(&keys.channel).arg(publish.verb()))
}

/// Delete a lock whoever holds it (with the other keys of fair and read-write locks, and the
/// holders' information, which is in the lock's record or hash).
pub(crate) fn force_release(keys: &LockKeys, publish: Publish) -> Call {
    let mut call = Call::on(Script::ForceRelease, keys)
        .arg(&keys.channel)
        .arg(publish.verb())
        .arg("");
    if let Shape::Semaphore(sem) = &keys.shape {
        call.keys.push(sem.counts.clone());
    }
    call
}

/// The read-only call that returns everything about the locks of every kind on `key`
/// (`inspect.lua`).
pub(crate) fn inspect(prefix: &str, key: &str, cluster: bool) -> Result<Call, crate::LockError> {
    let kinds = |kind| LockKeys::for_kind(prefix, key.to_owned(), kind);
    let (r, fair, rw) = (
        kinds(LockKind::Reentrant)?,
        kinds(LockKind::Fair)?,
        kinds(LockKind::Read)?,
    );
    let sem = LockKeys::semaphore(prefix, key.to_owned(), 1, 1, false)?;
    let counts = match &sem.shape {
        Shape::Semaphore(s) => s.counts.clone(),
        // Not made by LockKeys::semaphore; its naming, for completeness.
        Shape::Reentrant | Shape::Fair | Shape::Read | Shape::Write => format!("{}:n", sem.hash),
    };
    let [queue, waiters] = fair.extra();
    let [readers, writers] = rw.extra();
    let [sem_queue, sem_waiters] = LockKeys::semaphore(prefix, key.to_owned(), 1, 1, true)?.extra();
    let keys = vec![
        r.hash.clone(),
        fair.hash.clone(),
        queue,
        waiters,
        rw.hash.clone(),
        readers,
        writers,
        r.fence.clone(),
        sem.hash.clone(),
        counts,
        sem_queue,
        sem_waiters,
    ];
    let mut args = [&r.channel, &fair.channel, &rw.channel, &sem.channel]
        .map(|c| c.as_bytes().to_vec())
        .to_vec();
    args.push(if cluster {
        b"1".to_vec()
    } else {
        b"0".to_vec()
    });
    Ok(Call::raw(Script::Inspect, keys, args))
}

/// `read` or `write`, as the read-write scripts take it.
fn rw_mode(shape: &Shape) -> &'static str {
    match shape {
        Shape::Write => "write",
        Shape::Read | Shape::Reentrant | Shape::Fair | Shape::Semaphore(_) => "read",
    }
}
