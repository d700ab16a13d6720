//! The errors a lock operation and start-up can return, the drivers' one error type that
//! becomes them ([`backend`]), and what the protocol says of a reply it cannot read
//! ([`reply`]). Below the protocol and the backends, which both produce them; above only
//! `terms/` (a lock error names its [`LockKind`](crate::terms::kind::LockKind)).

pub(crate) mod backend;
pub(crate) mod reply;

use std::time::Duration;

/// Why a lock operation failed. Every variant names the key or backend concerned.
///
/// `Debug` prints the same text as `Display` (a `main` returning `Result<(), Box<dyn Error>>`
/// prints errors with `Debug`); match on the variants for the fields.
///
/// ```
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// # let registry = distlock::Registry::from_str("[backends.main]\nmode = \"memory\"").await?;
/// use distlock::LockError;
/// let guard = registry.lock("order:42").acquire().await?;
/// match registry.lock("order:42").wait(std::time::Duration::ZERO).acquire().await {
///     Err(LockError::Timeout { key, backend, .. }) => {
///         assert_eq!((key.as_str(), backend.as_str()), ("order:42", "main"));
///     }
///     other => panic!("{other:?}"),
/// }
/// # drop(guard); Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock was not acquired within the wait.
    #[error("timed out after {waited:?} waiting for lock `{key}` on backend `{backend}`")]
    #[non_exhaustive]
    Timeout {
        /// The lock's key, as the user wrote it.
        key: String,
        /// The backend's name.
        backend: String,
        /// How long was waited.
        waited: Duration,
        /// The holder's remaining lease when the wait ended, as the last acquire attempt
        /// reported it (`None`: not reported, e.g. by a quorum backend). With an auto-lease
        /// the holder's watchdog keeps renewing it, so this is an upper bound only for a
        /// fixed lease.
        holder_lease: Option<Duration>,
        /// The average time locks of this backend were held before release, in this
        /// process, recently (`None`: none released yet).
        recent_hold: Option<Duration>,
        /// What holds it, by kind, as far as this process can tell ([`HeldBy::Unknown`]
        /// when it cannot): a semaphore's permits, the leader of an election, a request
        /// through the same `distlock::tower::LockLayer`, a `distlock run` command. The
        /// HTTP responses of `distlock::web` say it in their message.
        held_by: HeldBy,
    },
    /// A run-once job ([`Lock::hold_at_least`](crate::Lock::hold_at_least), the attribute's
    /// `hold_at_least`) was not run here: another instance holds its lock, or ran it less
    /// than `hold_at_least` ago (on the Redis server's clock). Not a failure: the job ran,
    /// or is running, elsewhere; a scheduler should not retry it. [`LockError::is_skipped`]
    /// tells it apart; `try_acquire` answers `Ok(None)` instead.
    ///
    /// ```
    /// use distlock::{Lease, LockError, Registry};
    /// use std::time::Duration;
    /// # async fn f() -> Result<(), LockError> {
    /// let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let job = || {
    ///     registry
    ///         .lock("nightly-report")
    ///         .wait(Duration::ZERO)
    ///         .lease(Lease::Fixed(Duration::from_secs(600)))
    ///         .hold_at_least(Duration::from_secs(30))
    /// };
    /// job().run(async { /* the report */ }).await?;
    /// // Another instance firing the same schedule a second later skips it:
    /// let again = job().run(async { unreachable!() }).await;
    /// assert!(matches!(again, Err(LockError::Skipped { .. })));
    /// assert!(again.unwrap_err().is_skipped());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    #[error("skipped: lock `{key}` on backend `{backend}` is held, or was taken less than its hold_at_least ago (the job ran or runs elsewhere)")]
    #[non_exhaustive]
    Skipped {
        /// The lock's key.
        key: String,
        /// The backend's name.
        backend: String,
        /// How long until the lock can be taken again, as the last attempt reported it
        /// (`None`: not reported).
        free_in: Option<Duration>,
    },
    /// The lease ended while the lock was held: the renewal found the lock gone, or could
    /// not renew before the lease expired.
    #[error("lease of lock `{key}` on backend `{backend}` was lost: {reason}")]
    #[non_exhaustive]
    LeaseLost {
        /// The lock's key.
        key: String,
        /// The backend's name.
        backend: String,
        /// What happened.
        reason: String,
    },
    /// A release (or renewal) found that this owner no longer holds the lock.
    #[error("lock `{key}` on backend `{backend}` is not held by this owner (it expired or was released)")]
    #[non_exhaustive]
    NotHeld {
        /// The lock's key.
        key: String,
        /// The backend's name.
        backend: String,
    },
    /// A lock was used before `distlock::init` completed.
    #[error("distlock is not initialized: call distlock::init() (or init_from_path / init_from_str) first")]
    NotInitialized,
    /// No backend of that name is configured.
    #[error("no backend named `{backend}` is configured{}", known_list(.known))]
    #[non_exhaustive]
    NoSuchBackend {
        /// The name asked for.
        backend: String,
        /// The names that are configured.
        known: Vec<String>,
    },
    /// A lock names no backend, and the configuration has several backends and no
    /// `[defaults] backend`.
    #[error("no default backend: set `defaults.backend` to one of the configured backends ({}), or name one with `backend = \"...\"`", .known.join(", "))]
    NoDefaultBackend {
        /// The names that are configured.
        known: Vec<String>,
    },
    /// redlock/multi: too few nodes granted the lock.
    #[error("lock `{key}` on backend `{backend}`: quorum not reached: {granted} of {nodes} nodes granted, {needed} needed")]
    #[non_exhaustive]
    QuorumNotReached {
        /// The lock's key.
        key: String,
        /// The backend's name.
        backend: String,
        /// How many nodes granted.
        granted: usize,
        /// How many were needed.
        needed: usize,
        /// How many nodes there are.
        nodes: usize,
    },
    /// sentinel with `sync_replicas`: the master granted the lock, but fewer replicas than
    /// required acknowledged it within `sync_timeout`, so a failover could lose it. The lock
    /// was released again (or, if that failed too, is left to expire with its lease).
    #[error("lock `{key}` on backend `{backend}` ({address}): only {acked} of the {needed} replica(s) required acknowledged it within {timeout:?}; {}", if *.released { "it was released again" } else { "releasing it failed too, so it expires with its lease" })]
    #[non_exhaustive]
    ReplicationFailed {
        /// The lock's key.
        key: String,
        /// The backend's name.
        backend: String,
        /// The master's `host:port`.
        address: String,
        /// How many replicas acknowledged the write.
        acked: u32,
        /// How many were required (`sync_replicas`).
        needed: u32,
        /// How long was waited for them (`sync_timeout`).
        timeout: Duration,
        /// Whether the lock was released again.
        released: bool,
    },
    /// Redis failed or could not be reached.
    #[error("backend `{backend}` ({address}){}: {source}", key_suffix(.key))]
    #[non_exhaustive]
    Backend {
        /// The backend's name.
        backend: String,
        /// The server's `host:port` (never credentials).
        address: String,
        /// The lock's key, when one was concerned.
        key: Option<String>,
        /// What went wrong (opaque; see [`BackendError::kind`]).
        #[source]
        source: BackendError,
    },
    /// What was asked is not available on this backend: `kind` on `mode` in `format`
    /// (typed, to match on), and `reason` (why, and what to use instead).
    ///
    /// ```
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// # let registry = distlock::Registry::from_str("[backends.main]\nmode = \"memory\"").await?;
    /// use distlock::config::{ModeKind, Protocol};
    /// use distlock::{Feature, LockError};
    /// match registry.inspect("order:42", None).await {
    ///     Err(LockError::Unsupported { kind: Feature::Inspect, mode: ModeKind::Memory, format, .. }) => {
    ///         assert_eq!(format, Protocol::Distlock);
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    #[error("backend `{backend}`: {kind} is not supported on mode = \"{mode}\" with protocol = \"{format}\" ({reason})")]
    #[non_exhaustive]
    Unsupported {
        /// The backend's name.
        backend: String,
        /// What was asked.
        kind: Feature,
        /// The backend's on-Redis format (`protocol`).
        format: distlock_config::Protocol,
        /// The backend's mode.
        mode: distlock_config::ModeKind,
        /// Why it is not available, and what to use instead.
        reason: String,
    },
    /// The key cannot be used as a lock key.
    #[error("invalid lock key {key:?}: {reason}")]
    #[non_exhaustive]
    InvalidKey {
        /// The key as given.
        key: String,
        /// Why it was refused.
        reason: String,
    },
    /// A duration out of the range distlock accepts, refused before anything is sent: a
    /// fixed lease shorter than 1 ms or longer than [`MAX_LEASE`](crate::Lease::MAX) (24
    /// hours; `watchdog_timeout` for an auto lease), a `hold_at_least` below 1 ms or over
    /// the lease, a fence ttl below 1 ms or over 365 days. The ranges are one table
    /// ([`config::DurationUse`](crate::config::DurationUse)) checked alike by the builders,
    /// the attribute, the TOML configuration and the `distlock` command. Waits are never
    /// refused: they saturate at [`MAX_WAIT`](crate::Lock::MAX_WAIT).
    ///
    /// ```
    /// use distlock::{Lease, LockError, Registry};
    /// use std::time::Duration;
    /// # async fn f() {
    /// let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let err = registry.lock("job").lease(Lease::Fixed(Duration::MAX)).acquire().await;
    /// assert!(matches!(err, Err(LockError::InvalidDuration { .. })));
    /// # }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f());
    /// ```
    #[error("invalid {what} {} for lock `{key}` on backend `{backend}`: it must be {}", fmt_duration(*.value), distlock_config::range_text(*.min, *.limit))]
    #[non_exhaustive]
    InvalidDuration {
        /// The lock's key.
        key: String,
        /// The backend's name.
        backend: String,
        /// Which duration: `"lease"`, `"lease (watchdog_timeout)"`, `"hold_at_least"`
        /// (with a fixed lease: `"hold_at_least (longer than the fixed lease)"`), or
        /// `"fence ttl"` (then `key` is the fence's); a Redisson-format read lock's lease
        /// over 30 s names Redisson's `lockWatchdogTimeout`; on redlock and multi a lease
        /// with nothing left after the clock-drift allowance names that allowance.
        what: &'static str,
        /// The value given.
        value: Duration,
        /// The smallest value accepted.
        min: Duration,
        /// The largest value accepted.
        limit: Duration,
    },
    /// A semaphore asked for a number of permits it cannot have, refused before anything
    /// is sent (on every backend alike, memory included): a semaphore of 0 permits or of
    /// more than [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS), or an
    /// acquisition of 0 permits or of more than the semaphore has.
    ///
    /// ```
    /// use distlock::{LockError, Registry};
    /// # async fn f() {
    /// let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let err = registry.semaphore("export", 4).acquire(5).await;
    /// assert!(matches!(err, Err(LockError::InvalidPermits { .. })));
    /// # }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f());
    /// ```
    #[error("semaphore `{key}` on backend `{backend}`: cannot take {asked} of {permits} permit(s): {reason}")]
    #[non_exhaustive]
    InvalidPermits {
        /// The semaphore's key.
        key: String,
        /// The backend's name.
        backend: String,
        /// The permits asked for.
        asked: u32,
        /// The semaphore's number of permits.
        permits: u32,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The registry is shutting down ([`Registry::shutdown`](crate::Registry::shutdown),
    /// [`distlock::shutdown`](crate::shutdown)): an acquisition that was waiting when it
    /// began ends with this error, and every acquisition asked for afterwards is refused
    /// with it, before anything is sent. Not transient: this process will not take locks
    /// on this registry again; the HTTP mapping is a 503 (another instance can serve it).
    ///
    /// ```
    /// use distlock::{LockError, Registry};
    /// # async fn f() {
    /// let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// registry.shutdown().await;
    /// let err = registry.lock("job").acquire().await;
    /// assert!(matches!(err, Err(LockError::ShuttingDown { .. })));
    /// # }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f());
    /// ```
    #[error("lock `{key}` on backend `{backend}` was not acquired: the registry is shutting down")]
    #[non_exhaustive]
    ShuttingDown {
        /// The lock's key.
        key: String,
        /// The backend's name.
        backend: String,
    },
    /// A multi-key lock asked for by a task that already holds one of its keys, `held`,
    /// while it still needs `needs`, which sorts before it: taking `needs` after `held`
    /// breaks the global order every multi-key lock takes its keys in, and can deadlock
    /// with a task that holds `needs` and waits for `held`. Refused before anything is
    /// taken. Take the multi-key lock first (or only keys that sort after those held).
    ///
    /// ```
    /// use distlock::{LockError, Registry};
    /// # async fn f() {
    /// let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let b = registry.lock("b").acquire().await.unwrap();
    /// let err = b.scope(registry.lock_all(["a", "b"]).acquire()).await;
    /// assert!(matches!(err, Err(LockError::LockOrder { .. })));
    /// # }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f());
    /// ```
    #[error("backend `{backend}`: this task holds lock `{held}` and asks for the multi-key lock {keys:?}, which takes `{needs}` first (keys are taken in sorted order); taking `{needs}` after `{held}` can deadlock with a task holding `{needs}`: take the multi-key lock before `{held}`")]
    #[non_exhaustive]
    LockOrder {
        /// The key this task holds.
        held: String,
        /// The key it would have to take after it, which sorts before it.
        needs: String,
        /// The multi-key lock's keys, in the order they are taken.
        keys: Vec<String>,
        /// The backend's name.
        backend: String,
    },
    /// A nested acquisition of a name this task holds as a lock of another kind, where
    /// re-entering is not sound, refused at once, before anything is sent (waiting could
    /// only end in a `Timeout`, the task waiting for its own hold): a write lock asked for
    /// inside the task's read hold of the same key (there is no upgrade: the writer would
    /// wait for every reader to leave, this task's own read hold included), or, in
    /// Redisson's format, a reentrant or fair lock and a read-write lock of one name in one
    /// task (Redisson keeps both in the same hash, in two layouts). The rule for every
    /// pair of kinds is in docs/design.md ("Reentrancy").
    ///
    /// ```
    /// use distlock::{LockError, LockKind, Registry};
    /// # async fn f() {
    /// let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let read = registry.lock("doc").kind(LockKind::Read).acquire().await.unwrap();
    /// let err = read.scope(registry.lock("doc").kind(LockKind::Write).acquire()).await;
    /// assert!(matches!(
    ///     err,
    ///     Err(LockError::NestedKind { held: LockKind::Read, asked: LockKind::Write, .. })
    /// ));
    /// # }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f());
    /// ```
    #[error("lock `{key}` on backend `{backend}`: this task holds it as a {held:?} lock and asks for it as a {asked:?} lock: {reason}")]
    #[non_exhaustive]
    NestedKind {
        /// The lock's key.
        key: String,
        /// The backend's name.
        backend: String,
        /// The kind of the task's enclosing hold of the key.
        held: crate::LockKind,
        /// The kind asked for.
        asked: crate::LockKind,
        /// Why it is refused, and what to do instead.
        reason: &'static str,
    },
}

/// What holds a lock that an acquisition timed out on, by kind ([`LockError::Timeout`]'s
/// `held_by`): what the 409 answers of `distlock::web` and `distlock::tower` tell the
/// client, without naming the key.
///
/// ```
/// use distlock::error::HeldBy;
/// use distlock::{LockError, Registry};
/// use std::time::Duration;
/// # async fn f() -> Result<(), LockError> {
/// let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// let sem = registry.semaphore("export", 1);
/// let permit = sem.acquire(1).await?;
/// match sem.clone().wait(Duration::ZERO).acquire(1).await {
///     Err(LockError::Timeout { held_by, .. }) => assert_eq!(held_by, HeldBy::Permits),
///     other => panic!("{other:?}"),
/// }
/// # drop(permit); Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeldBy {
    /// Not known: another holder of the lock (another request, task, job or process).
    Unknown,
    /// A semaphore: all its permits are taken.
    Permits,
    /// An election's lock: the elected leader holds it.
    Leader,
    /// Another request taking the same lock at the same lock site (a
    /// `distlock::tower::LockLayer` of this service, on any instance), as the holder
    /// information recorded next to the lock says.
    Request,
    /// A `distlock run` command (an operator's or a scheduled job's), as the holder
    /// information recorded next to the lock says.
    Command,
    /// Another part of the service (a lock site other than the waiter's), as the holder
    /// information recorded next to the lock says.
    OtherSite,
}

