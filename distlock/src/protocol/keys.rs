//! Redis key names of a lock. Every key of one lock shares one hash tag, so one cluster slot.

use crate::terms::owner::Hold;
use crate::{LockError, LockKind};

/// Longest key accepted, in bytes.
/// Redisson's `fairLockWaitTimeout` (5 min): a fair waiter's allowance when it does not
/// wait (a try-once acquisition).
pub(crate) const REDISSON_FAIR_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

pub(crate) const MAX_KEY_LEN: usize = 1024;

/// The Redis names that make up one lock.
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    /// The key as the user gave it.
    pub user: String,
    /// The layout on Redis: which scripts and keys serve it.
    pub shape: Shape,
    /// distlock's own format or Redisson's.
    pub format: Format,
    /// The lock's main key: for a reentrant lock the hash `owner -> reentrancy count`, with
    /// the lease as its expiry (`PREFIX{KEY}`); for a fair lock the same layout under
    /// `PREFIX{KEY}:fair`; for a read-write lock the state hash `PREFIX{KEY}:rw`; for a
    /// semaphore the holders' zset `PREFIX{KEY}:sem`. The other keys of fair and read-write
    /// locks are derived from it (see `protocol/`).
    pub hash: String,
    /// Which counter the tokens come from ([`LockKeys::scoped`]; [`FenceScope::Key`]
    /// until then, and always in Redisson's format).
    pub fence_scope: FenceScope,
    /// Where the key's own counter starts on a server that has none, in µs (redlock and
    /// multi, for one attempt on all their nodes: `backend/quorum/ops.rs`); `None`: at
    /// the server's clock (`fence_prologue.lua`).
    pub seed_floor: Option<std::num::NonZeroU64>,
    /// The pub/sub channel a release is published on.
    pub channel: String,
    /// Holder information (`[backends.NAME] holder_info`, on by default in distlock's
    /// format): this holder's `host\tpid\tsite`, which the acquire scripts write, with the
    /// time and the token, with the lock itself (a reentrant or fair lock's record,
    /// `record.lua`; a read-write lock's hash, `i:<owner id>`), where it goes with the hold.
    /// `None`: the backend does not record holders.
    pub holder: Option<std::sync::Arc<str>>,
    /// A run-once job's `hold_at_least` (reentrant locks only): a new holder records the
    /// server time it may release at (`hold:until`), and a release before then keeps the
    /// lock, without a holder, until that time.
    pub hold_at_least: Option<std::time::Duration>,
    /// The tag of the acquiring backend (`crate::backend::Backend::tag`), set on a fresh
    /// acquisition of a reentrant lock of distlock's format ([`LockKeys::leaves_its_tag`]):
    /// its refused attempts leave it in the lock, so that the release publishes, and the
    /// holder's process, when it hands off, knows a waiter of another process is there
    /// (`acquire.lua`).
    pub handoff_tag: Option<std::sync::Arc<str>>,
}

/// The layout of a lock on Redis, one variant per family of scripts. Every function that
/// builds a call or serves a lock in memory matches on it exhaustively.
#[derive(Debug, Clone)]
pub(crate) enum Shape {
    /// A reentrant lock: the hash `owner -> count` (`acquire.lua`, `release.lua`).
    Reentrant,
    /// A fair lock: the same hash under `:fair`, with a queue (`fair_*.lua`).
    Fair,
    /// The read side of a read-write lock (`rw_*.lua`).
    Read,
    /// The write side of a read-write lock (`rw_*.lua`).
    Write,
    /// A semaphore: the holders' zset and counts hash (`sem_*.lua`). Boxed: every held
    /// lease keeps its keys, and most are locks.
    Semaphore(Box<SemKeys>),
}

