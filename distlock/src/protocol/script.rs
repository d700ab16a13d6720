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
    /// `crate::ops::fence`: claim a fenced value before reading it.
    FenceClaim,
    /// `crate::ops::fence` on redlock and multi: a fenced write that keeps what it
    /// replaced, for [`Script::FenceUndo`].
    FenceQuorum,
    /// `crate::ops::fence` on redlock and multi: undo a fenced write that failed as a whole.
    FenceUndo,
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
    /// `crate::lease::handoff`: release a reentrant lock and hand it to a waiter of
    /// this process in the same run.
    Handoff,
    /// `crate::primitives::semaphore`: take permits of a fair semaphore, or queue.
    SemFairAcquire,
    /// `crate::primitives::semaphore`: a fair semaphore's waiter leaves the queue.
    SemFairCancel,
}

/// A script's source: its prologues, then its own file, joined at compile time.
macro_rules! lua {
    ($($file:literal),+ $(,)?) => {
        concat!($(include_str!($file)),+)
    };
}

/// Each script's source as sent with EVAL: the one place that names its prologues
/// (`crate::__private::scripts` is this module, for the benches and tests that send the
/// protocol raw). Each constant is named after its `.lua` file, whose head documents its
/// KEYS and ARGV.
#[allow(missing_docs)]
pub mod sources {
    pub const ACQUIRE: &str = lua!("record.lua", "fence_prologue.lua", "acquire.lua");
    pub const RELEASE: &str = lua!("record.lua", "release_prologue.lua", "release.lua");
    pub const RENEW: &str = lua!("record.lua", "renew.lua");
    pub const FORCE_RELEASE: &str = lua!("force_release.lua");
    pub const RW_ACQUIRE: &str = lua!("rw_prologue.lua", "fence_prologue.lua", "rw_acquire.lua");
    pub const RW_RELEASE: &str = lua!("rw_prologue.lua", "rw_release.lua");
    pub const RW_RENEW: &str = lua!("rw_prologue.lua", "rw_renew.lua");
    pub const RW_CANCEL: &str = lua!("rw_prologue.lua", "rw_cancel.lua");
    pub const FAIR_ACQUIRE: &str = lua!("record.lua", "fence_prologue.lua", "fair_acquire.lua");
    pub const FAIR_CANCEL: &str = lua!("fair_cancel.lua");
    pub const FENCE: &str = lua!("fence.lua");
    pub const FENCE_GET: &str = lua!("fence_get.lua");
    pub const FENCE_CLAIM: &str = lua!("fence_claim.lua");
    pub const FENCE_QUORUM: &str = lua!(
        "fence_quorum_head.lua",
        "fence.lua",
        "fence_quorum_tail.lua"
    );
    pub const FENCE_UNDO: &str = lua!("fence_undo.lua");
    pub const INSPECT: &str = lua!("record.lua", "inspect.lua");
    pub const REDISSON_LOCK: &str = lua!("redisson/token_prologue.lua", "redisson/lock.lua");
    pub const REDISSON_UNLOCK: &str = lua!("redisson/unlock.lua");
    pub const REDISSON_RENEW: &str = lua!("redisson/renew.lua");
    pub const REDISSON_FAIR_LOCK: &str =
        lua!("redisson/token_prologue.lua", "redisson/fair_lock.lua");
    pub const REDISSON_FAIR_UNLOCK: &str = lua!("redisson/fair_unlock.lua");
    pub const REDISSON_FAIR_CANCEL: &str = lua!("redisson/fair_cancel.lua");
    pub const REDISSON_READ_LOCK: &str =
        lua!("redisson/token_prologue.lua", "redisson/read_lock.lua");
    pub const REDISSON_READ_UNLOCK: &str = lua!("redisson/read_unlock.lua");
    pub const REDISSON_READ_RENEW: &str = lua!("redisson/read_renew.lua");
    pub const REDISSON_WRITE_LOCK: &str =
        lua!("redisson/token_prologue.lua", "redisson/write_lock.lua");
    pub const REDISSON_WRITE_UNLOCK: &str = lua!("redisson/write_unlock.lua");
    pub const REDISSON_FAIR_FORCE_UNLOCK: &str = lua!("redisson/fair_force_unlock.lua");
    pub const ANNOUNCE: &str = lua!("announce.lua");
    pub const SEM_ACQUIRE: &str = lua!(
        "sem_prologue.lua",
        "fence_prologue.lua",
        "sem_take.lua",
        "sem_acquire.lua"
    );
    pub const SEM_FAIR_ACQUIRE: &str = lua!(
        "sem_prologue.lua",
        "fence_prologue.lua",
        "sem_take.lua",
        "sem_fair_acquire.lua"
    );
    pub const SEM_FAIR_CANCEL: &str = lua!("sem_fair_cancel.lua");
    pub const SEM_RELEASE: &str = lua!("sem_prologue.lua", "sem_release.lua");
    pub const SEM_RENEW: &str = lua!("sem_prologue.lua", "sem_renew.lua");
    pub const HANDOFF: &str = lua!(
        "record.lua",
        "fence_prologue.lua",
        "release_prologue.lua",
        "handoff.lua"
    );
}