impl HeldBy {
    /// How the 409 message names the holder: `"another holder"`, `"other holders (all
    /// permits are taken)"`, `"the elected leader"`, `"another request"`, `"a `distlock
    /// run` command"`, `"another part of the service"`.
    ///
    /// ```
    /// assert_eq!(distlock::error::HeldBy::Request.describe(), "another request");
    /// ```
    pub fn describe(self) -> &'static str {
        match self {
            HeldBy::Unknown => "another holder",
            HeldBy::Permits => "other holders (all of its permits are taken)",
            HeldBy::Leader => "the elected leader",
            HeldBy::Request => "another request",
            HeldBy::Command => "a `distlock run` command",
            HeldBy::OtherSite => "another part of the service",
        }
    }
}

/// A duration as written in the configuration (`"24h"`), or `Debug` beyond that syntax.
fn fmt_duration(d: Duration) -> String {
    if d.as_secs() > 100 * 365 * 86_400 {
        format!("{d:?}")
    } else {
        distlock_config::format_duration(d)
    }
}

fn user_shown(user: &Option<String>) -> String {
    match user {
        Some(u) => format!("`{u}`"),
        None => "`default`".to_owned(),
    }
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        String::new()
    } else {
        format!(" (configured: {})", known.join(", "))
    }
}

