//! The lock protocol on Redis: the Lua scripts, the calls that run them and what their
//! replies mean.
//!
//! Each script is a `.lua` file beside this one, headed by the KEYS and ARGV it takes and
//! what it returns; [`Script`] lists every one of them once. Every script runs atomically
//! and touches the keys of one lock only, which share one hash tag (one cluster slot; see
//! `keys.rs`). A lock is a hash `owner id -> reentrancy count` whose expiry is the lease; a
//! companion counter gives fencing tokens; a release that frees a lock publishes on the
//! lock's channel, with the verb the topology uses ([`Publish`]). Fair and read-write locks
//! have keys of their own (`fair_acquire.lua`, `rw_prologue.lua`).
//!
//! Scripts run by EVALSHA, falling back to EVAL after `NOSCRIPT` (a restarted server or a
//! promoted replica has an empty script cache): [`exec`] is the one place that does it.

pub(crate) mod exec;
pub(crate) mod probe;
pub(crate) mod version;

use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use crate::keys::{LockKeys, RedissonKeys};
use crate::owner::{Hold, OwnerId};
use crate::LockKind;

/// Every script of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Script {
    Acquire,
    Release,
    Renew,
    ForceRelease,
    RwAcquire,
    RwRelease,
    RwRenew,
    RwCancel,
    FairAcquire,
    FairCancel,
    /// `crate::fence`: a fenced write.
    Fence,
    /// `crate::fence`: read a fenced value.
    FenceGet,
    /// `crate::inspect`: read a lock's state, of every kind (read-only).
    Inspect,
    /// `protocol = "redisson"`: acquire or re-enter a reentrant (fenced) lock.
    RedissonLock,
    /// `protocol = "redisson"`: release one hold, behind the unlock latch.
    RedissonUnlock,
    /// `protocol = "redisson"`: the watchdog's renewal (reentrant, fair and write locks).
    RedissonRenew,
    /// `protocol = "redisson"`: acquire, re-enter or queue for a fair lock.
    RedissonFairLock,
    /// `protocol = "redisson"`: release one fair hold, waking the queue's head.
    RedissonFairUnlock,
    /// `protocol = "redisson"`: a fair waiter leaves the queue.
    RedissonFairCancel,
    /// `protocol = "redisson"`: acquire or re-enter a read hold.
    RedissonReadLock,
    /// `protocol = "redisson"`: release one read hold.
    RedissonReadUnlock,
    /// `protocol = "redisson"`: renew a reader's holds.
    RedissonReadRenew,
    /// `protocol = "redisson"`: acquire or re-enter the write lock.
    RedissonWriteLock,
    /// `protocol = "redisson"`: release one write hold.
    RedissonWriteUnlock,
    /// `protocol = "redisson"`: delete a fair lock, waking the queue's head.
    RedissonFairForceUnlock,
    /// `crate::leader`: publish a change of leader to the observers.
    Announce,
    /// `crate::semaphore`: take permits.
    SemAcquire,
    /// `crate::semaphore`: give back one acquisition's permits.
    SemRelease,
    /// `crate::semaphore`: the watchdog's renewal of one holder.
    SemRenew,
}

const RW_PROLOGUE: &str = include_str!("rw_prologue.lua");
const FENCE_PROLOGUE: &str = include_str!("fence_prologue.lua");
const SEM_PROLOGUE: &str = include_str!("sem_prologue.lua");

impl Script {
    /// All of them, for `SCRIPT LOAD`.
    pub(crate) const ALL: [Script; 29] = [
        Script::Acquire,
        Script::Release,
        Script::Renew,
        Script::ForceRelease,
        Script::RwAcquire,
        Script::RwRelease,
        Script::RwRenew,
        Script::RwCancel,
        Script::FairAcquire,
        Script::FairCancel,
        Script::Fence,
        Script::FenceGet,
        Script::Inspect,
        Script::RedissonLock,
        Script::RedissonUnlock,
        Script::RedissonRenew,
        Script::RedissonFairLock,
        Script::RedissonFairUnlock,
        Script::RedissonFairCancel,
        Script::RedissonReadLock,
        Script::RedissonReadUnlock,
        Script::RedissonReadRenew,
        Script::RedissonWriteLock,
        Script::RedissonWriteUnlock,
        Script::RedissonFairForceUnlock,
        Script::Announce,
        Script::SemAcquire,
        Script::SemRelease,
        Script::SemRenew,
    ];

