//! The servers and registries of an explorer run, and the faults it injects into them.
//!
//! Memory: one registry shared by every owner (a memory backend is per registry).
//! Single: a private redis-server (AOF `appendfsync always`, so a restart keeps the locks
//! unless the fault wipes the AOF), one registry per owner, each through its own fault
//! proxy, and an observer registry straight to the server for the free-lock checks.
//! Redlock (5 nodes) and multi (3 nodes): independent redis-servers (AOF `always`), each
//! owner reaching every node through a fault proxy of its own. Cluster: a private cluster
//! of 3 masters with a replica each; sentinel: a master, its replica and 3 sentinels
//! (`tests/src/topology.rs`); their owners connect directly (a proxy cannot follow a
//! redirection or a failover).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock::inspect::LockInfo;
use distlock::{LockKind, Registry};

use super::check::Checker;
use super::model::{Fault, Kind, Topology, OWNERS};
use crate::proxy::Proxy;
use crate::topology::{self, PrivateCluster, PrivateSentinel};
use crate::{resp_command, resp_command_timeout, RedisProcess, RespValue};

/// The backends the explorer runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// `mode = "memory"`.
    Memory,
    /// `mode = "single"` on a private redis-server.
    Single,
    /// `mode = "cluster"` on a private cluster.
    Cluster,
    /// `mode = "sentinel"` on a private sentinel group.
    Sentinel,
    /// `mode = "redlock"` on 5 private redis-servers.
    Redlock,
    /// `mode = "multi"` on 3 private redis-servers.
    Multi,
}

impl BackendKind {
    /// Parse `memory` / `single` / `cluster` / `sentinel` / `redlock` / `multi`.
    pub fn parse(s: &str) -> Option<BackendKind> {
        match s {
            "memory" => Some(BackendKind::Memory),
            "single" => Some(BackendKind::Single),
            "cluster" => Some(BackendKind::Cluster),
            "sentinel" => Some(BackendKind::Sentinel),
            "redlock" => Some(BackendKind::Redlock),
            "multi" => Some(BackendKind::Multi),
            _ => None,
        }
    }

    /// Its name in `--backend`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Memory => "memory",
            BackendKind::Single => "single",
            BackendKind::Cluster => "cluster",
            BackendKind::Sentinel => "sentinel",
            BackendKind::Redlock => "redlock",
            BackendKind::Multi => "multi",
        }
    }

    /// The faults its servers can take.
    pub fn topology(self) -> Topology {
        match self {
            BackendKind::Memory => Topology::Memory,
            BackendKind::Single => Topology::Single,
            BackendKind::Cluster => Topology::Cluster,
            BackendKind::Sentinel => Topology::Sentinel,
            BackendKind::Redlock | BackendKind::Multi => Topology::Quorum,
        }
    }

    /// Whether it is a quorum mode (only reentrant locks, no semaphores).
    pub fn quorum(self) -> bool {
        matches!(self, BackendKind::Redlock | BackendKind::Multi)
    }

    /// Whether `protocol = "redisson"` can be explored on it.
    pub fn takes_redisson(self) -> bool {
        matches!(
            self,
            BackendKind::Single | BackendKind::Cluster | BackendKind::Sentinel
        )
    }
}

/// The lock format of the Redis backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// distlock's own.
    Distlock,
    /// `protocol = "redisson"`.
    Redisson,
}

impl Format {
    /// Parse `distlock` / `redisson`.
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "distlock" => Some(Format::Distlock),
            "redisson" => Some(Format::Redisson),
            _ => None,
        }
    }

    /// Its name in `--format`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Distlock => "distlock",
            Format::Redisson => "redisson",
        }
    }
}

/// The `watchdog_timeout` of every registry (the auto lease).
pub const WATCHDOG: &str = "1s";

/// How long a failover may take to settle (the replica promoted, the old master its
/// replica again and in sync) before the run counts its servers as broken.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// The servers of a Redis backend.
enum Servers {
    None,
    Single(Arc<Mutex<RedisProcess>>),
    /// Redlock or multi: independent masters.
    Nodes(Arc<Mutex<Vec<RedisProcess>>>),
    Cluster(Arc<Mutex<PrivateCluster>>),
    Sentinel(Arc<Mutex<PrivateSentinel>>),
}

/// Servers, proxies and registries.
pub struct World {
    /// Which backend.
    pub backend: BackendKind,
    /// Which format.
    pub format: Format,
    servers: Servers,
    /// Per owner: its proxies (one per server it reaches through one).
    proxies: Vec<Vec<Proxy>>,
    owners: Vec<Registry>,
    observer: Registry,
    /// The observer's configuration (straight to the servers), for a holder process.
    direct: String,
    /// The holder process of a [`Fault::HolderPause`] under way.
    holder: Mutex<Option<super::holder::Holder>>,
    /// The planted bug of a holder process that trusts a flag (self-test).
    flag_holder: std::sync::atomic::AtomicBool,
    /// A memory backend beside the Redis one (differential steps).
    memory: Option<Registry>,
    /// The lasting fault on, and the server it took (an index into the nodes).
    active: Mutex<Option<(Fault, Vec<usize>)>>,
    broken: Arc<Mutex<Option<String>>>,
    /// The key prefix of the schedule running.
    prefix: Mutex<String>,
    /// Whether an earlier schedule of this run had faults (its registries and servers are
    /// this schedule's).
    faulted: std::sync::atomic::AtomicBool,
}

