//! The lock builder: `Lock::new(key)...acquire()`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::backoff::Backoff;
use crate::guard::{LockGuard, ReleaseOnDrop};
use crate::held::LeaseState;
use crate::keys::LockKeys;
use crate::owner::{Hold, OwnerId};
use crate::protocol::Attempt;
use crate::registry::Registry;
pub(crate) use crate::sites::LockSite;
use crate::{Lease, LockError, LockKind, OnLost};

/// A lock to acquire: a key, and how to wait and lease it.
///
/// `Lock::new` uses the registry set up by `distlock::init`; `Registry::lock` uses a given one.
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
    backend: Option<String>,
    wait: Option<Duration>,
    lease: Option<Lease>,
    kind: LockKind,
    on_lost: OnLost,
    registry: Option<Registry>,
    site: LockSite,
    hold_at_least: Option<Duration>,
    /// Holder information to record whatever the backend's `holder_info` says (the leader
    /// election's `host\tpid\tinfo`); `None`: as the backend is configured.
    holder: Option<Arc<str>>,
}

impl Lock {
    /// A lock on `key`, on the default backend of the registry in force: the innermost
    /// [`Registry::scope`] of this task, else the global one (`distlock::init`). Keys are
    /// at most 1024 bytes (`LockError::InvalidKey` on acquiring beyond that); a key built
    /// from request input can exceed it, and the axum mapping answers that 400. The lock
    /// site (shown by `distlock list` and in metrics) is the `file:line` of this call.
    #[track_caller]
    pub fn new(key: impl Into<String>) -> Lock {
        Lock {
            key: key.into(),
            backend: None,
            wait: None,
            lease: None,
            kind: LockKind::Reentrant,
            on_lost: OnLost::Cancel,
            registry: None,
            site: LockSite::Caller(std::panic::Location::caller()),
            hold_at_least: None,
            holder: None,
        }
    }

    /// Record `holder` (`host\tpid\tsite`) as this acquisition's holder information, also
    /// on a backend with `holder_info` off and on the memory backend.
    pub(crate) fn with_holder(mut self, holder: Arc<str>) -> Lock {
        self.holder = Some(holder);
        self
    }

    #[track_caller]
    pub(crate) fn with_registry(key: String, registry: Registry) -> Lock {
        Lock {
            registry: Some(registry),
            ..Lock::new(key)
        }
    }

    pub(crate) fn with_site(mut self, site: LockSite) -> Lock {
        self.site = site;
        self
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
        self.site = LockSite::Named(name);
        self
    }

    /// Use the backend of this name (`[backends.NAME]`) instead of the default.
    pub fn backend(mut self, name: impl Into<String>) -> Lock {
        self.backend = Some(name.into());
        self
    }

    /// Longest wait to acquire; `Duration::ZERO` tries once. Default: `[defaults].wait`.
    pub fn wait(mut self, wait: Duration) -> Lock {
        self.wait = Some(wait);
        self
    }

