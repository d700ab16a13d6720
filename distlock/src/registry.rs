//! The registry of named backends, and the global one that `init` sets up.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use distlock_config::{Config, Defaults};

use crate::backend::Backend;
use crate::errors::backend::BackendError;
use crate::{InitError, LockError};

/// Connected backends by name, with the configuration's defaults.
///
/// The global registry is set up by [`init`]; a `Registry` value can also be used on its own
/// (several configurations in one process, tests).
///
/// A registry can be used from any Tokio runtime of the process, also after the runtime it
/// was created on has shut down: its connections and background work (the watchdog, the
/// subscribers, releases of dropped guards) live on distlock's own background runtime
/// (2 to 4 threads), started when the first registry connects. See the README's "Testing" section.
///
/// [`Registry::scope`] makes a registry the one that `#[distributed_lock]` functions and
/// `Lock::new` use inside a future, instead of the global one (tests with their own
/// configuration).
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
    backends: HashMap<String, Entry>,
}

/// One configured backend: connected, or (`required = false`, down at `init`) being
/// connected in the background.
enum Entry {
    Ready(Arc<Backend>),
    Connecting(Arc<Pending>),
}

/// A backend being connected in the background.
struct Pending {
    name: String,
    mode: distlock_config::Mode,
    protocol: distlock_config::Protocol,
    backend: OnceLock<Arc<Backend>>,
    /// The address and why the last attempt failed.
    down: Mutex<(String, BackendError)>,
    /// The registry was shut down: stop connecting; a backend connected meanwhile is
    /// closed (refuses acquisitions) as soon as it is set.
    closed: std::sync::atomic::AtomicBool,
}

impl Entry {
    /// The backend, once connected.
    fn get(&self) -> Option<&Arc<Backend>> {
        match self {
            Entry::Ready(b) => Some(b),
            Entry::Connecting(p) => p.backend.get(),
        }
    }

    /// The backend, or why it is not connected yet.
    fn backend(&self) -> Result<Arc<Backend>, LockError> {
        match self {
            Entry::Ready(b) => Ok(b.clone()),
            Entry::Connecting(p) => match p.backend.get() {
                Some(b) => Ok(b.clone()),
                None => {
                    let down = p.down.lock().unwrap_or_else(|e| e.into_inner());
                    Err(LockError::Backend {
                        backend: p.name.clone(),
                        address: down.0.clone(),
                        key: None,
                        source: down.1.clone(),
                    })
                }
            },
        }
    }

    /// Whether the backend offers `kind` (one still being connected: by its mode).
    fn supports(&self, kind: crate::LockKind) -> Result<(), LockError> {
        match (self, self.get()) {
            (_, Some(b)) => b.supports(kind),
            (Entry::Connecting(p), None) => {
                crate::backend::mode_offers(&p.name, &p.mode, p.protocol, kind)
            }
            (Entry::Ready(b), None) => b.supports(kind),
        }
    }

