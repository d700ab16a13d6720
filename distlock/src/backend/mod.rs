//! Backends: where locks live. Each backend has a driver (the protocol on one kind of
//! store), a wake-up hub and a watchdog.

pub(crate) mod cluster;
pub(crate) mod memory;
pub(crate) mod quorum;
pub(crate) mod redis;
pub(crate) mod sentinel;

use std::sync::Arc;
use std::time::Duration;

use distlock_config::{BackendConfig, Defaults, Mode};

use crate::hub::Hub;
use crate::keys::LockKeys;
use crate::owner::OwnerId;
use crate::watchdog::Watchdog;
use crate::{InitError, LockError, LockKind};

/// What one acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Newly acquired, with this fencing token.
    Acquired { token: u64 },
    /// Already held by this owner; the count went up.
    Reentered,
    /// Held by another owner, for this much longer (`None`: no expiry set).
    Held { ttl: Option<Duration> },
    /// redlock/multi: too few nodes granted it (what was granted is released again); try
    /// again after `retry_in`. `busy`: every node answered, and others held it on some.
    NoQuorum {
        granted: usize,
        needed: usize,
        nodes: usize,
        busy: bool,
        retry_in: Duration,
    },
}

/// What one release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The lock is free.
    Freed,
    /// Released one reentrant level; still held by this owner.
    StillHeld,
    /// This owner did not hold it: nothing changed.
    NotHeld,
}

#[derive(Debug)]
pub(crate) enum Driver {
    Redis(redis::RedisDriver),
    Memory(memory::MemoryDriver),
    Quorum(quorum::QuorumDriver),
}

/// One configured backend.
#[derive(Debug)]
pub(crate) struct Backend {
    pub name: Arc<str>,
    /// `host:port` (or `memory`), for messages.
    pub address: String,
    pub prefix: String,
    pub watchdog_timeout: Duration,
    pub driver: Driver,
    pub hub: Arc<Hub>,
    pub watchdog: Watchdog,
    /// Tasks asleep waiting for a release now.
    pub waiting: std::sync::atomic::AtomicUsize,
    /// The runtime `init` ran on: background releases and tasks go there.
    pub runtime: tokio::runtime::Handle,
}