    /// The lease. Default: `[defaults].lease`.
    pub fn lease(mut self, lease: Lease) -> Lock {
        self.lease = Some(lease);
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
    /// Errors: `Timeout` when not acquired in time; `Backend` when Redis failed (on the first
    /// attempt at once; once waiting for another holder, failures such as a failover in
    /// progress are retried within the wait, and the last one is returned if it runs out);
    /// `Unsupported` for a fair or read-write lock on a redlock or multi backend;
    /// `NotInitialized`, `NoSuchBackend`, `InvalidKey`.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        let registry = match self.registry {
            Some(r) => r,
            None => crate::registry::current()?,
        };
        let backend = registry.backend(self.backend.as_deref())?;
        backend.supports(self.kind)?;
        let defaults = registry.defaults();
        let wait = self.wait.unwrap_or(defaults.wait);
        let lease = self.lease.unwrap_or_else(|| defaults.lease.into());
        let site = crate::metrics::site_label(self.site);
        let span = tracing::debug_span!("distlock.acquire", backend = %backend.name, key = %self.key, site, kind = self.kind.name());
        let name = backend.name.clone();
        let start = Instant::now();
        let r = tracing::Instrument::instrument(
            acquire(
                backend,
                self.key,
                self.kind,
                wait,
                lease,
                site,
                Extras {
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
        let outcome = match &r {
            Ok(g) if g.state.outermost => crate::metrics::Outcome::Acquired,
            Ok(_) => crate::metrics::Outcome::Reentered,
            Err(LockError::Timeout { .. }) => crate::metrics::Outcome::Timeout,
            Err(LockError::Skipped { .. }) => crate::metrics::Outcome::Skipped,
            Err(_) => crate::metrics::Outcome::Error,
        };
        crate::metrics::acquisition(&name, site, outcome, start.elapsed());
        r
    }

    /// Try once: `Ok(None)` when another owner holds the lock.
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
    pub async fn run<F: Future>(self, body: F) -> Result<F::Output, LockError> {
        let on_lost = self.on_lost;
        let guard = self.acquire().await?;
        let output = if guard.state.auto && on_lost == OnLost::Cancel {
            let body = guard.scope(body);
            tokio::pin!(body);
            tokio::select! {
                // The loss first: a body woken together with it (after a pause past the
                // lease) does not take one more step.
                biased;
                lost = guard.lost() => return Err(lost),
                out = &mut body => out,
            }
        } else {
            guard.scope(body).await
        };
        let (key, backend) = (guard.key().to_owned(), guard.backend().to_owned());
        if guard.state.is_lost() {
            tracing::warn!(backend = %backend, key = %key,
                "distlock: the body ran to its end after its lease was lost");
        }
        if let Err(e) = guard.release().await {
            tracing::warn!(backend = %backend, key = %key, error = %e, "distlock: release after the locked section failed");
        }
        Ok(output)
    }

    /// Delete the lock whoever holds it, waking its waiters (administration: a stuck
    /// lock). Returns whether a lock was there. The holder's guard will find it lost.
    /// With `kind(Fair)` it deletes the fair lock and its queue; with `kind(Read)` or
    /// `kind(Write)` the read-write lock (all readers, the writer, the waiting writers).
    /// On a `protocol = "redisson"` backend it does what Redisson's `forceUnlock` does: the
    /// lock hash goes, a fair lock's queue stays and its head is woken.
    pub async fn force_unlock(self) -> Result<bool, LockError> {
        let registry = match self.registry {
            Some(r) => r,
            None => crate::registry::current()?,
        };
        let backend = registry.backend(self.backend.as_deref())?;
        backend.supports(self.kind)?;
        let keys = backend.keys(self.key, self.kind, backend.watchdog_timeout)?;
        crate::runtime::entered(backend.force_release(&keys)).await
    }
}

/// What some acquisitions add: a run-once job's `hold_at_least`, and holder information to
/// record whatever the backend's `holder_info` says (a leader's).
struct Extras {
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
    extras: Extras,
) -> Result<LockGuard, LockError> {
    let (lease_len, auto) = match lease {
        Lease::Auto => (backend.watchdog_timeout, true),
        Lease::Fixed(d) => (d, false),
    };
    let Extras {
        hold_at_least,
        holder,
    } = extras;
    let mut keys = backend.keys(key, kind, lease_len)?;
    if let Some(hold) = hold_at_least {
        if kind != LockKind::Reentrant || backend.is_redisson() {
            return Err(LockError::Unsupported {
                backend: backend.name.to_string(),
                what: format!(
                    "hold_at_least (lock `{}`) is for reentrant locks in distlock's format; \
                     this is a {} lock{}",
                    keys.user,
                    kind.name(),
                    if backend.is_redisson() {
                        " on a protocol = \"redisson\" backend"
                    } else {
                        ""
                    }
                ),
            });
        }
        if !hold.is_zero() {
            let label = if auto {
                "hold_at_least"
            } else {
                "hold_at_least (longer than the fixed lease)"
            };
            crate::lease::check_duration(
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
        keys = keys.with_holder(crate::inspect::holder_text(label));
    }
    // Checked before anything is sent: Redis cannot expire a key that far out, a lock held
    // for longer than a day without renewal is a wedge waiting to happen, and a lease under
    // a millisecond is over before its grant arrives.
    crate::lease::check_lease(lease, lease_len, &keys.user, &backend.name)?;
    let start = Instant::now();
    let deadline = start + wait.min(crate::MAX_WAIT);
    if let Some(r) = keys.redisson.as_mut() {
        // A Redisson fair waiter's place in the queue lasts its allowance: its wait, as
        // Redisson's `tryLock(waitTime, ...)` passes it (try-once: fairLockWaitTimeout).
        if !wait.is_zero() {
            r.allowance = wait.min(crate::MAX_WAIT);
        }
    }
    // An enclosing hold of this lock in this task: a nested acquisition re-enters it. Of
    // the same kind, it counts a level of that hold, and sibling futures of the task take
    // turns (the hold's one permit, within `wait`); of another kind (a write lock's owner
    // taking the read lock) the owner is shared and the scripts of that kind decide.
    let outer = crate::context::find(&backend.name, &keys.user);
    let mut permit = None;
    let base = match &outer {
        Some(o) if o.keys.kind == kind && kind.counts_levels() => {
            match tokio::time::timeout_at(deadline, o.nested().acquire_owned()).await {
                Ok(Ok(p)) => permit = Some(p),
                _ => {
                    return Err(timeout(&backend, keys.user, start.elapsed(), None));
                }
            }
            if o.is_lost() {
                return Err(o.lost_error());
            }
            Hold::nested(o.owner)
        }
        Some(o) => Hold {
            nested: false,
            ..Hold::nested(o.owner)
        },
        None => Hold::fresh(),
    };
    let mut hold = base;
    // Redisson's format counts a re-entry on the owner's field, shared with the outer hold,
    // and has no level marks: a nested acquisition whose outcome is unknown (an error, or
    // this future dropped in flight) must not be "released" — that could take the outer
    // hold's count instead. Its possible extra count ends with the lease (documented).
    let redisson = backend.is_redisson();
    // (Also for a read or write acquisition inside a hold of the other kind: it counts on
    // the same owner's field, so a "release to be safe" could take the outer's count.)
    let ambiguous_is_kept = redisson && (hold.nested || outer.is_some());
    let outer_token = outer.as_ref().map(|o| o.token);
    let mut pending: Option<ReleaseOnDrop> = None;
    let mut watch = None;
    let mut backend_retry = Backoff::retry();
    // A fair or write waiter is queued in the backend once refused: on every way out but
    // acquiring (timeout, error, this future dropped) it leaves the queue again.
    let mut queued: Option<Queued> = None;
    loop {
        let mut notified = watch
            .as_ref()
            .map(|w: &crate::hub::Watch| Box::pin(w.notified()));
        if let Some(n) = notified.as_mut() {
            n.as_mut().enable();
        }
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        if queued.is_none() && !left.is_zero() && kind.queues() {
            queued = Some(Queued {
                backend: backend.clone(),
                keys: keys.clone(),
                owner: hold.owner,
                armed: true,
            });
        }
        // From the moment a script is sent until an answer says it took nothing, the level
        // may be held: if this future is dropped, or ends in an error, it is released in
        // the background. A retry after an error sends the same level, so a first run
        // whose reply was lost is found, not counted again.
        if pending.is_none() && !ambiguous_is_kept {
            pending = Some(ReleaseOnDrop::new(&backend, &keys, hold));
        }
        let attempt = match crate::runtime::entered(backend.acquire(&keys, hold, lease_len, left))
            .await
        {
            Ok(a) => {
                if !matches!(a, Attempt::Acquired { .. } | Attempt::Reentered) {
                    if let Some(p) = pending.take() {
                        p.disarm();
                    }
                }
                backend_retry.reset();
                a
            }
            // A transient failure (connection refused or reset, a time-out, a failover under
            // way: READONLY, LOADING, MASTERDOWN, TRYAGAIN, CLUSTERDOWN) is retried with
            // backoff until the wait ends; then the last error is returned.
            Err(e) if e.is_transient() && !ambiguous_is_kept => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(e);
                }
                drop(notified);
                if redisson {
                    // Redisson's format cannot tell a retry from a re-entry: the field
                    // this attempt may have taken is released in the background (a field
                    // of this acquisition alone, so nothing else is touched), and the
                    // retry is a fresh acquisition with a field of its own.
                    drop(pending.take());
                    hold = Hold::fresh();
                    // A queued fair waiter leaves the queue under its old field (in the
                    // background) and listens on the new field's channel.
                    drop(queued.take());
                    watch = None;
                }
                let pause = backend_retry.pause();
                tracing::debug!(backend = %backend.name, key = %keys.user, error = %e, retry_in = ?pause,
                    "distlock: backend failed while waiting; retrying within the wait");
                tokio::time::sleep_until(deadline.min(now + pause)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let ttl = match attempt {
            Attempt::Acquired { token } => {
                if let Some(p) = pending.take() {
                    p.disarm();
                }
                if let Some(mut q) = queued.take() {
                    q.armed = false;
                }
                tracing::debug!(backend = %backend.name, key = %keys.user, token, waited = ?start.elapsed(), "distlock: acquired");
                let expires_at = sent + backend.validity(lease_len);
                let state = LeaseState::new(
                    backend.name.clone(),
                    &backend.leases,
                    keys,
                    hold,
                    token,
                    auto,
                    true,
                    lease_len,
                    expires_at,
                    label,
                );
                return Ok(LockGuard {
                    state,
                    backend,
                    _permit: permit,
                });
            }
            Attempt::Reentered => {
                if let Some(p) = pending.take() {
                    p.disarm();
                }
                if let Some(mut q) = queued.take() {
                    q.armed = false;
                }
                tracing::debug!(backend = %backend.name, key = %keys.user, "distlock: re-entered");
                let token = outer_token.unwrap_or(0);
                let expires_at = sent + backend.validity(lease_len);
                let state = LeaseState::new(
                    backend.name.clone(),
                    &backend.leases,
                    keys,
                    hold,
                    token,
                    auto,
                    false,
                    lease_len,
                    expires_at,
                    label,
                );
                return Ok(LockGuard {
                    state,
                    backend,
                    _permit: permit,
                });
            }
            Attempt::Held { ttl } => ttl,
            Attempt::OuterLost => {
                // The enclosing hold's lock is gone: the outer guard hears of it now, and
                // this acquisition fails instead of re-creating the lock under it.
                let reason = "a nested acquisition found the lock gone (expired, deleted or lost in a failover)";
                return Err(match &outer {
                    Some(o) => {
                        o.mark_lost(reason.into());
                        o.lost_error()
                    }
                    None => LockError::LeaseLost {
                        key: keys.user,
                        backend: backend.name.to_string(),
                        reason: reason.into(),
                    },
                });
            }
            Attempt::NoQuorum {
                granted,
                needed,
                nodes,
                busy,
                retry_in,
            } => {
                // redlock/multi: everything granted was released again; retry after a
                // random pause, within `wait`.
                let now = Instant::now();
                if now >= deadline {
                    return Err(if busy {
                        timeout(&backend, keys.user, now - start, None)
                    } else {
                        LockError::QuorumNotReached {
                            key: keys.user,
                            backend: backend.name.to_string(),
                            granted,
                            needed,
                            nodes,
                        }
                    });
                }
                drop(notified);
                tokio::time::sleep_until(deadline.min(now + retry_in)).await;
                continue;
            }
        };
        let now = Instant::now();
        if now >= deadline {
            // The holder's remaining lease as this attempt reported it.
            let holder = ttl.map(|t| (t, sent));
            return Err(timeout(&backend, keys.user, now - start, holder));
        }
        let until = ttl.map_or(deadline, |t| deadline.min(now + t));
        match &watch {
            None => {
                tracing::debug!(backend = %backend.name, key = %keys.user, ?ttl, "distlock: waiting");
                drop(notified);
                let w = backend.hub.watch_with(
                    &keys.wait_channel(hold.owner),
                    keys.kind == LockKind::Reentrant || (redisson && keys.kind == LockKind::Fair),
                );
                // Subscribed before the next attempt, so a release after it is seen. Without
                // a subscription (subscriber down) the lease's end is the next chance.
                if !w.subscribe(until).await {
                    tokio::time::sleep_until(until).await;
                }
                watch = Some(w);
            }
            Some(w) if !w.is_live() => {
                drop(notified);
                if !w.subscribe(until).await {
                    tokio::time::sleep_until(until).await;
                }
            }
            Some(_) => {
                if let Some(n) = notified {
                    let _asleep = Asleep::new(&backend.waiting);
                    let _gauge = crate::metrics::Waiting::new(&backend.name, label);
                    tokio::select! {
                        _ = n => {}
                        _ = tokio::time::sleep_until(until) => {}
                    }
                }
            }
        }
    }
}

/// A `Timeout` with what was measured: the holder's remaining lease as last reported
/// (counted down to now), and the recent hold times on this backend.
fn timeout(
    backend: &Backend,
    key: String,
    waited: Duration,
    holder: Option<(Duration, Instant)>,
) -> LockError {
    LockError::Timeout {
        key,
        backend: backend.name.to_string(),
        waited,
        holder_lease: holder.map(|(ttl, seen)| ttl.saturating_sub(seen.elapsed())),
        recent_hold: crate::holds::typical(&backend.name),
    }
}

/// A waiter's place in a fair or write queue, left when dropped armed.
struct Queued {
    backend: Arc<Backend>,
    keys: LockKeys,
    owner: OwnerId,
    armed: bool,
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.armed {
            self.backend
                .cancel_in_background(self.keys.clone(), self.owner);
        }
    }
}

/// Counts a waiter as asleep while it lives.
pub(crate) struct Asleep<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Asleep<'a> {
    pub(crate) fn new(n: &'a std::sync::atomic::AtomicUsize) -> Asleep<'a> {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Asleep(n)
    }
}

impl Drop for Asleep<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
