//! Lease and lock kinds.

use std::time::Duration;

/// [`Lease::MAX`].
pub(crate) const MAX_LEASE: Duration = distlock_config::MAX_LEASE;

/// [`Lock::MAX_WAIT`](crate::Lock::MAX_WAIT).
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(365 * 86_400);

/// `value` checked against the range of `what` (the one table of every entry point,
/// [`distlock_config::check_duration`]), as the `InvalidDuration` of lock `key` on
/// `backend`, whose `what` is `label`.
pub(crate) fn check_duration(
    what: distlock_config::DurationUse,
    label: &'static str,
    value: Duration,
    key: &str,
    backend: &str,
) -> Result<Duration, crate::LockError> {
    distlock_config::check_duration(what, value).map_err(|e| crate::LockError::InvalidDuration {
        key: key.to_owned(),
        backend: backend.to_owned(),
        what: label,
        value,
        min: e.min,
        limit: e.max,
    })
}

/// The lease of an acquisition (`len`: the fixed duration, or `watchdog_timeout` for an
/// auto lease) checked before anything is sent.
pub(crate) fn check_lease(
    lease: Lease,
    len: Duration,
    key: &str,
    backend: &str,
) -> Result<(), crate::LockError> {
    use distlock_config::DurationUse;
    match lease {
        Lease::Auto => check_duration(
            DurationUse::WatchdogTimeout,
            "lease (watchdog_timeout)",
            len,
            key,
            backend,
        ),
        Lease::Fixed(_) => check_duration(DurationUse::Lease, "lease", len, key, backend),
    }
    .map(|_| ())
}

/// How long a lock is held before it expires on its own.
///
/// ```
/// use distlock::Lease;
/// use std::time::Duration;
/// let auto = Lease::Auto; // renewed by the watchdog while held
/// let fixed = Lease::Fixed(Duration::from_secs(30)); // never renewed
/// assert_ne!(auto, fixed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// The lease is `watchdog_timeout` long and the backend's watchdog renews it every third
    /// of that while the guard is held, so a crashed holder frees the lock within
    /// `watchdog_timeout`.
    Auto,
    /// A fixed lease, never renewed: the lock expires this long after it was acquired.
    Fixed(Duration),
}

impl Lease {
    /// The longest lease accepted (a fixed lease, or `watchdog_timeout` for `Lease::Auto`):
    /// 24 hours. A longer one is refused with [`LockError::InvalidDuration`](crate::LockError)
    /// before anything is sent: a lock that outlives a crashed holder by more than a day is a
    /// wedge, not a lease (use `Lease::Auto` for long work: it is renewed while held). The
    /// scripts check the same bound before their first write.
    ///
    /// ```
    /// assert_eq!(distlock::Lease::MAX, std::time::Duration::from_secs(24 * 3600));
    /// ```
    pub const MAX: Duration = MAX_LEASE;
}

impl From<distlock_config::LeaseSpec> for Lease {
    fn from(l: distlock_config::LeaseSpec) -> Lease {
        match l {
            distlock_config::LeaseSpec::Auto => Lease::Auto,
            distlock_config::LeaseSpec::Fixed(d) => Lease::Fixed(d),
        }
    }
}

/// What sort of lock.
///
/// Fair and read-write locks work on the `single`, `cluster`, `sentinel` and `memory`
/// backends; on `redlock` and `multi` acquiring one returns `LockError::Unsupported`
/// (their state — a queue, a set of readers — would have to be agreed on across
/// independent masters). Each kind of a key is a lock of its own in Redis
/// (`PREFIX{KEY}`, `PREFIX{KEY}:fair…`, `PREFIX{KEY}:rw…`): a `Read`/`Write` lock and a
/// `Reentrant` lock of the same key do not exclude each other. All kinds of a key share its
/// fencing counter, so tokens grow strictly across them.
///
/// ```
/// use distlock::{LockKind, Registry};
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// // Many readers at once...
/// let r1 = registry.lock("doc:7").kind(LockKind::Read).acquire().await?;
/// let r2 = registry.lock("doc:7").kind(LockKind::Read).acquire().await?;
/// // ...but no writer while they read.
/// assert!(registry.lock("doc:7").kind(LockKind::Write).try_acquire().await?.is_none());
/// drop((r1, r2));
///
/// // A fair lock: waiters get it in the order they asked.
/// let report = registry.lock("report").kind(LockKind::Fair).acquire().await?;
/// report.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LockKind {
    /// Exclusive and reentrant within one task (the default).
    #[default]
    Reentrant,
    /// Exclusive and reentrant, granted in the order waiters asked: waiters queue in Redis
    /// (a list, with each waiter's deadline — the end of its own wait — in a zset). A free
    /// lock goes to the head of the queue only; a waiter that died is dropped from the
    /// queue when its deadline passes, one that gave up leaves it at once. A release wakes
    /// every waiter of the key in this process; all but the head go back to sleep.
    Fair,
    /// Shared with other readers, exclusive of writers. Each reader has a lease of its own
    /// (renewed by the watchdog with `Lease::Auto`), so a crashed reader stops counting
    /// when its lease ends. Writer-preferring: while a writer waits, new readers wait too
    /// (readers already holding it may re-enter). Reentrant within one task.
    Read,
    /// Exclusive of readers and writers; reentrant within one task. The writer may also
    /// take the read lock of its key (a downgrade: release the write lock and keep
    /// reading). There is no upgrade: a task asking for the write lock inside its own read
    /// hold of the key (holding no write lock further out) gets `LockError::NestedKind` at
    /// once; a reader of another owner asking for it waits like any writer.
    Write,
}

impl LockKind {
    /// Whether a waiter of this kind queues in the backend (fair and write locks), and so
    /// must leave the queue when it gives up.
    pub(crate) fn queues(self) -> bool {
        match self {
            LockKind::Fair | LockKind::Write => true,
            LockKind::Reentrant | LockKind::Read => false,
        }
    }

    /// The name used by the attribute's `kind = "..."`.
    pub fn name(&self) -> &'static str {
        match self {
            LockKind::Reentrant => "reentrant",
            LockKind::Fair => "fair",
            LockKind::Read => "read",
            LockKind::Write => "write",
        }
    }
}

/// What happens to the body of `Lock::run` (and of a `#[distributed_lock]` function) when
/// its auto-lease is lost while it runs: the renewal finds the lock gone (deleted, expired,
/// a Redis restart), or cannot renew it before it expires. From then on another owner may
/// hold the lock, so the body is no longer exclusive.
///
/// Neither choice makes a half-done body whole: a body that writes in several steps must
/// be cancel-safe (one transaction), or fence its writes with the lock's token
/// (`distlock::fencing_token()`), so that a stale holder's writes are refused.
///
/// ```
/// use distlock::{OnLost, Registry};
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// let done = registry
///     .lock("transfer:1")
///     .on_lost(OnLost::Signal)
///     .run(async {
///         // debit ...
///         distlock::lease_lost().check()?; // stop before the next step if lost
///         // credit ...
///         Ok::<_, distlock::LockError>("done")
///     })
///     .await??;
/// assert_eq!(done, "done");
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLost {
    /// The default: the body is dropped at its next `.await`, and the call returns
    /// `Err(LockError::LeaseLost { .. })`. Whatever the body did before that stays done.
    #[default]
    Cancel,
    /// The body keeps running to its end and its result is returned; the loss is visible
    /// to it through `distlock::lease_lost()` (and to a guard's holder through
    /// `LockGuard::lost`/`is_held`). The body decides: check before each irreversible
    /// step and return an error, or finish what cannot be left half done.
    Signal,
}