    /// The Lua source as sent with EVAL.
    pub(crate) fn source(self) -> &'static str {
        static SOURCES: LazyLock<[String; 29]> = LazyLock::new(|| {
            Script::ALL.map(|s| match s {
                Script::Acquire => [FENCE_PROLOGUE, include_str!("acquire.lua")].concat(),
                Script::Release => include_str!("release.lua").to_owned(),
                Script::Renew => include_str!("renew.lua").to_owned(),
                Script::ForceRelease => include_str!("force_release.lua").to_owned(),
                Script::RwAcquire => {
                    [RW_PROLOGUE, FENCE_PROLOGUE, include_str!("rw_acquire.lua")].concat()
                }
                Script::RwRelease => [RW_PROLOGUE, include_str!("rw_release.lua")].concat(),
                Script::RwRenew => [RW_PROLOGUE, include_str!("rw_renew.lua")].concat(),
                Script::RwCancel => [RW_PROLOGUE, include_str!("rw_cancel.lua")].concat(),
                Script::FairAcquire => [FENCE_PROLOGUE, include_str!("fair_acquire.lua")].concat(),
                Script::FairCancel => include_str!("fair_cancel.lua").to_owned(),
                Script::Fence => include_str!("fence.lua").to_owned(),
                Script::FenceGet => include_str!("fence_get.lua").to_owned(),
                Script::Inspect => include_str!("inspect.lua").to_owned(),
                Script::RedissonLock => include_str!("redisson/lock.lua").to_owned(),
                Script::RedissonUnlock => include_str!("redisson/unlock.lua").to_owned(),
                Script::RedissonRenew => include_str!("redisson/renew.lua").to_owned(),
                Script::RedissonFairLock => include_str!("redisson/fair_lock.lua").to_owned(),
                Script::RedissonFairUnlock => include_str!("redisson/fair_unlock.lua").to_owned(),
                Script::RedissonFairCancel => include_str!("redisson/fair_cancel.lua").to_owned(),
                Script::RedissonReadLock => include_str!("redisson/read_lock.lua").to_owned(),
                Script::RedissonReadUnlock => include_str!("redisson/read_unlock.lua").to_owned(),
                Script::RedissonReadRenew => include_str!("redisson/read_renew.lua").to_owned(),
                Script::RedissonWriteLock => include_str!("redisson/write_lock.lua").to_owned(),
                Script::RedissonWriteUnlock => include_str!("redisson/write_unlock.lua").to_owned(),
                Script::RedissonFairForceUnlock => {
                    include_str!("redisson/fair_force_unlock.lua").to_owned()
                }
                Script::Announce => include_str!("announce.lua").to_owned(),
                Script::SemAcquire => [
                    SEM_PROLOGUE,
                    FENCE_PROLOGUE,
                    include_str!("sem_acquire.lua"),
                ]
                .concat(),
                Script::SemRelease => [SEM_PROLOGUE, include_str!("sem_release.lua")].concat(),
                Script::SemRenew => [SEM_PROLOGUE, include_str!("sem_renew.lua")].concat(),
            })
        });
        &SOURCES[self as usize]
    }

    /// The SHA1 of [`Script::source`], for EVALSHA.
    pub(crate) fn sha(self) -> &'static str {
        static SHAS: LazyLock<[String; 29]> = LazyLock::new(|| {
            Script::ALL.map(|s| redis::Script::new(s.source()).get_hash().to_owned())
        });
        &SHAS[self as usize]
    }
}

/// How a release is announced: `PUBLISH`, or `SPUBLISH` on a Redis Cluster, where a sharded
/// message goes from the lock's master straight to the subscribers of that slot instead of
/// crossing the cluster bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publish {
    Plain,
    Sharded,
}

impl Publish {
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Publish::Plain => "publish",
            Publish::Sharded => "spublish",
        }
    }
}