fn key_suffix(key: &Option<String>) -> String {
    match key {
        Some(k) => format!(", lock `{k}`"),
        None => String::new(),
    }
}

/// What a backend was asked for that it does not offer ([`LockError::Unsupported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feature {
    /// A lock of this kind.
    Lock(crate::LockKind),
    /// A semaphore ([`crate::Semaphore`]).
    Semaphore,
    /// Leader election ([`crate::Leader`]).
    Leader,
    /// Fenced values ([`crate::fence()`]).
    Fence,
    /// Inspecting locks (`Registry::inspect`, `distlock list|show`).
    Inspect,
    /// A lock held for at least a while (`Lock::hold_at_least`, run-once jobs).
    HoldAtLeast,
    /// Announcing on a channel (a leader's resignation).
    Announce,
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Feature::Lock(kind) => write!(f, "lock kind `{}`", kind.name()),
            Feature::Semaphore => f.write_str("semaphores"),
            Feature::Leader => f.write_str("leader election"),
            Feature::Fence => f.write_str("fenced values"),
            Feature::Inspect => f.write_str("inspecting locks"),
            Feature::HoldAtLeast => f.write_str("hold_at_least"),
            Feature::Announce => f.write_str("announcing"),
        }
    }
}

impl LockError {
    /// Whether trying again may succeed: the backend was unreachable, slow, or in a
    /// failover (`READONLY`, `LOADING`, `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`, no master
    /// named by the sentinels). Acquisitions retry these within their wait.
    pub fn is_transient(&self) -> bool {
        match self {
            LockError::Backend { source, .. } => source.is_transient(),
            _ => false,
        }
    }