impl Script {
    /// The script's name in messages (`Acquire`, `Release`, ...).
    pub(crate) fn name(self) -> &'static str {
        static NAMES: std::sync::OnceLock<[String; 35]> = std::sync::OnceLock::new();
        &NAMES.get_or_init(|| Script::ALL.map(|s| format!("{s:?}")))[self as usize]
    }

    /// All of them, for `SCRIPT LOAD`.
    pub(crate) const ALL: [Script; 35] = [
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
        Script::FenceClaim,
        Script::FenceQuorum,
        Script::FenceUndo,
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
        Script::SemFairAcquire,
        Script::SemFairCancel,
    ];

    /// The Lua source as sent with EVAL.
    pub(crate) fn source(self) -> &'static str {
        match self {
            Script::Acquire => sources::ACQUIRE,
            Script::Release => sources::RELEASE,
            Script::Renew => sources::RENEW,
            Script::ForceRelease => sources::FORCE_RELEASE,
            Script::RwAcquire => sources::RW_ACQUIRE,
            Script::RwRelease => sources::RW_RELEASE,
            Script::RwRenew => sources::RW_RENEW,
            Script::RwCancel => sources::RW_CANCEL,
            Script::FairAcquire => sources::FAIR_ACQUIRE,
            Script::FairCancel => sources::FAIR_CANCEL,
            Script::Fence => sources::FENCE,
            Script::FenceGet => sources::FENCE_GET,
            Script::FenceClaim => sources::FENCE_CLAIM,
            Script::FenceQuorum => sources::FENCE_QUORUM,
            Script::FenceUndo => sources::FENCE_UNDO,
            Script::Inspect => sources::INSPECT,
            Script::RedissonLock => sources::REDISSON_LOCK,
            Script::RedissonUnlock => sources::REDISSON_UNLOCK,
            Script::RedissonRenew => sources::REDISSON_RENEW,
            Script::RedissonFairLock => sources::REDISSON_FAIR_LOCK,
            Script::RedissonFairUnlock => sources::REDISSON_FAIR_UNLOCK,
            Script::RedissonFairCancel => sources::REDISSON_FAIR_CANCEL,
            Script::RedissonReadLock => sources::REDISSON_READ_LOCK,
            Script::RedissonReadUnlock => sources::REDISSON_READ_UNLOCK,
            Script::RedissonReadRenew => sources::REDISSON_READ_RENEW,
            Script::RedissonWriteLock => sources::REDISSON_WRITE_LOCK,
            Script::RedissonWriteUnlock => sources::REDISSON_WRITE_UNLOCK,
            Script::RedissonFairForceUnlock => sources::REDISSON_FAIR_FORCE_UNLOCK,
            Script::Announce => sources::ANNOUNCE,
            Script::SemAcquire => sources::SEM_ACQUIRE,
            Script::SemRelease => sources::SEM_RELEASE,
            Script::SemRenew => sources::SEM_RENEW,
            Script::Handoff => sources::HANDOFF,
            Script::SemFairAcquire => sources::SEM_FAIR_ACQUIRE,
            Script::SemFairCancel => sources::SEM_FAIR_CANCEL,
        }
    }

    /// The SHA1 of [`Script::source`], for EVALSHA.
    pub(crate) fn sha(self) -> &'static str {
        static SHAS: LazyLock<[String; 35]> = LazyLock::new(|| {
            Script::ALL.map(|s| redis::Script::new(s.source()).get_hash().to_owned())
        });
        &SHAS[self as usize]
    }

    /// The script's name in distlock's function library, for FCALL.
    pub(crate) fn function(self) -> &'static str {
        &LIBRARY.functions[self as usize]
    }

    /// The script whose source (as sent with EVAL) is `source`.
    pub(crate) fn of_source(source: &str) -> Option<Script> {
        Script::ALL.into_iter().find(|s| s.source() == source)
    }

    /// Whether the script may run on a server out of memory (`maxmemory` reached): the
    /// ones that let go, renew or read. A script sent by EVAL runs there and fails at its
    /// first write that could take memory; a function runs there only when flagged
    /// `allow-oom`, and is refused before it starts otherwise. So an acquisition, which
    /// makes keys, is refused whole on a full server, and what frees memory still runs.
    fn runs_when_full(self) -> bool {
        match self {
            Script::Acquire
            | Script::RwAcquire
            | Script::FairAcquire
            | Script::Fence
            | Script::FenceClaim
            | Script::FenceQuorum
            | Script::RedissonLock
            | Script::RedissonFairLock
            | Script::RedissonReadLock
            | Script::RedissonWriteLock
            | Script::SemAcquire
            | Script::SemFairAcquire => false,
            Script::Release
            | Script::Renew
            | Script::ForceRelease
            | Script::RwRelease
            | Script::RwRenew
            | Script::RwCancel
            | Script::FairCancel
            | Script::FenceGet
            | Script::FenceUndo
            | Script::Inspect
            | Script::RedissonUnlock
            | Script::RedissonRenew
            | Script::RedissonFairUnlock
            | Script::RedissonFairCancel
            | Script::RedissonReadUnlock
            | Script::RedissonReadRenew
            | Script::RedissonWriteUnlock
            | Script::RedissonFairForceUnlock
            | Script::Announce
            | Script::SemRelease
            | Script::SemRenew
            | Script::Handoff
            | Script::SemFairCancel => true,
        }
    }
}