/// What one acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Newly acquired, with this fencing token.
    Acquired { token: u64 },
    /// Already held by this owner; the count went up.
    Reentered,
    /// Held by another owner, for this much longer (`None`: no expiry set).
    Held { ttl: Option<Duration> },
    /// A nested acquisition found the owner's own hold gone (expired, deleted, lost in a
    /// failover): nothing was created, and the enclosing hold is lost.
    OuterLost,
    /// redlock/multi: too few nodes granted it (what was granted is released again); try
    /// again after `retry_in`. `busy`: every node answered, and others held it on some.
    NoQuorum {
        granted: usize,
        needed: usize,
        nodes: usize,
        busy: bool,
        retry_in: Duration,
    },
}

/// What one release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The lock is free.
    Freed,
    /// Released one reentrant level; still held by this owner.
    StillHeld,
    /// This owner did not hold it: nothing changed.
    NotHeld,
}

/// A reply a script cannot give: the server runs other scripts under these names, or
/// something between rewrote the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnexpectedReply {
    /// Which script answered.
    pub(crate) script: Script,
    /// The reply, as redis-rs shows it.
    pub(crate) reply: String,
}

impl std::fmt::Display for UnexpectedReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unexpected reply to the {:?} script: {}",
            self.script, self.reply
        )
    }
}

/// One script call: the script, its keys and its arguments.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) script: Script,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Vec<u8>>,
}

impl Call {
    fn new(script: Script, keys: &LockKeys) -> Call {
        let names = match keys.kind {
            LockKind::Reentrant => vec![keys.hash.clone()],
            LockKind::Fair | LockKind::Read | LockKind::Write => {
                let [a, b] = keys.extra();
                vec![keys.hash.clone(), a, b]
            }
        };
        Call {
            script,
            keys: names,
            args: Vec::new(),
        }
    }

    /// A call of `script` with these keys and arguments (scripts outside the lock
    /// protocol: `crate::fence`).
    pub(crate) fn raw(script: Script, keys: Vec<String>, args: Vec<Vec<u8>>) -> Call {
        Call { script, keys, args }
    }

    fn arg(mut self, a: impl AsRef<[u8]>) -> Call {
        self.args.push(a.as_ref().to_vec());
        self
    }

    fn unexpected(&self, v: &Value) -> UnexpectedReply {
        UnexpectedReply {
            script: self.script,
            reply: format!("{v:?}"),
        }
    }

    /// The acquire call for a lock of `keys.kind`. `wait`: how long the caller may still
    /// wait (fair and write locks queue for that long).
    pub(crate) fn acquire(keys: &LockKeys, hold: Hold, lease: Duration, wait: Duration) -> Call {
        if let Some(r) = &keys.redisson {
            return Call::redisson_acquire(keys, r, hold, lease, wait);
        }
        if let Some(sem) = &keys.sem {
            return Call::raw(
                Script::SemAcquire,
                vec![keys.hash.clone(), sem.counts.clone(), keys.fence.clone()],
                Vec::new(),
            )
            .arg(hold.owner.hex())
            .arg(sem.permits.to_string())
            .arg(sem.limit.to_string())
            .arg(millis(lease));
        }
        let lease = millis(lease);
        let wait = wait.as_millis().min(i64::MAX as u128).to_string();
        let nested = if hold.nested { "1" } else { "0" };
        let mut call = match keys.kind {
            LockKind::Reentrant => Call::new(Script::Acquire, keys)
                .arg(hold.owner.hex())
                .arg(lease)
                .arg(hold.level_hex())
                .arg(nested)
                .arg(keys.hold_at_least.map_or_else(|| "0".to_owned(), millis)),
            LockKind::Fair => Call::new(Script::FairAcquire, keys)
                .arg(hold.owner.hex())
                .arg(lease)
                .arg(wait)
                .arg(hold.level_hex())
                .arg(nested),
            LockKind::Read | LockKind::Write => Call::new(Script::RwAcquire, keys)
                .arg(hold.owner.hex())
                .arg(lease)
                .arg(rw_mode(keys.kind))
                .arg(wait)
                .arg(hold.level_hex())
                .arg(nested),
        };
        call.keys.push(keys.fence.clone());
        if let Some(info) = &keys.info {
            call.keys.push(info.key.clone());
            call = call.arg(&*info.holder);
        }
        call
    }