    /// Whether this is [`LockError::Skipped`]: a run-once job that ran, or runs, on
    /// another instance. Not an error to retry or alert on.
    pub fn is_skipped(&self) -> bool {
        matches!(self, LockError::Skipped { .. })
    }

    /// The key concerned, when there is one.
    pub fn key(&self) -> Option<&str> {
        match self {
            LockError::Timeout { key, .. }
            | LockError::Skipped { key, .. }
            | LockError::LeaseLost { key, .. }
            | LockError::NotHeld { key, .. }
            | LockError::QuorumNotReached { key, .. }
            | LockError::ReplicationFailed { key, .. }
            | LockError::InvalidKey { key, .. }
            | LockError::InvalidDuration { key, .. }
            | LockError::InvalidPermits { key, .. }
            | LockError::NestedKind { key, .. } => Some(key),
            LockError::ShuttingDown { key, .. } => Some(key),
            LockError::LockOrder { needs, .. } => Some(needs),
            LockError::Backend { key, .. } => key.as_deref(),
            LockError::NotInitialized
            | LockError::NoSuchBackend { .. }
            | LockError::NoDefaultBackend { .. }
            | LockError::Unsupported { .. } => None,
        }
    }

    /// The backend concerned, when there is one.
    pub fn backend(&self) -> Option<&str> {
        match self {
            LockError::Timeout { backend, .. }
            | LockError::Skipped { backend, .. }
            | LockError::LeaseLost { backend, .. }
            | LockError::NotHeld { backend, .. }
            | LockError::QuorumNotReached { backend, .. }
            | LockError::ReplicationFailed { backend, .. }
            | LockError::Backend { backend, .. }
            | LockError::Unsupported { backend, .. }
            | LockError::InvalidDuration { backend, .. }
            | LockError::InvalidPermits { backend, .. }
            | LockError::LockOrder { backend, .. }
            | LockError::NestedKind { backend, .. }
            | LockError::ShuttingDown { backend, .. }
            | LockError::NoSuchBackend { backend, .. } => Some(backend),
            LockError::NotInitialized
            | LockError::NoDefaultBackend { .. }
            | LockError::InvalidKey { .. } => None,
        }
    }
}

