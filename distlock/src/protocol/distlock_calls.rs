//! The calls of distlock's own format, one arm per [`Shape`]: the reentrant, fair and
//! read-write locks' scripts and the semaphore's.

use std::borrow::Cow;
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
    let wait = || wait.as_millis().min(i64::MAX as u128).to_string();
    let nested = hold.nested_arg();
    let mut call = match &keys.shape {
        Shape::Semaphore(sem) if sem.fair => {
            return sem_fair_acquire(keys, sem, hold, lease, wait(), publish)
        }
        Shape::Semaphore(sem) => return sem_acquire(keys, sem, hold, lease),
        Shape::Reentrant => return reentrant_acquire(keys, hold, lease),
        Shape::Fair => Call::on(Script::FairAcquire, keys)
            .arg(hold.owner.hex())
            .arg(millis(lease))
            .arg(wait())
            .arg(hold.level_hex())
            .arg(nested),
        Shape::Read | Shape::Write => Call::on(Script::RwAcquire, keys)
            .arg(hold.owner.hex())
            .arg(millis(lease))
            .arg(rw_mode(&keys.shape))
            .arg(wait())
            .arg(hold.level_hex())
            .arg(nested),
    };
    push_fence(&mut call, keys);
    match (&keys.shape, keys.holder.as_deref()) {
        (Shape::Fair, Some(holder)) => call.arg(since(holder)),
        (Shape::Read | Shape::Write | Shape::Semaphore(_), Some(holder)) => call.arg(holder),
        (Shape::Reentrant | Shape::Fair | Shape::Read | Shape::Write | Shape::Semaphore(_), _) => {
            call
        }
    }
}

/// acquire.lua's call: owner, lease and level, then only the optional arguments it needs
/// (holder information, the hand-off tag and the counter's floor for a fresh
/// acquisition; the nested flag; `hold_at_least`).
fn reentrant_acquire(keys: &LockKeys, hold: Hold, lease: Duration) -> Call {
    let mut call = Call::on(Script::Acquire, keys)
        .arg(hold.owner.hex())
        .arg(millis(lease))
        .arg(hold.level_hex());
    push_fence(&mut call, keys);
    let fresh = !hold.nested;
    optional(
        call,
        [
            keys.holder
                .as_deref()
                .filter(|_| fresh)
                .map(|h| Cow::Owned(since(h))),
            keys.handoff_tag
                .as_deref()
                .filter(|_| fresh)
                .map(Cow::Borrowed),
            hold.nested.then(|| Cow::Borrowed(hold.nested_arg())),
            keys.hold_at_least.map(|d| Cow::Owned(millis(d))),
            keys.seed_floor
                .filter(|_| fresh)
                .map(|f| Cow::Owned(f.get().to_string())),
        ],
    )
}

/// A script's optional arguments, in its order: those after the last one given are left
/// out (every argument costs the server a little on every call), and '' stands for one not
/// given before one that is.
fn optional<const N: usize>(mut call: Call, args: [Option<Cow<'_, str>>; N]) -> Call {
    let given = args.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
    for a in args.into_iter().take(given) {
        call = call.arg(a.unwrap_or(Cow::Borrowed("")));
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
        Shape::Reentrant | Shape::Fair => {
            let call = Call::on(Script::Release, keys)
                .only_hash()
                .arg(hold.owner.hex())
                .arg(&keys.channel)
                .arg(hold.level_hex());
            let may_keep = if hold.undo && !hold.nested {
                // The undo of the acquisition that created the lock (and set its
                // `hold:until`): the job never ran, so the slot is freed.
                Some("undo")
            } else if keys.hold_at_least.is_some() || hold.nested {
                Some("1")
            } else {
                None
            };
            let sharded = match publish {
                Publish::Sharded => Some(publish.verb()),
                Publish::Plain => None,
            };
            // A fair lock's waiters leave no tag in it (they queue): its release always
            // publishes; so does one while waiters of this backend are asleep.
            let always = (!keys.leaves_its_tag() || hold.others_wait).then_some("1");
            optional(
                call,
                [hold.only_level.then_some("1"), always, sharded, may_keep]
                    .map(|a| a.map(Cow::Borrowed)),
            )
        }
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
        r.fence(),
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