    /// [`Call::acquire`] in Redisson's format. Every kind draws its fencing token from
    /// `redisson_lock_token:{name}` (the reentrant lock as `RFencedLock` does); a nested
    /// acquisition only re-enters (reply 3 when the owner's field is gone).
    fn redisson_acquire(
        keys: &LockKeys,
        r: &RedissonKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
    ) -> Call {
        let field = hold.owner.redisson_field();
        let nested = if hold.nested { "1" } else { "0" };
        match keys.kind {
            LockKind::Reentrant => {
                let call = Call::raw(
                    Script::RedissonLock,
                    vec![keys.hash.clone(), keys.fence.clone()],
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
                    vec![keys.hash.clone(), queue, deadlines, keys.fence.clone()],
                    Vec::new(),
                )
                .arg(millis(lease))
                .arg(field)
                .arg(millis(r.allowance))
                .arg(if wait.is_zero() { "try" } else { "wait" })
                .arg(nested)
            }
            LockKind::Read => Call::raw(
                Script::RedissonReadLock,
                vec![
                    keys.hash.clone(),
                    redisson_rw_timeouts(keys, &field),
                    keys.fence.clone(),
                ],
                Vec::new(),
            )
            .arg(millis(lease))
            .arg(&field)
            .arg(format!("{field}:write")),
            LockKind::Write => Call::raw(
                Script::RedissonWriteLock,
                vec![keys.hash.clone(), keys.fence.clone()],
                Vec::new(),
            )
            .arg(millis(lease))
            .arg(format!("{field}:write")),
        }
    }

    /// The unlock latch key of a Redisson-format release, which the caller deletes once
    /// answered; `None` for other calls.
    pub(crate) fn redisson_latch(&self) -> Option<&str> {
        let at = match self.script {
            Script::RedissonUnlock | Script::RedissonWriteUnlock => 2,
            Script::RedissonFairUnlock | Script::RedissonReadUnlock => 4,
            Script::Acquire
            | Script::Release
            | Script::Renew
            | Script::ForceRelease
            | Script::RwAcquire
            | Script::RwRelease
            | Script::RwRenew
            | Script::RwCancel
            | Script::FairAcquire
            | Script::FairCancel
            | Script::Fence
            | Script::FenceGet
            | Script::Inspect
            | Script::RedissonLock
            | Script::RedissonRenew
            | Script::RedissonFairLock
            | Script::RedissonFairCancel
            | Script::RedissonReadLock
            | Script::RedissonReadRenew
            | Script::RedissonWriteLock
            | Script::RedissonFairForceUnlock
            | Script::Announce
            | Script::SemAcquire
            | Script::SemRelease
            | Script::SemRenew => return None,
        };
        self.keys.get(at).map(String::as_str)
    }