/// Why `init` failed.
///
/// `Debug` prints the same text as `Display`, so `?` in a `main` that returns
/// `Result<(), Box<dyn Error>>` shows a readable message.
///
/// ```
/// # async fn f() {
/// let err = distlock::Registry::from_str("[backends.x]\nmode = \"bogus\"").await.unwrap_err();
/// assert!(err.to_string().contains("<string>:2"));
/// # }
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] distlock_config::ConfigError),
    /// A server answered at a backend's address, but not in the Redis protocol (an HTTP
    /// server, another service on that port).
    #[error("backend `{backend}`: the server at {address} does not speak Redis (its answer is not a Redis reply: {detail}); check the port in the URL")]
    NotRedis {
        /// The backend's name.
        backend: String,
        /// The address (`host:port`).
        address: String,
        /// What the client library made of the answer.
        detail: String,
    },
    /// A backend could not be reached.
    #[error("backend `{backend}`: cannot connect to {address}: {source}")]
    #[non_exhaustive]
    Connect {
        /// The backend's name.
        backend: String,
        /// The address that failed (`host:port`, never credentials).
        address: String,
        /// What went wrong (opaque; see [`BackendError::kind`]).
        #[source]
        source: BackendError,
    },
    /// A server refused the password of a backend's URL: the server's own answer and the
    /// user tried (`default` when the URL names none), never the password.
    #[error("backend `{backend}`: the server at {address} refused the password of user `{user}`: {answer} (check the user and password in the URL; the password is never shown)")]
    #[non_exhaustive]
    AuthRefused {
        /// The backend's name.
        backend: String,
        /// The server's `host:port`.
        address: String,
        /// The user tried (`default`: the URL names no user).
        user: String,
        /// The server's answer (`WRONGPASS invalid username-password pair or user is
        /// disabled.`).
        answer: String,
    },
    /// A backend's configuration cannot be used by this build or this mode.
    #[error("backend `{backend}`: {message}")]
    #[non_exhaustive]
    Unsupported {
        /// The backend's name.
        backend: String,
        /// What is unsupported.
        message: String,
    },
    /// A server of a backend runs a Redis version older than distlock needs
    /// ([`MIN_REDIS_VERSION`](crate::inspect::MIN_REDIS_VERSION)).
    #[error("backend `{backend}`: the server at {address} runs Redis {version}, which is too old: distlock needs Redis {minimum} or later: {needs}")]
    #[non_exhaustive]
    ServerTooOld {
        /// The backend's name.
        backend: String,
        /// The server's `host:port`.
        address: String,
        /// The version found (`older than 7.0` when only that is known).
        version: String,
        /// The oldest version distlock runs on (`7.0`).
        minimum: String,
        /// What needs the newer version.
        needs: String,
    },
    /// The ACL user of a backend's connection lacks rights distlock needs for its locks
    /// (checked at `init` with `redis.acl_check_cmd`, so that it fails here and not at the
    /// first lock; docs/backends.md has the whole `ACL SETUSER` line).
    #[error("backend `{backend}`: the ACL user {} at {address} lacks rights distlock needs: {}; grant them with `ACL SETUSER {} {}`", user_shown(.user), .missing.join("; "), .user.as_deref().unwrap_or("default"), .grant.join(" "))]
    #[non_exhaustive]
    MissingRights {
        /// The backend's name.
        backend: String,
        /// The server's `host:port`.
        address: String,
        /// The ACL user (`None`: not named in the URL: `default`).
        user: Option<String>,
        /// Each missing right with the command that needs it: `missing +hincrby`,
        /// `missing key permission ~lock:* (HSET lock:{distlock-check} f 1)`, `missing
        /// channel permission &lock:* (PUBLISH lock:{distlock-check}:released x)`.
        missing: Vec<String>,
        /// The `ACL SETUSER` arguments that grant them (`+hincrby ~lock:* &lock:*`).
        grant: Vec<String>,
    },
    /// `#[distributed_lock]` sites name backends the configuration does not have.
    #[error("{} lock site(s) do not match the configuration:\n  {}", .0.len(), .0.join("\n  "))]
    Sites(Vec<String>),
    /// distlock's background runtime could not be started (the OS refused a thread), or
    /// the connecting task on it ended abnormally.
    #[error("distlock's background runtime: {reason}")]
    Runtime {
        /// What failed.
        reason: String,
    },
    /// `init` was called twice.
    #[error("distlock is already initialized")]
    AlreadyInitialized,
}

