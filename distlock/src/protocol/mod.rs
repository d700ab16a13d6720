//! The lock protocol on Redis: the Lua scripts, the calls that run them and what their
//! replies mean.
//!
//! Each script is a `.lua` file beside this one, headed by the KEYS and ARGV it takes and
//! what it returns; [`Script`] lists every one of them once (the self-check's probe is
//! `check/probe.lua`). Every script runs atomically
//! and touches the keys of one lock only, which share one hash tag (one cluster slot; see
//! `keys.rs`). A lock is a hash `owner id -> reentrancy count` whose expiry is the lease; a
//! companion counter gives fencing tokens; a release that frees a lock publishes on the
//! lock's channel, with the verb the topology uses ([`Publish`]). Fair and read-write locks
//! have keys of their own (`fair_acquire.lua`, `rw_prologue.lua`).
//!
//! Scripts run as the functions of one library (`FCALL`) on a server that takes it, else by
//! EVALSHA, falling back to EVAL after `NOSCRIPT` (a restarted server or a promoted replica
//! has an empty script cache): [`exec`] is the one place that does it.

pub(crate) mod call;
mod distlock_calls;
pub(crate) mod exec;
pub(crate) mod keys;
mod redisson_calls;
pub(crate) mod script;
pub(crate) mod slot;

use std::time::Duration;

pub(crate) use call::Call;
pub(crate) use script::{Attempt, HandedOff, Publish, Released, Script};

use crate::protocol::keys::{Format, LockKeys, RedissonKeys, Shape};
use crate::terms::owner::{Hold, OwnerId};
use crate::LockKind;

/// Which builder serves `keys`: Redisson's, with its lock kind, or distlock's. A semaphore
/// has only distlock's format (a `protocol = "redisson"` backend refuses semaphores before
/// anything is sent).
fn redisson(keys: &LockKeys) -> Option<(LockKind, &RedissonKeys)> {
    match (&keys.format, &keys.shape) {
        (Format::Distlock, _) | (Format::Redisson(_), Shape::Semaphore(_)) => None,
        (Format::Redisson(r), Shape::Reentrant | Shape::Fair | Shape::Read | Shape::Write) => {
            keys.shape.lock_kind().map(|kind| (kind, &**r))
        }
    }
}

/// The acquire call for `keys`. `wait`: how long the caller may still wait (fair and write
/// locks and fair semaphores queue for that long); `publish`: how a fair semaphore's
/// admitted head wakes the next waiter.
pub(crate) fn acquire(
    keys: &LockKeys,
    hold: Hold,
    lease: Duration,
    wait: Duration,
    publish: Publish,
) -> Call {
    match redisson(keys) {
        Some((kind, r)) => redisson_calls::acquire(keys, kind, r, hold, lease, wait),
        None => distlock_calls::acquire(keys, hold, lease, wait, publish),
    }
}

/// The release call of one level (one hold).
pub(crate) fn release(keys: &LockKeys, hold: Hold, publish: Publish) -> Call {
    match redisson(keys) {
        Some((kind, r)) => redisson_calls::release(keys, kind, r, hold, publish),
        None => distlock_calls::release(keys, hold, publish),
    }
}

/// The hand-off call (release `hold`, and when that frees the lock, grant it to the local
/// waiter's acquisition `to`), or `None` where there is no hand-off: Redisson's format
/// (its own clients take the lock on the PUBLISH of a release, and must keep seeing one),
/// and every shape but the reentrant lock (a fair lock's order is kept in Redis across
/// processes; read-write locks and semaphores admit several holders). The other rules —
/// quorum backends, run-once jobs — are `crate::lease::handoff::eligible`'s and the
/// backend's.
pub(crate) fn handoff(
    keys: &LockKeys,
    hold: Hold,
    to: Hold,
    lease: Duration,
    holder: Option<&str>,
    publish: Publish,
) -> Option<Call> {
    match redisson(keys) {
        Some(_) => None,
        None => distlock_calls::handoff(keys, hold, to, lease, holder, publish),
    }
}

/// How long a waiter of another process, once refused, lets this process hand the lock on
/// among its own waiters before a hand-off frees it for that waiter instead
/// (`handoff.lua`, the [`handoff`] call's last argument): a hot key shared by processes
/// changes process at most once per turn (each change costs a PUBLISH, a wake-up and an
/// acquire, about half a millisecond here), and a waiter elsewhere waits at most about a
/// turn longer than it would for a lock that is not handed on.
pub(crate) const TURN: Duration = Duration::from_millis(20);

