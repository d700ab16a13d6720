//! Leader election: one leader among replicas, on the reentrant lock.
//!
//! A leader of `NAME` is the holder of the lock `leader:NAME` (so `distlock list
//! 'leader:*'` shows the leaders), taken with an auto lease the watchdog renews: the
//! leadership has the lock's guarantees. Its fencing token is the epoch (it grows strictly
//! with every new leader); the loss is signalled a margin before the server can expire the
//! lease, so no other replica can lead before this one is told; a waiting candidate is
//! woken by the release's message. What observers see (`host\tpid\tINFO`) is the lock's
//! holder information, written by the acquiring script, kept at the lock's expiry by every
//! renewal and deleted by the release: it never outlives the leadership, and an observer
//! reads it with the holder in one script.
//!
//! A change of leader is announced on the channel `PREFIX{leader:NAME}:leader` (the new
//! leader after it is elected, the old one after it resigns or is dropped); a leader that
//! crashed is seen gone when its lease ends. Observers also read the state every
//! [`Leader::OBSERVE_POLL`], in case a message was lost.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::ops::target::Target;
use crate::primitives::guard::LockGuard;
use crate::primitives::lock::Lock;
use crate::protocol::keys::LockKeys;
use crate::registry::Registry;
use crate::rt::backoff::Backoff;
use crate::{Lease, LockError, LockKind};

/// The longest an observer ([`Leader::observe`], [`Leader::changes`]) goes without reading
/// the leader's state again, even when no change was announced: the bound (plus one read)
/// on how late it sees a change whose message was lost, or while pub/sub is down. A leader
/// that crashed is seen gone when its lease ends (at most this much later).
///
/// See [`Leader::OBSERVE_POLL`].
pub(crate) const OBSERVE_POLL: Duration = Duration::from_secs(1);

/// How long an observer waits for its channel's subscription to be confirmed before it
/// reads anyway (after a reconnect of the subscriber, or while it is down).
const RESUBSCRIBE_WAIT: Duration = Duration::from_millis(50);

/// See [`Leader::MAX_INFO`].
pub(crate) const MAX_LEADER_INFO: usize = 4096;

/// The lock site of a leader's lock beyond [`crate::metrics::MAX_NAME_LABELS`] election
/// names (metrics label their elections by name up to then).
const SITE: &str = "distlock::Leader";

/// An election among replicas: [`campaign`](Leader::campaign) to lead,
/// [`current`](Leader::current) / [`changes`](Leader::changes) (or
/// [`Leader::observe_once`] / [`Leader::observe`] on the default backend) to see who leads.
///
/// `Leader::new` uses the registry in force (the innermost [`Registry::scope`] of this
/// task, else the global one); [`Registry::leader`] a given one. Offered on the single,
/// cluster, sentinel and memory backends (the memory backend: among the tasks of this
/// process); a redlock or multi backend, or one with `protocol = "redisson"`, answers
/// `LockError::Unsupported`.
///
/// ```
/// use distlock::Leader;
/// # async fn f() -> Result<(), distlock::LockError> {
/// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
/// let leader = Leader::new("scheduler").info("replica-a").campaign().await?;
/// println!("leading in epoch {}", leader.epoch());
/// assert_eq!(Leader::observe_once("scheduler").await?.as_deref(), Some("replica-a"));
/// tokio::select! {
///     err = leader.lost() => eprintln!("no longer leading: {err}"),
///     _ = async { /* ... the leader's work, fenced with leader.epoch() ... */ } => {}
/// }
/// leader.resign().await?;
/// assert_eq!(Leader::observe_once("scheduler").await?, None);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Leader does nothing until it campaigns or observes"]
pub struct Leader {
    name: String,
    /// The registry, backend and wait (the lease is always `Lease::Auto`, the site the
    /// election's name).
    target: Target,
    info: Option<String>,
}

