//! The lock builder: `Lock::new(key)...acquire()`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;
pub(crate) use crate::obs::sites::LockSite;
use crate::ops::target::Target;
use crate::primitives::acquire::Request;
use crate::primitives::guard::LockGuard;
use crate::registry::Registry;
use crate::{Lease, LockError, LockKind, OnLost};

/// A lock to acquire: a key, and how to wait and lease it.
///
/// `Lock::new` uses the registry set up by `distlock::init`; `Registry::lock` uses a given one.
///
/// **Who gets it next.** When a holder releases a reentrant lock that another task of the
/// same process waits for, the release hands it to that task directly, in the same script
/// (direct hand-off: one round trip per owner change, FIFO among this process's waiters);
/// waiters in other processes are woken by a PUBLISH when a release frees the lock with no
/// local waiter. So a local waiter may go before a remote one that waited longer: for
/// strict first-come order across processes use [`LockKind::Fair`](crate::LockKind::Fair),
/// whose queue lives in Redis. (Hand-off is distlock's format on single, cluster and
/// sentinel backends; redlock/multi, `sync_replicas`, Redisson's format and run-once jobs
/// release and publish, and so does every lock of a backend with `handoff = false`:
/// *barging*, where any waiter may win, the releasing task too.)
///
/// ```
/// use distlock::{Lease, Lock};
/// use std::time::Duration;
/// # async fn f() -> Result<(), distlock::LockError> {
/// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
/// let guard = Lock::new("order:42")
///     .wait(Duration::from_secs(5))
///     .lease(Lease::Auto)
///     .acquire()
///     .await?;
/// // ... exclusive work ...
/// guard.release().await?;
///
/// // Or try once:
/// if let Some(guard) = Lock::new("report").try_acquire().await? {
///     drop(guard); // released in the background
/// }
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Lock does nothing until acquired"]
pub struct Lock {
    key: String,
    /// The registry, backend, wait, lease and site.
    target: Target,
    kind: LockKind,
    on_lost: OnLost,
    hold_at_least: Option<Duration>,
    /// Holder information to record whatever the backend's `holder_info` says (the leader
    /// election's `host\tpid\tinfo`); `None`: as the backend is configured.
    holder: Option<Arc<str>>,
    /// Whether this acquisition counts in `distlock_acquisitions_total` (a multi-key lock's
    /// keys do not: the multi-key acquisition counts once).
    counted: bool,
}

impl Lock {
    /// The longest wait: a longer one (`Duration::MAX` included) is treated as this, 365
    /// days, so "wait forever" can be written without overflowing a deadline.
    ///
    /// ```
    /// assert_eq!(distlock::Lock::MAX_WAIT, std::time::Duration::from_secs(365 * 86_400));
    /// ```
    pub const MAX_WAIT: Duration = crate::lease::policy::MAX_WAIT;

    /// A lock on `key`, on the default backend of the registry in force: the innermost
    /// [`Registry::scope`] of this task, else the global one (`distlock::init`). Keys are
    /// at most 1024 bytes (`LockError::InvalidKey` on acquiring beyond that); a key built
    /// from request input can exceed it, and the axum mapping answers that 400. The lock
    /// site (shown by `distlock list` and in metrics) is the `file:line` of this call.
    #[track_caller]
    pub fn new(key: impl Into<String>) -> Lock {
        Lock {
            key: key.into(),
            target: Target::here(),
            kind: LockKind::Reentrant,
            on_lost: OnLost::Cancel,
            hold_at_least: None,
            holder: None,
            counted: true,
        }
    }

    /// Leave this acquisition out of `distlock_acquisitions_total` (a multi-key lock counts
    /// its acquisition once itself).
    pub(crate) fn uncounted(mut self) -> Lock {
        self.counted = false;
        self
    }

    /// Record `holder` (`host\tpid\tsite`) as this acquisition's holder information, also
    /// on a backend with `holder_info` off and on the memory backend.
    pub(crate) fn with_holder(mut self, holder: Arc<str>) -> Lock {
        self.holder = Some(holder);
        self
    }

