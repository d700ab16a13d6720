//! The registry of named backends, and the global one that `init` sets up.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use distlock_config::{Config, Defaults};

use crate::backend::Backend;
use crate::{InitError, Lock, LockError};

/// Connected backends by name, with the configuration's defaults.
///
/// The global registry is set up by [`init`]; a `Registry` value can also be used on its own
/// (several configurations in one process, tests).
///
/// Background work (the watchdog, the subscriber, releases of dropped guards) runs on the
/// Tokio runtime the registry was created on: create it on the runtime that runs your locks.
///
/// ```
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let registry = distlock::Registry::from_str(r#"
///     [backends.local]
///     mode = "memory"
/// "#).await?;
/// let guard = registry.lock("job:7").acquire().await?;
/// guard.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    defaults: Defaults,
    backends: HashMap<String, Arc<Backend>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("backends", &self.backend_names())
            .field("defaults", &self.inner.defaults)
            .finish()
    }
}

impl Registry {
    /// Connect to every backend of `config` (in parallel). Fails naming the first backend
    /// and address that could not be reached.
    pub async fn connect(config: Config) -> Result<Registry, InitError> {
        let connecting = config
            .backends
            .values()
            .map(|b| Backend::connect(b, &config.defaults));
        let connected = futures_util::future::join_all(connecting).await;
        let mut backends = HashMap::new();
        for backend in connected {
            let backend = backend?;
            crate::watchdog::spawn(&backend);
            tracing::info!(backend = %backend.name, address = %backend.address, "distlock: backend connected");
            backends.insert(backend.name.to_string(), backend);
        }
        Ok(Registry {
            inner: Arc::new(Inner {
                defaults: config.defaults,
                backends,
            }),
        })
    }

    /// Parse `toml` and connect.
    #[allow(clippy::should_implement_trait)]
    pub async fn from_str(toml: &str) -> Result<Registry, InitError> {
        Registry::connect(Config::from_str(toml)?).await
    }

    /// Read the TOML file at `path` and connect.
    pub async fn from_path(path: impl AsRef<Path>) -> Result<Registry, InitError> {
        Registry::connect(Config::from_path(path)?).await
    }

    /// A lock on `key` in this registry.
    pub fn lock(&self, key: impl Into<String>) -> Lock {
        Lock::with_registry(key.into(), self.clone())
    }

    /// The configured backends' names, sorted.
    pub fn backend_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.inner.backends.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The `[defaults]` in force.
    pub fn defaults(&self) -> &Defaults {
        &self.inner.defaults
    }

    pub(crate) fn backend(&self, name: Option<&str>) -> Result<Arc<Backend>, LockError> {
        let name = name.or(self.inner.defaults.backend.as_deref());
        name.and_then(|n| self.inner.backends.get(n))
            .cloned()
            .ok_or_else(|| LockError::NoSuchBackend {
                backend: name.unwrap_or("<default>").to_owned(),
                known: self
                    .backend_names()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            })
    }

    /// Check every `#[distributed_lock]` site against this registry's backends; returns one
    /// line per bad site.
    pub fn check_sites(&self) -> Result<(), InitError> {
        let mut bad = Vec::new();
        for site in crate::sites() {
            // The same checks a call makes: the backend exists and offers the kind.
            if let Err(e) = self
                .backend(site.backend)
                .and_then(|b| b.supports(site.kind))
            {
                bad.push(format!(
                    "{} ({}:{}): {e}",
                    site.function, site.file, site.line
                ));
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(InitError::Sites(bad))
        }
    }

    /// How many tasks are asleep waiting for a lock on the backend now (for tests and
    /// benchmarks that wait for waiters instead of sleeping).
    #[doc(hidden)]
    pub fn waiting(&self, backend: &str) -> Option<usize> {
        self.inner
            .backends
            .get(backend)
            .map(|b| b.waiting.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// How many auto-leases the backend's watchdog renews now (for tests and benchmarks).
    #[doc(hidden)]
    pub fn watched_leases(&self, backend: &str) -> Option<usize> {
        self.inner.backends.get(backend).map(|b| b.leases.len())
    }
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();

pub(crate) fn global() -> Result<&'static Registry, LockError> {
    GLOBAL.get().ok_or(LockError::NotInitialized)
}

/// The global registry, once `init` has completed.
pub fn registry() -> Option<&'static Registry> {
    GLOBAL.get()
}

/// Set up the global registry from `$DISTLOCK_CONFIG`, else `./distlock.toml`.
///
/// Connects to every backend and checks every `#[distributed_lock]` site linked into the
/// binary; a site naming a backend that does not exist fails init, naming the function,
/// its file and line, and the backend.
///
/// ```no_run
/// # async fn f() -> Result<(), distlock::InitError> {
/// distlock::init().await?;
/// # Ok(()) }
/// ```
pub async fn init() -> Result<(), InitError> {
    let path = std::env::var_os("DISTLOCK_CONFIG").unwrap_or_else(|| "distlock.toml".into());
    init_from_path(path).await
}

/// Set up the global registry from the TOML file at `path`.
///
/// ```no_run
/// # async fn f() -> Result<(), distlock::InitError> {
/// distlock::init_from_path("distlock.toml").await?;
/// # Ok(()) }
/// ```
pub async fn init_from_path(path: impl AsRef<Path>) -> Result<(), InitError> {
    install(Registry::from_path(path).await?)
}

/// Set up the global registry from TOML text.
///
/// ```
/// # async fn f() -> Result<(), distlock::InitError> {
/// distlock::init_from_str(r#"
///     [backends.main]
///     mode = "memory"
/// "#).await?;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
pub async fn init_from_str(toml: &str) -> Result<(), InitError> {
    install(Registry::from_str(toml).await?)
}

/// Set up the global registry with a registry already connected.
pub fn init_with(registry: Registry) -> Result<(), InitError> {
    install(registry)
}

fn install(registry: Registry) -> Result<(), InitError> {
    registry.check_sites()?;
    GLOBAL
        .set(registry)
        .map_err(|_| InitError::AlreadyInitialized)
}
