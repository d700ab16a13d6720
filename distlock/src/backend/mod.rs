//! Backends: where locks live.
//!
//! One module per topology owns all of it — connecting, commands, renewal and its wake-up
//! subscriber: [`single`], [`cluster`], [`sentinel`], [`quorum`] (redlock and multi) and
//! [`memory`]. Each implements the backend contract, [`topology::Topology`], and a
//! [`Backend`] holds one behind it: the only dispatch over topologies. What a backend
//! offers is computed once, when it is connected ([`capabilities::Capabilities`]). The
//! Redis ones speak the protocol of `crate::protocol`; `server.rs` is the protocol on one
//! server connection (single, the sentinel master, each quorum node), and `conn.rs` builds
//! every connection's settings. Every failure is a [`DriverError`], turned into a public
//! error in one place (`errors/backend.rs`). Every async method enters distlock's
//! background runtime itself (`crate::rt::runtime::on_background_runtime`): callers need not.

mod auth;
pub(crate) use auth::explain as explain_auth;
mod capabilities;
mod check;
mod cluster;
mod cluster_slots;
mod conn;
mod direct;
mod link;
mod memory;
mod quorum;
mod redisson_once;
pub(crate) mod resend;
mod sentinel;
mod sentinel_resolve;
mod server;
mod single;
mod subscriber;
mod topology;
mod undo;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use distlock_config::{BackendConfig, Defaults, Mode, Protocol};

pub(crate) use self::capabilities::{mode_offers, mode_offers_semaphore};
use self::capabilities::{offers, protocol_fits, semaphore_offered, Announce, Capabilities};
use self::topology::{FencedSet, Topology};
use crate::errors::backend::DriverError;
use crate::lease::state::Leases;
use crate::protocol::keys::{LockKeys, Shape};
use crate::protocol::{Attempt, Released};
use crate::rt::hub::Hub;
use crate::rt::runtime::on_background_runtime;
use crate::terms::owner::{Hold, OwnerId};
use crate::{InitError, LockError, LockKind};

/// One configured backend.
#[derive(Debug)]
pub(crate) struct Backend {
    pub(crate) name: Arc<str>,
    /// `host:port` (or `memory`), for messages.
    pub(crate) address: String,
    pub(crate) prefix: String,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) hub: Arc<Hub>,
    /// The auto leases the watchdog renews.
    pub(crate) leases: Arc<Leases>,
    /// Tasks asleep waiting for a release now.
    pub(crate) waiting: AtomicUsize,
    /// distlock's background runtime (the backend is connected on it): background
    /// releases and tasks go there.
    pub(crate) runtime: tokio::runtime::Handle,
    /// Record holder information next to each lock (`holder_info`; never on memory).
    pub(crate) holder_info: bool,
    /// The self-check of its servers (`None`: memory).
    check: Option<check::SelfCheck>,
    /// The on-Redis format (`protocol`): distlock's or Redisson's.
    pub(crate) protocol: Protocol,
    /// Its mode, for what it refuses ([`Backend::unsupported`]).
    pub(crate) mode: distlock_config::ModeKind,
    /// The local waiters a release hands the lock to (`crate::lease::handoff`);
    /// `None` where there is no hand-off (`handoff = false`, memory, redlock/multi,
    /// sentinel with `sync_replicas`, Redisson's format).
    pub(crate) handoffs: Option<Arc<crate::lease::handoff::Waiters>>,
    /// What this backend's refused attempts at a reentrant lock of distlock's format leave
    /// in the lock (`acquire.lua`): a release publishes only when a waiter left its tag
    /// there (`release.lua`), and a hand-off tells a waiter of another process from one
    /// of its own by it (`handoff.lua`). The hand-off waiters' tag where there are any.
    pub(crate) tag: Arc<str>,
    /// The releases, undos and queue cancels being sent again until the server answers
    /// (`resend.rs`).
    resends: Arc<resend::Resends>,
    /// What it offers, computed when it was connected.
    caps: Capabilities,
    /// Its topology.
    driver: Arc<dyn Topology>,
}

/// A connected topology, its hub and its address (for messages).
type Connected = (Arc<dyn Topology>, Arc<Hub>, String);