/// Who leads: what [`Leader::current`] returns and [`Leader::changes`] sends.
///
/// ```
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// let g = registry.leader("jobs").info("worker-1").campaign().await?;
/// let now = registry.leader("jobs").current().await?.expect("a leader");
/// assert_eq!((now.info.as_str(), now.epoch), ("worker-1", g.epoch()));
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// What the leader gave as [`Leader::info`] (default `host:pid`).
    pub info: String,
    /// Its epoch ([`LeaderGuard::epoch`]).
    pub epoch: u64,
}

impl Leader {
    /// The longest an observer ([`Leader::observe`], [`Leader::changes`]) goes without
    /// reading the leader's state again, even when no change was announced: the bound (plus
    /// one read) on how late it sees a change whose message was lost, or while pub/sub is
    /// down. A leader that crashed is seen gone when its lease ends (at most this much later).
    ///
    /// ```
    /// assert_eq!(distlock::Leader::OBSERVE_POLL, std::time::Duration::from_secs(1));
    /// ```
    pub const OBSERVE_POLL: Duration = OBSERVE_POLL;

    /// The longest [`Leader::info`] accepted, in bytes.
    ///
    /// ```
    /// assert_eq!(distlock::Leader::MAX_INFO, 4096);
    /// ```
    pub const MAX_INFO: usize = MAX_LEADER_INFO;

    /// An election named `name` (not empty; the lock `leader:NAME`), on the default backend
    /// of the registry in force.
    ///
    /// ```
    /// let election = distlock::Leader::new("scheduler").backend("main");
    /// # drop(election);
    /// ```
    pub fn new(name: impl Into<String>) -> Leader {
        Leader {
            name: name.into(),
            target: Target::here(),
            info: None,
        }
    }

    /// An election named `name` in `registry`.
    pub(crate) fn with_registry(name: String, registry: Registry) -> Leader {
        let mut leader = Leader::new(name);
        leader.target.set_registry(registry);
        leader
    }

    /// Use the backend of this name (`[backends.NAME]`) instead of the default.
    ///
    /// ```
    /// let election = distlock::Leader::new("scheduler").backend("coordination");
    /// # drop(election);
    /// ```
    pub fn backend(mut self, name: impl Into<String>) -> Leader {
        self.target.set_backend(name.into());
        self
    }

    /// What observers see while this candidate leads (at most [`Leader::MAX_INFO`] bytes;
    /// more fails the campaign with `InvalidKey`). Default: `host:pid`.
    ///
    /// ```
    /// let election = distlock::Leader::new("scheduler").info("http://10.0.0.7:8080");
    /// # drop(election);
    /// ```
    pub fn info(mut self, info: impl Into<String>) -> Leader {
        self.info = Some(info.into());
        self
    }

    /// Longest [`campaign`](Leader::campaign) waits to be elected (`Timeout` after it;
    /// `Duration::ZERO` tries once). Default: until elected (at most [`Lock::MAX_WAIT`](crate::Lock::MAX_WAIT));
    /// a campaign is cancelled by dropping its future at any time.
    ///
    /// ```
    /// let election = distlock::Leader::new("scheduler").wait(std::time::Duration::from_secs(5));
    /// # drop(election);
    /// ```
    pub fn wait(mut self, wait: std::time::Duration) -> Leader {
        self.target.set_wait(wait);
        self
    }

    /// The election's name, as given.
    ///
    /// ```
    /// assert_eq!(distlock::Leader::new("scheduler").name(), "scheduler");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name of the lock behind this election: `leader:NAME`.
    fn key(&self) -> String {
        format!("leader:{}", self.name)
    }

    /// The backend, checked to offer leader election, and the lock's key.
    fn resolve(&self) -> Result<(Registry, Arc<Backend>, LockKeys), LockError> {
        let (registry, backend) = self.target.locate()?;
        if self.name.is_empty() {
            return Err(LockError::InvalidKey {
                key: self.name.clone(),
                reason: "the leader election's name is empty".into(),
            });
        }
        if backend.quorum_mode().is_some() {
            return Err(backend.unsupported(
                crate::Feature::Leader,
                "observers read the leader from one place; use a single, cluster, sentinel or memory backend",
            ));
        }
        if backend.is_redisson() {
            return Err(backend.unsupported(
                crate::Feature::Leader,
                "Redisson's lock format has no place for the leader's information",
            ));
        }
        let keys = backend.keys(self.key(), LockKind::Reentrant, backend.watchdog_timeout)?;
        Ok((registry, backend, keys))
    }

