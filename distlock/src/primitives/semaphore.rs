//! Semaphores: at most N permits held at once across processes, each acquisition with a
//! lease of its own.
//!
//! On Redis a semaphore is the zset `PREFIX{KEY}:sem` (holder id -> the end of its lease,
//! on the server's clock) and the hash `PREFIX{KEY}:sem:n` (each holder's permits and
//! fencing token), changed only by the scripts `protocol/sem_*.lua`, which purge the holders
//! whose lease has ended before anything else: a crashed holder's permits come back when its
//! lease ends. A release publishes on `PREFIX{KEY}:sem:released`, waking the waiters; a
//! waiter also wakes when the earliest holder's lease ends.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::obs::sites::LockSite;
use crate::ops::target::Target;
use crate::primitives::acquire::Request;
use crate::primitives::guard::GuardCore;
use crate::registry::Registry;
use crate::{Lease, LockError};

/// A counting semaphore across processes: at most `permits` permits held at once, each
/// acquisition (of one or more permits) with a lease of its own. Made by
/// [`Semaphore::new`] (the registry in force) or [`Registry::semaphore`].
///
/// - **Leases.** `Lease::Auto` (the default unless `[defaults].lease` says otherwise) is
///   renewed by the backend's watchdog while the guard lives, and the guard hears of a lost
///   lease a margin before the server can give its permits to another holder (the same rule
///   as locks); `Lease::Fixed(d)` is never renewed. A holder that crashes holds its permits
///   until its lease ends on the server, then they come back by themselves.
/// - **Changing the number of permits.** Every acquisition carries the `permits` of the
///   `Semaphore` it was made from, and is admitted only if the permits held by everyone
///   plus its own fit in that number. So a new number takes effect with the next
///   acquisition that carries it, and holders are never evicted: after shrinking from 4 to
///   2 while 4 are held, nobody asking with 2 is admitted until fewer than 2 are held.
///   Every user of a key should use the same number; an acquisition carrying an older,
///   larger number is still judged by it.
/// - **Waiting.** A waiter sleeps until a release of this semaphore is published or the
///   earliest holder's lease ends, whichever comes first, within `wait`. Waiters are not
///   queued unless the semaphore is [`fair`](Semaphore::fair): then permits go first come,
///   first served, across processes.
/// - **Fencing.** Each acquisition draws a token from the fencing counter its key shares
///   with the locks of that key ([`SemaphoreGuard::fencing_token`]): tokens grow strictly
///   with every acquisition, so a resource can refuse writes older than the last it saw.
/// - **Backends.** `single`, `cluster` (all of a semaphore's keys share its hash tag, so one
///   slot), `sentinel` and `memory`. On `redlock` and `multi`, and with
///   `protocol = "redisson"`, acquiring returns `LockError::Unsupported`.
/// - A semaphore is a Redis object of its own: it does not exclude the locks of the same
///   key, and `distlock::fencing_token()` inside its section does not see it (use the
///   guard's token).
/// - **Operations.** Each holder's host, pid and site are recorded with its permits
///   (`holder_info`, as for locks); [`Registry::inspect`], [`Registry::list`] and
///   `distlock list`/`show`/`watch` show a semaphore (`Kind::Semaphore`: its permits, each
///   holder's permits and lease left, the processes waiting), and
///   [`Semaphore::force_unlock`] / [`Semaphore::force_unlock_holder`] (`distlock unlock
///   KEY [--holder ID]`) free all its permits or one holder's; the holders hear it at once.
///
/// ```
/// use distlock::{Lease, Semaphore};
/// use std::time::Duration;
/// # async fn f() -> Result<(), distlock::LockError> {
/// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
/// let exports = Semaphore::new("export:acme", 4)
///     .wait(Duration::from_secs(5))
///     .lease(Lease::Auto);
/// let permit = exports.acquire(1).await?;
/// // ... at most 4 exports of acme run at once, across every process ...
/// assert_eq!(permit.permits(), 1);
/// permit.release().await?;
///
/// // Or try once:
/// if let Some(two) = exports.try_acquire(2).await? {
///     drop(two); // released in the background
/// }
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Semaphore does nothing until acquired"]
pub struct Semaphore {
    key: String,
    permits: u32,
    /// The registry, backend, wait, lease and site.
    target: Target,
    fair: bool,
}