/// `e`, a failure connecting the backend `cfg` describes, as an init error; `user`: the
/// ACL user its self-check runs as.
fn init_error(cfg: &BackendConfig, user: Option<&str>, e: DriverError) -> InitError {
    match e.into_init_error(&cfg.name) {
        InitError::MissingRights {
            backend,
            address,
            user: _,
            missing,
            grant,
        } => InitError::MissingRights {
            backend,
            address,
            user: user.map(str::to_owned),
            missing,
            grant,
        },
        other => other,
    }
}

/// Connect to the topology `cfg` describes and start its subscriber.
async fn connect_topology(
    cfg: &BackendConfig,
    name: &Arc<str>,
    settings: &conn::Settings,
) -> Result<Connected, DriverError> {
    Ok(match &cfg.mode {
        Mode::Memory => {
            let hub = Hub::local();
            let driver = Arc::new(memory::MemoryDriver::new(hub.clone()));
            (driver, hub, "memory".to_string())
        }
        Mode::Single { url, .. } => {
            let (single, hub) = single::connect(name, url, settings).await?;
            (Arc::new(single), hub, url.address.clone())
        }
        Mode::Cluster {
            nodes,
            sharded_subscription_mode,
            ..
        } => {
            let redisson =
                (cfg.protocol == Protocol::Redisson).then_some(*sharded_subscription_mode);
            let (cluster, hub) = cluster::connect(name, nodes, redisson, settings).await?;
            let address = cluster.address().to_owned();
            (Arc::new(cluster), hub, address)
        }
        Mode::Sentinel {
            master_name,
            sentinels,
            sync_replicas,
            sync_timeout,
            master_username,
            master_password,
            ..
        } => {
            let sync = (*sync_replicas > 0).then_some(sentinel::SyncReplicas {
                needed: *sync_replicas,
                timeout: *sync_timeout,
            });
            let auth = sentinel::MasterAuth {
                username: master_username.as_deref(),
                password: master_password.as_ref().map(|p| p.expose()),
            };
            let (master, hub) =
                sentinel::connect(name, master_name, sentinels, auth, sync, settings).await?;
            let address = format!("{master_name} via {}", conn::addresses(sentinels));
            (master, hub, address)
        }
        Mode::Redlock { nodes, quorum, .. } | Mode::Multi { nodes, quorum, .. } => {
            let kind = match &cfg.mode {
                Mode::Multi { .. } => quorum::QuorumKind::Multi,
                _ => quorum::QuorumKind::Redlock,
            };
            let (driver, hub) = quorum::connect(name, kind, nodes, *quorum, settings).await?;
            let address = driver.addresses();
            (Arc::new(driver), hub, address)
        }
    })
}

impl Backend {
    /// Connect to the backend a configuration describes, and start its subscriber. With
    /// `enforce_self_check`, the self-check of its servers (`check.rs`) may fail it; without, the
    /// caller reads the reports ([`Backend::probe`]).
    pub(crate) async fn connect(
        cfg: &BackendConfig,
        defaults: &Defaults,
        enforce_self_check: bool,
    ) -> Result<Arc<Backend>, InitError> {
        protocol_fits(cfg)?;
        let name: Arc<str> = Arc::from(cfg.name.as_str());
        let mut settings = conn::Settings::of(cfg).map_err(|e| InitError::Unsupported {
            backend: cfg.name.clone(),
            message: e.0,
        })?;
        settings.revocation = Some(crate::protocol::revocation_channel(&defaults.key_prefix));
        if settings.uses_tls() && cfg.tls_insecure_skip_verify {
            tracing::warn!(backend = %cfg.name, address = %conn::addresses(&cfg.mode.urls().into_iter().cloned().collect::<Vec<_>>()),
                "distlock: tls_insecure_skip_verify = true: the server's certificate is NOT verified; anyone on the path can impersonate the server");
        }
        let check = check::SelfCheck::of(cfg, &defaults.key_prefix);
        let user = check.as_ref().and_then(|c| c.user());
        let (driver, hub, address) = connect_topology(cfg, &name, &settings)
            .await
            .map_err(|e| init_error(cfg, user, e))?;
        let caps = Capabilities::of(cfg, driver.facts());
        // Redisson's forceUnlock publishes on the lock's channel only: in its format every
        // held lease listens there too.
        let leases = if cfg.protocol == Protocol::Redisson {
            Leases::watching_channels(hub.clone())
        } else {
            Leases::default()
        };
        let handoffs: Option<Arc<crate::lease::handoff::Waiters>> =
            caps.hand_off.then(Default::default);
        let leases = Arc::new(leases.handing_off(handoffs.clone()));
        let tag = handoffs.as_ref().map_or_else(
            || format!("{:016x}", rand::random::<u64>()).into(),
            |w| w.tag().clone(),
        );
        let backend = Backend {
            handoffs,
            tag,
            name,
            address,
            prefix: defaults.key_prefix.clone(),
            watchdog_timeout: defaults.watchdog_timeout,
            hub,
            leases,
            waiting: AtomicUsize::new(0),
            runtime: tokio::runtime::Handle::current(),
            holder_info: cfg.holder_info && !matches!(cfg.mode, Mode::Memory),
            check,
            protocol: cfg.protocol,
            mode: cfg.mode.kind(),
            resends: Arc::default(),
            caps,
            driver,
        };
        if enforce_self_check {
            if let (Some(check), Some(reports)) = (&backend.check, backend.probe_servers().await) {
                check.enforce(&cfg.name, reports)?;
            }
        }
        Ok(Arc::new(backend))
    }