/// The prologues a function library defines once, at its head, where a script defines
/// them on every call: in the order a script's source may start with them. None keeps
/// state between calls.
const SHARED_PROLOGUES: [&str; 3] = [
    include_str!("record.lua"),
    include_str!("fence_prologue.lua"),
    include_str!("release_prologue.lua"),
];

/// Every script as a function of one Redis Functions library (Redis 7.0 and later,
/// Valkey), loaded with `FUNCTION LOAD REPLACE` and called with `FCALL` (`exec.rs`).
/// The library's name carries a hash of every script's source, so builds whose scripts
/// differ load libraries of their own side by side (a rolling upgrade), and loading the
/// same build's library again changes nothing.
pub(crate) struct Library {
    /// The library's code, `#!lua name=...` first.
    pub(crate) source: String,
    /// Each script's function name, by `Script as usize`.
    functions: [String; 35],
}

pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let all: String = Script::ALL.iter().map(|s| s.sha()).collect();
    let name = format!("distlock_{}", &redis::Script::new(&all).get_hash()[..12]);
    let functions = Script::ALL.map(|s| format!("{name}_{}", s.name()));
    let mut source = format!("#!lua name={name}\n");
    for p in SHARED_PROLOGUES {
        source.push_str(p);
    }
    for s in Script::ALL {
        let mut body = s.source();
        for p in SHARED_PROLOGUES {
            body = body.strip_prefix(p).unwrap_or(body);
        }
        let flags = if s.runs_when_full() {
            "'allow-oom'"
        } else {
            ""
        };
        source.push_str(&format!(
            "redis.register_function{{function_name='{}', flags={{{flags}}}, callback=function(KEYS, ARGV)\n{body}\nend}}\n",
            functions[s as usize]
        ));
    }
    Library { source, functions }
});

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