    /// Campaign: resolves when this candidate is elected (it holds the lock `leader:NAME`
    /// with an auto lease, renewed by the watchdog until [`LeaderGuard::resign`], a drop of
    /// the guard, or a loss). A waiting candidate is woken by the leader's release, or
    /// tries again when the leader's lease ends.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let first = registry.leader("scheduler").campaign().await?;
    /// let second = registry.leader("scheduler").campaign(); // waits
    /// let (second, _) = tokio::join!(second, first.resign());
    /// assert!(second?.epoch() > 0);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// `Timeout` when not elected within the wait; `InvalidKey` for an empty name or info
    /// over [`Leader::MAX_INFO`] bytes; `Backend`, `Unsupported`, `NotInitialized`,
    /// `NoSuchBackend`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping this future at any `.await` leaves nothing held. An attempt
    /// sent but not answered is released in the background (a release of what was never
    /// taken changes nothing), and a queued fair or write waiter leaves the queue.
    pub async fn campaign(self) -> Result<LeaderGuard, LockError> {
        let (registry, backend, keys) = self.resolve()?;
        let info = match self.info {
            Some(i) => i,
            None => format!("{}:{}", crate::obs::holder::hostname(), std::process::id()),
        };
        if info.len() > MAX_LEADER_INFO {
            return Err(LockError::InvalidKey {
                key: keys.user,
                reason: format!(
                    "the leader's info is {} bytes long; at most {MAX_LEADER_INFO} are allowed",
                    info.len()
                ),
            });
        }
        let holder: Arc<str> = Arc::from(format!(
            "{}\t{}\t{info}",
            crate::obs::holder::hostname(),
            std::process::id()
        ));
        let guard = Lock::with_registry(keys.user.clone(), registry)
            .backend(backend.name.to_string())
            .lease(Lease::Auto)
            .wait(self.target.wait().unwrap_or(crate::lease::policy::MAX_WAIT))
            .site(crate::metrics::name_label(&self.name).unwrap_or(SITE))
            .with_holder(holder)
            .acquire()
            .await
            .map_err(|e| match e {
                // A busy election: its leader is what holds it.
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
                    held_by: crate::errors::HeldBy::Leader,
                },
                other => other,
            })?;
        // A shutdown that takes this lease over resigns it: it announces the change too.
        guard.held.state.resign_on_shutdown(channel(&keys));
        let leader = LeaderGuard {
            guard: Some(guard),
            info,
            backend,
            channel: channel(&keys),
            keys,
        };
        // Dropped here (this future cancelled): the guard releases in the background.
        leader.announce("elected").await;
        Ok(leader)
    }

    /// Who leads now, read with the holder in one call; `None` when nobody leads. Reads
    /// with the inspection script: an ACL user needs `+hgetall +lrange` for it.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// assert_eq!(registry.leader("scheduler").current().await?, None);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub async fn current(&self) -> Result<Option<LeaderInfo>, LockError> {
        let (_, backend, keys) = self.resolve()?;
        read(&backend, &keys).await.map(|(now, _)| now)
    }

    /// Who leads now, and every change after: a [`tokio::sync::watch::Receiver`] whose value
    /// is the current leader (`None`: nobody leads). Await `changed()` for the next change,
    /// `borrow()` for the latest; like every watch channel it keeps the latest value only,
    /// so changes in quick succession may be seen as one. A background task keeps it up to
    /// date: woken by the change messages (see the module docs), at the end of the
    /// leader's lease, and at least every [`Leader::OBSERVE_POLL`]; a failed read is retried (with
    /// backoff, within that bound) and keeps the last value. The task ends when the last
    /// receiver is dropped.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let mut who = registry.leader("scheduler").changes().await?;
    /// assert_eq!(*who.borrow(), None);
    /// let g = registry.leader("scheduler").info("a").campaign().await?;
    /// who.changed().await.expect("the observer runs");
    /// assert_eq!(who.borrow().as_ref().map(|l| l.epoch), Some(g.epoch()));
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub async fn changes(&self) -> Result<watch::Receiver<Option<LeaderInfo>>, LockError> {
        let (_, backend, keys) = self.resolve()?;
        let chan = channel(&keys);
        let (first, watcher) = crate::rt::runtime::on_background_runtime(async {
            // Subscribed before the first read: a change after it is announced to us.
            let watcher = backend.hub.watch(&chan);
            watcher.subscribe(Instant::now() + OBSERVE_POLL).await;
            let (first, _) = read(&backend, &keys).await?;
            Ok::<_, LockError>((first, watcher))
        })
        .await?;
        let (tx, rx) = watch::channel(first);
        let runtime = backend.runtime.clone();
        drop(runtime.spawn(observe_task(backend, keys, watcher, tx)));
        Ok(rx)
    }

    /// The current leader's info on the default backend of the registry in force
    /// (`None`: nobody leads): [`Leader::current`] for the info only.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
    /// let now: Option<String> = distlock::Leader::observe_once("scheduler").await?;
    /// # assert_eq!(now, None);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub async fn observe_once(name: impl Into<String>) -> Result<Option<String>, LockError> {
        Ok(Leader::new(name).current().await?.map(|l| l.info))
    }

    /// The leader of `name` on the default backend of the registry in force, and its
    /// changes: [`Leader::changes`].
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.unwrap();
    /// let mut who = distlock::Leader::observe("scheduler").await?;
    /// while who.changed().await.is_ok() {
    ///     match &*who.borrow() {
    ///         Some(l) => println!("{} leads (epoch {})", l.info, l.epoch),
    ///         None => println!("nobody leads"),
    ///     }
    /// #   break;
    /// }
    /// # Ok(()) }
    /// # let rt = tokio::runtime::Runtime::new().unwrap();
    /// # rt.block_on(async {
    /// #     let f = f();
    /// #     tokio::pin!(f);
    /// #     let _ = tokio::time::timeout(std::time::Duration::from_millis(50), f).await;
    /// # });
    /// ```
    pub async fn observe(
        name: impl Into<String>,
    ) -> Result<watch::Receiver<Option<LeaderInfo>>, LockError> {
        Leader::new(name).changes().await
    }
}

