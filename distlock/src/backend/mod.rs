//! Backends: where locks live. Each backend has a driver (the protocol on one kind of
//! store), a wake-up hub and a watchdog.

pub(crate) mod memory;
pub(crate) mod redis;

use std::sync::Arc;
use std::time::Duration;

use distlock_config::{BackendConfig, Defaults, Mode};

use crate::hub::Hub;
use crate::keys::LockKeys;
use crate::owner::OwnerId;
use crate::watchdog::Watchdog;
use crate::{InitError, LockError};

/// What one acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Newly acquired, with this fencing token.
    Acquired { token: u64 },
    /// Already held by this owner; the count went up.
    Reentered,
    /// Held by another owner, for this much longer (`None`: no expiry set).
    Held { ttl: Option<Duration> },
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
                let client = ::redis::Client::open(url.url.as_str()).map_err(connect_err)?;
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
            other => {
                return Err(unsupported(format!(
                    "mode \"{}\" is not available yet in this version of distlock",
                    other.name()
                )))
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

    fn backend_error(&self, key: Option<&str>, source: ::redis::RedisError) -> LockError {
        LockError::Backend {
            backend: self.name.to_string(),
            address: self.address.clone(),
            key: key.map(str::to_owned),
            source,
        }
    }

    pub async fn acquire(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        match &self.driver {
            Driver::Memory(m) => Ok(m.acquire(keys, owner, lease)),
            Driver::Redis(r) => r
                .acquire(keys, owner, lease)
                .await
                .map_err(|e| self.backend_error(Some(&keys.user), e)),
        }
    }

    pub async fn release(&self, keys: &LockKeys, owner: OwnerId) -> Result<Released, LockError> {
        match &self.driver {
            Driver::Memory(m) => Ok(m.release(keys, owner)),
            Driver::Redis(r) => r
                .release(keys, owner)
                .await
                .map_err(|e| self.backend_error(Some(&keys.user), e)),
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
        }
    }

    pub async fn force_release(&self, keys: &LockKeys) -> Result<bool, LockError> {
        match &self.driver {
            Driver::Memory(m) => Ok(m.force_release(keys)),
            Driver::Redis(r) => r
                .force_release(keys)
                .await
                .map_err(|e| self.backend_error(Some(&keys.user), e)),
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
        }
    }

    /// Release without waiting: used when a guard is dropped. Never blocks, never panics.
    pub fn release_in_background(self: &Arc<Self>, keys: LockKeys, owner: OwnerId) {
        match &self.driver {
            Driver::Memory(m) => {
                m.release(&keys, owner);
            }
            Driver::Redis(_) => {
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