    /// Whether the backend offers semaphores (one still being connected: by its mode).
    fn supports_semaphore(&self) -> Result<(), LockError> {
        match (self, self.get()) {
            (_, Some(b)) => b.supports_semaphore(),
            (Entry::Connecting(p), None) => {
                crate::backend::mode_offers_semaphore(&p.name, &p.mode, p.protocol)
            }
            (Entry::Ready(b), None) => b.supports_semaphore(),
        }
    }
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
    /// The global registry, once `init` (or [`init_with`]) has completed.
    pub fn global() -> Option<&'static Registry> {
        GLOBAL.get()
    }

    /// Connect to every backend of `config` (in parallel). Fails naming the first backend
    /// and address that could not be reached.
    ///
    /// The connecting runs on distlock's background runtime (started here on first use);
    /// this future only waits for it, from whatever runtime it is polled on. Dropping it
    /// abandons the connecting.
    pub async fn connect(config: Config) -> Result<Registry, InitError> {
        crate::rt::runtime::run(connect_here(config))
            .await
            .map_err(|e| InitError::Runtime {
                reason: e.to_string(),
            })?
    }

    /// The `init` self-check of every backend of `config`, reported instead of failing
    /// (`distlock check`): each backend is connected on its own (in parallel) and each of
    /// its servers asked its version, the ACL user's missing rights, its eviction policy
    /// and (a cluster) its state; a backend that cannot be connected reports why. The
    /// connections are closed again before this returns.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = distlock::config::Config::from_path("distlock.toml")?;
    /// for backend in distlock::Registry::check(config).await {
    ///     match &backend.servers {
    ///         Ok(servers) => {
    ///             for s in servers.iter().flatten() {
    ///                 println!("{} {} ok: {}", backend.backend, s.address, s.is_ok());
    ///             }
    ///         }
    ///         Err(e) => println!("{}: {e}", backend.backend),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check(config: Config) -> Vec<crate::check::report::BackendReport> {
        let run = crate::rt::runtime::run(async move {
            let checks = config.backends.values().map(|b| {
                let defaults = &config.defaults;
                async move {
                    let urls = b.mode.urls();
                    let mut report = crate::check::report::BackendReport {
                        backend: b.name.clone(),
                        mode: b.mode.name().to_owned(),
                        address: match urls.as_slice() {
                            [] => "memory".to_owned(),
                            urls => urls
                                .iter()
                                .map(|u| u.address.as_str())
                                .collect::<Vec<_>>()
                                .join(","),
                        },
                        servers: Ok(Vec::new()),
                    };
                    report.servers = match Backend::connect(b, defaults, false).await {
                        Ok(backend) => Ok(backend.probe().await.unwrap_or_default()),
                        Err(e) => Err(not_redis(e)),
                    };
                    report
                }
            });
            futures_util::future::join_all(checks).await
        });
        match run.await {
            Ok(reports) => reports,
            Err(e) => vec![crate::check::report::BackendReport {
                backend: "(all)".into(),
                mode: String::new(),
                address: String::new(),
                servers: Err(InitError::Runtime {
                    reason: e.to_string(),
                }),
            }],
        }
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

    /// Run `fut` with this registry in place of the global one: inside it,
    /// `#[distributed_lock]` functions, `Lock::new` and `IdGenerator`s without a registry
    /// of their own use this one (scopes nest; the innermost wins). It is task-scoped:
    /// a task spawned inside does not inherit it (wrap that task's future in `scope` too).
    ///
    /// This is how a test runs annotated code against its own configuration, with or
    /// without a global `init`.
    ///
    /// ```
    /// use distlock::{distributed_lock, LockError, Registry};
    ///
    /// #[distributed_lock(key = "job:<id>", wait = "0s")]
    /// async fn job(id: u32) -> Result<u64, LockError> {
    ///     Ok(distlock::fencing_token().unwrap_or(0))
    /// }
    ///
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let registry = Registry::from_str("[backends.test]\nmode = \"memory\"").await?;
    /// let token = registry.scope(job(7)).await?;
    /// assert!(token >= 1);
    /// // Outside the scope, the global registry (here: none).
    /// assert!(matches!(job(7).await, Err(LockError::NotInitialized)));
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn scope<F: std::future::Future>(
        &self,
        fut: F,
    ) -> impl std::future::Future<Output = F::Output> {
        SCOPED.scope(self.clone(), fut)
    }

    /// The configured backends' names, sorted.
    pub fn backend_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.inner.backends.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The mode and the on-Redis format of backend `name` (`None`: no such backend), e.g.
    /// to tell what [`LockError::Unsupported`] will refuse before asking.
    ///
    /// ```
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::config::{ModeKind, Protocol};
    /// let registry = distlock::Registry::from_str("[backends.main]\nmode = \"memory\"").await?;
    /// assert_eq!(registry.mode("main"), Some((ModeKind::Memory, Protocol::Distlock)));
    /// assert_eq!(registry.mode("other"), None);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn mode(
        &self,
        name: &str,
    ) -> Option<(distlock_config::ModeKind, distlock_config::Protocol)> {
        match self.inner.backends.get(name)? {
            Entry::Ready(b) => Some((b.mode, b.protocol)),
            Entry::Connecting(p) => Some((p.mode.kind(), p.protocol)),
        }
    }

    /// The `[defaults]` in force.
    pub fn defaults(&self) -> &Defaults {
        &self.inner.defaults
    }

    pub(crate) fn backend(&self, name: Option<&str>) -> Result<Arc<Backend>, LockError> {
        let known = || {
            self.backend_names()
                .into_iter()
                .map(str::to_owned)
                .collect()
        };
        let Some(name) = name.or(self.inner.defaults.backend.as_deref()) else {
            return Err(LockError::NoDefaultBackend { known: known() });
        };
        match self.inner.backends.get(name) {
            Some(slot) => slot.backend(),
            None => Err(LockError::NoSuchBackend {
                backend: name.to_owned(),
                known: known(),
            }),
        }
    }

    /// Check every `#[distributed_lock]` site against this registry's backends; returns one
    /// line per bad site.
    pub fn check_sites(&self) -> Result<(), InitError> {
        let mut bad = Vec::new();
        for site in crate::obs::sites::sites() {
            // The same checks a call makes: the backend exists and offers the kind (a
            // backend still being connected is judged by its configured mode).
            let name = site.backend.or(self.inner.defaults.backend.as_deref());
            let checked = match name.and_then(|n| self.inner.backends.get(n)) {
                Some(slot) if site.permits.is_some() => slot.supports_semaphore(),
                Some(slot) => slot.supports(site.kind),
                None => self.backend(site.backend).map(drop),
            };
            if let Err(e) = checked {
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

    /// The longest [`Registry::shutdown`] (and [`distlock::shutdown`](crate::shutdown))
    /// takes: 5 seconds, whatever the servers do (down, slow, partitioned).
    ///
    /// ```
    /// assert_eq!(distlock::Registry::SHUTDOWN_BOUND, std::time::Duration::from_secs(5));
    /// ```
    pub const SHUTDOWN_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

    /// Shut down gracefully: give back every lock this registry's locks, semaphores,
    /// multi-key locks and leader elections hold in this process, so that other processes
    /// get them at once instead of waiting out the leases. Call it on SIGTERM, after the
    /// service has stopped taking work (e.g. once axum's graceful shutdown has drained the
    /// requests in flight).
    ///
    /// On every backend, in order:
    /// 1. **No new acquisitions.** Every acquisition asked for from now on fails with
    ///    [`LockError::ShuttingDown`], before anything is sent; so do the ones waiting now
    ///    (a lock, a semaphore, a multi-key lock, a campaign for leadership), at once (what
    ///    an attempt in flight may have taken is undone in the background).
    /// 2. **The holders are told first.** Every lease held, of every kind, is signalled
    ///    lost: `lost()` resolves with `LeaseLost` (reason "the process is shutting down"),
    ///    `is_held()` / `is_leader()` turn false, and an annotated body or `run` with an
    ///    auto lease is dropped at its next `.await`.
    /// 3. **Then the locks are given back.** A holder that lets go within its lease's
    ///    loss margin (a tenth of the lease, 20 ms to 2 s: 2 s with the default
    ///    `watchdog_timeout` of 30 s) releases as usual; the leases still held after that
    ///    are released here, each hold on its own (a semaphore's permits, a reentrant
    ///    level, a read or write hold, every key of a multi-key lock). A leader resigns: its
    ///    election's observers are told. A run-once hold (`hold_at_least`) is released as
    ///    its own release would: the lock stays taken until `hold_at_least` after it was
    ///    taken (the job ran, or began to, here), so it does not run again elsewhere early.
    /// 4. **Pending releases are flushed.** Background releases of dropped guards, undos
    ///    of acquisitions cut short, queue cancels and hand-offs still in flight are waited
    ///    for.
    ///
    /// It returns within [`Registry::SHUTDOWN_BOUND`] (5 s) whatever the servers do: with
    /// Redis down, a release that cannot be sent by then is left, and its lease runs out
    /// on its own (as after a crash); each such lock is logged at WARN. Idempotent: calling
    /// it again (or concurrently) waits for nothing more; the registry stays shut down.
    /// Other registries of the process are not affected. Guards released by the shutdown
    /// answer `release()` with `Ok` and release nothing again when dropped.
    ///
    /// ```
    /// use distlock::{LockError, Registry};
    /// # async fn f() -> Result<(), LockError> {
    /// let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// let guard = registry.lock("report").acquire().await?;
    /// let waiter = tokio::spawn({
    ///     let registry = registry.clone();
    ///     async move { registry.lock("report").acquire().await }
    /// });
    /// registry.shutdown().await;
    /// assert!(!guard.is_held());
    /// assert!(matches!(guard.lost().await, LockError::LeaseLost { .. }));
    /// assert!(matches!(waiter.await.unwrap(), Err(LockError::ShuttingDown { .. })));
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub async fn shutdown(&self) {
        let deadline = tokio::time::Instant::now() + Self::SHUTDOWN_BOUND;
        let mut backends = Vec::new();
        for slot in self.inner.backends.values() {
            if let Entry::Connecting(p) = slot {
                p.closed.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            if let Some(b) = slot.get() {
                backends.push(b.clone());
            }
        }
        let each = backends
            .iter()
            .map(|b| crate::upkeep::shutdown::shut_down(b, deadline));
        futures_util::future::join_all(each).await;
    }

    /// Whether [`Registry::shutdown`] was called.
    ///
    /// ```
    /// # async fn f() {
    /// let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// assert!(!registry.is_shut_down());
    /// registry.shutdown().await;
    /// assert!(registry.is_shut_down());
    /// # }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f());
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.inner.backends.values().any(|slot| match slot {
            Entry::Connecting(p) => p.closed.load(std::sync::atomic::Ordering::SeqCst),
            Entry::Ready(b) => b.leases.is_closed(),
        })
    }

    /// How many tasks are asleep waiting for a lock on the backend now (for tests and
    /// benchmarks that wait for waiters instead of sleeping). Feature `test-support`.
    #[cfg(feature = "test-support")]
    pub fn waiting(&self, backend: &str) -> Option<usize> {
        self.inner
            .backends
            .get(backend)
            .and_then(Entry::get)
            .map(|b| b.waiting.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// How many times the backend's subscriber connection(s) were made (for tests that
    /// wait for a reconnect instead of sleeping). Feature `test-support`.
    #[cfg(feature = "test-support")]
    pub fn subscriber_connections(&self, backend: &str) -> Option<u64> {
        self.inner
            .backends
            .get(backend)
            .and_then(Entry::get)
            .map(|b| b.hub.connections())
    }

    /// How many holders the memory backend `backend` keeps now (`None`: no such memory
    /// backend): what another process would ask the server, for a backend that lives in
    /// this process. Feature `test-support`.
    #[cfg(feature = "test-support")]
    pub fn memory_holders(&self, backend: &str) -> Option<usize> {
        self.inner
            .backends
            .get(backend)
            .and_then(Entry::get)
            .and_then(|b| b.local_holders())
    }

    /// How many auto-leases the backend's watchdog renews now (for tests and benchmarks).
    /// Feature `test-support`.
    #[cfg(feature = "test-support")]
    pub fn watched_leases(&self, backend: &str) -> Option<usize> {
        self.inner
            .backends
            .get(backend)
            .and_then(Entry::get)
            .map(|b| b.leases.len())
    }
}

/// Connect every backend of `config`, on the runtime this runs on. A backend with
/// `required = false` that cannot be reached is left to a background task that keeps
/// connecting; any other failure fails the whole registry.
async fn connect_here(config: Config) -> Result<Registry, InitError> {
    let connecting = config
        .backends
        .values()
        .map(|b| Backend::connect(b, &config.defaults, true));
    let connected = futures_util::future::join_all(connecting).await;
    let mut backends = HashMap::new();
    for (cfg, backend) in config.backends.values().zip(connected) {
        let backend = match backend.map_err(not_redis) {
            Err(e) => Err(crate::backend::explain_auth(e, cfg).await),
            ok => ok,
        };
        let slot = match backend {
            Ok(backend) => {
                crate::upkeep::watchdog::spawn(&backend);
                tracing::info!(backend = %backend.name, address = %backend.address, "distlock: backend connected");
                Entry::Ready(backend)
            }
            Err(InitError::Connect {
                backend,
                address,
                source,
            }) if !cfg.required && source.is_transient() => {
                tracing::warn!(backend = %backend, address = %address, error = %source,
                    "distlock: backend unreachable; starting without it (required = false) and connecting in the background; locks on it fail until then");
                let pending = Arc::new(Pending {
                    name: backend,
                    mode: cfg.mode.clone(),
                    protocol: cfg.protocol,
                    backend: OnceLock::new(),
                    down: Mutex::new((address, source)),
                    closed: std::sync::atomic::AtomicBool::new(false),
                });
                keep_connecting(
                    Arc::downgrade(&pending),
                    cfg.clone(),
                    config.defaults.clone(),
                );
                Entry::Connecting(pending)
            }
            Err(e) => return Err(e),
        };
        backends.insert(cfg.name.clone(), slot);
    }
    Ok(Registry {
        inner: Arc::new(Inner {
            defaults: config.defaults,
            backends,
        }),
    })
}

/// Connect the backend of `slot` in the background (50 ms doubling up to 30 s between
/// attempts) until it is connected or the registry is gone.
fn keep_connecting(
    slot: std::sync::Weak<Pending>,
    cfg: distlock_config::BackendConfig,
    defaults: Defaults,
) {
    tokio::spawn(async move {
        let mut backoff = crate::rt::backoff::Backoff::new(
            std::time::Duration::from_millis(50),
            std::time::Duration::from_secs(30),
        );
        loop {
            tokio::time::sleep(backoff.pause()).await;
            match slot.upgrade() {
                None => return,
                Some(s) if s.closed.load(std::sync::atomic::Ordering::SeqCst) => return,
                Some(_) => {}
            }
            match Backend::connect(&cfg, &defaults, true)
                .await
                .map_err(not_redis)
            {
                Ok(backend) => {
                    let Some(slot) = slot.upgrade() else { return };
                    crate::upkeep::watchdog::spawn(&backend);
                    tracing::info!(backend = %backend.name, address = %backend.address,
                        "distlock: backend connected (it was unreachable at init)");
                    let _ = slot.backend.set(backend.clone());
                    // Shut down meanwhile: the shutdown may have looked before the
                    // backend was set, so it is closed here too (closing twice is harmless).
                    if slot.closed.load(std::sync::atomic::Ordering::SeqCst) {
                        backend.leases.close();
                    }
                    return;
                }
                Err(InitError::Connect {
                    address, source, ..
                }) => {
                    let Some(slot) = slot.upgrade() else { return };
                    tracing::debug!(backend = %slot.name, address = %address, error = %source,
                        "distlock: backend still unreachable");
                    *slot.down.lock().unwrap_or_else(|e| e.into_inner()) = (address, source);
                }
                Err(e) => {
                    // The server answers but cannot be used (not Redis, refused TLS or
                    // AUTH): keep trying, as it may be fixed; say why at every attempt.
                    let Some(slot) = slot.upgrade() else { return };
                    tracing::warn!(backend = %slot.name, error = %e,
                        "distlock: backend reachable but not usable");
                }
            }
        }
    });
}

/// A connection error whose cause is an answer that is not a Redis reply becomes
/// `InitError::NotRedis`: the URL points at another kind of server.
fn not_redis(e: InitError) -> InitError {
    match e {
        InitError::Connect {
            backend,
            address,
            source,
        } if source.is_not_redis() => InitError::NotRedis {
            backend,
            address,
            // The client's parse report runs over several lines; its first says enough.
            detail: source
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned(),
        },
        other => other,
    }
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();

tokio::task_local! {
    /// The registry of a [`Registry::scope`].
    static SCOPED: Registry;
}

/// The registry a lock without one of its own uses: the innermost [`Registry::scope`] of
/// this task, else the global one.
pub(crate) fn current() -> Result<Registry, LockError> {
    if let Ok(r) = SCOPED.try_with(Registry::clone) {
        return Ok(r);
    }
    GLOBAL.get().cloned().ok_or(LockError::NotInitialized)
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
///
/// # Errors
///
/// An [`InitError`](crate::InitError) naming the file, line and field of a bad
/// configuration, or the backend and address that could not be reached, authenticated or
/// checked; `AlreadyInitialized` when a global registry is already set.
///
/// # Cancel safety
///
/// Nothing is installed until it returns `Ok`: dropping it earlier leaves no global
/// registry, and the connections made so far are closed.
pub async fn init() -> Result<(), InitError> {
    let (path, origin) = match std::env::var_os("DISTLOCK_CONFIG") {
        Some(p) if !p.is_empty() => (std::path::PathBuf::from(p), "DISTLOCK_CONFIG names it"),
        Some(_) => (
            "distlock.toml".into(),
            "DISTLOCK_CONFIG is set but empty, so the default `distlock.toml` was used: set DISTLOCK_CONFIG to the file's path (or unset it)",
        ),
        None => (
            "distlock.toml".into(),
            "DISTLOCK_CONFIG is not set, so the default `distlock.toml` was used: set DISTLOCK_CONFIG to the file's path, or call init_from_path",
        ),
    };
    let config = Config::from_path(&path).map_err(|mut e| {
        if e.field == "(file)" {
            e.message = format!("{}; {origin}", e.message);
        }
        e
    })?;
    install(Registry::connect(config).await?)
}

/// Set up the global registry from the TOML file at `path`.
///
/// ```no_run
/// # async fn f() -> Result<(), distlock::InitError> {
/// distlock::init_from_path("distlock.toml").await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// An [`InitError`](crate::InitError) naming the file, line and field of a bad
/// configuration, or the backend and address that could not be reached, authenticated or
/// checked; `AlreadyInitialized` when a global registry is already set.
///
/// # Cancel safety
///
/// Nothing is installed until it returns `Ok`: dropping it earlier leaves no global
/// registry, and the connections made so far are closed.
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
///
/// # Errors
///
/// An [`InitError`](crate::InitError) naming the file, line and field of a bad
/// configuration, or the backend and address that could not be reached, authenticated or
/// checked; `AlreadyInitialized` when a global registry is already set.
///
/// # Cancel safety
///
/// Nothing is installed until it returns `Ok`: dropping it earlier leaves no global
/// registry, and the connections made so far are closed.
pub async fn init_from_str(toml: &str) -> Result<(), InitError> {
    install(Registry::from_str(toml).await?)
}

/// Shut the global registry down gracefully (see [`Registry::shutdown`]): release every
/// lease this process holds through it, resign its leaders, end the waiting acquisitions
/// with [`LockError::ShuttingDown`] and refuse new ones, and flush the pending releases;
/// within [`Registry::SHUTDOWN_BOUND`] (5 s) whatever the servers do. Does nothing before
/// `init`. Idempotent.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// distlock::init().await?;
/// // ... serve until SIGTERM (`tokio::signal::unix::signal(SignalKind::terminate())`),
/// // stop taking work, then:
/// distlock::shutdown().await;
/// # Ok(()) }
/// ```
pub async fn shutdown() {
    if let Some(registry) = GLOBAL.get() {
        registry.shutdown().await;
    }
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