    /// The self-check of every server (`check.rs`), at once; `None` on the memory backend.
    async fn probe_servers(
        &self,
    ) -> Option<Vec<Result<crate::check::report::ServerReport, DriverError>>> {
        let check = self.check.as_ref()?;
        let reports = self.driver.probe(&check.probe)?.await;
        Some(
            reports
                .into_iter()
                .map(|r| r.map(|r| check.label(r)))
                .collect(),
        )
    }

    /// A driver's failure as the error of an operation on `key`.
    fn fail<'a>(&'a self, key: Option<&'a str>) -> impl FnOnce(DriverError) -> LockError + 'a {
        move |e| e.into_lock_error(&self.name, key)
    }

    /// How long a lease of `lease` granted now is valid, as far as this process can tell:
    /// less the clock drift allowance on the quorum backends.
    pub(crate) fn validity(&self, lease: Duration) -> Duration {
        self.caps.validity(lease)
    }

    /// Whether locks of `kind` can be taken here: fair and read-write locks need the whole
    /// lock state in one place (one server, one cluster slot, or this process); a quorum
    /// backend (redlock, multi) would have to agree on a queue or a reader set across
    /// independent masters, which this protocol does not do.
    pub(crate) fn supports(&self, kind: LockKind) -> Result<(), LockError> {
        if self.caps.offers(kind) {
            return Ok(());
        }
        offers(&self.name, self.mode, self.protocol, kind)
    }

    /// Whether semaphores can be taken here (see [`semaphore_offered`]).
    pub(crate) fn supports_semaphore(&self) -> Result<(), LockError> {
        if self.caps.semaphores {
            return Ok(());
        }
        semaphore_offered(&self.name, self.mode, self.protocol)
    }

    /// `kind` refused here, for `reason` (why, and what to use instead).
    pub(crate) fn unsupported(&self, kind: crate::Feature, reason: impl Into<String>) -> LockError {
        capabilities::unsupported(&self.name, kind, self.protocol, self.mode, reason)
    }

    /// Whether what `shape` lays out can be taken here: [`Backend::supports`] for a lock,
    /// [`Backend::supports_semaphore`] for a semaphore.
    pub(crate) fn supports_shape(&self, shape: &Shape) -> Result<(), LockError> {
        match shape.lock_kind() {
            Some(kind) => self.supports(kind),
            None => self.supports_semaphore(),
        }
    }

    /// The Redis names of a lock of `kind` on `key` in this backend's format, for an
    /// acquisition leased for `lease`.
    pub(crate) fn keys(
        &self,
        key: String,
        kind: LockKind,
        lease: Duration,
    ) -> Result<LockKeys, LockError> {
        match self.protocol {
            Protocol::Redisson => LockKeys::redisson(key, kind, lease),
            Protocol::Distlock => {
                Ok(LockKeys::for_kind(&self.prefix, key, kind)?.scoped(self.caps.fence_scope))
            }
        }
    }