impl Registry {
    /// A leader election named `name` in this registry: see [`Leader`].
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// assert!(g.is_leader());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn leader(&self, name: impl Into<String>) -> Leader {
        Leader::with_registry(name.into(), self.clone())
    }
}

/// The leadership won by [`Leader::campaign`]. Dropping it resigns in the background.
///
/// ```
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// let g = registry.leader("scheduler").campaign().await?;
/// assert!(g.is_leader());
/// let epoch = g.epoch(); // fence the leader's writes with it
/// g.resign().await?;
/// let next = registry.leader("scheduler").campaign().await?;
/// assert!(next.epoch() > epoch);
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard resigns at once"]
pub struct LeaderGuard {
    /// `None` once resigned (or being dropped).
    guard: Option<LockGuard>,
    info: String,
    backend: Arc<Backend>,
    keys: LockKeys,
    channel: String,
}

impl LeaderGuard {
    /// The epoch: a fencing token that grows strictly with every new leader of this
    /// election (the token of the lock `leader:NAME`). Pass it to
    /// [`distlock::fence`](crate::fence()) or a `WHERE fence < $epoch` to refuse a former
    /// leader's late writes.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// assert!(g.epoch() >= 1);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn epoch(&self) -> u64 {
        self.guard.as_ref().map_or(0, LockGuard::fencing_token)
    }

    /// Whether this process still leads, as far as it knows: not resigned, not lost, and
    /// the lease not within the safety margin of its end.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// assert!(g.is_leader());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn is_leader(&self) -> bool {
        self.guard.as_ref().is_some_and(LockGuard::is_held)
    }

    /// Resolves when the leadership is lost (the lock was found gone, or could not be
    /// renewed before the safety margin ahead of its end: a margin *before* the server can
    /// expire it, so no other candidate can be elected before this resolves), with the
    /// `LeaseLost` error saying why.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// tokio::select! {
    ///     err = g.lost() => return Err(err),
    ///     _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {} // the work
    /// }
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub async fn lost(&self) -> LockError {
        match &self.guard {
            Some(g) => g.lost().await,
            None => std::future::pending().await,
        }
    }

    /// The fencing token of the leadership: the same as [`epoch`](Self::epoch), under the
    /// name every guard gives it.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// assert_eq!(g.fencing_token(), g.epoch());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.epoch()
    }

    /// Whether this process still leads: the same as [`is_leader`](Self::is_leader), under
    /// the name every guard gives it.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// assert!(g.is_held());
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn is_held(&self) -> bool {
        self.is_leader()
    }

    /// The key of the lock behind the election: `leader:NAME`.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// assert_eq!(g.key(), "leader:scheduler");
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn key(&self) -> &str {
        &self.keys.user
    }

    /// The backend's name.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// assert_eq!(g.backend(), "m");
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn backend(&self) -> &str {
        &self.backend.name
    }

    /// What observers see of this leader ([`Leader::info`]).
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").info("a").campaign().await?;
    /// assert_eq!(g.info(), "a");
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn info(&self) -> &str {
        &self.info
    }

    /// Give up the leadership: release the lock (a waiting candidate is woken by its
    /// message) and announce it to observers. `Err(LockError::NotHeld)` when the
    /// leadership had been lost already (nothing changed then).
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// g.resign().await?;
    /// assert_eq!(registry.leader("scheduler").current().await?, None);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
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
    pub async fn resign(mut self) -> Result<(), LockError> {
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        let released = guard.release().await;
        self.announce("resigned").await;
        released
    }

    /// Give up the leadership: the same as [`resign`](Self::resign), under the name every
    /// guard gives it.
    ///
    /// ```
    /// # async fn f() -> Result<(), distlock::LockError> {
    /// # let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let g = registry.leader("scheduler").campaign().await?;
    /// g.release().await?;
    /// assert_eq!(registry.leader("scheduler").current().await?, None);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// As [`resign`](Self::resign): `NotHeld` when the leadership had been lost already;
    /// `Backend` when Redis failed.
    ///
    /// # Cancel safety
    ///
    /// As [`resign`](Self::resign): the lock is freed either way.
    pub async fn release(self) -> Result<(), LockError> {
        self.resign().await
    }

    /// Publish a change on the election's channel; a failure is logged (observers then
    /// see the change at their next poll).
    async fn announce(&self, what: &str) {
        let r = self.backend.announce(&self.keys, &self.channel, what).await;
        if let Err(e) = r {
            tracing::warn!(backend = %self.backend.name, key = %self.keys.user, error = %e,
                "distlock: announcing a change of leader failed; observers see it within their poll interval");
        }
    }
}