impl Shape {
    /// The shape of a lock of `kind`.
    pub(crate) fn of(kind: LockKind) -> Shape {
        match kind {
            LockKind::Reentrant => Shape::Reentrant,
            LockKind::Fair => Shape::Fair,
            LockKind::Read => Shape::Read,
            LockKind::Write => Shape::Write,
        }
    }

    /// What a semaphore's main key adds to the key's `PREFIX{KEY}`.
    const SEMAPHORE_SUFFIX: &'static str = ":sem";

    /// What the shape's main key adds to the key's `PREFIX{KEY}` (distlock's format).
    fn suffix(&self) -> &'static str {
        match self {
            Shape::Reentrant => "",
            Shape::Fair => ":fair",
            Shape::Read | Shape::Write => ":rw",
            Shape::Semaphore(_) => Shape::SEMAPHORE_SUFFIX,
        }
    }

    /// The lock kind of this shape; `None` for a semaphore.
    pub(crate) fn lock_kind(&self) -> Option<LockKind> {
        match self {
            Shape::Reentrant => Some(LockKind::Reentrant),
            Shape::Fair => Some(LockKind::Fair),
            Shape::Read => Some(LockKind::Read),
            Shape::Write => Some(LockKind::Write),
            Shape::Semaphore(_) => None,
        }
    }

    /// Whether a waiter of this shape queues in the backend (and must leave the queue).
    pub(crate) fn queues(&self) -> bool {
        match self {
            Shape::Semaphore(sem) => sem.fair,
            Shape::Reentrant | Shape::Fair | Shape::Read | Shape::Write => {
                self.lock_kind().is_some_and(LockKind::queues)
            }
        }
    }

    /// Whether it is the lock kind `kind`.
    pub(crate) fn is(&self, kind: LockKind) -> bool {
        self.lock_kind() == Some(kind)
    }

    /// Whether it is either side of a read-write lock.
    pub(crate) fn is_rw(&self) -> bool {
        matches!(self, Shape::Read | Shape::Write)
    }
}

/// The on-Redis format of a lock.
#[derive(Debug, Clone)]
pub(crate) enum Format {
    /// distlock's own layout (`PREFIX{KEY}...`).
    Distlock,
    /// Redisson's: `hash` is then the name itself, `channel`
    /// `redisson_lock__channel:{name}`, `fence` the fenced lock's
    /// `redisson_lock_token:{name}`. Boxed, like a semaphore's keys.
    Redisson(Box<RedissonKeys>),
}

impl Format {
    /// Whether it is Redisson's format.
    pub(crate) fn is_redisson(&self) -> bool {
        matches!(self, Format::Redisson(_))
    }

    /// The undo `hold` as sent again after its first answer (`backend/undo.rs`): in
    /// distlock's format the same (its level's mark tells a second run from the first);
    /// in Redisson's under a new unlock request id, since its unlock latch answers a
    /// request id from its first run, which found nothing to release.
    pub(crate) fn undo_sent_again(&self, hold: Hold) -> Hold {
        match self {
            Format::Distlock => hold,
            Format::Redisson(_) => hold.renumbered(),
        }
    }

    /// Whether an attempt whose outcome is unknown (an error) is retried under a new owner
    /// field: Redisson's format cannot tell a retry from a re-entry (no level marks), so
    /// the field the attempt may have taken is released and the retry takes its own;
    /// distlock's sends the same level again, which a first run is found by.
    pub(crate) fn retries_under_a_new_field(&self) -> bool {
        match self {
            Format::Distlock => false,
            Format::Redisson(_) => true,
        }
    }

    /// Whether a nested acquisition (`nested`: under a hold of this task) whose outcome is
    /// unknown must be left as it is rather than released: in Redisson's format it counts
    /// on the owner's field shared with the outer hold, and a "release to be safe" could
    /// take the outer hold's count instead (its possible extra count ends with the lease).
    pub(crate) fn keeps_an_unknown_nested_outcome(&self, nested: bool) -> bool {
        match self {
            Format::Distlock => false,
            Format::Redisson(_) => nested,
        }
    }
}