/// The renew call of one lease.
pub(crate) fn renew(keys: &LockKeys, owner: OwnerId, lease: Duration) -> Call {
    match redisson(keys) {
        Some((kind, _)) => redisson_calls::renew(keys, kind, owner, lease),
        None => distlock_calls::renew(keys, owner, lease),
    }
}

/// The call by which a queued waiter leaves the queue; `None` for what does not queue.
pub(crate) fn cancel(keys: &LockKeys, owner: OwnerId, publish: Publish) -> Option<Call> {
    match redisson(keys) {
        Some((kind, r)) => redisson_calls::cancel(keys, kind, r, owner, publish),
        None => distlock_calls::cancel(keys, owner, publish),
    }
}

/// Delete a lock whoever holds it, and publish its name on the backend-wide `revocation`
/// channel (see [`revocation_channel`]).
pub(crate) fn force_release(keys: &LockKeys, publish: Publish, revocation: &str) -> Call {
    match redisson(keys) {
        Some((kind, _)) => redisson_calls::force_release(keys, kind, publish).arg(revocation),
        None => {
            let call = distlock_calls::force_release(keys, publish).arg(revocation);
            // force_release.lua's ARGV[5]: one semaphore holder only.
            match &keys.shape {
                Shape::Semaphore(sem) => match &sem.only_holder {
                    Some(holder) => call.arg(holder.as_str()),
                    None => call,
                },
                Shape::Reentrant | Shape::Fair | Shape::Read | Shape::Write => call,
            }
        }
    }
}

/// The backend-wide revocation channel of the backends with key prefix `prefix`: a forced
/// release publishes the name of the lock it deleted there, and every backend's
/// subscriber listens (`crate::upkeep::revoke`). A plain channel (not sharded): on a
/// cluster one subscription on any node hears the forced releases of every slot.
pub(crate) fn revocation_channel(prefix: &str) -> String {
    format!("{prefix}__revoked")
}

