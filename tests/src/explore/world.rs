//! The servers and registries of an explorer run, and the faults it injects into them.
//!
//! Memory: one registry shared by every owner (a memory backend is per registry).
//! Single: a private redis-server (AOF `appendfsync always`, so a restart keeps the locks
//! unless the fault wipes the AOF), one registry per owner, each through its own fault
//! proxy, and an observer registry straight to the server for the free-lock checks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::inspect::LockInfo;
use distlock::{LockKind, Registry};

use super::check::Checker;
use super::model::{Fault, Kind, OWNERS};
use crate::proxy::Proxy;
use crate::{resp_command, resp_command_timeout, RedisProcess, RespValue};

/// The backends the explorer runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// `mode = "memory"`.
    Memory,
    /// `mode = "single"` on a private redis-server.
    Single,
}

impl BackendKind {
    /// Parse `memory` / `single`.
    pub fn parse(s: &str) -> Option<BackendKind> {
        match s {
            "memory" => Some(BackendKind::Memory),
            "single" => Some(BackendKind::Single),
            _ => None,
        }
    }

    /// Its name in `--backend`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Memory => "memory",
            BackendKind::Single => "single",
        }
    }
}

/// The `watchdog_timeout` of every registry (the auto lease).
pub const WATCHDOG: &str = "1s";

/// Servers, proxies and registries.
pub struct World {
    /// Which backend.
    pub backend: BackendKind,
    server: Option<Arc<Mutex<RedisProcess>>>,
    proxies: Vec<Proxy>,
    owners: Vec<Registry>,
    observer: Registry,
    /// A memory backend beside the Redis one (differential steps).
    memory: Option<Registry>,
    active: Mutex<Option<Fault>>,
    broken: Arc<Mutex<Option<String>>>,
}

fn config(body: &str) -> String {
    format!(
        "[defaults]\nwatchdog_timeout = \"{WATCHDOG}\"\n[backends.main]\n{body}\nresponse_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n"
    )
}

async fn registry(body: &str) -> Registry {
    let text = if body.contains("memory") {
        format!("[defaults]\nwatchdog_timeout = \"{WATCHDOG}\"\n[backends.main]\n{body}\n")
    } else {
        config(body)
    };
    Registry::from_str(&text)
        .await
        .unwrap_or_else(|e| panic!("explorer: registry from\n{text}\nfailed: {e}"))
}

impl World {
    /// Start the servers and registries of `backend`.
    pub async fn start(backend: BackendKind) -> World {
        match backend {
            BackendKind::Memory => {
                let shared = registry("mode = \"memory\"").await;
                World {
                    backend,
                    server: None,
                    proxies: Vec::new(),
                    owners: vec![shared.clone(); usize::from(OWNERS)],
                    observer: shared,
                    memory: None,
                    active: Mutex::new(None),
                    broken: Arc::default(),
                }
            }
            BackendKind::Single => Self::start_single().await,
        }
    }

    async fn start_single() -> World {
        let server = tokio::task::spawn_blocking(|| {
            RedisProcess::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"])
        })
        .await
        .expect("explorer: start redis-server");
        let addr = server.addr();
        let proxies: Vec<Proxy> = (0..OWNERS).map(|_| Proxy::start(&addr)).collect();
        let mut owners = Vec::new();
        for p in &proxies {
            owners.push(registry(&format!("mode = \"single\"\nurl = \"{}\"", p.url())).await);
        }
        let observer = registry(&format!("mode = \"single\"\nurl = \"{}\"", server.url())).await;
        World {
            backend: BackendKind::Single,
            server: Some(Arc::new(Mutex::new(server))),
            proxies,
            owners,
            observer,
            memory: Some(registry("mode = \"memory\"").await),
            active: Mutex::new(None),
            broken: Arc::default(),
        }
    }

    /// The memory registry beside a Redis backend.
    pub fn memory(&self) -> Option<&Registry> {
        self.memory.as_ref()
    }

    /// Why the servers cannot be used any more (a restart failed), if so.
    pub fn broken(&self) -> Option<String> {
        lock(&self.broken).clone()
    }

    /// The registry of owner `o`.
    pub fn owner(&self, o: u8) -> &Registry {
        &self.owners[usize::from(o)]
    }

    /// The server's `host:port` (Redis backends).
    pub fn addr(&self) -> Option<String> {
        self.server.as_ref().map(|s| lock(s).addr())
    }

    /// Whether the server holds nothing of `key` for `kind` (no holder, no waiter); `None`
    /// where the explorer cannot tell (semaphores; an error).
    pub async fn is_free(&self, key: &str, kind: Kind) -> Option<bool> {
        if matches!(kind, Kind::Semaphore(_)) {
            return None;
        }
        let infos = self.observer.inspect(key, None).await.ok()?;
        let busy = |i: &LockInfo| !i.holders.is_empty() || !i.waiters.is_empty();
        let rw = |k: distlock::inspect::Kind| k == LockKind::Read || k == LockKind::Write;
        Some(!infos.iter().any(|i| match kind {
            Kind::Reentrant => i.kind == LockKind::Reentrant && !i.holders.is_empty(),
            Kind::Fair => i.kind == LockKind::Fair && busy(i),
            Kind::Read => {
                (i.kind == LockKind::Write && busy(i))
                    || (i.kind == LockKind::Read && !i.waiters.is_empty())
            }
            Kind::Write => rw(i.kind) && busy(i),
            Kind::Semaphore(_) => false,
        }))
    }