impl Drop for LeaderGuard {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        // Released, then announced, in the background. On a runtime that is shutting
        // down the task is dropped: the guard then releases on its own (unannounced).
        let (backend, keys, channel) = (
            self.backend.clone(),
            self.keys.clone(),
            self.channel.clone(),
        );
        let spawner = self.backend.clone();
        spawner.spawn_background(async move {
            let _ = guard.release().await;
            if let Err(e) = backend.announce(&keys, &channel, "resigned").await {
                tracing::debug!(backend = %backend.name, key = %keys.user, error = %e,
                    "distlock: announcing a dropped leader failed");
            }
        });
    }
}

/// The channel changes of leader of the lock `keys` are announced on (its hash tag, so
/// its cluster slot).
fn channel(keys: &LockKeys) -> String {
    format!("{}:leader", keys.hash)
}

/// Who leads (read with the holder in one call), and what is left of its lease.
async fn read(
    backend: &Backend,
    keys: &LockKeys,
) -> Result<(Option<LeaderInfo>, Option<Duration>), LockError> {
    if let Some(found) = backend.local_holder(keys) {
        return Ok(match found {
            Some((text, epoch, ttl)) => (
                Some(LeaderInfo {
                    info: info_of(&text),
                    epoch,
                }),
                Some(ttl),
            ),
            None => (None, None),
        });
    }
    let found = crate::ops::inspect::inspect_on(backend, &keys.user).await?;
    let Some(lock) = found
        .into_iter()
        .find(|l| l.kind == LockKind::Reentrant && !l.holders.is_empty())
    else {
        return Ok((None, None));
    };
    let holder = &lock.holders[0];
    let epoch = holder.token.or(lock.token).unwrap_or(0);
    let info = holder.site.clone().unwrap_or_else(|| holder.owner.clone());
    Ok((Some(LeaderInfo { info, epoch }), lock.ttl))
}