    /// A lock on `key` in `registry`.
    #[track_caller]
    pub(crate) fn with_registry(key: String, registry: Registry) -> Lock {
        let mut lock = Lock::new(key);
        lock.target.set_registry(registry);
        lock
    }

    /// A lock on `key` with the terms of `target` (a multi-key lock's, for each key).
    #[track_caller]
    pub(crate) fn with_target(key: String, target: Target) -> Lock {
        Lock {
            target,
            ..Lock::new(key)
        }
    }

    /// Name the lock site: what holder information (`distlock list`, [`Registry::inspect`])
    /// and the metrics' `site` label show instead of the `file:line` of `Lock::new`.
    /// `#[distributed_lock]` sets it to the function's path. Keep the number of distinct
    /// names small (a metrics label): a place in the code, never a key.
    ///
    /// ```
    /// let lock = distlock::Lock::new("order:42").site("checkout::pay");
    /// # drop(lock);
    /// ```
    pub fn site(mut self, name: &'static str) -> Lock {
        self.target.set_site(LockSite::Named(name));
        self
    }

    /// Use the backend of this name (`[backends.NAME]`) instead of the default.
    pub fn backend(mut self, name: impl Into<String>) -> Lock {
        self.target.set_backend(name.into());
        self
    }

    /// Longest wait to acquire; `Duration::ZERO` tries once. Default: `[defaults].wait`.
    pub fn wait(mut self, wait: Duration) -> Lock {
        self.target.set_wait(wait);
        self
    }

    /// The lease. Default: `[defaults].lease`.
    pub fn lease(mut self, lease: Lease) -> Lock {
        self.target.set_lease(lease);
        self
    }

