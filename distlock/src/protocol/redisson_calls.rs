//! The calls of Redisson's format (`protocol = "redisson"`), one arm per lock kind; the
//! scripts are `protocol/redisson/*.lua`. A semaphore has no Redisson format (such a backend
//! refuses it before anything is sent), so these take a [`LockKind`], not a shape.

use std::time::Duration;

use crate::protocol::call::Call;
use crate::protocol::keys::{LockKeys, RedissonKeys};
use crate::protocol::script::{millis, Publish, Script};
use crate::terms::owner::{Hold, OwnerId};
use crate::LockKind;

/// Redisson's `LockPubSub.UNLOCK_MESSAGE`, as the text the scripts publish.
const UNLOCK_MESSAGE: &str = "0";

/// Redisson's `LockPubSub.READ_UNLOCK_MESSAGE` (every waiter of a client wakes): what its
/// write lock's release publishes.
const READ_UNLOCK_MESSAGE: &str = "1";

/// How long an unlock latch lives (Redisson's default: `(timeout 3000 + retry delay of 1000
/// to 2000) * 4 attempts` = 16 to 20 s); the caller deletes it once answered.
pub(crate) const LATCH_TTL: Duration = Duration::from_secs(20);

/// The acquire call. Every kind draws its fencing token from `redisson_lock_token:{name}`
/// (the reentrant lock as `RFencedLock` does); a nested acquisition only re-enters (reply 3
/// when the owner's enclosing hold is gone: its field, or for a read-write lock the field
/// of the mode it is nested in, `Hold::nested_arg`).
pub(crate) fn acquire(
    keys: &LockKeys,
    kind: LockKind,
    r: &RedissonKeys,
    hold: Hold,
    lease: Duration,
    wait: Duration,
) -> Call {
    let field = hold.owner.redisson_field();
    let nested = hold.nested_arg();
    match kind {
        LockKind::Reentrant => {
            let call = Call::raw(
                Script::RedissonLock,
                vec![keys.hash.clone(), keys.fence()],
                Vec::new(),
            )
            .arg(millis(lease))
            .arg(field);
            if hold.nested {
                call.arg("1")
            } else {
                call
            }
        }
        LockKind::Fair => {
            let [queue, deadlines] = keys.extra();
            Call::raw(
                Script::RedissonFairLock,
                vec![keys.hash.clone(), queue, deadlines, keys.fence()],
                Vec::new(),
            )
            .arg(millis(lease))
            .arg(field)
            .arg(millis(r.allowance))
            .arg(if wait.is_zero() { "try" } else { "wait" })
            .arg(nested)
        }
        LockKind::Read => {
            let call = Call::raw(
                Script::RedissonReadLock,
                vec![keys.hash.clone(), rw_timeouts(keys, &field), keys.fence()],
                Vec::new(),
            )
            .arg(millis(lease))
            .arg(&field)
            .arg(format!("{field}:write"));
            if hold.nested {
                call.arg(nested)
            } else {
                call
            }
        }
        LockKind::Write => {
            let call = Call::raw(
                Script::RedissonWriteLock,
                vec![keys.hash.clone(), keys.fence()],
                Vec::new(),
            )
            .arg(millis(lease))
            .arg(format!("{field}:write"));
            if hold.nested {
                call.arg(nested).arg(&field)
            } else {
                call
            }
        }
    }
}