/// Redisson's default `lockWatchdogTimeout`: the longest lease a reader may have in
/// Redisson's format. Readers share one hash, and a Java reader's watchdog sets its expiry
/// to *its* lease (`pexpire`, not only extending) every third of it; a distlock reader
/// with a longer lease would see the hash expire under it (a writer getting in) once that
/// Java reader dies, without being told. With leases of at most this, a Java renewal can
/// only move the expiry later than any distlock reader's lease end. (A Java client whose
/// `lockWatchdogTimeout` is shorter shortens the bound to it: give distlock's readers
/// leases, `watchdog_timeout` or fixed, of at most that.)
pub(crate) const REDISSON_READ_LEASE_MAX: std::time::Duration = std::time::Duration::from_secs(30);

impl LockKeys {
    /// The longest lease this lock takes, when shorter than `crate::MAX_LEASE`: a
    /// Redisson-format read lock's [`REDISSON_READ_LEASE_MAX`].
    pub(crate) fn lease_limit(&self) -> Option<std::time::Duration> {
        match (&self.format, &self.shape) {
            (Format::Redisson(_), Shape::Read) => Some(REDISSON_READ_LEASE_MAX),
            (Format::Redisson(_), Shape::Reentrant | Shape::Fair | Shape::Write)
            | (Format::Redisson(_), Shape::Semaphore(_))
            | (Format::Distlock, _) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct SemKeys {
    /// The hash `PREFIX{KEY}:sem:n`: holder id -> permits, `t:<holder id>` -> token.
    pub counts: String,
    /// The permits this acquisition takes.
    pub permits: u32,
    /// The number of permits of the semaphore, as this acquisition sees it.
    pub limit: u32,
    /// Whether waiters queue (first come, first served: `sem_fair_acquire.lua`, its keys
    /// [`LockKeys::extra`]).
    pub fair: bool,
    /// A forced release of one holder only (`Semaphore::force_unlock_holder`): its id.
    pub only_holder: Option<String>,
}

/// What a lock in Redisson's format needs besides its names (`protocol/redisson/*.lua`).
#[derive(Debug, Clone)]
pub(crate) struct RedissonKeys {
    /// The lease of this acquisition: the expiry an unlock keeps for the holds left.
    pub lease: std::time::Duration,
    /// A fair waiter's allowance (`RedissonFairLock`'s per-waiter wait): the acquisition's
    /// `wait`, or Redisson's `fairLockWaitTimeout` for a try-once acquisition. The same
    /// value goes to the queueing and to the cancel of one acquisition.
    pub allowance: std::time::Duration,
}

/// Which counter the fencing tokens of distlock's format come from. Tokens only need to
/// grow from holder to holder of one key, and a counter shared by many keys does that; it
/// also spares every new key a counter of its own (a key created, `TIME`, an expiry: the
/// bulk of a first acquisition's cost, and a key that stays a day).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FenceScope {
    /// The key's own counter, `PREFIX{KEY}:fence`: redlock and multi. Their token is the
    /// largest of several nodes' counters, and a node's counter that lags is raised by a
    /// second round trip; a key's counters on the nodes move together, while a shared
    /// counter would move with other keys' acquisitions, in another order on each node.
    /// A new key's counters start from the acquiring client's clock
    /// ([`LockKeys::seed_floor`]), so that they start equal.
    Key,
    /// One counter per server, `PREFIX{{fence}`: single and sentinel.
    Server,
    /// One counter per cluster slot, `PREFIX{{fence:N}`, whose hash tag `{fence:N` falls
    /// in the lock's slot (a script may only touch the keys of one slot): cluster.
    Slot,
}

impl LockKeys {
    /// Names for `key` under `prefix`: `PREFIX{KEY}`, `PREFIX{KEY}:fence`, `PREFIX{KEY}:released`.
    ///
    /// A key holding `{` or `}` would break that hash tag, so it gets a tag of its own
    /// derived from the key (`PREFIX{#HASH}KEY`): still one slot per lock, still injective.
    pub(crate) fn new(prefix: &str, key: String) -> Result<LockKeys, LockError> {
        if key.is_empty() {
            return Err(LockError::InvalidKey {
                key,
                reason: "the key is empty".into(),
            });
        }
        if key.len() > MAX_KEY_LEN {
            return Err(LockError::InvalidKey {
                reason: format!(
                    "the key is {} bytes long; at most {MAX_KEY_LEN} are allowed",
                    key.len()
                ),
                key,
            });
        }
        let hash = if key.contains(['{', '}']) {
            format!("{prefix}{{#{:016x}}}{key}", fnv1a(key.as_bytes()))
        } else {
            format!("{prefix}{{{key}}}")
        };
        Ok(LockKeys {
            fence_scope: FenceScope::Key,
            seed_floor: None,
            channel: format!("{hash}:released"),
            hash,
            user: key,
            shape: Shape::Reentrant,
            format: Format::Distlock,
            holder: None,
            hold_at_least: None,
            handoff_tag: None,
        })
    }

    /// Names of the semaphore on `key` (`PREFIX{KEY}:sem`, `PREFIX{KEY}:sem:n`, channel
    /// `PREFIX{KEY}:sem:released`; the fencing counter shared with the locks of the key),
    /// for an acquisition of `permits` out of `limit`; `fair`: waiters queue.
    pub(crate) fn semaphore(
        prefix: &str,
        key: String,
        permits: u32,
        limit: u32,
        fair: bool,
    ) -> Result<LockKeys, LockError> {
        let mut keys = LockKeys::new(prefix, key)?;
        keys.hash.push_str(Shape::SEMAPHORE_SUFFIX);
        keys.channel = format!("{}:released", keys.hash);
        keys.shape = Shape::Semaphore(Box::new(SemKeys {
            counts: format!("{}:n", keys.hash),
            permits,
            limit,
            fair,
            only_holder: None,
        }));
        Ok(keys)
    }

    /// Names of the reentrant (fenced) lock `name` in Redisson's format: the lock hash is
    /// the name itself (no `key_prefix`), the channel and the token counter are derived
    /// with `RedissonObject.prefixName` (`prefix:{name}`, or `prefix:name` when the name
    /// has a `{`, whose tag then picks the slot). A name whose `{` opens no valid hash tag
    /// is refused: its derived keys would land in other cluster slots than the lock.
    ///
    /// By `kind`: the reentrant and fair locks share the hash and the channel stem
    /// `redisson_lock__channel:{name}` (a fair waiter listens on `<stem>:<owner field>`);
    /// read and write locks share the hash (field `mode`) and `redisson_rwlock:{name}`.
    pub(crate) fn redisson(
        name: String,
        kind: LockKind,
        lease: std::time::Duration,
    ) -> Result<LockKeys, LockError> {
        let mut keys = LockKeys::new("", name)?;
        if keys.user.contains('{') && !has_hash_tag(&keys.user) {
            return Err(LockError::InvalidKey {
                key: keys.user,
                reason: "with protocol = \"redisson\" a name holding `{` needs a non-empty `{tag}` (Redisson derives the channel and token names as `prefix:name`, which only share the lock's cluster slot through that tag)".into(),
            });
        }
        keys.hash = keys.user.clone();
        keys.shape = Shape::of(kind);
        keys.channel = match kind {
            LockKind::Reentrant | LockKind::Fair => {
                redisson_name("redisson_lock__channel", &keys.user)
            }
            LockKind::Read | LockKind::Write => redisson_name("redisson_rwlock", &keys.user),
        };
        keys.format = Format::Redisson(Box::new(RedissonKeys {
            lease,
            allowance: REDISSON_FAIR_WAIT,
        }));
        Ok(keys)
    }

    /// The unlock latch of one unlock request (`redisson_unlock_latch:{name}:<request>`).
    pub(crate) fn redisson_latch(&self, request: &str) -> String {
        format!(
            "{}:{request}",
            redisson_name("redisson_unlock_latch", &self.user)
        )
    }

    /// The channel a waiter for this lock listens on: a Redisson fair waiter on its own
    /// `redisson_lock__channel:{name}:<owner field>` (the release wakes the queue's head
    /// only), every other waiter on [`LockKeys::channel`].
    pub(crate) fn wait_channel(&self, owner: crate::terms::owner::OwnerId) -> String {
        if self.waits_on_its_own_channel() {
            format!("{}:{}", self.channel, owner.redisson_field())
        } else {
            self.channel.clone()
        }
    }

    /// Whether a refused acquisition leaves its backend's tag in the lock, and a release
    /// publishes only when one is there ([`LockKeys::handoff_tag`]): distlock's reentrant
    /// lock, whose record (`record.lua`) keeps the tags. A fair lock's waiters are in its
    /// queue instead, and its release always publishes; the other kinds' scripts publish
    /// by their own rules; Redisson's format is Redisson's.
    pub(crate) fn leaves_its_tag(&self) -> bool {
        let shape = match &self.shape {
            Shape::Reentrant => true,
            Shape::Fair | Shape::Read | Shape::Write | Shape::Semaphore(_) => false,
        };
        let format = match &self.format {
            Format::Distlock => true,
            Format::Redisson(_) => false,
        };
        shape && format
    }

    /// Whether each waiter listens on a channel of its own (a Redisson fair lock's: a
    /// release wakes the queue's head only), not on the lock's [`LockKeys::channel`].
    pub(crate) fn waits_on_its_own_channel(&self) -> bool {
        matches!(
            (&self.format, &self.shape),
            (Format::Redisson(_), Shape::Fair)
        )
    }

    /// A waiter that waits `wait` (capped at `MAX_WAIT`; zero: tries once): a Redisson fair
    /// waiter's place in the queue lasts that long, as Redisson's `tryLock(waitTime, ...)`
    /// passes it (a try-once keeps `fairLockWaitTimeout`). Nothing for another format.
    pub(crate) fn set_allowance(&mut self, wait: std::time::Duration) {
        if let Format::Redisson(r) = &mut self.format {
            if !wait.is_zero() {
                r.allowance = wait;
            }
        }
    }

    /// Under `protocol = "redisson"`, what the read lock's per-hold timeout keys start
    /// with (`RedissonReadLock.getKeyPrefix`): `{name}`, or the bare name when it holds a
    /// `{`; hold i of owner f is `<stem>:<f>:rwlock_timeout:<i>`.
    pub(crate) fn redisson_rw_stem(&self) -> String {
        if self.user.contains('{') {
            self.user.clone()
        } else {
            format!("{{{}}}", self.user)
        }
    }

    /// Names for a lock of `kind` on `key`. Fair and read-write locks have Redis keys of
    /// their own (`PREFIX{KEY}:fair...`, `PREFIX{KEY}:rw...`, with channels
    /// `PREFIX{KEY}:fair:released` and `PREFIX{KEY}:rw:released`), so they never exclude
    /// the reentrant lock of the same key; all kinds share the fencing counter
    /// `PREFIX{KEY}:fence` and the hash tag.
    pub(crate) fn for_kind(
        prefix: &str,
        key: String,
        kind: LockKind,
    ) -> Result<LockKeys, LockError> {
        let mut keys = LockKeys::new(prefix, key)?;
        if kind == LockKind::Reentrant {
            return Ok(keys);
        }
        keys.shape = Shape::of(kind);
        keys.hash.push_str(keys.shape.suffix());
        keys.channel = format!("{}:released", keys.hash);
        Ok(keys)
    }

    /// Take the tokens of distlock's format from the counter of `scope`. Redisson's format
    /// keeps its own counter.
    pub(crate) fn scoped(mut self, scope: FenceScope) -> LockKeys {
        if let Format::Distlock = self.format {
            self.fence_scope = scope;
        }
        self
    }

    /// The counter an acquisition draws its token from, and the key's own counter when
    /// that is another one: every acquisition of earlier builds of distlock drew from it,
    /// and the acquire scripts draw above it while it lives (at most 24 h after such a
    /// build started it) and raise it to what they draw, so that processes of both builds
    /// on one key, as in a rolling upgrade, still give growing tokens. Worked out per call
    /// (a held lease keeps only the scope): the server's `PREFIX{{fence`, the slot's
    /// `PREFIX{{fence:N}` (`PREFIX` is what comes before the hash's `{`: a `key_prefix`
    /// has none). Their tags start with `{`, which no lock key's tag does (a key holding a
    /// brace gets the tag `{#HASH}`): no user key ever names a counter, and an
    /// application's own keys are unlikely to, even under an empty `key_prefix`.
    pub(crate) fn counters(&self) -> (String, Option<String>) {
        let prefix = || &self.hash[..self.hash.find('{').unwrap_or(0)];
        let shared = match (&self.format, self.fence_scope) {
            (Format::Redisson(_), _) | (Format::Distlock, FenceScope::Key) => {
                return (self.fence(), None)
            }
            (Format::Distlock, FenceScope::Server) => format!("{}{{{{fence}}", prefix()),
            (Format::Distlock, FenceScope::Slot) => {
                use crate::protocol::slot::{counter_tag, slot, COUNTER_TAG};
                let n = counter_tag(slot(self.hash.as_bytes()));
                format!("{}{{{COUNTER_TAG}{n}}}", prefix())
            }
        };
        (shared, Some(self.fence()))
    }

    /// The key's own fencing counter: `PREFIX{KEY}:fence`, Redisson's
    /// `redisson_lock_token:{name}` in its format. The acquire scripts draw the tokens
    /// from it, or from the server's or the slot's counter ([`LockKeys::fence_scope`],
    /// [`LockKeys::counters`]). Made when asked, not kept: every held lease keeps its
    /// keys, and only an acquisition needs this one.
    pub(crate) fn fence(&self) -> String {
        match &self.format {
            Format::Redisson(_) => redisson_name("redisson_lock_token", &self.user),
            Format::Distlock => {
                let suffix = self.shape.suffix();
                let key = self.hash.strip_suffix(suffix).unwrap_or(&self.hash);
                format!("{key}:fence")
            }
        }
    }

    /// Record holder information as `holder` (`host\tpid\tsite`).
    pub(crate) fn with_holder(mut self, holder: std::sync::Arc<str>) -> LockKeys {
        self.holder = Some(holder);
        self
    }

    /// The other Redis keys of a fair or read-write lock (all derived from `hash`, so in its
    /// slot): fair lock and fair semaphore: the wait queue (list) and the waiters' deadlines
    /// (zset); read-write: the readers' lease ends (zset) and the waiting writers' deadlines
    /// (zset).
    /// Under `protocol = "redisson"` the fair lock's are `redisson_lock_queue:{name}` and
    /// `redisson_lock_timeout:{name}`; the read-write lock has none (its per-hold keys are
    /// named by holder, see [`LockKeys::redisson_rw_stem`]).
    pub(crate) fn extra(&self) -> [String; 2] {
        if self.format.is_redisson() {
            return [
                redisson_name("redisson_lock_queue", &self.user),
                redisson_name("redisson_lock_timeout", &self.user),
            ];
        }
        match self.shape {
            Shape::Fair | Shape::Semaphore(_) => [
                format!("{}:queue", self.hash),
                format!("{}:waiters", self.hash),
            ],
            Shape::Reentrant | Shape::Read | Shape::Write => [
                format!("{}:readers", self.hash),
                format!("{}:writers", self.hash),
            ],
        }
    }
}

/// `RedissonObject.prefixName(prefix, name)`: `prefix:{name}`, or `prefix:name` when the
/// name has a `{`.
fn redisson_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Whether Redis hashes `name` by a tag: a `{` followed later by a `}` with something between.
fn has_hash_tag(name: &str) -> bool {
    name.find('{')
        .and_then(|open| name[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

/// 64-bit FNV-1a: stable across processes and versions, which the key layout needs.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The cluster hash tag of a Redis key, as Redis computes it (for tests and routing checks).
#[cfg(test)]
fn hash_tag(name: &str) -> &str {
    if let Some(open) = name.find('{') {
        if let Some(len) = name[open + 1..].find('}') {
            if len > 0 {
                return &name[open + 1..open + 1 + len];
            }
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_key_shares_one_tag() {
        let k = LockKeys::new("lock:", "order:42".into()).unwrap();
        assert_eq!(k.hash, "lock:{order:42}");
        assert_eq!(k.fence(), "lock:{order:42}:fence");
        assert_eq!(k.channel, "lock:{order:42}:released");
        assert_eq!(hash_tag(&k.hash), "order:42");
        assert_eq!(hash_tag(&k.fence()), "order:42");
    }

    #[test]
    fn braces_get_their_own_tag() {
        for key in ["a{b}c", "}x", "{", "{}", "x}{y"] {
            let k = LockKeys::new("lock:", key.into()).unwrap();
            let tag = hash_tag(&k.hash);
            assert!(tag.starts_with('#'), "{key}: {}", k.hash);
            assert_eq!(hash_tag(&k.fence()), tag);
            assert_eq!(hash_tag(&k.channel), tag);
            assert!(k.hash.ends_with(key));
        }
        let a = LockKeys::new("lock:", "a{b}".into()).unwrap();
        let b = LockKeys::new("lock:", "a{c}".into()).unwrap();
        assert_ne!(a.hash, b.hash);
    }

    #[test]
    fn shared_fencing_counters() {
        use crate::protocol::slot::slot;
        let key = |k: &str| LockKeys::new("lock:", k.into()).unwrap();
        let k = key("order:42").scoped(FenceScope::Key);
        assert_eq!(k.counters(), ("lock:{order:42}:fence".into(), None));
        let k = key("order:42").scoped(FenceScope::Server);
        assert_eq!(
            k.counters(),
            ("lock:{{fence}".into(), Some("lock:{order:42}:fence".into()))
        );
        // No lock key is named like a shared counter, whatever its user key.
        for user in ["{fence}", "{fence:1}", "{{fence}", "fence", "#fence"] {
            let k = key(user);
            assert!(!k.hash.starts_with("lock:{{"), "{}", k.hash);
        }
        for user in ["order:42", "a{b}c", "x", "{"] {
            for kind in [LockKind::Reentrant, LockKind::Fair, LockKind::Write] {
                let k = LockKeys::for_kind("app:", user.into(), kind)
                    .unwrap()
                    .scoped(FenceScope::Slot);
                let (fence, legacy) = k.counters();
                assert!(fence.starts_with("app:{{fence:"), "{fence}");
                assert_eq!(slot(fence.as_bytes()), slot(k.hash.as_bytes()), "{user}");
                let legacy = legacy.unwrap();
                assert_eq!(slot(legacy.as_bytes()), slot(k.hash.as_bytes()));
            }
        }
        let r = LockKeys::redisson(
            "o".into(),
            LockKind::Reentrant,
            std::time::Duration::from_secs(30),
        )
        .unwrap()
        .scoped(FenceScope::Server);
        assert_eq!(r.counters(), ("redisson_lock_token:{o}".into(), None));
    }

    #[test]
    fn bad_keys() {
        assert!(matches!(
            LockKeys::new("p", String::new()),
            Err(LockError::InvalidKey { .. })
        ));
        let long = "x".repeat(MAX_KEY_LEN + 1);
        let err = LockKeys::new("p", long).unwrap_err();
        assert!(err.to_string().contains("at most 1024"), "{err}");
    }

    #[test]
    fn redisson_names() {
        let d = std::time::Duration::from_secs(30);
        let k = LockKeys::redisson("order:42".into(), LockKind::Reentrant, d).unwrap();
        assert_eq!(k.hash, "order:42");
        assert_eq!(k.channel, "redisson_lock__channel:{order:42}");
        assert_eq!(k.fence(), "redisson_lock_token:{order:42}");
        assert_eq!(
            k.redisson_latch("ab"),
            "redisson_unlock_latch:{order:42}:ab"
        );
        let t = LockKeys::redisson("a{t}b".into(), LockKind::Reentrant, d).unwrap();
        assert_eq!(t.channel, "redisson_lock__channel:a{t}b");
        assert_eq!(hash_tag(&t.channel), hash_tag(&t.hash));
        let f = LockKeys::redisson("order:42".into(), LockKind::Fair, d).unwrap();
        assert_eq!(f.hash, "order:42");
        assert_eq!(
            f.extra(),
            [
                "redisson_lock_queue:{order:42}".to_string(),
                "redisson_lock_timeout:{order:42}".to_string()
            ]
        );
        let o = crate::terms::owner::OwnerId::random();
        assert_eq!(
            f.wait_channel(o),
            format!("redisson_lock__channel:{{order:42}}:{}", o.redisson_field())
        );
        assert_eq!(k.wait_channel(o), k.channel);
        let rw = LockKeys::redisson("order:42".into(), LockKind::Write, d).unwrap();
        assert_eq!(rw.channel, "redisson_rwlock:{order:42}");
        assert_eq!(rw.redisson_rw_stem(), "{order:42}");
        let rwt = LockKeys::redisson("a{t}b".into(), LockKind::Read, d).unwrap();
        assert_eq!(rwt.redisson_rw_stem(), "a{t}b");
        assert_eq!(rwt.channel, "redisson_rwlock:a{t}b");
        for bad in ["a{b", "x{}y", ""] {
            assert!(matches!(
                LockKeys::redisson(bad.into(), LockKind::Reentrant, d),
                Err(LockError::InvalidKey { .. })
            ));
        }
    }

    #[test]
    fn kinds_have_their_own_keys_in_the_same_slot() {
        let rw = LockKeys::for_kind("lock:", "k".into(), LockKind::Read).unwrap();
        assert_eq!(rw.hash, "lock:{k}:rw");
        assert_eq!(rw.fence(), "lock:{k}:fence");
        assert_eq!(rw.channel, "lock:{k}:rw:released");
        assert_eq!(rw.extra()[0], "lock:{k}:rw:readers");
        let fair = LockKeys::for_kind("lock:", "k".into(), LockKind::Fair).unwrap();
        assert_eq!(fair.hash, "lock:{k}:fair");
        assert_eq!(fair.extra()[0], "lock:{k}:fair:queue");
        for name in rw.extra().iter().chain(fair.extra().iter()) {
            assert_eq!(hash_tag(name), "k");
        }
        let sem = LockKeys::semaphore("lock:", "k".into(), 1, 4, false).unwrap();
        assert_eq!(sem.hash, "lock:{k}:sem");
        assert_eq!(sem.channel, "lock:{k}:sem:released");
        assert_eq!(sem.fence(), "lock:{k}:fence");
        let Shape::Semaphore(k) = &sem.shape else {
            panic!("a semaphore's keys")
        };
        let counts = &k.counts;
        assert_eq!(counts, "lock:{k}:sem:n");
        assert_eq!(hash_tag(counts), "k");
    }
}