fn config(body: &str, format: Format) -> String {
    let protocol = match format {
        Format::Distlock => "",
        Format::Redisson => "protocol = \"redisson\"\n",
    };
    format!(
        "[defaults]\nwatchdog_timeout = \"{WATCHDOG}\"\n[backends.main]\n{body}\n{protocol}response_timeout = \"500ms\"\nconnect_timeout = \"500ms\"\n"
    )
}

async fn registry(body: &str, format: Format) -> Registry {
    let text = if body.contains("memory") {
        format!("[defaults]\nwatchdog_timeout = \"{WATCHDOG}\"\n[backends.main]\n{body}\n")
    } else {
        config(body, format)
    };
    Registry::from_str(&text)
        .await
        .unwrap_or_else(|e| panic!("explorer: registry from\n{text}\nfailed: {e}"))
}

fn url_list(urls: &[String]) -> String {
    urls.iter()
        .map(|u| format!("\"{u}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

impl World {
    /// Start the servers and registries of `backend` in `format`.
    pub async fn start(backend: BackendKind, format: Format) -> World {
        match backend {
            BackendKind::Memory => {
                let shared = registry("mode = \"memory\"", format).await;
                World {
                    backend,
                    format: Format::Distlock,
                    servers: Servers::None,
                    proxies: Vec::new(),
                    owners: vec![shared.clone(); usize::from(OWNERS)],
                    observer: shared,
                    direct: String::new(),
                    holder: Mutex::default(),
                    flag_holder: Default::default(),
                    memory: None,
                    active: Mutex::new(None),
                    broken: Arc::default(),
                    prefix: Mutex::default(),
                    faulted: Default::default(),
                }
            }
            BackendKind::Single => Self::start_single(format).await,
            BackendKind::Redlock => Self::start_quorum(backend, 5).await,
            BackendKind::Multi => Self::start_quorum(backend, 3).await,
            BackendKind::Cluster => Self::start_cluster(format).await,
            BackendKind::Sentinel => Self::start_sentinel(format).await,
        }
    }

    fn assemble(
        backend: BackendKind,
        format: Format,
        servers: Servers,
        proxies: Vec<Vec<Proxy>>,
        owners: Vec<Registry>,
        (observer, direct): (Registry, String),
        memory: Registry,
    ) -> World {
        World {
            backend,
            format,
            servers,
            proxies,
            owners,
            observer,
            direct,
            holder: Mutex::default(),
            flag_holder: Default::default(),
            memory: Some(memory),
            active: Mutex::new(None),
            broken: Arc::default(),
            prefix: Mutex::default(),
            faulted: Default::default(),
        }
    }

    async fn start_single(format: Format) -> World {
        let server = tokio::task::spawn_blocking(|| {
            let s =
                RedisProcess::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
            fill(&s.addr()).expect("explorer: fill redis-server");
            s
        })
        .await
        .expect("explorer: start redis-server");
        let addr = server.addr();
        let proxies: Vec<Vec<Proxy>> = (0..OWNERS).map(|_| vec![Proxy::start(&addr)]).collect();
        let mut owners = Vec::new();
        for p in &proxies {
            let body = format!("mode = \"single\"\nurl = \"{}\"", p[0].url());
            owners.push(registry(&body, format).await);
        }
        let body = format!("mode = \"single\"\nurl = \"{}\"", server.url());
        let observer = (registry(&body, format).await, config(&body, format));
        let memory = registry("mode = \"memory\"", Format::Distlock).await;
        let servers = Servers::Single(Arc::new(Mutex::new(server)));
        Self::assemble(
            BackendKind::Single,
            format,
            servers,
            proxies,
            owners,
            observer,
            memory,
        )
    }

    async fn start_quorum(backend: BackendKind, n: usize) -> World {
        let nodes: Vec<RedisProcess> = tokio::task::spawn_blocking(move || {
            (0..n)
                .map(|_| {
                    let s = RedisProcess::start_with_args(&[
                        "--appendonly",
                        "yes",
                        "--appendfsync",
                        "always",
                    ]);
                    fill(&s.addr()).expect("explorer: fill a quorum node");
                    s
                })
                .collect()
        })
        .await
        .expect("explorer: start the quorum's redis-servers");
        let mode = backend.name();
        let body = |urls: &[String]| {
            format!(
                "mode = \"{mode}\"\nnodes = [{}]\nnode_timeout = \"100ms\"",
                url_list(urls)
            )
        };
        let proxies: Vec<Vec<Proxy>> = (0..OWNERS)
            .map(|_| nodes.iter().map(|n| Proxy::start(&n.addr())).collect())
            .collect();
        let mut owners = Vec::new();
        for p in &proxies {
            let urls: Vec<String> = p.iter().map(Proxy::url).collect();
            owners.push(registry(&body(&urls), Format::Distlock).await);
        }
        let urls: Vec<String> = nodes.iter().map(RedisProcess::url).collect();
        let observer = (
            registry(&body(&urls), Format::Distlock).await,
            config(&body(&urls), Format::Distlock),
        );
        let memory = registry("mode = \"memory\"", Format::Distlock).await;
        let servers = Servers::Nodes(Arc::new(Mutex::new(nodes)));
        Self::assemble(
            backend,
            Format::Distlock,
            servers,
            proxies,
            owners,
            observer,
            memory,
        )
    }

    async fn start_cluster(format: Format) -> World {
        let cluster = tokio::task::spawn_blocking(PrivateCluster::start)
            .await
            .expect("explorer: start a private cluster");
        let body = format!(
            "mode = \"cluster\"\nnodes = [{}]",
            url_list(&cluster.urls())
        );
        let mut owners = Vec::new();
        for _ in 0..OWNERS {
            owners.push(registry(&body, format).await);
        }
        let observer = (registry(&body, format).await, config(&body, format));
        let memory = registry("mode = \"memory\"", Format::Distlock).await;
        let servers = Servers::Cluster(Arc::new(Mutex::new(cluster)));
        Self::assemble(
            BackendKind::Cluster,
            format,
            servers,
            Vec::new(),
            owners,
            observer,
            memory,
        )
    }

    async fn start_sentinel(format: Format) -> World {
        let group = tokio::task::spawn_blocking(|| PrivateSentinel::start(3))
            .await
            .expect("explorer: start a private sentinel group");
        let body = format!(
            "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]",
            PrivateSentinel::MASTER_NAME,
            url_list(&group.sentinel_urls())
        );
        let mut owners = Vec::new();
        for _ in 0..OWNERS {
            owners.push(registry(&body, format).await);
        }
        let observer = (registry(&body, format).await, config(&body, format));
        let memory = registry("mode = \"memory\"", Format::Distlock).await;
        let servers = Servers::Sentinel(Arc::new(Mutex::new(group)));
        Self::assemble(
            BackendKind::Sentinel,
            format,
            servers,
            Vec::new(),
            owners,
            observer,
            memory,
        )
    }

    /// A schedule with key prefix `prefix` begins (the faults aimed at `k0`'s master).
    /// `flag_holder`: the planted bug of a holder process that trusts a flag.
    pub fn schedule_begins(&self, prefix: &str, flag_holder: bool) {
        *lock(&self.prefix) = prefix.to_owned();
        // A lost reply armed by the last schedule and never sent is not this one's.
        for p in self.proxies.iter().flatten() {
            p.reset_after_replies(0);
        }
        self.flag_holder
            .store(flag_holder, std::sync::atomic::Ordering::Relaxed);
    }

    /// A schedule ended, with faults (`faulted`) or without.
    pub fn schedule_ends(&self, faulted: bool) {
        if faulted {
            self.faulted
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether an earlier schedule of this run had faults.
    pub fn faulted_before(&self) -> bool {
        self.faulted.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the backend offers `kind` (docs/backends.md; `distlock/src/backend/offers.rs`):
    /// redlock and multi only reentrant locks, Redisson's format no semaphores.
    pub fn offers(&self, kind: Kind) -> bool {
        match kind {
            Kind::Reentrant | Kind::Multi => true,
            // Elections: one place to read the leader from, in distlock's format.
            Kind::Leader => !self.backend.quorum() && self.format == Format::Distlock,
            // hold_at_least: reentrant locks in distlock's format.
            Kind::RunOnce => self.format == Format::Distlock,
            Kind::Fair | Kind::Read | Kind::Write => !self.backend.quorum(),
            Kind::Semaphore(_) => !self.backend.quorum() && self.format == Format::Distlock,
        }
    }

    /// The key of name `n` for `kind` under `prefix`. In Redisson's format the read-write
    /// kinds get names of their own: there a reentrant or fair lock and a read-write lock
    /// of one name are one hash in two layouts (docs/design.md "Reentrancy";
    /// `tests/tests/nested_kinds.rs` covers it), which the model does not describe.
    pub fn key(&self, prefix: &str, n: u8, kind: Kind) -> String {
        let base = super::task::key_of(prefix, n, kind);
        match (self.format, kind) {
            (_, Kind::Leader) => format!("leader:{base}"),
            (Format::Redisson, Kind::Read | Kind::Write) => format!("{base}rw"),
            _ => base,
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

    /// The single server's `host:port`.
    pub fn addr(&self) -> Option<String> {
        match &self.servers {
            Servers::Single(s) => Some(lock(s).addr()),
            _ => None,
        }
    }

    /// Whether the server holds nothing of `key` for `kind` (no holder, no waiter); `None`
    /// where the explorer cannot tell (semaphores; an error).
    pub async fn is_free(&self, key: &str, kind: Kind) -> Option<bool> {
        let kind = match kind {
            Kind::Semaphore(_) | Kind::Multi => return None,
            // An election's lock and a run-once job's are reentrant locks.
            Kind::Leader | Kind::RunOnce => Kind::Reentrant,
            k => k,
        };
        let infos = self.observer.inspect(key, None).await.ok()?;
        let busy = |i: &LockInfo| !i.holders.is_empty() || !i.waiters.is_empty();
        let rw = |k: distlock::inspect::Kind| k == LockKind::Read || k == LockKind::Write;
        // Redisson's format: a reentrant and a fair lock of one name are one hash.
        let one_hash = |k: distlock::inspect::Kind| k == LockKind::Reentrant || k == LockKind::Fair;
        let redisson = self.format == Format::Redisson;
        Some(!infos.iter().any(|i| match kind {
            Kind::Reentrant | Kind::Fair if redisson => one_hash(i.kind) && busy(i),
            Kind::Reentrant => i.kind == LockKind::Reentrant && !i.holders.is_empty(),
            Kind::Fair => i.kind == LockKind::Fair && busy(i),
            Kind::Read => {
                (i.kind == LockKind::Write && busy(i))
                    || (i.kind == LockKind::Read && !i.waiters.is_empty())
            }
            Kind::Write => rw(i.kind) && busy(i),
            Kind::Semaphore(_) | Kind::Multi | Kind::Leader | Kind::RunOnce => false,
        }))
    }

    /// What the server shows of `key` (for messages).
    pub async fn describe(&self, key: &str) -> String {
        match self.observer.inspect(key, None).await {
            Ok(infos) => infos
                .iter()
                .map(|i| {
                    format!(
                        "{:?}: {} holder(s), {} waiter(s), ttl {:?}, last token {:?}",
                        i.kind,
                        i.holders.len(),
                        i.waiters.len(),
                        i.ttl,
                        i.token
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(e) => format!("(inspect failed: {e})"),
        }
    }

    /// The masters now: every server that takes locks (blocking: asks the servers).
    fn masters(&self) -> Vec<String> {
        match &self.servers {
            Servers::None => Vec::new(),
            Servers::Single(s) => vec![lock(s).addr()],
            Servers::Nodes(n) => lock(n).iter().map(RedisProcess::addr).collect(),
            Servers::Cluster(c) => lock(c)
                .nodes
                .iter()
                .map(RedisProcess::addr)
                .filter(|a| topology::role(a).as_deref() == Some("master"))
                .collect(),
            Servers::Sentinel(g) => lock(g).master_addr().into_iter().collect(),
        }
    }

    /// Every data server (not the sentinels).
    fn data_servers(&self) -> Vec<String> {
        match &self.servers {
            Servers::None => Vec::new(),
            Servers::Single(s) => vec![lock(s).addr()],
            Servers::Nodes(n) => lock(n).iter().map(RedisProcess::addr).collect(),
            Servers::Cluster(c) => lock(c).nodes.iter().map(RedisProcess::addr).collect(),
            Servers::Sentinel(g) => {
                let g = lock(g);
                vec![g.master.addr(), g.replica.addr()]
            }
        }
    }

    /// The minority of a quorum's nodes a fault takes: 2 of 5, 1 of 3.
    fn minority(&self) -> Vec<usize> {
        match &self.servers {
            Servers::Nodes(n) => (0..(lock(n).len() - 1) / 2).collect(),
            _ => Vec::new(),
        }
    }

    /// The master a cluster or sentinel fault aims at (cluster: the master of `k0`'s
    /// slot), as an index: cluster nodes, or 0 the first master / 1 the replica.
    fn target_master(&self) -> Option<usize> {
        match &self.servers {
            Servers::Cluster(c) => {
                let c = lock(c);
                let key = super::task::key_of(&lock(&self.prefix), 0, Kind::Reentrant);
                let slot = c.keyslot(&key);
                let master = c.master_of_slot(slot)?;
                c.index_of(&master)
            }
            Servers::Sentinel(g) => {
                let g = lock(g);
                let master = g.master_addr()?;
                if master == g.master.addr() {
                    Some(0)
                } else if master == g.replica.addr() {
                    Some(1)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    fn pid_of(&self, i: usize) -> Option<u32> {
        match &self.servers {
            Servers::Single(s) => lock(s).pid(),
            Servers::Nodes(n) => lock(n).get(i).and_then(RedisProcess::pid),
            Servers::Cluster(c) => lock(c).nodes.get(i).and_then(RedisProcess::pid),
            Servers::Sentinel(g) => {
                let g = lock(g);
                if i == 0 {
                    g.master.pid()
                } else {
                    g.replica.pid()
                }
            }
            Servers::None => None,
        }
    }

    fn signal_all(&self, which: &[usize], sig: libc::c_int) {
        for &i in which {
            if let Some(pid) = self.pid_of(i) {
                // SAFETY: kill(2) with a child's pid and a signal number has no memory effects.
                unsafe {
                    libc::kill(pid as libc::pid_t, sig);
                }
            }
        }
    }

    /// Begin a lasting fault.
    pub async fn fault_begin(self: &Arc<Self>, fault: Fault, checker: &Checker) {
        if matches!(self.servers, Servers::None) {
            return;
        }
        if let Fault::HolderPause { auto, pause_ms } = fault {
            return self.holder_begins(auto, pause_ms, checker).await;
        }
        checker.fault_begin(true);
        let me = self.clone();
        let took: Vec<usize> = tokio::task::spawn_blocking(move || me.begin_blocking(fault))
            .await
            .unwrap_or_default();
        match fault {
            Fault::Down { persist: false } | Fault::NodesDown { persist: false } => {
                checker.keys_lost(None)
            }
            // A master lost or cut off past the failure detection: its replica may be
            // promoted without what it acknowledged last (asynchronous replication), and
            // clients may still write to it until it is demoted (documented limits).
            Fault::MasterDown | Fault::MasterPause => {
                checker.writes_lost();
                checker.losing_writes(true);
            }
            _ => {}
        }
        tracing::info!(target: "explore", "fault {fault:?} begins on servers {took:?}");
        *lock(&self.active) = Some((fault, took));
    }

    fn begin_blocking(&self, fault: Fault) -> Vec<usize> {
        match (fault, &self.servers) {
            (Fault::Down { .. }, Servers::Single(s)) => {
                lock(s).kill();
                vec![0]
            }
            (Fault::Pause, Servers::Single(_)) => {
                self.signal_all(&[0], libc::SIGSTOP);
                vec![0]
            }
            (Fault::Blackhole { owner }, _) => {
                for p in &self.proxies[usize::from(owner)] {
                    p.set_blackhole(true);
                }
                Vec::new()
            }
            (Fault::NodesDown { .. }, Servers::Nodes(n)) => {
                let which = self.minority();
                let mut n = lock(n);
                for &i in &which {
                    n[i].kill();
                }
                which
            }
            (Fault::NodesPause, Servers::Nodes(_)) => {
                let which = self.minority();
                self.signal_all(&which, libc::SIGSTOP);
                which
            }
            (Fault::MasterDown, Servers::Cluster(_) | Servers::Sentinel(_)) => {
                let Some(i) = self.target_master() else {
                    return Vec::new();
                };
                match &self.servers {
                    Servers::Cluster(c) => {
                        let mut c = lock(c);
                        // Its replica, which the end of the fault waits to see promoted.
                        let replica =
                            first_replica(&c.nodes[i].addr()).and_then(|r| c.index_of(&r));
                        c.nodes[i].kill();
                        return std::iter::once(i).chain(replica).collect();
                    }
                    Servers::Sentinel(g) => {
                        let mut g = lock(g);
                        if i == 0 {
                            g.master.kill()
                        } else {
                            g.replica.kill()
                        }
                    }
                    _ => {}
                }
                vec![i]
            }
            (Fault::MasterPause, Servers::Cluster(_) | Servers::Sentinel(_)) => {
                let Some(i) = self.target_master() else {
                    return Vec::new();
                };
                self.signal_all(&[i], libc::SIGSTOP);
                vec![i]
            }
            _ => Vec::new(),
        }
    }

    /// End the lasting fault, if one is on.
    pub async fn fault_end(self: &Arc<Self>, checker: &Checker) {
        let Some((fault, took)) = lock(&self.active).take() else {
            return;
        };
        if let Fault::HolderPause { .. } = fault {
            return self.holder_ends(checker).await;
        }
        let me = self.clone();
        let settled = tokio::task::spawn_blocking(move || me.end_blocking(fault, &took))
            .await
            .unwrap_or(Err("the fault's end panicked".to_owned()));
        tracing::info!(target: "explore", "fault {fault:?} ended: {settled:?}");
        if let Err(why) = settled {
            *lock(&self.broken) = Some(why);
        }
        if matches!(fault, Fault::MasterDown | Fault::MasterPause) {
            checker.writes_lost();
            checker.losing_writes(false);
        }
        checker.fault_end();
    }

    /// A holder process tries `k0` and is SIGSTOPped. Not a fault of the servers: the
    /// checker counts it (what started before it is not judged as quiet) but judges every
    /// step meanwhile. A process that cannot start breaks the run (like a server).
    async fn holder_begins(&self, auto: bool, pause_ms: u32, checker: &Checker) {
        checker.fault_begin(false);
        let key = self.key(&lock(&self.prefix).clone(), 0, Kind::Reentrant);
        let flag = self.flag_holder.load(std::sync::atomic::Ordering::Relaxed);
        match super::holder::Holder::start(&self.direct, &key, auto, flag).await {
            Ok(mut h) => {
                tracing::info!(target: "explore", "holder process on {key}: {}", h.answer);
                h.pause(Duration::from_millis(u64::from(pause_ms)));
                *lock(&self.holder) = Some(h);
            }
            Err(why) => *lock(&self.broken) = Some(format!("holder process: {why}")),
        }
        *lock(&self.active) = Some((Fault::HolderPause { auto, pause_ms }, Vec::new()));
    }

    /// The holder process is resumed and judged ([`super::holder::judge`]).
    async fn holder_ends(&self, checker: &Checker) {
        let Some(h) = lock(&self.holder).take() else {
            return;
        };
        // It never held the lock (`BUSY`, `ERR`): nothing to judge; dropped, it is killed.
        let Some(token) = h.token() else {
            return;
        };
        let key = self.key(&lock(&self.prefix).clone(), 0, Kind::Reentrant);
        match h.resume().await {
            Ok(r) => {
                tracing::info!(target: "explore", "holder process resumed: {r:?}");
                for v in super::holder::judge(&r, &key, token) {
                    checker.violation(v);
                }
            }
            Err(why) => checker.violation(format!("holder process of {key}: {why}")),
        }
    }

    fn end_blocking(&self, fault: Fault, took: &[usize]) -> Result<(), String> {
        match (fault, &self.servers) {
            (Fault::Down { persist }, Servers::Single(s)) => restart_filled(&mut lock(s), persist),
            (Fault::Pause, Servers::Single(_)) | (Fault::NodesPause, Servers::Nodes(_)) => {
                self.signal_all(took, libc::SIGCONT);
                Ok(())
            }
            (Fault::Blackhole { owner }, _) => {
                for p in &self.proxies[usize::from(owner)] {
                    p.set_blackhole(false);
                }
                Ok(())
            }
            (Fault::NodesDown { persist }, Servers::Nodes(n)) => {
                let mut n = lock(n);
                took.iter()
                    .try_for_each(|&i| restart_filled(&mut n[i], persist))
            }
            (Fault::MasterDown, Servers::Cluster(c)) => {
                let Some(&i) = took.first() else {
                    return Ok(());
                };
                let mut c = lock(c);
                // Its replica is promoted first (else the node would come back empty as the
                // master of its slots), then it rejoins as that replica's replica.
                let old = c.nodes[i].addr();
                let replica = took.get(1).map(|&r| c.nodes[r].addr());
                let promoted = poll_until(SETTLE_LIMIT, || {
                    replica
                        .as_deref()
                        .is_none_or(|r| topology::role(r).as_deref() == Some("master"))
                });
                if !promoted {
                    return Err(format!("cluster: {old}'s replica was not promoted"));
                }
                restart(&mut c.nodes[i], false)?;
                settle_cluster(&c)
            }
            (Fault::MasterPause, Servers::Cluster(c)) => {
                self.signal_all(took, libc::SIGCONT);
                settle_cluster(&lock(c))
            }
            (Fault::MasterDown, Servers::Sentinel(g)) => {
                let Some(&i) = took.first() else {
                    return Ok(());
                };
                let mut g = lock(g);
                let old = if i == 0 {
                    g.master.addr()
                } else {
                    g.replica.addr()
                };
                // The replica is promoted first; the old master, restarted empty, is then
                // turned into its replica by the sentinels.
                if !poll_until(SETTLE_LIMIT, || g.master_addr().is_some_and(|m| m != old)) {
                    return Err(format!("sentinel: {old} was not replaced"));
                }
                let restarted = if i == 0 {
                    restart(&mut g.master, false)
                } else {
                    restart(&mut g.replica, false)
                };
                restarted?;
                settle_sentinel(&g)
            }
            (Fault::MasterPause, Servers::Sentinel(g)) => {
                self.signal_all(took, libc::SIGCONT);
                settle_sentinel(&lock(g))
            }
            _ => Ok(()),
        }
    }

    /// A failover (cluster: `CLUSTER FAILOVER` on the replica of `k0`'s master, a
    /// coordinated hand-over; sentinel: `SENTINEL FAILOVER`), waited for until the servers
    /// have settled.
    pub async fn failover(self: &Arc<Self>, checker: &Checker) {
        let sentinel = matches!(self.servers, Servers::Sentinel(_));
        if !sentinel && !matches!(self.servers, Servers::Cluster(_)) {
            return;
        }
        checker.fault_begin(true);
        if sentinel {
            // Not coordinated: the old master takes writes until it is demoted (documented
            // limit, docs/fault-testing.md "sentinel-failover").
            checker.writes_lost();
            checker.losing_writes(true);
        }
        let me = self.clone();
        let settled = tokio::task::spawn_blocking(move || me.failover_blocking())
            .await
            .unwrap_or(Err("the failover panicked".to_owned()));
        tracing::info!(target: "explore", "failover: {settled:?}, masters now {:?}", {
            let me = self.clone();
            tokio::task::spawn_blocking(move || me.masters()).await.unwrap_or_default()
        });
        if let Err(why) = settled {
            *lock(&self.broken) = Some(why);
        }
        if sentinel {
            checker.writes_lost();
            checker.losing_writes(false);
        }
        checker.fault_end();
    }

    fn failover_blocking(&self) -> Result<(), String> {
        match &self.servers {
            Servers::Cluster(c) => {
                // Settled first: a fault just before (a DEBUG SLEEP on a busy machine) may
                // have moved k0's slot to another master.
                // A node's CLUSTER SLOTS may still name the master of k0's slot before a
                // failover just done: asked until the master named has a replica.
                settle_cluster(&lock(c))?;
                let mut pair = None;
                poll_until(SETTLE_LIMIT, || {
                    pair = self.target_master().and_then(|i| {
                        let master = lock(c).nodes[i].addr();
                        first_replica(&master).map(|r| (master, r))
                    });
                    pair.is_some()
                });
                let (master, replica) =
                    pair.ok_or("cluster: no master of k0's slot with a replica")?;
                let c = lock(c);
                // A manual failover the master does not complete in time (a busy machine)
                // is abandoned by the replica: it is asked again, up to 4 times. A replica
                // that still deems its master failed (a pause or a restart just ended:
                // "Master is down or failed") refuses: asked again until it agrees.
                let mut last;
                let (mut asked_times, refused_until) = (0, Instant::now() + SETTLE_LIMIT);
                let took_over = loop {
                    let r = resp_command(&replica, &["CLUSTER", "FAILOVER"]);
                    let asked = r.as_ref().is_ok_and(RespValue::is_ok);
                    last = Some(r);
                    if asked {
                        asked_times += 1;
                        if poll_until(SETTLE_LIMIT / 4, || {
                            topology::role(&replica).as_deref() == Some("master")
                        }) {
                            break true;
                        }
                        if asked_times == 4 {
                            break false;
                        }
                    } else if Instant::now() >= refused_until {
                        break false;
                    } else {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                };
                if !took_over {
                    return Err(format!(
                        "cluster: {replica} did not take over from {master}: {last:?}"
                    ));
                }
                settle_cluster(&c)
            }
            Servers::Sentinel(g) => {
                let g = lock(g);
                let old = g
                    .master_addr()
                    .ok_or("sentinel: no sentinel names the master")?;
                // A sentinel refuses while it has no replica it deems good (`NOGOODSLAVE`,
                // e.g. just after the previous failover): asked again until one accepts.
                // A failover it accepted may still be abandoned (the promotion not seen
                // within the group's `failover-timeout` of 3 s on a busy machine; the
                // sentinels then wait twice that before another): asked again when the
                // master is not replaced within half the limit, for up to three limits.
                let mut last = None;
                let until = Instant::now() + SETTLE_LIMIT * 3;
                let replaced = loop {
                    let asked = poll_until(SETTLE_LIMIT, || {
                        g.sentinels.iter().any(|s| {
                            let r = resp_command(
                                &s.addr(),
                                &["SENTINEL", "FAILOVER", PrivateSentinel::MASTER_NAME],
                            );
                            let ok = r.as_ref().is_ok_and(RespValue::is_ok);
                            last = Some(r);
                            ok
                        })
                    });
                    if !asked {
                        return Err(format!(
                            "sentinel: no sentinel accepted SENTINEL FAILOVER: {last:?}"
                        ));
                    }
                    if poll_until(SETTLE_LIMIT / 2, || {
                        g.master_addr().is_some_and(|m| m != old)
                    }) {
                        break true;
                    }
                    if Instant::now() >= until {
                        break false;
                    }
                };
                if !replaced {
                    return Err(format!("sentinel: {old} was not replaced"));
                }
                settle_sentinel(&g)
            }
            _ => Ok(()),
        }
    }

    /// Owner `owner`'s connections reset through its proxies now, or (`lose_reply`) the
    /// next reply of each of its servers swallowed and its connection reset. Where the
    /// owners have no proxies (cluster, sentinel), nothing.
    pub fn reset_connections(&self, owner: u8, lose_reply: bool, checker: &Checker) {
        let Some(proxies) = self.proxies.get(usize::from(owner)) else {
            return;
        };
        checker.fault_begin(false);
        for p in proxies {
            if lose_reply {
                p.reset_after_replies(1);
            } else {
                p.reset_all();
            }
        }
    }

    /// `CLIENT KILL` of every normal and pub/sub client (every data server).
    pub async fn kill_clients(self: &Arc<Self>, checker: &Checker) {
        if matches!(self.servers, Servers::None) {
            return;
        }
        checker.fault_begin(false);
        let me = self.clone();
        blocking(move || {
            for addr in me.data_servers() {
                for t in ["normal", "pubsub"] {
                    let _ = resp_command(&addr, &["CLIENT", "KILL", "TYPE", t]);
                }
            }
        })
        .await;
    }

    /// Raw `DEL` of every key of `keys` (all kinds), on every master.
    pub async fn delete_keys(self: &Arc<Self>, keys: Vec<String>, checker: &Checker, name: u8) {
        if matches!(self.servers, Servers::None) {
            return;
        }
        checker.fault_begin(false);
        checker.keys_lost(Some(name));
        let me = self.clone();
        blocking(move || {
            let redisson = me.format == Format::Redisson;
            for addr in me.masters() {
                for key in &keys {
                    raw_del_all(&addr, key, redisson);
                }
            }
        })
        .await;
        checker.keys_gone(name);
    }

    /// `DEBUG SLEEP` for `ms` (a fault while it lasts), not waited for: on the server,
    /// every cluster master, the sentinel group's master, a minority of a quorum's nodes.
    pub fn debug_sleep(self: &Arc<Self>, ms: u32, checker: &Arc<Checker>) {
        if matches!(self.servers, Servers::None) {
            return;
        }
        checker.fault_begin(true);
        let checker = checker.clone();
        let secs = format!("{:.3}", f64::from(ms) / 1000.0);
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            let targets: Vec<String> = match &me.servers {
                Servers::Nodes(n) => {
                    let which = me.minority();
                    let n = lock(n);
                    which.iter().map(|&i| n[i].addr()).collect()
                }
                _ => me.masters(),
            };
            let sleeps: Vec<_> = targets
                .into_iter()
                .map(|addr| {
                    let secs = secs.clone();
                    std::thread::spawn(move || {
                        let limit = Duration::from_secs(10);
                        match resp_command_timeout(&addr, &["DEBUG", "SLEEP", &secs], limit) {
                            Ok(RespValue::Error(e)) => Err(format!("{addr}: DEBUG SLEEP: {e}")),
                            _ => Ok(()),
                        }
                    })
                })
                .collect();
            for s in sleeps {
                // A fault that did not happen would pass for one that was survived.
                if let Ok(Err(why)) = s.join() {
                    *lock(&me.broken) = Some(why);
                }
            }
            checker.fault_end();
        });
    }

    /// Raw `DEL` of a reentrant lock's hash: a release without the owner check (a
    /// planted bug of the self-test; single server).
    pub fn raw_release(&self, key: &str) {
        if let Some(addr) = self.addr() {
            let _ = resp_command(&addr, &["DEL", &format!("lock:{{{key}}}")]);
        }
    }
}

/// Restart a server, its AOF kept (`persist`) or wiped. It ends once the server has
/// loaded its data (`LOADING` answers are part of the fault).
fn restart(s: &mut RedisProcess, persist: bool) -> Result<(), String> {
    if !persist {
        let _ = std::fs::remove_dir_all(s.dir().join("appendonlydir"));
    }
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.restart())).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "redis-server did not restart".to_owned())
    })?;
    let addr = s.addr();
    if poll_until(SETTLE_LIMIT, || {
        info_field(&addr, "loading").as_deref() == Some("0")
    }) {
        Ok(())
    } else {
        Err(format!("{addr}: still loading after {SETTLE_LIMIT:?}"))
    }
}

/// [`restart`] a server that keeps [`FILLER_KEYS`] besides the locks' keys ([`fill`]): a
/// restart with its data loads them first; one without has them written again, for the
/// next.
fn restart_filled(s: &mut RedisProcess, persist: bool) -> Result<(), String> {
    restart(s, persist)?;
    if persist {
        Ok(())
    } else {
        fill(&s.addr())
    }
}

/// Keys a single server or quorum node keeps besides the locks' (`DEBUG POPULATE`, 64
/// bytes each): a restart with its data loads them for a while first, answering
/// `LOADING` meanwhile.
const FILLER_KEYS: &str = "500000";

/// Write [`FILLER_KEYS`] keys into `addr` and rewrite its AOF, so that a restart with
/// the data loads them.
fn fill(addr: &str) -> Result<(), String> {
    let args = ["DEBUG", "POPULATE", FILLER_KEYS, "explore:filler", "64"];
    match resp_command(addr, &args) {
        Ok(RespValue::Simple(_)) => {}
        other => return Err(format!("{addr}: DEBUG POPULATE: {other:?}")),
    }
    match resp_command(addr, &["BGREWRITEAOF"]) {
        Ok(RespValue::Simple(_)) => {}
        other => return Err(format!("{addr}: BGREWRITEAOF: {other:?}")),
    }
    let rewritten = || {
        info_field(addr, "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(addr, "aof_rewrite_scheduled").as_deref() == Some("0")
    };
    if poll_until(SETTLE_LIMIT, rewritten) {
        Ok(())
    } else {
        Err(format!(
            "{addr}: AOF rewrite not done within {SETTLE_LIMIT:?}"
        ))
    }
}

/// A field of `INFO persistence` on `addr`.
fn info_field(addr: &str, field: &str) -> Option<String> {
    let Ok(RespValue::Bulk(info)) = resp_command(addr, &["INFO", "persistence"]) else {
        return None;
    };
    let prefix = format!("{field}:");
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_owned()))
}

/// Poll `f` (a server's state; there is no event to await) every 20 ms until it holds or
/// `limit` passes.
fn poll_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Until every node reports `cluster_state:ok`, 3 masters with a replica in sync each.
fn settle_cluster(c: &PrivateCluster) -> Result<(), String> {
    if poll_until(SETTLE_LIMIT, || c.is_ready()) {
        Ok(())
    } else {
        Err(format!("cluster: not settled within {SETTLE_LIMIT:?}"))
    }
}

/// Until every sentinel names the same master, which has its replica online, and the
/// other server is that replica with its link up.
fn settle_sentinel(g: &PrivateSentinel) -> Result<(), String> {
    let settled = poll_until(SETTLE_LIMIT, || {
        let names: Vec<Option<String>> = g
            .sentinels
            .iter()
            .map(|s| topology::sentinel_master_addr(&s.addr(), PrivateSentinel::MASTER_NAME))
            .collect();
        let Some(Some(master)) = names.first().cloned() else {
            return false;
        };
        let other = if master == g.master.addr() {
            g.replica.addr()
        } else {
            g.master.addr()
        };
        names.iter().all(|n| n.as_deref() == Some(master.as_str()))
            && g.sentinels.iter().all(|s| sees_replica(&s.addr(), &other))
            && topology::role(&master).as_deref() == Some("master")
            && topology::replica_online(&master)
            && topology::info_field(&other, "replication", "master_link_status").as_deref()
                == Some("up")
    });
    if settled {
        Ok(())
    } else {
        Err(format!(
            "sentinel group: not settled within {SETTLE_LIMIT:?}"
        ))
    }
}

/// Whether the sentinel at `addr` lists `replica` as a replica in good standing (flags
/// exactly `slave`: not down, not disconnected), so it would promote it.
fn sees_replica(addr: &str, replica: &str) -> bool {
    let Ok(RespValue::Array(list)) = resp_command(
        addr,
        &["SENTINEL", "REPLICAS", PrivateSentinel::MASTER_NAME],
    ) else {
        return false;
    };
    list.iter().filter_map(RespValue::as_array).any(|flat| {
        let field = |name: &str| {
            flat.chunks(2).find_map(|kv| match kv {
                [k, v] if k.as_str() == Some(name) => v.as_str(),
                _ => None,
            })
        };
        field("name") == Some(replica) && field("flags") == Some("slave")
    })
}

/// `127.0.0.1:PORT` of the first replica of the master at `addr` (`INFO replication`).
fn first_replica(addr: &str) -> Option<String> {
    let line = topology::info_field(addr, "replication", "slave0")?;
    let port = line
        .split(',')
        .find_map(|kv| kv.strip_prefix("port="))?
        .to_string();
    Some(format!("127.0.0.1:{port}"))
}

/// Delete every key of lock name `key` on the server at `addr`: distlock's `lock:{KEY}*`,
/// or (`redisson`) Redisson's bare name and the keys named after it (its fair queue and
/// deadlines, its read-write holds' timeouts; the token counter stays, as a retired
/// name's would not).
fn raw_del_all(addr: &str, key: &str, redisson: bool) {
    let patterns = if redisson {
        vec![
            key.to_owned(),
            format!("{key}rw"),
            format!("{{{key}rw}}:*"),
            format!("redisson_lock_queue:{{{key}}}"),
            format!("redisson_lock_timeout:{{{key}}}"),
        ]
    } else {
        vec![format!("lock:{{{key}}}*")]
    };
    for pattern in patterns {
        if let Ok(RespValue::Array(names)) = resp_command(addr, &["KEYS", &pattern]) {
            for n in names.iter().filter_map(RespValue::as_str) {
                let _ = resp_command(addr, &["DEL", n]);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn blocking(f: impl FnOnce() + Send + 'static) {
    let _ = tokio::task::spawn_blocking(f).await;
}

impl Drop for World {
    fn drop(&mut self) {
        let all: Vec<usize> = (0..6).collect();
        self.signal_all(&all, libc::SIGCONT);
    }
}