impl Semaphore {
    /// The most permits a semaphore can have: 2147483647 (`i32::MAX`, what the scripts
    /// keep in a Redis integer). A semaphore of more is refused when acquiring
    /// (`LockError::InvalidPermits`) on every backend, memory included, before anything
    /// is sent.
    ///
    /// ```
    /// assert_eq!(distlock::Semaphore::MAX_PERMITS, 2_147_483_647);
    /// ```
    pub const MAX_PERMITS: u32 = i32::MAX as u32;

    /// A semaphore of `permits` permits on `key`, on the default backend of the registry in
    /// force (the innermost [`Registry::scope`] of this task, else the global one). A
    /// `permits` of 0, or over [`Semaphore::MAX_PERMITS`], is refused when acquiring
    /// (`LockError::InvalidPermits`); keys follow
    /// the rules of [`Lock::new`](crate::Lock::new).
    ///
    /// ```
    /// let s = distlock::Semaphore::new("export:acme", 4);
    /// assert_eq!((s.key(), s.permits()), ("export:acme", 4));
    /// ```
    #[track_caller]
    pub fn new(key: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore {
            key: key.into(),
            permits,
            target: Target::here(),
            fair: false,
        }
    }

    /// Serve waiters first come, first served: permits go to the waiter that has waited
    /// longest, and a waiter asking for many permits is never overtaken by later ones
    /// asking for fewer (while it waits at the head, those wait behind it). The queue
    /// lives in Redis, so the order holds across processes. A waiter that gives up (its
    /// `wait` ends, its future is dropped) leaves the queue; one whose process died keeps
    /// its place until its `wait` ends, and the waiters behind it wait that long at most.
    /// `try_acquire` does not queue, and is refused while others wait.
    ///
    /// Without it (the default) waiters are not queued: whichever asks when permits are
    /// free takes them, which gives more throughput and no order.
    ///
    /// Every user of a key should agree: an unqueued acquisition does not look at the
    /// queue. Backends: as the semaphore's (`single`, `cluster`, `sentinel`, `memory`).
    /// Attribute: `kind = "fair_semaphore", permits = N`.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
    /// use distlock::Semaphore;
    /// use std::time::Duration;
    /// let api = Semaphore::new("thirdparty", 3).fair().wait(Duration::from_secs(10));
    /// let permit = api.acquire(1).await?;
    /// assert!(api.is_fair());
    /// permit.release().await?;
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn fair(mut self) -> Semaphore {
        self.fair = true;
        self
    }

    /// Whether waiters queue ([`fair`](Self::fair)).
    ///
    /// ```
    /// assert!(!distlock::Semaphore::new("export:acme", 4).is_fair());
    /// ```
    pub fn is_fair(&self) -> bool {
        self.fair
    }

    /// Name the site (metrics' `site` label) instead of the `file:line` of `new` (see
    /// [`Lock::site`](crate::Lock::site)).
    ///
    /// ```
    /// let s = distlock::Semaphore::new("export:acme", 4).site("exports::run");
    /// # drop(s);
    /// ```
    pub fn site(mut self, name: &'static str) -> Semaphore {
        self.target.set_site(LockSite::Named(name));
        self
    }

    /// Use the backend of this name (`[backends.NAME]`) instead of the default.
    ///
    /// ```
    /// let s = distlock::Semaphore::new("export:acme", 4).backend("orders");
    /// # drop(s);
    /// ```
    pub fn backend(mut self, name: impl Into<String>) -> Semaphore {
        self.target.set_backend(name.into());
        self
    }