    /// What an acquire call's reply means.
    pub(crate) fn attempt(&self, v: &Value) -> Result<Attempt, UnexpectedReply> {
        match v {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1), Value::Int(token)] => Ok(Attempt::Acquired {
                    token: u64::try_from(*token).map_err(|_| self.unexpected(v))?,
                }),
                [Value::Int(2), _] => Ok(Attempt::Reentered),
                [Value::Int(3), _] => Ok(Attempt::OuterLost),
                [Value::Int(0), Value::Int(pttl)] => Ok(Attempt::Held {
                    ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                }),
                _ => Err(self.unexpected(v)),
            },
            _ => Err(self.unexpected(v)),
        }
    }

    /// The release call of one level.
    pub(crate) fn release(keys: &LockKeys, hold: Hold, publish: Publish) -> Call {
        if let Some(r) = &keys.redisson {
            let latch = keys.redisson_latch(&hold.redisson_request());
            let field = hold.owner.redisson_field();
            let latch_ttl = REDISSON_LATCH_TTL.as_millis().to_string();
            return match keys.kind {
                LockKind::Reentrant => Call::raw(
                    Script::RedissonUnlock,
                    vec![keys.hash.clone(), keys.channel.clone(), latch],
                    Vec::new(),
                )
                .arg(REDISSON_UNLOCK_MESSAGE)
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
                    .arg(REDISSON_UNLOCK_MESSAGE)
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
                        redisson_rw_timeouts(keys, &field),
                        keys.redisson_rw_stem(),
                        latch,
                    ],
                    Vec::new(),
                )
                .arg(REDISSON_UNLOCK_MESSAGE)
                .arg(field)
                .arg(publish.verb())
                .arg(latch_ttl),
                LockKind::Write => Call::raw(
                    Script::RedissonWriteUnlock,
                    vec![keys.hash.clone(), keys.channel.clone(), latch],
                    Vec::new(),
                )
                .arg(REDISSON_READ_UNLOCK_MESSAGE)
                .arg(millis(r.lease))
                .arg(format!("{field}:write"))
                .arg(publish.verb())
                .arg(latch_ttl),
            };
        }
        if let Some(sem) = &keys.sem {
            return Call::raw(
                Script::SemRelease,
                vec![keys.hash.clone(), sem.counts.clone()],
                Vec::new(),
            )
            .arg(hold.owner.hex())
            .arg(&keys.channel)
            .arg(publish.verb());
        }
        match keys.kind {
            LockKind::Reentrant | LockKind::Fair => Call::new(Script::Release, keys)
                .only_hash()
                .arg(hold.owner.hex())
                .arg(&keys.channel)
                .arg(publish.verb())
                .arg(hold.level_hex())
                .arg(if keys.hold_at_least.is_some() || hold.nested {
                    "1"
                } else {
                    "0"
                }),
            LockKind::Read | LockKind::Write => Call::new(Script::RwRelease, keys)
                .arg(hold.owner.hex())
                .arg(rw_mode(keys.kind))
                .arg(&keys.channel)
                .arg(publish.verb())
                .arg(hold.level_hex()),
        }
        .with_info_key(keys)
    }

    /// Why the release (cancel, forced release) that `v` answers could not announce itself,
    /// when it could not: it did what it did, but its PUBLISH failed (an ACL user without
    /// the channel right gets NOPERM), so waiters wake at the lease's end instead.
    pub(crate) fn publish_failure(v: &Value) -> Option<String> {
        match v {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(_), Value::BulkString(e)] => {
                    Some(String::from_utf8_lossy(e).into_owned())
                }
                [Value::Int(_), Value::SimpleString(e)] => Some(e.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// What a release call's reply means.
    pub(crate) fn released(&self, v: &Value) -> Result<Released, UnexpectedReply> {
        if self.redisson_latch().is_some() {
            return match v {
                Value::Int(1) => Ok(Released::Freed),
                Value::Int(0) => Ok(Released::StillHeld),
                Value::Int(-1) => Ok(Released::NotHeld),
                other => Err(self.unexpected(other)),
            };
        }
        if Call::publish_failure(v).is_some() {
            return Ok(Released::Freed);
        }
        match v {
            Value::Int(0) => Ok(Released::Freed),
            Value::Int(n) if *n > 0 => Ok(Released::StillHeld),
            Value::Int(_) => Ok(Released::NotHeld),
            other => Err(self.unexpected(other)),
        }
    }

    /// The renew call of one lease.
    pub(crate) fn renew(keys: &LockKeys, owner: OwnerId, lease: Duration) -> Call {
        if keys.redisson.is_some() {
            let field = owner.redisson_field();
            return match keys.kind {
                LockKind::Reentrant | LockKind::Fair => {
                    Call::raw(Script::RedissonRenew, vec![keys.hash.clone()], Vec::new())
                        .arg(millis(lease))
                        .arg(field)
                }
                LockKind::Write => {
                    Call::raw(Script::RedissonRenew, vec![keys.hash.clone()], Vec::new())
                        .arg(millis(lease))
                        .arg(format!("{field}:write"))
                }
                LockKind::Read => Call::raw(
                    Script::RedissonReadRenew,
                    vec![keys.hash.clone(), keys.redisson_rw_stem()],
                    Vec::new(),
                )
                .arg(millis(lease))
                .arg(field),
            };
        }
        if let Some(sem) = &keys.sem {
            return Call::raw(
                Script::SemRenew,
                vec![keys.hash.clone(), sem.counts.clone()],
                Vec::new(),
            )
            .arg(owner.hex())
            .arg(millis(lease));
        }
        match keys.kind {
            LockKind::Reentrant | LockKind::Fair => Call::new(Script::Renew, keys)
                .only_hash()
                .arg(owner.hex())
                .arg(millis(lease)),
            LockKind::Read | LockKind::Write => Call::new(Script::RwRenew, keys)
                .arg(owner.hex())
                .arg(millis(lease))
                .arg(rw_mode(keys.kind)),
        }
        .with_info_key(keys)
    }

    /// What a renew (or cancel, or force-release) call's reply means: whether it did it.
    pub(crate) fn done(&self, v: &Value) -> Result<bool, UnexpectedReply> {
        if Call::publish_failure(v).is_some() {
            return Ok(true);
        }
        match v {
            Value::Int(n) => Ok(*n == 1),
            other => Err(self.unexpected(other)),
        }
    }

    /// The call by which a fair or write waiter leaves the queue; `None` for the kinds
    /// that do not queue.
    pub(crate) fn cancel(keys: &LockKeys, owner: OwnerId, publish: Publish) -> Option<Call> {
        if let Some(r) = &keys.redisson {
            // Only Redisson's fair lock queues (its write lock has no queue).
            return match keys.kind {
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
                        .arg(REDISSON_UNLOCK_MESSAGE)
                        .arg(publish.verb()),
                    )
                }
                LockKind::Reentrant | LockKind::Read | LockKind::Write => None,
            };
        }
        let script = match keys.kind {
            LockKind::Fair => Script::FairCancel,
            LockKind::Write => Script::RwCancel,
            LockKind::Reentrant | LockKind::Read => return None,
        };
        Some(
            Call::new(script, keys)
                .arg(owner.hex())
                .arg(&keys.channel)
                .arg(publish.verb()),
        )
    }

    /// Delete a lock whoever holds it (with the other keys of fair and read-write locks).
    /// The holder information goes too, recorded or not (another process may record it).
    pub(crate) fn force_release(keys: &LockKeys, publish: Publish) -> Call {
        if keys.redisson.is_some() && keys.kind == LockKind::Fair {
            // `RedissonFairLock.forceUnlockAsync`: DEL the hash, wake the queue's head.
            let [queue, deadlines] = keys.extra();
            return Call::raw(
                Script::RedissonFairForceUnlock,
                vec![keys.hash.clone(), queue, deadlines, keys.channel.clone()],
                Vec::new(),
            )
            .arg(REDISSON_UNLOCK_MESSAGE)
            .arg(publish.verb());
        }
        if keys.redisson.is_some() {
            // `RedissonLock.forceUnlockAsync`: DEL the hash, publish UNLOCK_MESSAGE (the
            // read-write lock: on its channel, whatever its mode).
            return Call::raw(Script::ForceRelease, vec![keys.hash.clone()], Vec::new())
                .arg(&keys.channel)
                .arg(publish.verb())
                .arg(REDISSON_UNLOCK_MESSAGE);
        }
        let mut call = Call::new(Script::ForceRelease, keys)
            .arg(&keys.channel)
            .arg(publish.verb());
        call.keys.push(keys.info_key());
        call
    }

    /// The read-only call that returns everything about the locks of every kind on
    /// `reentrant`'s key (`inspect.lua`); `reentrant` names the reentrant lock's keys.
    pub(crate) fn inspect(prefix: &str, key: &str) -> Result<Call, crate::LockError> {
        let kinds = |kind| LockKeys::for_kind(prefix, key.to_owned(), kind);
        let (r, fair, rw) = (
            kinds(LockKind::Reentrant)?,
            kinds(LockKind::Fair)?,
            kinds(LockKind::Read)?,
        );
        let [queue, waiters] = fair.extra();
        let [readers, writers] = rw.extra();
        let keys = vec![
            r.hash.clone(),
            r.info_key(),
            fair.hash.clone(),
            queue,
            waiters,
            fair.info_key(),
            rw.hash.clone(),
            readers,
            writers,
            rw.info_key(),
            r.fence.clone(),
        ];
        let channels = [&r.channel, &fair.channel, &rw.channel]
            .map(|c| c.as_bytes().to_vec())
            .to_vec();
        Ok(Call::raw(Script::Inspect, keys, channels))
    }

    /// Append the holder information hash as the last key, when it is recorded.
    fn with_info_key(mut self, keys: &LockKeys) -> Call {
        if let Some(info) = &keys.info {
            self.keys.push(info.key.clone());
        }
        self
    }

    /// Keep only the lock's main key (the scripts shared with the reentrant lock).
    fn only_hash(mut self) -> Call {
        self.keys.truncate(1);
        self
    }
}