/// The release call of one hold.
pub(crate) fn release(
    keys: &LockKeys,
    kind: LockKind,
    r: &RedissonKeys,
    hold: Hold,
    publish: Publish,
) -> Call {
    let latch = keys.redisson_latch(&hold.redisson_request());
    let field = hold.owner.redisson_field();
    let latch_ttl = LATCH_TTL.as_millis().to_string();
    match kind {
        LockKind::Reentrant => Call::raw(
            Script::RedissonUnlock,
            vec![keys.hash.clone(), keys.channel.clone(), latch],
            Vec::new(),
        )
        .arg(UNLOCK_MESSAGE)
        .arg(millis(r.lease))
        .arg(field)
        .arg(publish.verb())
        .arg(latch_ttl),
        LockKind::Fair => {
            let [queue, deadlines] = keys.extra();
            Call::raw(
                Script::RedissonFairUnlock,
                vec![
                    keys.hash.clone(),
                    queue,
                    deadlines,
                    keys.channel.clone(),
                    latch,
                ],
                Vec::new(),
            )
            .arg(UNLOCK_MESSAGE)
            .arg(millis(r.lease))
            .arg(field)
            .arg(publish.verb())
            .arg(latch_ttl)
        }
        LockKind::Read => Call::raw(
            Script::RedissonReadUnlock,
            vec![
                keys.hash.clone(),
                keys.channel.clone(),
                rw_timeouts(keys, &field),
                keys.redisson_rw_stem(),
                latch,
            ],
            Vec::new(),
        )
        .arg(UNLOCK_MESSAGE)
        .arg(field)
        .arg(publish.verb())
        .arg(latch_ttl),
        LockKind::Write => Call::raw(
            Script::RedissonWriteUnlock,
            vec![keys.hash.clone(), keys.channel.clone(), latch],
            Vec::new(),
        )
        .arg(READ_UNLOCK_MESSAGE)
        .arg(millis(r.lease))
        .arg(format!("{field}:write"))
        .arg(publish.verb())
        .arg(latch_ttl),
    }
}

/// The renew call of one lease.
pub(crate) fn renew(keys: &LockKeys, kind: LockKind, owner: OwnerId, lease: Duration) -> Call {
    let field = owner.redisson_field();
    match kind {
        LockKind::Reentrant | LockKind::Fair => {
            Call::raw(Script::RedissonRenew, vec![keys.hash.clone()], Vec::new())
                .arg(millis(lease))
                .arg(field)
        }
        LockKind::Write => Call::raw(Script::RedissonRenew, vec![keys.hash.clone()], Vec::new())
            .arg(millis(lease))
            .arg(format!("{field}:write")),
        LockKind::Read => Call::raw(
            Script::RedissonReadRenew,
            vec![keys.hash.clone(), keys.redisson_rw_stem()],
            Vec::new(),
        )
        .arg(millis(lease))
        .arg(field),
    }
}

/// The call by which a fair waiter leaves the queue; only Redisson's fair lock queues (its
/// write lock has no queue).
pub(crate) fn cancel(
    keys: &LockKeys,
    kind: LockKind,
    r: &RedissonKeys,
    owner: OwnerId,
    publish: Publish,
) -> Option<Call> {
    match kind {
        LockKind::Fair => {
            let [queue, deadlines] = keys.extra();
            Some(
                Call::raw(
                    Script::RedissonFairCancel,
                    vec![queue, deadlines, keys.hash.clone(), keys.channel.clone()],
                    Vec::new(),
                )
                .arg(owner.redisson_field())
                .arg(millis(r.allowance))
                .arg(UNLOCK_MESSAGE)
                .arg(publish.verb()),
            )
        }
        LockKind::Reentrant | LockKind::Read | LockKind::Write => None,
    }
}

/// What Redisson's `forceUnlock` does: the fair lock (`RedissonFairLock.forceUnlockAsync`)
/// deletes the hash and wakes the queue's head; the others (`RedissonLock.forceUnlockAsync`)
/// delete the hash and publish `UNLOCK_MESSAGE` (the read-write lock: on its channel,
/// whatever its mode).
pub(crate) fn force_release(keys: &LockKeys, kind: LockKind, publish: Publish) -> Call {
    match kind {
        LockKind::Fair => {
            let [queue, deadlines] = keys.extra();
            Call::raw(
                Script::RedissonFairForceUnlock,
                vec![keys.hash.clone(), queue, deadlines, keys.channel.clone()],
                Vec::new(),
            )
            .arg(UNLOCK_MESSAGE)
            .arg(publish.verb())
        }
        LockKind::Reentrant | LockKind::Read | LockKind::Write => {
            Call::raw(Script::ForceRelease, vec![keys.hash.clone()], Vec::new())
                .arg(&keys.channel)
                .arg(publish.verb())
                .arg(UNLOCK_MESSAGE)
        }
    }
}

/// A reader's timeout key prefix `{name}:<field>:rwlock_timeout` (hold i: `<prefix>:<i>`).
fn rw_timeouts(keys: &LockKeys, field: &str) -> String {
    format!("{}:{field}:rwlock_timeout", keys.redisson_rw_stem())
}
