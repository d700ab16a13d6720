//! The protocol's scripts (one variant per `.lua` file, its source and SHA), the publish
//! verb of a topology, and what acquire and release replies mean.

use std::sync::LazyLock;
use std::time::Duration;

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
    /// `crate::ops::fence`: a fenced write.
    Fence,
    /// `crate::ops::fence`: read a fenced value.
    FenceGet,
    /// `crate::ops::inspect`: read a lock's state, of every kind (read-only).
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
    /// `crate::primitives::leader`: publish a change of leader to the observers.
    Announce,
    /// `crate::primitives::semaphore`: take permits.
    SemAcquire,
    /// `crate::primitives::semaphore`: give back one acquisition's permits.
    SemRelease,
    /// `crate::primitives::semaphore`: the watchdog's renewal of one holder.
    SemRenew,
    /// `crate::primitives::handoff`: release a reentrant lock and hand it to a waiter of
    /// this process in the same run.
    Handoff,
}

const RW_PROLOGUE: &str = include_str!("rw_prologue.lua");
const FENCE_PROLOGUE: &str = include_str!("fence_prologue.lua");
const RELEASE_PROLOGUE: &str = include_str!("release_prologue.lua");
const SEM_PROLOGUE: &str = include_str!("sem_prologue.lua");
const REDISSON_TOKEN_PROLOGUE: &str = include_str!("redisson/token_prologue.lua");

impl Script {
    /// The script's name in messages (`Acquire`, `Release`, ...).
    pub(crate) fn name(self) -> &'static str {
        static NAMES: std::sync::OnceLock<[String; 30]> = std::sync::OnceLock::new();
        &NAMES.get_or_init(|| Script::ALL.map(|s| format!("{s:?}")))[self as usize]
    }

    /// All of them, for `SCRIPT LOAD`.
    pub(crate) const ALL: [Script; 30] = [
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
        Script::Handoff,
    ];

    /// The Lua source as sent with EVAL.
    pub(crate) fn source(self) -> &'static str {
        static SOURCES: LazyLock<[String; 30]> = LazyLock::new(|| {
            Script::ALL.map(|s| match s {
                Script::Acquire => [FENCE_PROLOGUE, include_str!("acquire.lua")].concat(),
                Script::Release => [RELEASE_PROLOGUE, include_str!("release.lua")].concat(),
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
                Script::RedissonLock => {
                    [REDISSON_TOKEN_PROLOGUE, include_str!("redisson/lock.lua")].concat()
                }
                Script::RedissonUnlock => include_str!("redisson/unlock.lua").to_owned(),
                Script::RedissonRenew => include_str!("redisson/renew.lua").to_owned(),
                Script::RedissonFairLock => [
                    REDISSON_TOKEN_PROLOGUE,
                    include_str!("redisson/fair_lock.lua"),
                ]
                .concat(),
                Script::RedissonFairUnlock => include_str!("redisson/fair_unlock.lua").to_owned(),
                Script::RedissonFairCancel => include_str!("redisson/fair_cancel.lua").to_owned(),
                Script::RedissonReadLock => [
                    REDISSON_TOKEN_PROLOGUE,
                    include_str!("redisson/read_lock.lua"),
                ]
                .concat(),
                Script::RedissonReadUnlock => include_str!("redisson/read_unlock.lua").to_owned(),
                Script::RedissonReadRenew => include_str!("redisson/read_renew.lua").to_owned(),
                Script::RedissonWriteLock => [
                    REDISSON_TOKEN_PROLOGUE,
                    include_str!("redisson/write_lock.lua"),
                ]
                .concat(),
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
                Script::Handoff => [
                    FENCE_PROLOGUE,
                    RELEASE_PROLOGUE,
                    include_str!("handoff.lua"),
                ]
                .concat(),
            })
        });
        &SOURCES[self as usize]
    }

    /// The SHA1 of [`Script::source`], for EVALSHA.
    pub(crate) fn sha(self) -> &'static str {
        static SHAS: LazyLock<[String; 30]> = LazyLock::new(|| {
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

/// What one hand-off did (`handoff.lua`: a release that, when it frees the lock, grants it
/// to a waiter of this process in the same run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandedOff {
    /// The waiter holds the lock now, with this fencing token.
    To { token: u64 },
    /// Not handed over: what the release did (`Freed`: freed and published, or kept
    /// until its `hold:until`).
    Released(Released),
}

/// A lease in whole milliseconds, at least 1 (`PEXPIRE 0` would delete the lock at once).
pub(crate) fn millis(lease: Duration) -> String {
    lease.as_millis().clamp(1, i64::MAX as u128).to_string()
}
