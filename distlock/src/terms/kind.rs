//! The lock kinds ([`LockKind`]): what a lock excludes and how its waiters are served.

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