/// The info in a holder text `host\tpid\tinfo`.
fn info_of(text: &str) -> String {
    text.splitn(3, '\t').nth(2).unwrap_or(text).to_owned()
}

/// Keeps an observer's value up to date until its last receiver is dropped.
async fn observe_task(
    backend: Arc<Backend>,
    keys: LockKeys,
    watcher: crate::rt::hub::Watch,
    tx: watch::Sender<Option<LeaderInfo>>,
) {
    let mut retry = Backoff::new(Duration::from_millis(50), OBSERVE_POLL);
    // The first read was made before this task listened: read again at once.
    let mut next = Instant::now();
    let mut notified = Box::pin(watcher.notified());
    notified.as_mut().enable();
    loop {
        tokio::select! {
            _ = notified.as_mut() => {}
            _ = tokio::time::sleep_until(next) => {}
            _ = tx.closed() => return,
        }
        // Listening again before the read: a change announced during it wakes the next
        // round.
        notified = Box::pin(watcher.notified());
        notified.as_mut().enable();
        if !watcher.is_live() {
            // Asked again (the subscriber reconnected, or is down); briefly, so that a
            // broken subscriber does not hold up the read: the poll is the fallback.
            watcher.subscribe(Instant::now() + RESUBSCRIBE_WAIT).await;
        }
        match read(&backend, &keys).await {
            Ok((now, ttl)) => {
                retry.reset();
                tx.send_if_modified(|v| {
                    let changed = *v != now;
                    *v = now;
                    changed
                });
                next = Instant::now() + wake_after(ttl);
            }
            Err(e) => {
                tracing::debug!(backend = %backend.name, key = %keys.user, error = %e,
                    "distlock: reading the leader failed; retrying");
                next = Instant::now() + retry.pause();
            }
        }
    }
}

/// When to read again without a message: at the end of the leader's lease (a crashed
/// leader is gone then), at most [`Leader::OBSERVE_POLL`].
fn wake_after(ttl: Option<Duration>) -> Duration {
    ttl.map_or(OBSERVE_POLL, |t| {
        (t + Duration::from_millis(1)).min(OBSERVE_POLL)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_info_is_what_follows_host_and_pid() {
        assert_eq!(info_of("h\t42\tsvc:8080"), "svc:8080");
        assert_eq!(info_of("h\t42\ta\tb"), "a\tb");
        assert_eq!(info_of("plain"), "plain");
    }

    #[test]
    fn observers_read_again_at_the_lease_end_at_most_every_poll() {
        assert_eq!(wake_after(None), OBSERVE_POLL);
        assert_eq!(wake_after(Some(Duration::from_secs(30))), OBSERVE_POLL);
        assert_eq!(
            wake_after(Some(Duration::from_millis(200))),
            Duration::from_millis(201)
        );
    }
}