/// The read-only call that returns everything about the locks of every kind on `key`.
/// `cluster`: the server is a cluster node, asked for its own address.
pub(crate) fn inspect(prefix: &str, key: &str, cluster: bool) -> Result<Call, crate::LockError> {
    distlock_calls::inspect(prefix, key, cluster)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn scripts_check_the_same_bounds_as_the_builder() {
        let lease = format!("lease > {}", crate::lease::policy::MAX_LEASE.as_millis());
        let wait = format!("wait > {}", crate::lease::policy::MAX_WAIT.as_millis());
        for s in [
            Script::Acquire,
            Script::Handoff,
            Script::Renew,
            Script::RwRenew,
            Script::SemAcquire,
            Script::SemRenew,
        ] {
            assert!(s.source().contains(&lease), "{s:?} checks {lease}");
        }
        for s in [
            Script::FairAcquire,
            Script::RwAcquire,
            Script::SemFairAcquire,
        ] {
            assert!(s.source().contains(&lease), "{s:?} checks {lease}");
            assert!(s.source().contains(&wait), "{s:?} checks {wait}");
        }
    }

    #[test]
    fn semaphore_calls_use_the_semaphore_scripts_and_keys() {
        assert_eq!(
            crate::__private::scripts::SEM_ACQUIRE,
            Script::SemAcquire.source()
        );
        assert_eq!(
            crate::__private::scripts::SEM_RELEASE,
            Script::SemRelease.source()
        );
        let keys = LockKeys::semaphore("lock:", "k".into(), 2, 5, false).unwrap();
        let hold = Hold::fresh();
        let a = acquire(
            &keys,
            hold,
            Duration::from_secs(30),
            Duration::ZERO,
            Publish::Plain,
        );
        assert_eq!(a.script, Script::SemAcquire);
        assert_eq!(
            a.keys,
            vec!["lock:{k}:sem", "lock:{k}:sem:n", "lock:{k}:fence"]
        );
        assert_eq!(
            a.args[1..],
            [b"2".to_vec(), b"5".to_vec(), b"30000".to_vec()]
        );
        let pair = |a, b| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        assert_eq!(a.attempt(&pair(1, 9)), Ok(Attempt::Acquired { token: 9 }));
        assert_eq!(
            a.attempt(&pair(0, 20)),
            Ok(Attempt::Held {
                ttl: Some(Duration::from_millis(20))
            })
        );
        let r = release(&keys, hold, Publish::Sharded);
        assert_eq!(r.script, Script::SemRelease);
        assert_eq!(r.args[1], b"lock:{k}:sem:released");
        assert_eq!(r.args[2], b"spublish");
        assert_eq!(r.released(&Value::Int(0)), Ok(Released::Freed));
        assert_eq!(r.released(&Value::Int(-1)), Ok(Released::NotHeld));
        let w = renew(&keys, hold.owner, Duration::from_secs(1));
        assert_eq!(w.script, Script::SemRenew);
        assert_eq!(w.keys, vec!["lock:{k}:sem", "lock:{k}:sem:n"]);
        assert_eq!(w.args[1], b"1000");
    }

    #[test]
    fn every_script_is_headed_by_its_keys_and_argv() {
        for s in Script::ALL {
            let src = s.source();
            assert!(src.starts_with("--"), "{s:?}");
            assert!(src.contains("KEYS[1]"), "{s:?} names its keys");
            assert_eq!(s.sha().len(), 40);
        }
    }

    #[test]
    fn the_library_names_every_script_and_defines_the_shared_helpers_once() {
        let library = &script::LIBRARY.source;
        assert!(library.starts_with("#!lua name=distlock_"));
        for s in Script::ALL {
            let registered = format!("function_name='{}'", s.function());
            assert_eq!(library.matches(&registered).count(), 1, "{s:?}");
        }
        for helper in [
            "local function read_record(",
            "local function release_level(",
        ] {
            assert_eq!(library.matches(helper).count(), 1, "{helper}");
        }
    }

    #[test]
    fn the_publish_verb_is_passed_in() {
        let keys = LockKeys::new("lock:", "k".into()).unwrap();
        let hold = Hold::fresh();
        let plain = release(&keys, hold, Publish::Plain);
        let sharded = release(&keys, hold, Publish::Sharded);
        assert_eq!(
            plain.args.len(),
            3,
            "owner, channel, level: the optional ones left out"
        );
        assert_eq!(
            sharded.args[3..],
            [b"".to_vec(), b"".to_vec(), b"spublish".to_vec()]
        );
        let fair = LockKeys::for_kind("lock:", "k".into(), LockKind::Fair).unwrap();
        assert_eq!(
            release(&fair, hold, Publish::Plain).args[3..],
            [b"".to_vec(), b"1".to_vec()],
            "a fair lock's release always publishes"
        );
        assert_eq!(plain.keys, vec!["lock:{k}".to_string()]);
        let only = release(
            &keys,
            Hold {
                only_level: true,
                ..hold
            },
            Publish::Plain,
        );
        assert_eq!(
            only.args[3..],
            [b"1".to_vec()],
            "the owner's only level (Hold::only_level)"
        );
        assert!(
            !hold.undoing().only_level,
            "an undo is never the only level"
        );
    }

    #[test]
    fn the_handoff_call_is_for_distlocks_reentrant_lock_only() {
        let d = Duration::from_secs(5);
        let (old, new) = (Hold::fresh(), Hold::fresh());
        let mut keys = LockKeys::new("lock:", "k".into()).unwrap();
        let call = handoff(&keys, old, new, d, None, Publish::Sharded).unwrap();
        assert_eq!(call.script, Script::Handoff);
        assert_eq!(call.keys, vec!["lock:{k}", "lock:{k}:fence"]);
        assert_eq!(call.args[2], b"spublish");
        assert_eq!(call.args[4], new.owner.hex());
        assert_eq!(call.args[5], b"5000");
        assert_eq!(call.args[6], new.level_hex().as_bytes());
        assert_eq!(call.args[7], b"0", "not known to be the owner's only level");
        assert_eq!(
            call.args.len(),
            11,
            "holder, tag and turn: always 11 arguments"
        );
        assert_eq!(call.args[9], b"", "no tag: an empty 10th argument");
        assert_eq!(
            call.args[10],
            TURN.as_millis().to_string().as_bytes(),
            "the turn in ms"
        );
        assert_eq!(
            call.args[8], b"",
            "no holder information: an empty 9th argument"
        );
        let only = Hold {
            only_level: true,
            ..old
        };
        let call_only = handoff(&keys, only, new, d, None, Publish::Plain).unwrap();
        assert_eq!(
            call_only.args[7], b"1",
            "the owner's only level (Hold::only_level)"
        );
        let with_info = handoff(&keys, old, new, d, Some("h\t1\ts"), Publish::Plain).unwrap();
        assert_eq!(
            with_info.keys.len(),
            2,
            "the information is in the lock's record"
        );
        let info = String::from_utf8(with_info.args[8].clone()).unwrap();
        assert!(info.starts_with("h\t1\ts\t"), "{info:?}: with since, in ms");
        assert!(info.rsplit('\t').next().unwrap().parse::<u64>().unwrap() > 0);
        keys = keys.with_holder("h\t2\tt".into());
        let old_records = handoff(&keys, old, new, d, None, Publish::Plain).unwrap();
        assert_eq!(old_records.keys.len(), 2);
        assert_eq!(
            old_records.args[8], b"",
            "the old entry goes with its hold; no new one"
        );
        // This process's tag: the lock goes free instead for a waiter of another process.
        keys.handoff_tag = Some("00ab".into());
        let tagged = handoff(&keys, old, new, d, None, Publish::Plain).unwrap();
        assert_eq!(tagged.args[8..10], [b"".to_vec(), b"00ab".to_vec()]);
        let refused = acquire(&keys, old, d, Duration::ZERO, Publish::Plain);
        assert!(refused.args[3].starts_with(b"h\t2\tt\t"), "with since");
        assert_eq!(refused.args[4..], [b"00ab".to_vec()]);
        keys.holder = None;
        let refused = acquire(&keys, old, d, Duration::ZERO, Publish::Plain);
        assert_eq!(refused.args[3..], [b"".to_vec(), b"00ab".to_vec()]);
        let nested = acquire(
            &keys,
            Hold::nested(old.owner),
            d,
            Duration::ZERO,
            Publish::Plain,
        );
        assert_eq!(
            nested.args[3..],
            [b"".to_vec(), b"".to_vec(), b"1".to_vec()],
            "a nested acquisition never waits: no tag"
        );
        let pair = |a, b| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        assert_eq!(call.handed_off(&pair(4, 9)), Ok(HandedOff::To { token: 9 }));
        assert_eq!(
            call.handed_off(&Value::Int(0)),
            Ok(HandedOff::Released(Released::Freed))
        );
        assert_eq!(
            call.handed_off(&Value::Int(-1)),
            Ok(HandedOff::Released(Released::NotHeld))
        );
        assert!(call.handed_off(&pair(4, -1)).is_err());
        let fair = LockKeys::for_kind("lock:", "k".into(), LockKind::Fair).unwrap();
        assert!(handoff(&fair, old, new, d, None, Publish::Plain).is_none());
        let redisson = LockKeys::redisson("k".into(), LockKind::Reentrant, d).unwrap();
        assert!(handoff(&redisson, old, new, d, None, Publish::Plain).is_none());
    }

    #[test]
    fn an_undo_releases_with_its_hold_until() {
        let mut keys = LockKeys::new("lock:", "k".into()).unwrap();
        keys.hold_at_least = Some(Duration::from_secs(5));
        let hold = Hold::fresh();
        let flag = |h: Hold| release(&keys, h, Publish::Plain).args[6].clone();
        assert_eq!(flag(hold), b"1", "a release keeps hold:until");
        assert_eq!(flag(hold.undoing()), b"undo", "an undo frees the slot");
        let nested = Hold::nested(hold.owner);
        assert_eq!(
            flag(nested.undoing()),
            b"1",
            "a nested undo keeps the outer's"
        );
    }

    #[test]
    fn redisson_calls_use_redissons_keys_and_fields() {
        let keys = LockKeys::redisson(
            "order:42".into(),
            LockKind::Reentrant,
            Duration::from_secs(30),
        )
        .unwrap();
        let hold = Hold::fresh();
        let field = hold.owner.redisson_field();
        let a = acquire(
            &keys,
            hold,
            Duration::from_secs(30),
            Duration::ZERO,
            Publish::Plain,
        );
        assert_eq!(a.script, Script::RedissonLock);
        assert_eq!(a.keys, vec!["order:42", "redisson_lock_token:{order:42}"]);
        assert_eq!(a.args, vec![b"30000".to_vec(), field.clone().into_bytes()]);
        let nested = acquire(
            &keys,
            Hold::nested(hold.owner),
            Duration::from_secs(1),
            Duration::ZERO,
            Publish::Plain,
        );
        assert_eq!(nested.args[2], b"1", "only re-enter");
        let pair = |a, b| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        assert_eq!(nested.attempt(&pair(3, 0)), Ok(Attempt::OuterLost));
        assert_eq!(a.attempt(&pair(1, 9)), Ok(Attempt::Acquired { token: 9 }));

        let r = release(&keys, hold, Publish::Sharded);
        assert_eq!(r.script, Script::RedissonUnlock);
        assert_eq!(
            r.keys,
            vec![
                "order:42".to_string(),
                "redisson_lock__channel:{order:42}".to_string(),
                format!(
                    "redisson_unlock_latch:{{order:42}}:{}",
                    hold.redisson_request()
                ),
            ]
        );
        assert_eq!(r.args[0], b"0", "UNLOCK_MESSAGE");
        assert_eq!(r.args[2], field.as_bytes());
        assert_eq!(r.args[3], b"spublish");
        assert_eq!(r.released(&Value::Int(1)), Ok(Released::Freed));
        assert_eq!(r.released(&Value::Int(0)), Ok(Released::StillHeld));
        assert_eq!(r.released(&Value::Int(-1)), Ok(Released::NotHeld));
        assert!(r.released(&Value::Nil).is_err());
        // a retry of the same release carries the same latch
        assert_eq!(release(&keys, hold, Publish::Sharded).keys, r.keys);

        let w = renew(&keys, hold.owner, Duration::from_secs(30));
        assert_eq!(w.script, Script::RedissonRenew);
        assert_eq!(w.keys, vec!["order:42"]);
        assert_eq!(w.args[1], field.as_bytes());
        let f = force_release(&keys, Publish::Plain, "lock:__revoked");
        assert_eq!(f.keys, vec!["order:42"]);
        assert_eq!(f.args[2], b"0");
        assert_eq!(f.args[3], b"lock:__revoked");
    }

    #[test]
    fn redisson_fair_and_rw_calls_use_redissons_names() {
        let d = Duration::from_secs(30);
        let hold = Hold::fresh();
        let field = hold.owner.redisson_field();
        let latch = format!("redisson_unlock_latch:{{o}}:{}", hold.redisson_request());
        let mut fair = LockKeys::redisson("o".into(), LockKind::Fair, d).unwrap();
        if let Format::Redisson(r) = &mut fair.format {
            r.allowance = Duration::from_secs(5);
        }
        let a = acquire(&fair, hold, d, Duration::from_secs(5), Publish::Plain);
        assert_eq!(a.script, Script::RedissonFairLock);
        assert_eq!(
            a.keys,
            vec![
                "o",
                "redisson_lock_queue:{o}",
                "redisson_lock_timeout:{o}",
                "redisson_lock_token:{o}"
            ]
        );
        assert_eq!(a.args[1], field.as_bytes());
        assert_eq!(a.args[2], b"5000", "the allowance");
        assert_eq!(a.args[3], b"wait");
        assert_eq!(
            acquire(&fair, hold, d, Duration::ZERO, Publish::Plain).args[3],
            b"try"
        );
        let r = release(&fair, hold, Publish::Plain);
        assert_eq!(r.script, Script::RedissonFairUnlock);
        assert_eq!(r.keys[3], "redisson_lock__channel:{o}");
        assert_eq!(r.redisson_latch(), Some(latch.as_str()));
        assert_eq!(r.released(&Value::Int(-1)), Ok(Released::NotHeld));
        let c = cancel(&fair, hold.owner, Publish::Sharded).unwrap();
        assert_eq!(c.script, Script::RedissonFairCancel);
        assert_eq!(c.args[1], b"5000", "the same allowance as queued with");
        assert_eq!(c.args[3], b"spublish");
        assert_eq!(renew(&fair, hold.owner, d).script, Script::RedissonRenew);
        let f = force_release(&fair, Publish::Sharded, "lock:__revoked");
        assert_eq!(f.script, Script::RedissonFairForceUnlock);
        assert_eq!(f.keys[3], "redisson_lock__channel:{o}");
        assert_eq!(
            f.args,
            vec![
                b"0".to_vec(),
                b"spublish".to_vec(),
                b"lock:__revoked".to_vec()
            ]
        );

        let read = LockKeys::redisson("o".into(), LockKind::Read, d).unwrap();
        let a = acquire(&read, hold, d, Duration::ZERO, Publish::Plain);
        assert_eq!(a.script, Script::RedissonReadLock);
        assert_eq!(a.keys[1], format!("{{o}}:{field}:rwlock_timeout"));
        assert_eq!(a.args[2], format!("{field}:write").as_bytes());
        let r = release(&read, hold, Publish::Plain);
        assert_eq!(r.keys[1], "redisson_rwlock:{o}");
        assert_eq!(r.keys[3], "{o}");
        assert_eq!(r.redisson_latch(), Some(latch.as_str()));
        assert!(cancel(&read, hold.owner, Publish::Plain).is_none());
        let w = renew(&read, hold.owner, d);
        assert_eq!(w.script, Script::RedissonReadRenew);
        assert_eq!(w.keys, vec!["o", "{o}"]);

        let write = LockKeys::redisson("o".into(), LockKind::Write, d).unwrap();
        let a = acquire(&write, hold, d, Duration::from_secs(1), Publish::Plain);
        assert_eq!(a.script, Script::RedissonWriteLock);
        assert_eq!(a.args[1], format!("{field}:write").as_bytes());
        let r = release(&write, hold, Publish::Plain);
        assert_eq!(r.script, Script::RedissonWriteUnlock);
        assert_eq!(r.args[0], b"1", "READ_UNLOCK_MESSAGE");
        assert_eq!(r.redisson_latch(), Some(latch.as_str()));
        assert!(cancel(&write, hold.owner, Publish::Plain).is_none());
        // nested acquisitions name the enclosing hold they require (reply 3 without it)
        use crate::terms::owner::Enclosing;
        let nested = |enclosing| Hold::nested_in(hold.owner, enclosing);
        assert_eq!(
            acquire(&write, hold, d, Duration::ZERO, Publish::Plain)
                .args
                .len(),
            2
        );
        let a = acquire(
            &write,
            nested(Enclosing::Same),
            d,
            Duration::ZERO,
            Publish::Plain,
        );
        assert_eq!(a.args[2], b"1");
        let a = acquire(
            &write,
            nested(Enclosing::Read),
            d,
            Duration::ZERO,
            Publish::Plain,
        );
        assert_eq!(a.args[2..], [b"r".to_vec(), field.clone().into_bytes()]);
        assert_eq!(
            acquire(&read, hold, d, Duration::ZERO, Publish::Plain)
                .args
                .len(),
            3
        );
        let a = acquire(
            &read,
            nested(Enclosing::Write),
            d,
            Duration::ZERO,
            Publish::Plain,
        );
        assert_eq!(a.args[3], b"w");
        assert_eq!(
            a.attempt(&Value::Array(vec![Value::Int(3), Value::Int(0)])),
            Ok(Attempt::OuterLost)
        );
        let rw = LockKeys::for_kind("lock:", "o".into(), LockKind::Write).unwrap();
        for (h, flag) in [
            (hold, "0"),
            (nested(Enclosing::Same), "1"),
            (nested(Enclosing::Read), "r"),
        ] {
            assert_eq!(
                acquire(&rw, h, d, Duration::ZERO, Publish::Plain).args[5],
                flag.as_bytes()
            );
        }
        let rr = LockKeys::for_kind("lock:", "o".into(), LockKind::Read).unwrap();
        assert_eq!(
            acquire(
                &rr,
                nested(Enclosing::Write),
                d,
                Duration::ZERO,
                Publish::Plain
            )
            .args[5],
            b"w"
        );
        assert_eq!(
            renew(&write, hold.owner, d).args[1],
            format!("{field}:write").as_bytes()
        );
    }

    #[test]
    fn replies_parse() {
        let keys = LockKeys::new("lock:", "k".into()).unwrap();
        let call = acquire(
            &keys,
            Hold::fresh(),
            Duration::from_secs(1),
            Duration::ZERO,
            Publish::Plain,
        );
        assert_eq!(call.keys.len(), 2);
        let pair = |a, b| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        assert_eq!(
            call.attempt(&pair(1, 7)),
            Ok(Attempt::Acquired { token: 7 })
        );
        assert_eq!(call.attempt(&pair(2, 0)), Ok(Attempt::Reentered));
        assert_eq!(
            call.attempt(&pair(0, 20)),
            Ok(Attempt::Held {
                ttl: Some(Duration::from_millis(20))
            })
        );
        assert_eq!(call.attempt(&pair(0, -1)), Ok(Attempt::Held { ttl: None }));
        assert!(call.attempt(&pair(1, -5)).is_err());
        assert!(call.attempt(&Value::Nil).is_err());
    }
}