impl Backend {
    /// Connect to the backend a configuration describes, and start its tasks.
    pub async fn connect(
        cfg: &BackendConfig,
        defaults: &Defaults,
    ) -> Result<Arc<Backend>, InitError> {
        let name: Arc<str> = Arc::from(cfg.name.as_str());
        let unsupported = |message: String| InitError::Unsupported {
            backend: cfg.name.clone(),
            message,
        };
        let (driver, hub, address) = match &cfg.mode {
            Mode::Memory => {
                let hub = Hub::local();
                (
                    Driver::Memory(memory::MemoryDriver::new(hub.clone())),
                    hub,
                    "memory".to_string(),
                )
            }
            Mode::Single { url } => {
                if url.tls {
                    return Err(unsupported(format!(
                        "{}: rediss:// (TLS) is not supported by this build yet; use redis://",
                        url.address
                    )));
                }
                let connect_err = |source| InitError::Connect {
                    backend: cfg.name.clone(),
                    address: url.address.clone(),
                    source,
                };
                let client = redis::client(&url.url).map_err(connect_err)?;
                let driver = redis::RedisDriver::connect(
                    client.clone(),
                    cfg.connect_timeout,
                    cfg.response_timeout,
                )
                .await
                .map_err(connect_err)?;
                let (hub, requests) = Hub::subscribed();
                let connector: crate::subscriber::Connector = Arc::new(move || {
                    let client = client.clone();
                    Box::pin(async move { client.get_async_pubsub().await })
                });
                crate::subscriber::spawn(
                    name.clone(),
                    &hub,
                    requests,
                    connector,
                    cfg.connect_timeout,
                );
                (Driver::Redis(driver), hub, url.address.clone())
            }
            Mode::Cluster { nodes } => {
                if let Some(u) = nodes.iter().find(|u| u.tls) {
                    return Err(unsupported(format!(
                        "{}: rediss:// (TLS) is not supported by this build yet; use redis://",
                        u.address
                    )));
                }
                let address = nodes
                    .iter()
                    .map(|u| u.address.as_str())
                    .collect::<Vec<_>>()
                    .join(",");
                let connect_err = |source| InitError::Connect {
                    backend: cfg.name.clone(),
                    address: address.clone(),
                    source,
                };
                let driver = redis::RedisDriver::connect_cluster(
                    nodes,
                    cfg.connect_timeout,
                    cfg.response_timeout,
                )
                .await
                .map_err(connect_err)?;
                let (hub, requests) = Hub::subscribed();
                cluster::spawn_subscriber(
                    name.clone(),
                    &hub,
                    requests,
                    nodes,
                    cfg.connect_timeout,
                    cfg.response_timeout,
                )
                .await
                .map_err(connect_err)?;
                (Driver::Redis(driver), hub, address)
            }
            Mode::Sentinel {
                master_name,
                sentinels,
                sync_replicas,
                sync_timeout,
            } => {
                if let Some(u) = sentinels.iter().find(|u| u.tls) {
                    return Err(unsupported(format!(
                        "{}: rediss:// (TLS) is not supported by this build yet; use redis://",
                        u.address
                    )));
                }
                let sync = (*sync_replicas > 0).then_some(redis::SyncReplicas {
                    needed: *sync_replicas,
                    timeout: *sync_timeout,
                });
                let master = sentinel::SentinelMaster::connect(
                    name.clone(),
                    master_name,
                    sentinels,
                    cfg.connect_timeout,
                    cfg.response_timeout,
                    sync.map(|s| s.timeout),
                )
                .await
                .map_err(|(address, source)| InitError::Connect {
                    backend: cfg.name.clone(),
                    address,
                    source,
                })?;
                let (hub, requests) = Hub::subscribed();
                crate::subscriber::spawn_with_reset(
                    name.clone(),
                    &hub,
                    requests,
                    master.pubsub_connector(),
                    cfg.connect_timeout,
                    master.changes(),
                );
                let address = format!(
                    "{master_name} via {}",
                    sentinels
                        .iter()
                        .map(|u| u.address.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                );
                let driver = redis::RedisDriver::sentinel(master, cfg.response_timeout, sync);
                (Driver::Redis(driver), hub, address)
            }
            Mode::Redlock { nodes, quorum } | Mode::Multi { nodes, quorum } => {
                if let Some(u) = nodes.iter().find(|u| u.tls) {
                    return Err(unsupported(format!(
                        "{}: rediss:// (TLS) is not supported by this build yet; use redis://",
                        u.address
                    )));
                }
                let kind = match &cfg.mode {
                    Mode::Multi { .. } => quorum::QuorumKind::Multi,
                    _ => quorum::QuorumKind::Redlock,
                };
                let (hub, requests) = Hub::subscribed();
                let driver = quorum::QuorumDriver::connect(
                    &name,
                    kind,
                    nodes,
                    *quorum,
                    cfg.connect_timeout,
                    cfg.response_timeout,
                    &hub,
                    requests,
                )
                .await
                .map_err(|(address, source)| InitError::Connect {
                    backend: cfg.name.clone(),
                    address,
                    source,
                })?;
                let address = driver.addresses();
                (Driver::Quorum(driver), hub, address)
            }
        };
        let backend = Arc::new(Backend {
            name,
            address,
            prefix: defaults.key_prefix.clone(),
            watchdog_timeout: defaults.watchdog_timeout,
            driver,
            hub,
            watchdog: Watchdog::default(),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            runtime: tokio::runtime::Handle::current(),
        });
        crate::watchdog::spawn(&backend);
        Ok(backend)
    }

    /// The address errors name: the current master's for sentinel, else `address`.
    fn error_address(&self) -> String {
        match &self.driver {
            Driver::Redis(r) => r.current_address().unwrap_or_else(|| self.address.clone()),
            _ => self.address.clone(),
        }
    }

    /// How long a lease of `lease` granted now is valid, as far as this process can tell:
    /// less the clock drift allowance on the quorum backends.
    pub fn validity(&self, lease: Duration) -> Duration {
        match &self.driver {
            Driver::Quorum(q) => q.validity(lease),
            _ => lease,
        }
    }

    /// A quorum backend's node failed.
    fn node_error(&self, key: Option<&str>, e: quorum::NodeError) -> LockError {
        LockError::Backend {
            backend: self.name.to_string(),
            address: e.address,
            key: key.map(str::to_owned),
            source: e.source,
        }
    }

    fn backend_error(&self, key: Option<&str>, source: ::redis::RedisError) -> LockError {
        LockError::Backend {
            backend: self.name.to_string(),
            address: self.error_address(),
            key: key.map(str::to_owned),
            source,
        }
    }

    /// Whether locks of `kind` can be taken here: fair and read-write locks need the whole
    /// lock state in one place (one server, one cluster slot, or this process); a quorum
    /// backend (redlock, multi) would have to agree on a queue or a reader set across
    /// independent masters, which this protocol does not do.
    pub fn supports(&self, kind: LockKind) -> Result<(), LockError> {
        match (&self.driver, kind) {
            (_, LockKind::Reentrant) | (Driver::Memory(_) | Driver::Redis(_), _) => Ok(()),
            (Driver::Quorum(q), _) => Err(LockError::Unsupported {
                backend: self.name.to_string(),
                what: format!(
                    "lock kind `{}` on mode = \"{}\" (fair and read-write locks need one master or one cluster slot; use a single, cluster, sentinel or memory backend)",
                    kind.name(),
                    q.mode_name()
                ),
            }),
        }
    }

    /// One acquire attempt. `wait`: how long the caller may still wait (fair and write
    /// locks queue for that long; zero: do not queue).
    pub async fn acquire(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Attempt, LockError> {
        self.supports(keys.kind)?;
        match &self.driver {
            Driver::Memory(m) => Ok(m.acquire(keys, owner, lease, wait)),
            Driver::Redis(r) => match r.acquire_checked(keys, owner, lease, wait).await {
                Ok(a) => Ok(a),
                Err(redis::AcquireError::Redis(e)) => Err(self.backend_error(Some(&keys.user), e)),
                Err(redis::AcquireError::NotReplicated {
                    acked,
                    needed,
                    timeout,
                    released,
                }) => Err(LockError::ReplicationFailed {
                    key: keys.user.clone(),
                    backend: self.name.to_string(),
                    address: self.error_address(),
                    acked,
                    needed,
                    timeout,
                    released,
                }),
            },
            Driver::Quorum(q) => Ok(q.acquire(keys, owner, lease).await),
        }
    }

    /// A fair or write waiter gives up waiting: it leaves the queue. Returns whether it
    /// was queued.
    pub async fn cancel(&self, keys: &LockKeys, owner: OwnerId) -> Result<bool, LockError> {
        match &self.driver {
            Driver::Memory(m) => Ok(m.cancel(keys, owner)),
            Driver::Redis(r) => r
                .cancel(keys, owner)
                .await
                .map_err(|e| self.backend_error(Some(&keys.user), e)),
            Driver::Quorum(_) => Ok(false),
        }
    }

    /// Leave the queue without waiting (a waiter that timed out or was dropped).
    pub fn cancel_in_background(self: &Arc<Self>, keys: LockKeys, owner: OwnerId) {
        match &self.driver {
            Driver::Memory(m) => {
                m.cancel(&keys, owner);
            }
            Driver::Redis(_) => {
                let backend = self.clone();
                drop(self.runtime.spawn(async move {
                    if let Err(e) = backend.cancel(&keys, owner).await {
                        tracing::debug!(backend = %backend.name, key = %keys.user, error = %e,
                            "distlock: leaving the wait queue failed; the entry expires at its deadline");
                    }
                }));
            }
            Driver::Quorum(_) => {}
        }
    }

    pub async fn release(&self, keys: &LockKeys, owner: OwnerId) -> Result<Released, LockError> {
        match &self.driver {
            Driver::Memory(m) => Ok(m.release(keys, owner)),
            Driver::Redis(r) => r
                .release(keys, owner)
                .await
                .map_err(|e| self.backend_error(Some(&keys.user), e)),
            Driver::Quorum(q) => q
                .release(keys, owner)
                .await
                .map_err(|e| self.node_error(Some(&keys.user), e)),
        }
    }

    pub async fn renew(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Result<Vec<bool>, LockError> {
        match &self.driver {
            Driver::Memory(m) => Ok(m.renew(items, lease)),
            Driver::Redis(r) => r
                .renew(items, lease)
                .await
                .map_err(|e| self.backend_error(None, e)),
            Driver::Quorum(q) => q
                .renew_each(items, lease)
                .await
                .into_iter()
                .map(|r| r.map_err(|e| self.node_error(None, e)))
                .collect(),
        }
    }

    /// Renew many leases, each with its own outcome: `Ok(true)` renewed, `Ok(false)` the
    /// lock was gone, `Err` not known (Redis failed for it). A cluster answers per item, so
    /// a master that is down does not hold up the leases on the others.
    pub async fn renew_each(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Vec<Result<bool, LockError>> {
        match &self.driver {
            Driver::Redis(r) if r.renews_per_item() => r
                .renew_each(items, lease)
                .await
                .into_iter()
                .map(|r| r.map_err(|e| self.backend_error(None, e)))
                .collect(),
            Driver::Quorum(q) => q
                .renew_each(items, lease)
                .await
                .into_iter()
                .map(|r| r.map_err(|e| self.node_error(None, e)))
                .collect(),
            _ => match self.renew(items, lease).await {
                Ok(v) => v.into_iter().map(Ok).collect(),
                Err(e) => items.iter().map(|_| Err(e.clone())).collect(),
            },
        }
    }

    pub async fn force_release(&self, keys: &LockKeys) -> Result<bool, LockError> {
        match &self.driver {
            Driver::Memory(m) => Ok(m.force_release(keys)),
            Driver::Redis(r) => r
                .force_release(keys)
                .await
                .map_err(|e| self.backend_error(Some(&keys.user), e)),
            Driver::Quorum(q) => q
                .force_release(keys)
                .await
                .map_err(|e| self.node_error(Some(&keys.user), e)),
        }
    }

    /// INCR `key` (a plain counter, outside the lock layout), giving it `ttl` when new.
    pub async fn next_sequence(&self, key: &str, ttl: Duration) -> Result<u64, LockError> {
        match &self.driver {
            Driver::Memory(m) => Ok(m.next_sequence(key)),
            Driver::Redis(r) => r
                .next_sequence(key, ttl)
                .await
                .map_err(|e| self.backend_error(Some(key), e)),
            Driver::Quorum(q) => q
                .next_sequence(key, ttl)
                .await
                .map_err(|e| self.node_error(Some(key), e)),
        }
    }

    /// Release without waiting: used when a guard is dropped. Never blocks, never panics.
    pub fn release_in_background(self: &Arc<Self>, keys: LockKeys, owner: OwnerId) {
        match &self.driver {
            Driver::Memory(m) => {
                m.release(&keys, owner);
            }
            Driver::Redis(_) | Driver::Quorum(_) => {
                let backend = self.clone();
                // On a runtime that is shutting down the task is dropped, and the lease
                // runs out on its own.
                drop(self.runtime.spawn(async move {
                    if let Err(e) = backend.release(&keys, owner).await {
                        tracing::warn!(backend = %backend.name, key = %keys.user, error = %e,
                            "distlock: background release failed; the lease will run out");
                    }
                }));
            }
        }
    }
}

// ---- Hook for `crate::fence` (added by the fault-testing branch; port it along with the
// backend restructuring). The only entry point the fencing helpers use besides
// `Driver::Memory(m).fenced_set/fenced_get`. ----
impl Backend {
    /// Run a fencing script (`crate::fence`) on this backend: on its one server (single,
    /// cluster, sentinel), or on every node of a redlock/multi backend, each bounded by
    /// `node_timeout`. Returns each server's reply and how many must agree (1, or the
    /// quorum); `None` on the memory backend, which has no scripts.
    pub(crate) async fn run_fence_script(
        &self,
        key: &str,
        script: &crate::scripts::LuaScript,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Option<(Vec<Result<::redis::Value, LockError>>, usize)> {
        match &self.driver {
            Driver::Memory(_) => None,
            Driver::Redis(r) => Some((
                vec![r
                    .run_script(script, keys, args)
                    .await
                    .map_err(|e| self.backend_error(Some(key), e))],
                1,
            )),
            Driver::Quorum(q) => {
                let (nodes, quorum, node_timeout) = q.fence_nodes();
                let replies = futures_util::future::join_all(nodes.into_iter().map(
                    |(address, driver)| async move {
                        let fail = |source| quorum::NodeError {
                            address: address.to_owned(),
                            source,
                        };
                        let Some(d) = driver else {
                            return Err(fail(::redis::RedisError::from((
                                ::redis::ErrorKind::Io,
                                "not connected",
                            ))));
                        };
                        match tokio::time::timeout(node_timeout, d.run_script(script, keys, args))
                            .await
                        {
                            Ok(r) => r.map_err(fail),
                            Err(_) => Err(fail(redis::timed_out("script timed out", node_timeout))),
                        }
                    },
                ))
                .await;
                let replies = replies
                    .into_iter()
                    .map(|r| r.map_err(|e| self.node_error(Some(key), e)))
                    .collect();
                Some((replies, quorum))
            }
        }
    }
}