    /// The kind of lock. Default: `LockKind::Reentrant`. See [`LockKind`] for what fair and
    /// read-write locks do, and where they are available.
    ///
    /// ```
    /// use distlock::{LockKind, Registry};
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let w = registry.lock("config").kind(LockKind::Write).acquire().await?;
    /// // The writer may read its own key (a downgrade).
    /// let r = w
    ///     .scope(registry.lock("config").kind(LockKind::Read).try_acquire())
    ///     .await?;
    /// assert!(r.is_some());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn kind(mut self, kind: LockKind) -> Lock {
        self.kind = kind;
        self
    }

    /// What [`run`](Lock::run) does with its body when the auto-lease is lost: drop it at
    /// its next `.await` ([`OnLost::Cancel`], the default) or let it run on, the loss
    /// visible through `distlock::lease_lost()` ([`OnLost::Signal`]). See [`OnLost`].
    pub fn on_lost(mut self, on_lost: OnLost) -> Lock {
        self.on_lost = on_lost;
        self
    }

    /// A run-once job: keep the lock at least this long after it was taken, measured on
    /// the Redis server's clock (as ShedLock's `lockAtLeastFor`). Instances of a service that
    /// fire the same schedule, with clocks seconds apart, then run the job once: the first
    /// takes the lock, and a release before `hold_at_least` has passed leaves the lock in
    /// place, without a holder, until then. The others find it held and get
    /// [`LockError::Skipped`] (from `acquire` and `run`; `try_acquire` answers `Ok(None)`),
    /// not `Timeout`: the job ran or runs elsewhere, which a scheduler must not retry.
    ///
    /// The lease stays the longest the lock is held (ShedLock's `lockAtMostFor`): a fixed
    /// lease shorter than `hold_at_least` is refused (`InvalidDuration`), and a holder that
    /// crashes keeps it only until its lease ends. Reentrant locks only (fair and read-write
    /// locks, and `protocol = "redisson"` backends, answer `Unsupported`); a nested
    /// acquisition re-enters and ignores it. The attribute's argument is `hold_at_least`.
    ///
    /// ```
    /// use distlock::{Lease, Registry};
    /// use std::time::Duration;
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let report = registry
    ///     .lock("nightly-report")
    ///     .wait(Duration::ZERO)
    ///     .lease(Lease::Fixed(Duration::from_secs(600)))
    ///     .hold_at_least(Duration::from_secs(30));
    /// match report.run(async { /* build the report */ }).await {
    ///     Ok(()) => println!("ran the report"),
    ///     Err(e) if e.is_skipped() => println!("another instance ran it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn hold_at_least(mut self, hold: Duration) -> Lock {
        self.hold_at_least = Some(hold);
        self
    }

    /// The key, as given.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Acquire, waiting at most the configured wait. A waiter sleeps until a release of
    /// this key is published or the holder's lease runs out, whichever comes first.
    ///
    /// # Errors
    ///
    /// `Timeout` when not acquired within the wait (`Skipped` for a run-once job whose lock
    /// is held); `Backend` when Redis failed (on the first attempt at once; once waiting for
    /// another holder, failures such as a failover in progress are retried within the wait,
    /// and the last one is returned if it runs out);
    /// `LeaseLost` when a nested acquisition finds the enclosing hold gone; `Unsupported`
    /// for a kind or option the backend cannot serve; `InvalidKey`, `InvalidDuration`,
    /// `NotInitialized`, `NoSuchBackend`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping this future at any `.await` leaves nothing held. An attempt
    /// sent but not answered is released in the background (a release of what was never
    /// taken changes nothing), and a queued fair or write waiter leaves the queue.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        let to = self.target.resolve()?;
        to.backend.supports(self.kind)?;
        let site = to.site;
        let span = tracing::debug_span!("distlock.acquire", backend = %to.backend.name, key = %self.key, site, kind = self.kind.name());
        let name = to.backend.name.clone();
        let counted = self.counted;
        let start = Instant::now();
        let r = tracing::Instrument::instrument(
            acquire(
                to.backend,
                self.key,
                self.kind,
                to.wait,
                to.lease,
                site,
                HoldTerms {
                    hold_at_least: self.hold_at_least,
                    holder: self.holder,
                },
            ),
            span,
        )
        .await;
        // A run-once job that found its lock held: skipped, not timed out.
        let r = match r {
            Err(LockError::Timeout {
                key,
                backend,
                holder_lease,
                ..
            }) if self.hold_at_least.is_some() => Err(LockError::Skipped {
                key,
                backend,
                free_in: holder_lease,
            }),
            r => r,
        };
        if counted {
            crate::ops::target::count(&name, site, start, &r, |g| !g.held.state.outermost);
        }
        r
    }

    /// Try once: `Ok(None)` when another owner holds the lock.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), but a lock held by another owner is `Ok(None)`, not
    /// `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping this future at any `.await` leaves nothing held. An attempt
    /// sent but not answered is released in the background (a release of what was never
    /// taken changes nothing), and a queued fair or write waiter leaves the queue.
    pub async fn try_acquire(self) -> Result<Option<LockGuard>, LockError> {
        match self.wait(Duration::ZERO).acquire().await {
            Ok(g) => Ok(Some(g)),
            Err(LockError::Timeout { .. } | LockError::Skipped { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Acquire, run `body` holding the lock (in its task-scoped context, so nested
    /// acquisitions re-enter and `fencing_token()` works), then release.
    ///
    /// With `Lease::Auto`, a lost lease drops `body` at its next `.await` and returns
    /// `LeaseLost` (with [`OnLost::Signal`]: the body runs on and its result is returned;
    /// it sees the loss through `distlock::lease_lost()`). **The body must therefore be
    /// cancel-safe**: what it did before the loss stays done, so several writes belong in
    /// one transaction, or are fenced by the lock's token. The lock is released on every
    /// way out: return, panic, or this future being dropped. A failed release after the
    /// body finished is logged, not returned: the body's result stands.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let total = registry.lock("ledger").run(async { 40 + 2 }).await?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// What acquiring returns, and `LeaseLost` when the lease is lost while the body runs
    /// (with `Lease::Auto`; the body is dropped at its next `.await`). A failed release after
    /// the body is logged, not returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping this future at any point releases what it holds (in the background) and
    /// drops the body where it stands: what the body did before stays done, so its writes
    /// belong in one transaction or are fenced by the token.
    pub async fn run<F: Future>(self, body: F) -> Result<F::Output, LockError> {
        let on_lost = self.on_lost;
        let guard = self.acquire().await?;
        let body = guard.scope(body);
        guard.held.run(body, on_lost == OnLost::Cancel).await
    }

    /// Delete the lock whoever holds it, waking its waiters (administration: a stuck
    /// lock). Returns whether a lock was there. The holder is told at once: its process
    /// hears the revocation (the backend-wide channel `<key_prefix>__revoked`; on the
    /// memory backend before this returns), checks its lease with one renewal round trip,
    /// and its guard's `lost()` resolves; a message missed while its subscriber was
    /// reconnecting is made up for by its next renewal (docs/operations.md).
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.lock("stuck").acquire().await?;
    /// assert!(registry.lock("stuck").force_unlock().await?);
    /// assert!(!g.is_held());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    ///
    /// With `kind(Fair)` it deletes the fair lock and its queue; with `kind(Read)` or
    /// `kind(Write)` the read-write lock (all readers, the writer, the waiting writers).
    /// On a `protocol = "redisson"` backend it does what Redisson's `forceUnlock` does: the
    /// lock hash goes, a fair lock's queue stays and its head is woken.
    pub async fn force_unlock(self) -> Result<bool, LockError> {
        let backend = self.target.backend()?;
        backend.supports(self.kind)?;
        let keys = backend.keys(self.key, self.kind, backend.watchdog_timeout)?;
        backend.force_release(&keys).await
    }
}

impl Registry {
    /// A lock on `key` in this registry (its site: the `file:line` of this call).
    #[track_caller]
    pub fn lock(&self, key: impl Into<String>) -> Lock {
        Lock::with_registry(key.into(), self.clone())
    }
}

/// What some acquisitions add: a run-once job's `hold_at_least`, and holder information to
/// record whatever the backend's `holder_info` says (a leader's).
struct HoldTerms {
    hold_at_least: Option<Duration>,
    holder: Option<Arc<str>>,
}

async fn acquire(
    backend: Arc<Backend>,
    key: String,
    kind: LockKind,
    wait: Duration,
    lease: Lease,
    label: &'static str,
    terms: HoldTerms,
) -> Result<LockGuard, LockError> {
    let (lease_len, auto) = match lease {
        Lease::Auto => (backend.watchdog_timeout, true),
        Lease::Fixed(d) => (d, false),
    };
    let HoldTerms {
        hold_at_least,
        holder,
    } = terms;
    let mut keys = backend.keys(key, kind, lease_len)?;
    if let Some(hold) = hold_at_least {
        if kind != LockKind::Reentrant || backend.is_redisson() {
            return Err(backend.unsupported(
                crate::Feature::HoldAtLeast,
                format!(
                    "hold_at_least (lock `{}`) is for reentrant locks in distlock's format; this is a {} lock",
                    keys.user,
                    kind.name(),
                ),
            ));
        }
        if !hold.is_zero() {
            let label = if auto {
                "hold_at_least"
            } else {
                "hold_at_least (longer than the fixed lease)"
            };
            crate::lease::policy::check_duration(
                distlock_config::DurationUse::HoldAtLeast,
                label,
                hold,
                &keys.user,
                &backend.name,
            )?;
            if !auto && hold > lease_len {
                return Err(LockError::InvalidDuration {
                    key: keys.user,
                    backend: backend.name.to_string(),
                    what: label,
                    value: hold,
                    min: distlock_config::DurationUse::HoldAtLeast.range().0,
                    limit: lease_len,
                });
            }
        }
        keys.hold_at_least = Some(hold).filter(|h| !h.is_zero());
    }
    if let Some(holder) = holder {
        keys = keys.with_holder(holder);
    } else if backend.holder_info {
        keys = keys.with_holder(crate::obs::holder::holder_text(label));
    }
    let held = crate::primitives::acquire::acquire(Request {
        backend,
        keys,
        wait,
        lease,
        site: label,
    })
    .await?;
    Ok(LockGuard { held })
}