    /// What the server shows of `key` (for messages).
    pub async fn describe(&self, key: &str) -> String {
        match self.observer.inspect(key, None).await {
            Ok(infos) => infos
                .iter()
                .map(|i| {
                    format!(
                        "{:?}: {} holder(s), {} waiter(s), ttl {:?}",
                        i.kind,
                        i.holders.len(),
                        i.waiters.len(),
                        i.ttl
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(e) => format!("(inspect failed: {e})"),
        }
    }

    /// Begin a lasting fault.
    pub async fn fault_begin(&self, fault: Fault, checker: &Checker) {
        let Some(server) = self.server.clone() else {
            return;
        };
        *lock(&self.active) = Some(fault);
        checker.fault_begin(true);
        match fault {
            Fault::Down { persist } => {
                if !persist {
                    checker.keys_lost(None);
                }
                blocking(move || lock(&server).kill()).await;
            }
            Fault::Pause => signal(&server, libc::SIGSTOP),
            Fault::Blackhole { owner } => self.proxies[usize::from(owner)].set_blackhole(true),
        }
    }

    /// End the lasting fault, if one is on.
    pub async fn fault_end(&self, checker: &Checker) {
        let Some(fault) = lock(&self.active).take() else {
            return;
        };
        let Some(server) = self.server.clone() else {
            return;
        };
        match fault {
            Fault::Down { persist } => {
                let broken = self.broken.clone();
                blocking(move || {
                    let mut s = lock(&server);
                    if !persist {
                        let _ = std::fs::remove_dir_all(s.dir().join("appendonlydir"));
                    }
                    let restarted =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.restart()));
                    if let Err(e) = restarted {
                        let why = e
                            .downcast_ref::<String>()
                            .cloned()
                            .unwrap_or_else(|| "redis-server did not restart".to_owned());
                        *lock(&broken) = Some(why);
                    }
                })
                .await
            }
            Fault::Pause => signal(&server, libc::SIGCONT),
            Fault::Blackhole { owner } => self.proxies[usize::from(owner)].set_blackhole(false),
        }
        checker.fault_end();
    }

    /// `CLIENT KILL` of every normal and pub/sub client.
    pub async fn kill_clients(&self, checker: &Checker) {
        let Some(addr) = self.addr() else { return };
        checker.fault_begin(false);
        blocking(move || {
            for t in ["normal", "pubsub"] {
                let _ = resp_command(&addr, &["CLIENT", "KILL", "TYPE", t]);
            }
        })
        .await;
    }

    /// Raw `DEL` of every key of `keys` (all kinds).
    pub async fn delete_keys(&self, keys: Vec<String>, checker: &Checker, name: u8) {
        let Some(addr) = self.addr() else { return };
        checker.fault_begin(false);
        checker.keys_lost(Some(name));
        blocking(move || {
            for key in keys {
                raw_del_all(&addr, &key);
            }
        })
        .await;
    }

    /// `DEBUG SLEEP` for `ms` (a fault while it lasts), not waited for.
    pub fn debug_sleep(&self, ms: u32, checker: &Arc<Checker>) {
        let Some(addr) = self.addr() else { return };
        checker.fault_begin(true);
        let checker = checker.clone();
        let secs = format!("{:.3}", f64::from(ms) / 1000.0);
        tokio::task::spawn_blocking(move || {
            let _ =
                resp_command_timeout(&addr, &["DEBUG", "SLEEP", &secs], Duration::from_secs(10));
            checker.fault_end();
        });
    }

    /// Raw `DEL` of a reentrant lock's hash: a release without the owner check (a
    /// planted bug of the self-test).
    pub fn raw_release(&self, key: &str) {
        if let Some(addr) = self.addr() {
            let _ = resp_command(&addr, &["DEL", &format!("lock:{{{key}}}")]);
        }
    }
}

fn raw_del_all(addr: &str, key: &str) {
    let pattern = format!("lock:{{{key}}}*");
    if let Ok(RespValue::Array(names)) = resp_command(addr, &["KEYS", &pattern]) {
        for n in names.iter().filter_map(RespValue::as_str) {
            let _ = resp_command(addr, &["DEL", n]);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn signal(server: &Mutex<RedisProcess>, sig: libc::c_int) {
    if let Some(pid) = lock(server).pid() {
        // SAFETY: kill(2) with a child's pid and a signal number has no memory effects.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

async fn blocking(f: impl FnOnce() + Send + 'static) {
    let _ = tokio::task::spawn_blocking(f).await;
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(server) = &self.server {
            signal(server, libc::SIGCONT);
        }
    }
}