/// The return type a `#[distributed_lock]` function needs: a `Result` whose error type a
/// [`LockError`] converts into (`E: From<LockError>`), so that a lock that is not acquired
/// in time, or whose lease is lost, is returned as the function's error.
///
/// It is implemented for every `Result<T, E>` with `E: From<LockError>`: `LockError`
/// itself, your crate's error type with an `impl From<LockError>`, `anyhow::Error`,
/// `Box<dyn Error + Send + Sync>`. A type of another crate without that impl (`String`,
/// `std::io::Error`) cannot be given it in your crate (the orphan rule): return your own
/// error type that wraps it instead.
///
/// ```
/// #[derive(Debug)]
/// enum AppError {
///     Lock(distlock::LockError),
///     Message(String),
/// }
///
/// impl From<distlock::LockError> for AppError {
///     fn from(e: distlock::LockError) -> Self {
///         AppError::Lock(e)
///     }
/// }
///
/// #[distlock::distributed_lock(key = "report:<day>")]
/// async fn report(day: u32) -> Result<String, AppError> {
///     if day == 0 {
///         return Err(AppError::Message("no day 0".into()));
///     }
///     Ok(format!("report {day}"))
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock]` returns lock errors as the function's error: `{Self}` needs an error type `E: From<distlock::LockError>`",
    label = "the error type of this `Result` has no `From<distlock::LockError>`",
    note = "return `Result<T, distlock::LockError>`, or an error type of your crate with `impl From<distlock::LockError> for YourError`; a type of another crate (such as `String`) cannot get that impl: wrap it in an error type of yours"
)]
pub trait LockResult {
    /// `Err(e.into())`.
    fn from_lock_error(e: LockError) -> Self;
}

#[diagnostic::do_not_recommend]
impl<T, E: From<LockError>> LockResult for Result<T, E> {
    #[inline(always)]
    fn from_lock_error(e: LockError) -> Self {
        Err(E::from(e))
    }
}

/// `Debug` as `Display`: what `main` prints when it returns the error.
macro_rules! debug_as_display {
    ($($t:ty),*) => {$(
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(self, f)
            }
        }
    )*};
}
debug_as_display!(LockError, InitError);

use self::backend::{BackendError, DriverError};

impl DriverError {
    /// The public error of a lock operation on `key` (if one) of backend `backend`.
    pub(crate) fn into_lock_error(self, backend: &str, key: Option<&str>) -> LockError {
        match self {
            DriverError::NotReplicated {
                address,
                acked,
                needed,
                timeout,
                released,
            } => LockError::ReplicationFailed {
                key: key.unwrap_or_default().to_owned(),
                backend: backend.to_owned(),
                address,
                acked,
                needed,
                timeout,
                released,
            },
            other => LockError::Backend {
                backend: backend.to_owned(),
                address: other.address(),
                key: key.map(str::to_owned),
                source: BackendError::new(other),
            },
        }
    }

    /// The public error of a backend that could not be connected at start-up. A command
    /// refused to the ACL user while connecting (`NOPERM`: `ROLE` on a sentinel master)
    /// is a missing right, named.
    pub(crate) fn into_init_error(self, backend: &str) -> InitError {
        if self.is_no_perm() {
            let detail = self
                .redis_error()
                .and_then(|e| e.detail())
                .unwrap_or_default()
                .to_owned();
            // "this user has no permissions to run the 'role' command"
            let command = detail
                .split('\'')
                .nth(1)
                .filter(|_| detail.contains("command"))
                .map(str::to_lowercase);
            return InitError::MissingRights {
                backend: backend.to_owned(),
                address: self.address(),
                user: None,
                missing: vec![match &command {
                    Some(c) => format!("missing +{c} ({detail})"),
                    None => detail.clone(),
                }],
                grant: command.map(|c| format!("+{c}")).into_iter().collect(),
            };
        }
        InitError::Connect {
            backend: backend.to_owned(),
            address: self.address(),
            source: BackendError::new(self),
        }
    }
}