    /// The Redis names of a semaphore on `key` (distlock's format), for an acquisition of
    /// `permits` out of `limit`; `fair`: waiters queue.
    pub(crate) fn semaphore_keys(
        &self,
        key: String,
        permits: u32,
        limit: u32,
        fair: bool,
    ) -> Result<LockKeys, LockError> {
        Ok(
            LockKeys::semaphore(&self.prefix, key, permits, limit, fair)?
                .scoped(self.caps.fence_scope),
        )
    }

    /// Whether this backend speaks Redisson's format.
    pub(crate) fn is_redisson(&self) -> bool {
        self.protocol == Protocol::Redisson
    }

    /// One acquire attempt. `wait`: how long the caller may still wait (fair and write
    /// locks queue for that long; zero: do not queue). The caller has checked that this
    /// backend offers what `keys` lay out ([`Backend::supports_shape`]).
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
    ) -> Result<Attempt, LockError> {
        // What the keys lay out was checked once, before the first attempt (the engine's
        // `check_terms`), not again per attempt.
        let r = on_background_runtime(self.driver.acquire(keys, hold, lease, wait)).await;
        r.map_err(self.fail(Some(&keys.user)))
    }

    /// A fair or write waiter gives up waiting: it leaves the queue. Returns whether it
    /// was queued.
    pub(crate) async fn cancel(&self, keys: &LockKeys, owner: OwnerId) -> Result<bool, LockError> {
        on_background_runtime(self.send_cancel(keys, owner)).await
    }

    /// [`Backend::cancel`], in the task that polls it.
    async fn send_cancel(&self, keys: &LockKeys, owner: OwnerId) -> Result<bool, LockError> {
        let r = self.driver.cancel(keys, owner).await;
        r.map_err(self.fail(Some(&keys.user)))
    }

    /// Leave the queue without waiting (a waiter that timed out or was dropped): in the
    /// background, sent again until the server answers (`resend.rs`); with `late`, an
    /// attempt of the place got no answer and may run after this, so it is sent again
    /// later too ([`Backend::cancel_again_later`]).
    pub(crate) fn cancel_in_background(
        self: &Arc<Self>,
        keys: Arc<LockKeys>,
        owner: OwnerId,
        late: bool,
    ) {
        if let Some(store) = self.driver.local() {
            return store.cancel_now(&keys, owner);
        }
        // No queue to leave where fair and write locks are not offered (redlock, multi).
        if !self.caps.offers(LockKind::Fair) {
            return;
        }
        let backend = self.clone();
        self.resend(
            "leaving the wait queue",
            &keys.clone(),
            {
                let (backend, keys) = (backend.clone(), keys.clone());
                move || {
                    let (backend, keys) = (backend.clone(), keys.clone());
                    async move { backend.send_cancel(&keys, owner).await.map(drop) }
                }
            },
            move || {
                if late {
                    backend.cancel_again_later(&keys, owner);
                }
            },
        );
    }

    /// Run `attempt` (a release, an undo or a queue cancel of `keys`: safe to run twice) in
    /// the background until the server answers, then `done` (`resend.rs`).
    pub(crate) fn resend<F, Fut>(
        &self,
        what: &'static str,
        keys: &LockKeys,
        attempt: F,
        done: impl FnOnce() + Send + 'static,
    ) where
        F: FnMut() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(), LockError>> + Send,
    {
        self.resends.spawn(
            &self.runtime,
            resend::Label {
                what,
                backend: self.name.clone(),
                key: keys.user.clone(),
            },
            resend::Resends::retry_for(keys.format.is_redisson()),
            attempt,
            done,
        );
    }

    /// Wait until every release, undo and queue cancel this backend is sending again has
    /// been answered (or given up): for a graceful shutdown, before distlock's background
    /// runtime goes. Those asleep in their backoff are sent at once. While the server does
    /// not answer this waits (a re-send goes on for minutes at most): bound it with a
    /// timeout.
    #[allow(dead_code)] // The graceful shutdown's; tests use it meanwhile.
    pub(crate) async fn flush_resends(&self) {
        on_background_runtime(async {
            self.resends.flush().await;
            if let Some(own) = self.driver.resends() {
                own.flush().await;
            }
        })
        .await;
    }

    /// How many releases, undos and queue cancels are being sent again.
    #[allow(dead_code)] // Diagnostics and tests.
    pub(crate) fn resends_pending(&self) -> usize {
        let own = self.driver.resends().map_or(0, |r| r.pending());
        self.resends.pending() + own
    }

    /// Release `hold`: answered, it is sent again later when an attempt of its acquisition
    /// got no answer (`Hold::late`, `undo.rs`).
    pub(crate) async fn release(
        self: &Arc<Self>,
        keys: &LockKeys,
        hold: Hold,
    ) -> Result<Released, LockError> {
        let r = on_background_runtime(self.send_release(keys, hold)).await;
        if r.is_ok() && hold.late {
            self.release_again_later(&Arc::new(keys.clone()), hold);
        }
        r
    }

    /// [`Backend::release`], in the task that polls it.
    async fn send_release(&self, keys: &LockKeys, hold: Hold) -> Result<Released, LockError> {
        let hold = Hold {
            others_wait: self.hub.waiting_on(&keys.channel),
            ..hold
        };
        let r = self.driver.release(keys, hold).await;
        r.map_err(self.fail(Some(&keys.user)))
    }

    /// Release `hold` and, when that frees the lock, hand it to the local waiter's
    /// acquisition `to` (`crate::lease::handoff`); `Ok(None)`: not offered here.
    pub(crate) async fn hand_off(
        self: &Arc<Self>,
        keys: &LockKeys,
        hold: Hold,
        to: Hold,
        lease: Duration,
        holder: Option<&str>,
    ) -> Result<Option<crate::protocol::HandedOff>, LockError> {
        let r = on_background_runtime(self.driver.hand_off(keys, hold, to, lease, holder)).await;
        if r.is_ok() && hold.late {
            self.release_again_later(&Arc::new(keys.clone()), hold);
        }
        r.map_err(self.fail(Some(&keys.user)))
    }

    /// Renew many leases, each with its own outcome: `Ok(true)` renewed, `Ok(false)` the
    /// lock was gone, `Err` not known (Redis failed for it).
    pub(crate) async fn renew_each(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Vec<Result<bool, LockError>> {
        let results = on_background_runtime(self.driver.renew_each(items, lease)).await;
        results
            .into_iter()
            .zip(items)
            .map(|(r, (keys, _))| r.map_err(self.fail(Some(&keys.user))))
            .collect()
    }

    /// Delete a lock whoever holds it; its holders are told at once (on a Redis backend by
    /// the revocation message the script publishes, in memory directly), and their
    /// processes check their leases (`crate::upkeep::revoke`).
    pub(crate) async fn force_release(&self, keys: &LockKeys) -> Result<bool, LockError> {
        let to = crate::protocol::revocation_channel(&self.prefix);
        let r = on_background_runtime(self.driver.force_release(keys, &to)).await;
        if r.is_ok() && self.driver.local().is_some() {
            self.mark_force_released(keys);
        }
        r.map_err(self.fail(Some(&keys.user)))
    }

    /// Every holder of `keys` is in this process (memory): each is marked lost before the
    /// forced release returns.
    fn mark_force_released(&self, keys: &LockKeys) {
        let only = match &keys.shape {
            Shape::Semaphore(sem) => sem.only_holder.as_deref(),
            Shape::Reentrant | Shape::Fair | Shape::Read | Shape::Write => None,
        };
        let concerned = |l: &crate::lease::state::LeaseState| {
            l.keys.hash == keys.hash
                && only.is_none_or(|o| l.owner.hex().as_slice() == o.as_bytes())
        };
        for lease in self.leases.held(concerned) {
            lease.mark_lost("the lock was force-released".into());
        }
    }

    /// INCR `key` (a plain counter, outside the lock layout), giving it `ttl` when new.
    pub(crate) async fn next_sequence(&self, key: &str, ttl: Duration) -> Result<u64, LockError> {
        let r = on_background_runtime(self.driver.next_sequence(key, ttl)).await;
        r.map_err(self.fail(Some(key)))
    }

    /// The Redis keys matching `pattern` (SCAN; on a cluster every master, on redlock/multi
    /// every node), at most `limit`; `None` on the memory backend.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Option<Result<Vec<String>, LockError>> {
        let r = on_background_runtime(self.driver.scan(pattern, limit)?).await;
        Some(r.map_err(self.fail(None)))
    }

    /// Each server's self-check report (version, rights, eviction policy, cluster state),
    /// or why it could not be asked; `None` on the memory backend.
    pub(crate) async fn probe(
        &self,
    ) -> Option<Vec<Result<crate::check::report::ServerReport, LockError>>> {
        let r = on_background_runtime(self.probe_servers()).await?;
        Some(r.into_iter().map(|r| r.map_err(self.fail(None))).collect())
    }

    /// The address each reply of [`Backend::run_script`] came from.
    pub(crate) fn script_addresses(&self) -> Vec<String> {
        match &self.caps.reply_addresses {
            Some(nodes) => nodes.clone(),
            None => vec![self.address.clone()],
        }
    }

    /// Run a script outside the lock protocol (`crate::ops::fence`) for `key`: on the one server
    /// (single, cluster, sentinel), or on every node of a redlock/multi backend. Returns
    /// each server's reply and how many must agree (1, or the quorum); `None` on the memory
    /// backend, which has no scripts.
    pub(crate) async fn run_script(
        &self,
        key: &str,
        call: &crate::protocol::Call,
    ) -> Option<(Vec<Result<redis::Value, LockError>>, usize)> {
        let (replies, needed) = on_background_runtime(self.driver.run_script(call)?).await;
        let replies = replies
            .into_iter()
            .map(|r| r.map_err(|e| e.into_lock_error(&self.name, Some(key))))
            .collect();
        Some((replies, needed))
    }

    /// Whether it is a Redis Cluster backend (inspection asks the node that answers for its
    /// own address: `protocol/inspect.lua`).
    pub(crate) fn is_cluster(&self) -> bool {
        self.caps.cluster
    }

    /// A fenced write (`crate::ops::fence`) on a redlock or multi backend: stored on a
    /// quorum with no newer token on any node that answered, else refused as stale or
    /// failed, and undone where it was taken (`backend/quorum/fenced.rs`). `None` on the
    /// other modes.
    pub(crate) async fn quorum_fenced_set(
        &self,
        key: &str,
        name: &str,
        value: &[u8],
        token: u64,
        ttl_ms: u64,
    ) -> Option<Result<bool, LockError>> {
        let set = on_background_runtime(self.driver.fenced_set(name, value, token, ttl_ms)?).await;
        Some(match set {
            FencedSet::Stored => Ok(true),
            FencedSet::Stale => Ok(false),
            FencedSet::Failed {
                error: Some(e),
                nodes: 1,
                ..
            } => Err(e.into_lock_error(&self.name, Some(key))),
            FencedSet::Failed {
                stored,
                needed,
                nodes,
                ..
            } => Err(LockError::QuorumNotReached {
                key: key.to_owned(),
                backend: self.name.to_string(),
                granted: stored,
                needed,
                nodes,
            }),
        })
    }

    /// The mode's name when it is a quorum backend (redlock, multi), else `None`.
    pub(crate) fn quorum_mode(&self) -> Option<&'static str> {
        self.caps.quorum_mode
    }

    /// A fenced write (`crate::ops::fence`) done at once where the store is in this
    /// process (memory): whether it was stored. `None` elsewhere: a script does it.
    pub(crate) fn local_fenced_set(
        &self,
        name: &str,
        value: &[u8],
        token: u64,
        ttl: Option<Duration>,
    ) -> Option<bool> {
        Some(self.driver.local()?.fenced_set(name, value, token, ttl))
    }

    /// A fenced claim (`crate::ops::fence`) done at once where the store is in this
    /// process (memory): whether it was claimed. `None` elsewhere: a script does it.
    pub(crate) fn local_fenced_claim(
        &self,
        name: &str,
        token: u64,
        ttl: Option<Duration>,
    ) -> Option<bool> {
        Some(self.driver.local()?.fenced_claim(name, token, ttl))
    }

    /// A fenced value and its token (`crate::ops::fence`), read at once where the store is
    /// in this process (memory). `None` elsewhere: a script reads it.
    pub(crate) fn local_fenced_get(&self, name: &str) -> Option<Option<(Vec<u8>, u64)>> {
        Some(self.driver.local()?.fenced_get(name))
    }

    /// The holder text, token and lease left of the reentrant lock `keys`, read at once
    /// where the store is in this process (memory; `crate::primitives::leader`): the inner
    /// `None` when nobody holds it. `None` elsewhere: inspection reads it.
    pub(crate) fn local_holder(
        &self,
        keys: &LockKeys,
    ) -> Option<Option<(Arc<str>, u64, Duration)>> {
        Some(self.driver.local()?.holder(keys))
    }

    /// How many holders the store keeps now, where it is in this process (memory); `None`
    /// elsewhere (the servers know). Feature `test-support`.
    #[cfg(feature = "test-support")]
    pub(crate) fn local_holders(&self) -> Option<usize> {
        Some(self.driver.local()?.holders())
    }

    /// Publish `message` on `channel`, a channel under the hash tag of the lock `keys`
    /// (`crate::primitives::leader`: a change of leader for its observers), with the verb the topology
    /// uses; on the memory backend the watchers in this process are woken. Not offered on a
    /// quorum backend (`Unsupported`).
    pub(crate) async fn announce(
        &self,
        keys: &LockKeys,
        channel: &str,
        message: &str,
    ) -> Result<(), LockError> {
        let verb = match self.caps.announce {
            Announce::Publish(verb) => verb,
            Announce::Deliver => {
                if let Some(store) = self.driver.local() {
                    store.deliver(channel);
                }
                return Ok(());
            }
            Announce::NotOffered => {
                return Err(self.unsupported(
                    crate::Feature::Announce,
                    "a message goes to one server; a quorum backend has independent masters",
                ))
            }
        };
        let call = crate::protocol::Call::raw(
            crate::protocol::Script::Announce,
            vec![keys.hash.clone()],
            vec![
                verb.verb().as_bytes().to_vec(),
                channel.as_bytes().to_vec(),
                message.as_bytes().to_vec(),
            ],
        );
        match self.run_script(&keys.user, &call).await {
            Some((mut replies, _)) => replies.pop().unwrap_or(Ok(redis::Value::Nil)).map(drop),
            None => Ok(()),
        }
    }

    /// Release without waiting: used when a guard is dropped. Never blocks, never panics.
    pub(crate) fn release_in_background(self: &Arc<Self>, keys: Arc<LockKeys>, hold: Hold) {
        self.release_in_background_holding(keys, hold, None);
    }

    /// [`Backend::release_in_background`], keeping `permit` (a hold's nested permit, taken
    /// for a release that frees without counting down: `Hold::only_level`) until the release has
    /// run, so no nested acquisition of that hold runs on the server before it.
    pub(crate) fn release_in_background_holding(
        self: &Arc<Self>,
        keys: Arc<LockKeys>,
        hold: Hold,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        if let Some(store) = self.driver.local() {
            return store.release_now(&keys, hold);
        }
        let backend = self.clone();
        // Sent until the server answers (`resend.rs`); on a runtime that is shutting
        // down the task is dropped, and the lease runs out on its own.
        self.resend(
            "a background release",
            &keys.clone(),
            move || {
                let (backend, keys) = (backend.clone(), keys.clone());
                async move {
                    backend.send_release(&keys, hold).await?;
                    backend.release_again_later(&keys, hold);
                    Ok(())
                }
            },
            move || drop(permit),
        );
    }

    /// Run `fut` on distlock's background runtime, counted as this backend's background
    /// work until it ends: what [`Backend::flush_releases`] awaits. Every release, undo,
    /// queue cancel or hand-off sent in the background goes through here.
    pub(crate) fn spawn_background<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.leases.background.spawn(&self.runtime, fut);
    }

    /// Resolves when this backend has no background release in flight: every release of
    /// a dropped guard, undo of an acquisition cut short, queue cancel and background
    /// hand-off started so far (through [`Backend::spawn_background`]) has ended. A
    /// graceful shutdown (`crate::upkeep::shutdown`) awaits it, bounded by its deadline.
    ///
    /// This is the one place a shutdown learns of pending releases: the releases, undos
    /// and queue cancels being sent again until the server answers ([`Backend::resend`])
    /// are flushed too, those asleep in their backoff sent at once.
    pub(crate) async fn flush_releases(&self) {
        on_background_runtime(self.leases.background.idle()).await;
        self.flush_resends().await;
    }
}