/// Redisson's `LockPubSub.UNLOCK_MESSAGE`, as the text the scripts publish.
const REDISSON_UNLOCK_MESSAGE: &str = "0";

/// Redisson's `LockPubSub.READ_UNLOCK_MESSAGE` (every waiter of a client wakes): what its
/// write lock's release publishes.
const REDISSON_READ_UNLOCK_MESSAGE: &str = "1";

/// Redisson's `fairLockWaitTimeout` (5 min): a fair waiter's allowance when it does not
/// wait (a try-once acquisition).
pub(crate) const REDISSON_FAIR_WAIT: Duration = Duration::from_secs(300);

/// A reader's timeout key prefix `{name}:<field>:rwlock_timeout` (hold i: `<prefix>:<i>`).
fn redisson_rw_timeouts(keys: &LockKeys, field: &str) -> String {
    format!("{}:{field}:rwlock_timeout", keys.redisson_rw_stem())
}

/// How long an unlock latch lives (Redisson's default: `(timeout 3000 + retry delay of 1000
/// to 2000) * 4 attempts` = 16 to 20 s); the caller deletes it once answered.
pub(crate) const REDISSON_LATCH_TTL: Duration = Duration::from_secs(20);

/// `read` or `write`, as the read-write scripts take it.
fn rw_mode(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Write => "write",
        LockKind::Read | LockKind::Reentrant | LockKind::Fair => "read",
    }
}

