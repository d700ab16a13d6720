//! Multi-key locks: `Lock::all([k1, k2, ...])` takes every key or none, within one wait.
//!
//! Deadlock-free by a global order: the keys are deduplicated and sorted, and taken one
//! after the other, each an ordinary reentrant lock (so keys in different cluster slots
//! work, each with its own fencing token). Two owners asking for `[a, b]` and `[b, a]`
//! both ask for `a` first, so neither can hold `b` while waiting for `a`. When a key is
//! not taken within what is left of the wait, the keys taken so far are released and the
//! acquisition fails with the `Timeout` naming that key.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::ops::target::Target;
use crate::primitives::guard::LockGuard;
use crate::primitives::lock::{Lock, LockSite};
use crate::registry::Registry;
use crate::rt::backoff::Backoff;
use crate::upkeep::revoke;
use crate::{Lease, LockError, OnLost};

/// Several locks taken together, all or nothing: from [`Lock::all`] or
/// [`Registry::lock_all`].
///
/// The keys are taken in sorted order (a global order, so two owners asking for the same
/// keys in different orders cannot deadlock), each as a reentrant lock of its own, all
/// within one `wait`. A duplicate key is taken once.
///
/// ```
/// use distlock::{Lock, Registry};
/// use std::time::Duration;
/// # async fn f() -> Result<(), distlock::LockError> {
/// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
/// let both = Lock::all(["account:2", "account:1"])
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// assert_eq!(both.keys(), ["account:1", "account:2"]); // in the order they were taken
/// let t1 = both.token("account:1").expect("held");
/// // ... move money between the two accounts, fencing each write with its key's token ...
/// # assert!(t1 >= 1);
/// both.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone)]
#[must_use = "a MultiLock does nothing until acquired"]
pub struct MultiLock {
    keys: Vec<String>,
    /// The registry, backend, wait, lease and site, every key's.
    target: Target,
    on_lost: OnLost,
}

impl Lock {
    /// Locks on all of `keys` at once, on the default backend of the registry in force
    /// (see [`Lock::new`]): all or nothing, deadlock-free, within one wait. See [`MultiLock`].
    #[track_caller]
    pub fn all<I>(keys: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        MultiLock {
            keys: keys.into_iter().map(Into::into).collect(),
            target: Target::here(),
            on_lost: OnLost::Cancel,
        }
    }
}

impl Registry {
    /// Locks on all of `keys` at once in this registry: see [`MultiLock`].
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.lock_all(["a", "b"]).try_acquire().await?.expect("free");
    /// assert!(registry.lock("b").try_acquire().await?.is_none());
    /// g.release().await?;
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    #[track_caller]
    pub fn lock_all<I>(&self, keys: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let mut all = Lock::all(keys);
        all.target.set_registry(self.clone());
        all
    }
}

impl MultiLock {
    /// Name the lock site (see [`Lock::site`]).
    pub fn site(mut self, name: &'static str) -> MultiLock {
        self.target.set_site(LockSite::Named(name));
        self
    }

    /// Use the backend of this name (`[backends.NAME]`) instead of the default; every key
    /// is locked on it.
    pub fn backend(mut self, name: impl Into<String>) -> MultiLock {
        self.target.set_backend(name.into());
        self
    }

    /// Longest wait to acquire all of the keys, together; `Duration::ZERO` tries each once.
    /// Default: `[defaults].wait`.
    pub fn wait(mut self, wait: Duration) -> MultiLock {
        self.target.set_wait(wait);
        self
    }

    /// The lease of every key's lock. Default: `[defaults].lease`.
    pub fn lease(mut self, lease: Lease) -> MultiLock {
        self.target.set_lease(lease);
        self
    }

    /// What [`run`](MultiLock::run) does when any of the leases is lost (see
    /// [`Lock::on_lost`]).
    pub fn on_lost(mut self, on_lost: OnLost) -> MultiLock {
        self.on_lost = on_lost;
        self
    }

    /// The keys in the order they are taken: sorted, without duplicates.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Acquire every key, waiting at most the configured wait for all of them together.
    ///
    /// # Errors
    ///
    /// `InvalidKey` for an empty list; `LockOrder` when this task holds one of the keys out
    /// of order; `Timeout` naming the first key not taken in time; `LeaseLost` naming a key
    /// that was lost (force-released, its lease run out) while a later one was awaited,
    /// when the wait ran out before the keys could be taken again; otherwise what
    /// [`Lock::acquire`](crate::Lock::acquire) returns for a key. Nothing stays held on an error.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping this future at any `.await` leaves nothing held. An attempt
    /// sent but not answered is released in the background (a release of what was never
    /// taken changes nothing), and a queued fair or write waiter leaves the queue.
    pub async fn acquire(mut self) -> Result<MultiLockGuard, LockError> {
        if self.keys.is_empty() {
            return Err(LockError::InvalidKey {
                key: String::new(),
                reason: "a multi-key lock needs at least one key".into(),
            });
        }
        let registry = self.target.registry()?;
        let wait = self.target.wait_in(&registry);
        let mut keys = std::mem::take(&mut self.keys);
        keys.sort_unstable();
        keys.dedup();
        // Counted once, as the acquisition of every key (the keys' own locks do not count).
        let counted = self.target.backend_in(&registry).map(|b| b.name.clone());
        if let Some(name) = &counted {
            out_of_order(name, &keys)?;
        }
        let start = Instant::now();
        let site = crate::metrics::site_label(self.target.site());
        let each = self.target.in_registry(registry);
        let r = acquire_keys(each, wait, keys, start).await;
        if let Some(name) = counted {
            crate::ops::target::count(&name, site, start, &r, |g| {
                !g.guards.iter().any(|g| g.held.state.outermost)
            });
        }
        r
    }