    /// Longest wait to acquire; `Duration::ZERO` tries once. Default: `[defaults].wait`.
    ///
    /// ```
    /// let s = distlock::Semaphore::new("export:acme", 4).wait(std::time::Duration::from_secs(5));
    /// # drop(s);
    /// ```
    pub fn wait(mut self, wait: Duration) -> Semaphore {
        self.target.set_wait(wait);
        self
    }

    /// The lease of each acquisition. Default: `[defaults].lease`. A lease over
    /// [`MAX_LEASE`](crate::Lease::MAX) is refused (`LockError::InvalidDuration`).
    ///
    /// ```
    /// use distlock::{Lease, Semaphore};
    /// let s = Semaphore::new("export:acme", 4).lease(Lease::Fixed(std::time::Duration::from_secs(30)));
    /// # drop(s);
    /// ```
    pub fn lease(mut self, lease: Lease) -> Semaphore {
        self.target.set_lease(lease);
        self
    }

    /// The key, as given.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The number of permits (what each acquisition is admitted against).
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// A semaphore like this one with `permits` permits: acquisitions made from it are
    /// admitted against the new number (see "Changing the number of permits" on
    /// [`Semaphore`]).
    ///
    /// ```
    /// let s = distlock::Semaphore::new("export:acme", 4).set_permits(2);
    /// assert_eq!(s.permits(), 2);
    /// ```
    pub fn set_permits(mut self, permits: u32) -> Semaphore {
        self.permits = permits;
        self
    }