/// A lease in whole milliseconds, at least 1 (`PEXPIRE 0` would delete the lock at once).
fn millis(lease: Duration) -> String {
    lease.as_millis().clamp(1, i64::MAX as u128).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_check_the_same_bounds_as_the_builder() {
        let lease = format!("lease > {}", crate::MAX_LEASE.as_millis());
        let wait = format!("wait > {}", crate::MAX_WAIT.as_millis());
        for s in [
            Script::Acquire,
            Script::Renew,
            Script::RwRenew,
            Script::SemAcquire,
            Script::SemRenew,
        ] {
            assert!(s.source().contains(&lease), "{s:?} checks {lease}");
        }
        for s in [Script::FairAcquire, Script::RwAcquire] {
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
        let keys = LockKeys::semaphore("lock:", "k".into(), 2, 5).unwrap();
        let hold = Hold::fresh();
        let a = Call::acquire(&keys, hold, Duration::from_secs(30), Duration::ZERO);
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
        let r = Call::release(&keys, hold, Publish::Sharded);
        assert_eq!(r.script, Script::SemRelease);
        assert_eq!(r.args[1], b"lock:{k}:sem:released");
        assert_eq!(r.args[2], b"spublish");
        assert_eq!(r.released(&Value::Int(0)), Ok(Released::Freed));
        assert_eq!(r.released(&Value::Int(-1)), Ok(Released::NotHeld));
        let w = Call::renew(&keys, hold.owner, Duration::from_secs(1));
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
    fn the_publish_verb_is_passed_in() {
        let keys = LockKeys::new("lock:", "k".into()).unwrap();
        let hold = Hold::fresh();
        let plain = Call::release(&keys, hold, Publish::Plain);
        let sharded = Call::release(&keys, hold, Publish::Sharded);
        assert_eq!(plain.args[2], b"publish");
        assert_eq!(sharded.args[2], b"spublish");
        assert_eq!(plain.keys, vec!["lock:{k}".to_string()]);
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
        let a = Call::acquire(&keys, hold, Duration::from_secs(30), Duration::ZERO);
        assert_eq!(a.script, Script::RedissonLock);
        assert_eq!(a.keys, vec!["order:42", "redisson_lock_token:{order:42}"]);
        assert_eq!(a.args, vec![b"30000".to_vec(), field.clone().into_bytes()]);
        let nested = Call::acquire(
            &keys,
            Hold::nested(hold.owner),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        assert_eq!(nested.args[2], b"1", "only re-enter");
        let pair = |a, b| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        assert_eq!(nested.attempt(&pair(3, 0)), Ok(Attempt::OuterLost));
        assert_eq!(a.attempt(&pair(1, 9)), Ok(Attempt::Acquired { token: 9 }));

        let r = Call::release(&keys, hold, Publish::Sharded);
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
        assert_eq!(Call::release(&keys, hold, Publish::Sharded).keys, r.keys);

        let w = Call::renew(&keys, hold.owner, Duration::from_secs(30));
        assert_eq!(w.script, Script::RedissonRenew);
        assert_eq!(w.keys, vec!["order:42"]);
        assert_eq!(w.args[1], field.as_bytes());
        let f = Call::force_release(&keys, Publish::Plain);
        assert_eq!(f.keys, vec!["order:42"]);
        assert_eq!(f.args[2], b"0");
    }

    #[test]
    fn redisson_fair_and_rw_calls_use_redissons_names() {
        let d = Duration::from_secs(30);
        let hold = Hold::fresh();
        let field = hold.owner.redisson_field();
        let latch = format!("redisson_unlock_latch:{{o}}:{}", hold.redisson_request());
        let mut fair = LockKeys::redisson("o".into(), LockKind::Fair, d).unwrap();
        fair.redisson.as_mut().unwrap().allowance = Duration::from_secs(5);
        let a = Call::acquire(&fair, hold, d, Duration::from_secs(5));
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
            Call::acquire(&fair, hold, d, Duration::ZERO).args[3],
            b"try"
        );
        let r = Call::release(&fair, hold, Publish::Plain);
        assert_eq!(r.script, Script::RedissonFairUnlock);
        assert_eq!(r.keys[3], "redisson_lock__channel:{o}");
        assert_eq!(r.redisson_latch(), Some(latch.as_str()));
        assert_eq!(r.released(&Value::Int(-1)), Ok(Released::NotHeld));
        let c = Call::cancel(&fair, hold.owner, Publish::Sharded).unwrap();
        assert_eq!(c.script, Script::RedissonFairCancel);
        assert_eq!(c.args[1], b"5000", "the same allowance as queued with");
        assert_eq!(c.args[3], b"spublish");
        assert_eq!(
            Call::renew(&fair, hold.owner, d).script,
            Script::RedissonRenew
        );
        let f = Call::force_release(&fair, Publish::Sharded);
        assert_eq!(f.script, Script::RedissonFairForceUnlock);
        assert_eq!(f.keys[3], "redisson_lock__channel:{o}");
        assert_eq!(f.args, vec![b"0".to_vec(), b"spublish".to_vec()]);

        let read = LockKeys::redisson("o".into(), LockKind::Read, d).unwrap();
        let a = Call::acquire(&read, hold, d, Duration::ZERO);
        assert_eq!(a.script, Script::RedissonReadLock);
        assert_eq!(a.keys[1], format!("{{o}}:{field}:rwlock_timeout"));
        assert_eq!(a.args[2], format!("{field}:write").as_bytes());
        let r = Call::release(&read, hold, Publish::Plain);
        assert_eq!(r.keys[1], "redisson_rwlock:{o}");
        assert_eq!(r.keys[3], "{o}");
        assert_eq!(r.redisson_latch(), Some(latch.as_str()));
        assert!(Call::cancel(&read, hold.owner, Publish::Plain).is_none());
        let w = Call::renew(&read, hold.owner, d);
        assert_eq!(w.script, Script::RedissonReadRenew);
        assert_eq!(w.keys, vec!["o", "{o}"]);

        let write = LockKeys::redisson("o".into(), LockKind::Write, d).unwrap();
        let a = Call::acquire(&write, hold, d, Duration::from_secs(1));
        assert_eq!(a.script, Script::RedissonWriteLock);
        assert_eq!(a.args[1], format!("{field}:write").as_bytes());
        let r = Call::release(&write, hold, Publish::Plain);
        assert_eq!(r.script, Script::RedissonWriteUnlock);
        assert_eq!(r.args[0], b"1", "READ_UNLOCK_MESSAGE");
        assert_eq!(r.redisson_latch(), Some(latch.as_str()));
        assert!(Call::cancel(&write, hold.owner, Publish::Plain).is_none());
        assert_eq!(
            Call::renew(&write, hold.owner, d).args[1],
            format!("{field}:write").as_bytes()
        );
    }

    #[test]
    fn replies_parse() {
        let keys = LockKeys::new("lock:", "k".into()).unwrap();
        let call = Call::acquire(&keys, Hold::fresh(), Duration::from_secs(1), Duration::ZERO);
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