    /// Try each key once: `Ok(None)` when another owner holds one of them (nothing is held
    /// then).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), but a key held by another owner is `Ok(None)`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping this future at any `.await` leaves nothing held. An attempt
    /// sent but not answered is released in the background (a release of what was never
    /// taken changes nothing), and a queued fair or write waiter leaves the queue.
    pub async fn try_acquire(self) -> Result<Option<MultiLockGuard>, LockError> {
        match self.wait(Duration::ZERO).acquire().await {
            Ok(g) => Ok(Some(g)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Acquire every key, run `body` holding them (in the task-scoped context of every one:
    /// nested acquisitions of any of the keys re-enter, [`fencing_token_of`](crate::fencing_token_of)
    /// gives each key's token, and `lease_lost()` watches all of the leases), then release
    /// them. As [`Lock::run`]: with auto leases, the loss of any lease drops `body` at its
    /// next `.await` and returns `LeaseLost` naming that key (unless [`OnLost::Signal`]).
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let tokens = registry
    ///     .lock_all(["account:1", "account:2"])
    ///     .run(async {
    ///         (distlock::fencing_token_of("account:1"), distlock::fencing_token_of("account:2"))
    ///     })
    ///     .await?;
    /// assert!(tokens.0.is_some() && tokens.1.is_some());
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
        let output = if guard.auto && on_lost == OnLost::Cancel {
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
        if let Err(e) = guard.release().await {
            tracing::warn!(error = %e, "distlock: release of a multi-key lock after the locked section failed");
        }
        Ok(output)
    }
}

/// Take `keys` (sorted, deduplicated) one after the other, each with the terms of `each`,
/// within `wait` from `start`. Nothing stays held on an error.
///
/// A key taken first can be lost while a later one is awaited (a `force_unlock`, its lease
/// run out): another owner may hold it by then. A revocation heard during the round that
/// may concern a key taken is checked on the server before the guard is returned (its
/// own check may not have run yet); a round with a key lost is given back whole and the
/// keys are taken again within the same wait, after a pause ([`Backoff::retry`]). So the
/// guard returned holds every key; past the wait, the loss is the error.
async fn acquire_keys(
    each: Target,
    wait: Duration,
    keys: Vec<String>,
    start: Instant,
) -> Result<MultiLockGuard, LockError> {
    let deadline = start + wait.min(crate::lease::policy::MAX_WAIT);
    let backend = each.backend().ok();
    // Between rounds (a fixed lease shorter than the wait for the next key would
    // otherwise go round without a pause until the deadline).
    let mut backoff = Backoff::retry();
    loop {
        // The revocations heard from here on, for the keys this round takes.
        let noted = backend.as_ref().map(|b| b.leases.heard.in_flight());
        let guards = take_each(&each, &keys, deadline, start).await?;
        if let (Some(backend), Some(noted)) = (&backend, noted) {
            let states: Vec<_> = guards.iter().map(|g| g.held.state.clone()).collect();
            if noted.revoked_since(|k| states.iter().any(|s| revoke::concerns(s, k))) {
                revoke::confirm(backend, &states).await;
            }
        }
        let Some(lost) = guards.iter().find(|g| !g.is_held()) else {
            let auto = guards.iter().all(|g| g.held.state.auto);
            return Ok(MultiLockGuard { guards, auto });
        };
        let error = lost.held.state.lost_error();
        tracing::debug!(backend = %lost.backend(), key = %lost.key(), error = %error,
            "distlock: a key of a multi-key lock was lost while the next was awaited; taking them again");
        release_all(guards).await;
        let now = Instant::now();
        if now >= deadline {
            return Err(error);
        }
        tokio::time::sleep_until(deadline.min(now + backoff.pause())).await;
    }
}

/// One round of [`acquire_keys`]: each key in turn, within `deadline`.
async fn take_each(
    each: &Target,
    keys: &[String],
    deadline: Instant,
    start: Instant,
) -> Result<Vec<LockGuard>, LockError> {
    // Taken so far: dropped (released in the background) on an error or if this
    // future is dropped.
    let mut guards: Vec<LockGuard> = Vec::with_capacity(keys.len());
    for key in keys.iter().cloned() {
        let lock = Lock::with_target(key, each.clone())
            .uncounted()
            .wait(deadline.saturating_duration_since(Instant::now()));
        match lock.acquire().await {
            Ok(g) => guards.push(g),
            Err(e) => {
                let e = match e {
                    LockError::Timeout {
                        key,
                        backend,
                        holder_lease,
                        recent_hold,
                        held_by,
                        ..
                    } => LockError::Timeout {
                        key,
                        backend,
                        waited: start.elapsed(),
                        holder_lease,
                        recent_hold,
                        held_by,
                    },
                    other => other,
                };
                release_all(guards).await;
                return Err(e);
            }
        }
    }
    Ok(guards)
}

/// Release every guard, the last taken first; errors are logged (the guards dropped on
/// the way out are released in the background).
async fn release_all(guards: Vec<LockGuard>) {
    for g in guards.into_iter().rev() {
        let (key, backend) = (g.key().to_owned(), g.backend().to_owned());
        if let Err(e) = g.release().await {
            tracing::debug!(backend = %backend, key = %key, error = %e,
                "distlock: releasing a key of a multi-key lock that was not completed");
        }
    }
}

/// Several held locks, from [`MultiLock::acquire`]. Dropping it releases all of them in
/// the background; `release().await` releases them and tells whether all were still held.
///
/// ```
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// let g = registry.lock_all(["b", "a"]).acquire().await?;
/// assert!(g.is_held());
/// for (key, token) in g.fencing_tokens() {
///     println!("{key}: fencing token {token}");
/// }
/// drop(g); // released in the background
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiLockGuard {
    /// In the order taken (sorted by key).
    guards: Vec<LockGuard>,
    /// Every lease is renewed by the watchdog.
    auto: bool,
}

impl MultiLockGuard {
    /// The keys, in the order they were taken (sorted, without duplicates).
    pub fn keys(&self) -> Vec<&str> {
        self.guards.iter().map(LockGuard::key).collect()
    }

    /// The fencing token of `key` (`None` if it is not one of the keys).
    pub fn token(&self, key: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|g| g.key() == key)
            .map(LockGuard::fencing_token)
    }

    /// Every key with its fencing token, in the order taken.
    pub fn fencing_tokens(&self) -> Vec<(&str, u64)> {
        self.guards
            .iter()
            .map(|g| (g.key(), g.fencing_token()))
            .collect()
    }

    /// The backend's name (every key is locked on the same backend).
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.lock_all(["a", "b"]).acquire().await?;
    /// assert_eq!(g.backend(), "m");
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn backend(&self) -> &str {
        // Never empty: an acquisition takes at least one key.
        self.guards.first().map_or("", LockGuard::backend)
    }

    /// The guard of each key, in the order taken.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether every lock is held, as far as this process knows.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Resolves when any of the leases is lost, with that key's `LeaseLost` error. Never
    /// resolves after the guard is released.
    pub async fn lost(&self) -> LockError {
        crate::lease::state::lost_any(self.guards.iter().map(|g| g.held.state.clone()).collect())
            .await
    }

    /// Release every lock, the last taken first. All are released whatever happens; the
    /// first error (`NotHeld` for a key whose lease had ended) is returned.
    ///
    /// # Errors
    ///
    /// The first key's error (`NotHeld`, `Backend`); every key is released whatever the
    /// others answer. A key whose release failed transiently is sent again in the
    /// background until the server answers (docs/design.md, "Re-sends").
    ///
    /// # Cancel safety
    ///
    /// Dropping this future before the reply sends the release again in the background
    /// (a second run changes nothing): the lock is freed either way.
    pub async fn release(mut self) -> Result<(), LockError> {
        let mut first = None;
        while let Some(g) = self.guards.pop() {
            if let Err(e) = g.release().await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Run `fut` inside the task-scoped context of every one of the locks (see
    /// [`LockGuard::scope`]).
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        crate::lease::context::scope_group(
            self.guards.iter().map(|g| g.held.state.clone()).collect(),
            fut,
        )
    }
}

/// Refuses `keys` (sorted) when this task holds one of them while it still needs one that
/// sorts before it (see [`LockError::LockOrder`]).
fn out_of_order(backend: &str, keys: &[String]) -> Result<(), LockError> {
    let held = |k: &String| crate::lease::context::find(backend, k).is_some();
    let Some(last_held) = keys.iter().rposition(held) else {
        return Ok(());
    };
    match keys[..last_held].iter().find(|k| !held(k)) {
        Some(needs) => Err(LockError::LockOrder {
            held: keys[last_held].clone(),
            needs: needs.clone(),
            keys: keys.to_vec(),
            backend: backend.to_owned(),
        }),
        None => Ok(()),
    }
}