    /// Take `n` permits, waiting at most the configured wait.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let s = registry.semaphore("pool", 3);
    /// let a = s.acquire(2).await?;
    /// let b = s.acquire(1).await?;
    /// assert!(s.try_acquire(1).await?.is_none()); // all 3 taken
    /// drop((a, b));
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidPermits` for 0 permits or more than the semaphore has; `Timeout` when not
    /// enough permits were free within the wait; `Backend`, `Unsupported` (redlock, multi and
    /// `protocol = "redisson"` backends), `InvalidKey`, `InvalidDuration`, `NotInitialized`,
    /// `NoSuchBackend`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping this future at any `.await` leaves nothing held. An attempt
    /// sent but not answered is released in the background (a release of what was never
    /// taken changes nothing), and a queued fair or write waiter leaves the queue.
    pub async fn acquire(&self, n: u32) -> Result<SemaphoreGuard, LockError> {
        let to = self.target.resolve()?;
        let site = to.site;
        let span = tracing::debug_span!("distlock.semaphore", backend = %to.backend.name, key = %self.key, permits = self.permits, n);
        let name = to.backend.name.clone();
        let start = Instant::now();
        let r = tracing::Instrument::instrument(
            acquire(self, to.backend, n, to.wait, to.lease, site),
            span,
        )
        .await;
        // A busy semaphore: its permits are what holds it.
        let r = r.map_err(|e| match e {
            LockError::Timeout {
                key,
                backend,
                waited,
                holder_lease,
                recent_hold,
                ..
            } => LockError::Timeout {
                key,
                backend,
                waited,
                holder_lease,
                recent_hold,
                held_by: crate::errors::HeldBy::Permits,
            },
            other => other,
        });
        crate::ops::target::count(&name, site, start, &r, |_| false);
        r
    }

    /// Try once: `Ok(None)` when fewer than `n` permits are free.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let one = registry.semaphore("single-slot", 1).try_acquire(1).await?.expect("free");
    /// assert!(registry.semaphore("single-slot", 1).try_acquire(1).await?.is_none());
    /// one.release().await?;
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), but too few free permits is `Ok(None)`, not `Timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping this future at any `.await` leaves nothing held. An attempt
    /// sent but not answered is released in the background (a release of what was never
    /// taken changes nothing), and a queued fair or write waiter leaves the queue.
    pub async fn try_acquire(&self, n: u32) -> Result<Option<SemaphoreGuard>, LockError> {
        let once = self.clone().wait(Duration::ZERO);
        match once.acquire(n).await {
            Ok(g) => Ok(Some(g)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Take `n` permits, run `body`, then give them back (on every way out: return, panic,
    /// this future dropped). With `Lease::Auto`, a lost lease drops `body` at its next
    /// `.await` and returns `LeaseLost` (as [`Lock::run`](crate::Lock::run)), so the body
    /// must be cancel-safe. A failed release after the body is logged, not returned.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let rows = registry.semaphore("export:acme", 4).run(1, async { 42 }).await?;
    /// assert_eq!(rows, 42);
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
    pub async fn run<F: Future>(&self, n: u32, body: F) -> Result<F::Output, LockError> {
        self.acquire(n).await?.held.run(body, true).await
    }

    /// Administration: give back every permit of this semaphore, whoever holds them.
    /// Returns whether some were held. The holders' processes are told at once: their
    /// guards find the lease lost (`lost()` resolves) without waiting for a renewal.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.semaphore("export:acme", 2).acquire(1).await?;
    /// assert!(registry.semaphore("export:acme", 2).force_unlock().await?);
    /// assert!(!g.is_held());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub async fn force_unlock(self) -> Result<bool, LockError> {
        let backend = self.target.backend()?;
        backend.supports_semaphore()?;
        let permits = self.permits.max(1);
        let keys = backend.semaphore_keys(self.key, permits, permits, false)?;
        backend.force_release(&keys).await
    }

    /// Administration: give back the permits of one holder of this semaphore, its holder
    /// id as [`Registry::inspect`] shows it ([`Holder::owner`](crate::inspect::Holder::owner),
    /// `owner` in `distlock show --json`). Returns whether that holder held permits. Its
    /// process is told at once (its guard's `lost()` resolves); the other holders keep
    /// theirs.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.semaphore("export:acme", 2).acquire(1).await?;
    /// let h = registry.semaphore("export:acme", 2).acquire(1).await?;
    /// assert!(!registry.semaphore("export:acme", 2).force_unlock_holder("00ff").await?);
    /// assert!(registry.semaphore("export:acme", 2).force_unlock_holder(&g.holder_id()).await?);
    /// assert!(!g.is_held());
    /// assert!(h.is_held());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// As [`force_unlock`](Self::force_unlock): `Backend`, `Unsupported` (redlock, multi,
    /// `protocol = "redisson"`), `InvalidKey`, `NotInitialized`, `NoSuchBackend`.
    pub async fn force_unlock_holder(self, holder: &str) -> Result<bool, LockError> {
        let backend = self.target.backend()?;
        backend.supports_semaphore()?;
        if holder.is_empty() {
            // No holder has an empty id (and an empty one would mean "every holder").
            return Ok(false);
        }
        let permits = self.permits.max(1);
        let mut keys = backend.semaphore_keys(self.key, permits, permits, false)?;
        if let crate::protocol::keys::Shape::Semaphore(sem) = &mut keys.shape {
            sem.only_holder = Some(holder.to_owned());
        }
        backend.force_release(&keys).await
    }
}

impl Registry {
    /// A semaphore of `permits` permits on `key` in this registry: see [`Semaphore`].
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.semaphore("export:acme", 2).acquire(2).await?;
    /// assert!(g.is_held());
    /// g.release().await?;
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    #[track_caller]
    pub fn semaphore(&self, key: impl Into<String>, permits: u32) -> Semaphore {
        let mut semaphore = Semaphore::new(key, permits);
        semaphore.target.set_registry(self.clone());
        semaphore
    }
}

fn invalid(backend: &Backend, key: String, asked: u32, permits: u32) -> Option<LockError> {
    let reason = if permits == 0 {
        "a semaphore needs at least 1 permit"
    } else if permits > Semaphore::MAX_PERMITS {
        "a semaphore has at most 2147483647 permits (Semaphore::MAX_PERMITS)"
    } else if asked == 0 {
        "an acquisition takes at least 1 permit"
    } else if asked > permits {
        "more than the semaphore has"
    } else {
        return None;
    };
    Some(LockError::InvalidPermits {
        key,
        backend: backend.name.to_string(),
        asked,
        permits,
        reason,
    })
}

/// Take `n` permits of `sem` on `backend`.
async fn acquire(
    sem: &Semaphore,
    backend: Arc<Backend>,
    n: u32,
    wait: Duration,
    lease: Lease,
    label: &'static str,
) -> Result<SemaphoreGuard, LockError> {
    backend.supports_semaphore()?;
    if let Some(e) = invalid(&backend, sem.key.clone(), n, sem.permits) {
        return Err(e);
    }
    let mut keys = backend.semaphore_keys(sem.key.clone(), n, sem.permits, sem.fair)?;
    if backend.holder_info {
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
    Ok(SemaphoreGuard { held, permits: n })
}

/// Permits held, from [`Semaphore::acquire`]. Dropping it gives them back in the background
/// (never blocking, never panicking); `release().await` gives them back and tells whether
/// they were still held.
///
/// ```
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// let g = registry.semaphore("export:acme", 4).acquire(2).await?;
/// assert_eq!(g.permits(), 2);
/// assert!(g.is_held());
/// println!("fencing token {}", g.fencing_token());
/// tokio::select! {
///     e = g.lost() => println!("lost: {e}"),
///     _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
/// }
/// g.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard gives the permits back at once"]
pub struct SemaphoreGuard {
    held: GuardCore,
    permits: u32,
}

impl SemaphoreGuard {
    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The fencing token of this acquisition, from the counter the key shares with its
    /// locks: it grows strictly with every acquisition.
    pub fn fencing_token(&self) -> u64 {
        self.held.state.token
    }

    /// Whether the permits are held, as far as this process knows: not released, not
    /// reported lost by the watchdog, and the lease not within its safety margin of its end.
    pub fn is_held(&self) -> bool {
        self.held.state.is_held()
    }

    /// Resolves when the lease is lost (the watchdog found the permits gone or could not
    /// renew them in time, or a fixed lease is running out), a margin before the server
    /// can give them to another holder, or when the registry is shutting down
    /// ([`Registry::shutdown`](crate::Registry::shutdown) gives them back).
    pub async fn lost(&self) -> LockError {
        self.held.state.lost().await
    }

    /// This acquisition's holder id, as [`Registry::inspect`] shows it
    /// ([`Holder::owner`](crate::inspect::Holder::owner)) and
    /// [`Semaphore::force_unlock_holder`] (`distlock unlock KEY --holder ID`) takes it.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.semaphore("export:acme", 2).acquire(1).await?;
    /// assert_eq!(g.holder_id().len(), 32);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn holder_id(&self) -> String {
        String::from_utf8_lossy(&self.held.state.owner.hex()).into_owned()
    }

    /// The semaphore's key, as given.
    pub fn key(&self) -> &str {
        &self.held.state.keys.user
    }

    /// The backend's name.
    pub fn backend(&self) -> &str {
        &self.held.backend.name
    }

    /// Give the permits back. `Err(LockError::NotHeld)` when they were no longer held (the
    /// lease had ended): then nothing was changed.
    ///
    /// # Errors
    ///
    /// `NotHeld` when this owner no longer held it (the lease had ended or the lock was
    /// deleted: nothing was changed); `Backend` when Redis failed. A transient failure
    /// ([`LockError::is_transient`]) means it was not confirmed: it is sent again in the
    /// background until the server answers (free within about a second after the server
    /// answers again; docs/design.md, "Re-sends").
    ///
    /// # Cancel safety
    ///
    /// Dropping this future before the reply sends the release again in the background
    /// (a second run changes nothing): the lock is freed either way.
    pub async fn release(self) -> Result<(), LockError> {
        self.held.release().await
    }
}
