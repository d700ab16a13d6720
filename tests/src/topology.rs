//! Private topologies for destructive tests: a whole Redis Cluster, or a master with a
//! replica and sentinels, started by one test on ports of its own (17400..17499, from
//! [`allocate_port`]), so killing their servers never disturbs the
//! shared topologies other tests use in parallel. Dropping a topology kills every process
//! it started and removes their directories.

use std::fmt;
use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::{
    allocate_port, resp_command, resp_command_timeout, wait_until, RedisProcess, RespValue,
    START_TIMEOUT,
};

/// How long a new topology may take to become ready (cluster formed, sentinels see each
/// other and the replica).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// Arguments every private server gets: a replica's full sync starts at once.
const COMMON_ARGS: &[&str] = &["--repl-diskless-sync-delay", "0"];

// ------------------------------------------------------------------ cluster

/// A private Redis Cluster: 3 masters with one replica each, `cluster-node-timeout 1000`
/// (a dead master is replaced by its replica within a few seconds).
pub struct PrivateCluster {
    /// The six nodes; the first three start as masters.
    pub nodes: Vec<RedisProcess>,
}

impl PrivateCluster {
    /// Start six nodes, join them with `redis-cli --cluster create`, and wait until every
    /// node reports `cluster_state:ok` with 3 masters that each have a replica in sync.
    ///
    /// # Panics
    /// If `redis-server`/`redis-cli` cannot run or the cluster is not ready within
    /// [`READY_TIMEOUT`].
    pub fn start() -> PrivateCluster {
        let ports: Vec<u16> = (0..6).map(|_| allocate_port()).collect();
        Self::start_on_ports(&ports, None)
    }

    /// Like [`PrivateCluster::start`], on the six `ports` given, with the cluster bus on
    /// `bus_ports` (`cluster-port`; default: each port + 10000).
    ///
    /// # Panics
    /// As [`PrivateCluster::start`]; also when `ports` (or `bus_ports`) are not six.
    pub fn start_on_ports(ports: &[u16], bus_ports: Option<&[u16]>) -> PrivateCluster {
        assert_eq!(ports.len(), 6, "a private cluster has six nodes");
        if let Some(bus) = bus_ports {
            assert_eq!(bus.len(), 6, "one cluster bus port per node");
        }
        let nodes: Vec<RedisProcess> = thread::scope(|s| {
            let handles: Vec<_> = ports
                .iter()
                .enumerate()
                .map(|(i, &port)| {
                    s.spawn(move || {
                        let bus = bus_ports.map(|b| b[i].to_string());
                        let mut args = vec![
                            "--cluster-enabled",
                            "yes",
                            "--cluster-node-timeout",
                            "1000",
                            "--cluster-config-file",
                            "nodes.conf",
                            "--cluster-replica-validity-factor",
                            "0",
                        ];
                        if let Some(bus) = &bus {
                            args.extend_from_slice(&["--cluster-port", bus.as_str()]);
                        }
                        args.extend_from_slice(COMMON_ARGS);
                        RedisProcess::start_on_port(port, &args)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("start a cluster node"))
                .collect()
        });
        let cluster = PrivateCluster { nodes };
        let addrs: Vec<String> = cluster.nodes.iter().map(RedisProcess::addr).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli: {e}; install redis-tools"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create {addrs:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until(
            READY_TIMEOUT,
            "the private cluster to be ready (cluster_state:ok, 3 masters with a replica each)",
            || cluster.is_ready(),
        );
        cluster
    }

    /// Whether every node reports `cluster_state:ok` and 6 known nodes, and 3 masters each
    /// have a replica in sync.
    pub fn is_ready(&self) -> bool {
        let (mut masters, mut replicas) = (0, 0);
        for node in &self.nodes {
            let addr = node.addr();
            let Some(info) = text(&addr, &["CLUSTER", "INFO"]) else {
                return false;
            };
            if !info.contains("cluster_state:ok") || !info.contains("cluster_known_nodes:6") {
                return false;
            }
            match info_field(&addr, "replication", "role").as_deref() {
                Some("master") => {
                    if !replica_online(&addr) {
                        return false;
                    }
                    masters += 1;
                }
                Some("slave") => {
                    if info_field(&addr, "replication", "master_link_status").as_deref()
                        != Some("up")
                    {
                        return false;
                    }
                    replicas += 1;
                }
                _ => return false,
            }
        }
        masters == 3 && replicas == 3
    }

    /// `redis://127.0.0.1:PORT` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisProcess::url).collect()
    }

    /// The index in [`PrivateCluster::nodes`] of the running node whose `host:port` is `addr`.
    pub fn index_of(&self, addr: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.addr() == addr)
    }

    /// The slot of `key`, asked of a running node.
    ///
    /// # Panics
    /// If no node answers.
    pub fn keyslot(&self, key: &str) -> u16 {
        let addrs: Vec<String> = self.nodes.iter().map(RedisProcess::addr).collect();
        keyslot(&addrs, key)
    }

    /// `host:port` of the master serving `slot`, as the running nodes see it now.
    pub fn master_of_slot(&self, slot: u16) -> Option<String> {
        let addrs: Vec<String> = self.nodes.iter().map(RedisProcess::addr).collect();
        master_of_slot(&addrs, slot)
    }
}

impl fmt::Debug for PrivateCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateCluster")
            .field("nodes", &self.nodes)
            .finish()
    }
}

/// The slot of `key`, asked of the first of `addrs` that answers `CLUSTER KEYSLOT`.
///
/// # Panics
/// If none answers.
pub fn keyslot(addrs: &[String], key: &str) -> u16 {
    for addr in addrs {
        if let Ok(RespValue::Integer(n)) = resp_command(addr, &["CLUSTER", "KEYSLOT", key]) {
            return n as u16;
        }
    }
    panic!("no cluster node of {addrs:?} answers CLUSTER KEYSLOT")
}

/// `host:port` of the master serving `slot`, from `CLUSTER SLOTS` of the first of `addrs`
/// that answers.
pub fn master_of_slot(addrs: &[String], slot: u16) -> Option<String> {
    for addr in addrs {
        let Ok(RespValue::Array(ranges)) = resp_command(addr, &["CLUSTER", "SLOTS"]) else {
            continue;
        };
        for range in &ranges {
            let Some(r) = range.as_array() else { continue };
            let (Some(lo), Some(hi)) = (
                r.first().and_then(RespValue::as_int),
                r.get(1).and_then(RespValue::as_int),
            ) else {
                continue;
            };
            if (lo..=hi).contains(&i64::from(slot)) {
                let node = r.get(2)?.as_array()?;
                let host = node.first()?.as_str()?;
                let port = node.get(1)?.as_int()?;
                return Some(format!("{host}:{port}"));
            }
        }
        return None;
    }
    None
}

// ------------------------------------------------------------------ sentinel

/// A `redis-sentinel` process owned by a test: not daemonized, killed on drop.
pub struct SentinelProcess {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl SentinelProcess {
    /// Start a sentinel on a free private port monitoring `master_name` at
    /// `127.0.0.1:master_port` with `quorum`, `down-after-milliseconds 1000` and
    /// `failover-timeout 3000`; wait until it answers `PING`.
    ///
    /// # Panics
    /// If it cannot be started or does not answer within 10 s.
    pub fn start(master_name: &str, master_port: u16, quorum: u32) -> SentinelProcess {
        Self::start_on_port(allocate_port(), master_name, master_port, quorum)
    }

    /// Like [`SentinelProcess::start`], on `port`.
    ///
    /// # Panics
    /// If it cannot be started or does not answer within 10 s.
    pub fn start_on_port(
        port: u16,
        master_name: &str,
        master_port: u16,
        quorum: u32,
    ) -> SentinelProcess {
        let dir = std::env::temp_dir().join(format!(
            "distlock-sentinel-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let conf = dir.join("sentinel.conf");
        fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir \"{}\"\n\
                 sentinel resolve-hostnames no\n\
                 sentinel monitor {master_name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {master_name} 1000\n\
                 sentinel failover-timeout {master_name} 3000\n\
                 sentinel parallel-syncs {master_name} 1\n",
                dir.display()
            ),
        )
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", conf.display()));
        let log = File::create(dir.join("sentinel.log")).expect("sentinel log");
        let log2 = log.try_clone().expect("sentinel log");
        let bin =
            std::env::var("DISTLOCK_REDIS_SENTINEL").unwrap_or_else(|_| "redis-sentinel".into());
        let child = Command::new(&bin)
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `{bin}`: {e}; install redis-sentinel"));
        let mut sentinel = SentinelProcess {
            port,
            dir,
            child: Some(child),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = sentinel
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                sentinel.child = None;
                panic!(
                    "redis-sentinel on port {port} exited during start-up ({status}):\n{}",
                    sentinel.log_tail()
                );
            }
            if matches!(resp_command(&sentinel.addr(), &["PING"]), Ok(RespValue::Simple(s)) if s == "PONG")
            {
                return sentinel;
            }
            assert!(
                Instant::now() < deadline,
                "redis-sentinel on port {port} did not answer PING within {START_TIMEOUT:?}:\n{}",
                sentinel.log_tail()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// `127.0.0.1:PORT`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Kill it with SIGKILL (no-op when not running).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl fmt::Debug for SentinelProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelProcess")
            .field("port", &self.port)
            .field("pid", &self.child.as_ref().map(Child::id))
            .finish()
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A private master, one replica and `n` sentinels (quorum `n / 2 + 1`), monitoring the
/// master under [`PrivateSentinel::MASTER_NAME`].
pub struct PrivateSentinel {
    /// The first master.
    pub master: RedisProcess,
    /// Its replica.
    pub replica: RedisProcess,
    /// The sentinels.
    pub sentinels: Vec<SentinelProcess>,
}

impl PrivateSentinel {
    /// The name the sentinels know the master by.
    pub const MASTER_NAME: &'static str = "distlock-private";

    /// Start a master, a replica attached to it, then `n` sentinels, and wait until every
    /// sentinel sees the replica and the other sentinels.
    ///
    /// # Panics
    /// If a process cannot start or the group is not ready within [`READY_TIMEOUT`].
    pub fn start(n: usize) -> PrivateSentinel {
        let master = allocate_port();
        let replica = allocate_port();
        let sentinels: Vec<u16> = (0..n).map(|_| allocate_port()).collect();
        Self::start_on_ports(master, replica, &sentinels)
    }

    /// Like [`PrivateSentinel::start`], on the ports given (one sentinel per port of
    /// `sentinel_ports`).
    ///
    /// # Panics
    /// As [`PrivateSentinel::start`].
    pub fn start_on_ports(
        master_port: u16,
        replica_port: u16,
        sentinel_ports: &[u16],
    ) -> PrivateSentinel {
        let n = sentinel_ports.len();
        let master = RedisProcess::start_on_port(master_port, COMMON_ARGS);
        let master_port = master.port().to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", master_port.as_str()];
        args.extend_from_slice(COMMON_ARGS);
        let replica = RedisProcess::start_on_port(replica_port, &args);
        wait_until(READY_TIMEOUT, "the replica to be in sync", || {
            replica_online(&master.addr())
        });
        wait_acknowledged(&master.addr(), 1);
        let quorum = (n / 2 + 1) as u32;
        let sentinels: Vec<SentinelProcess> = sentinel_ports
            .iter()
            .map(|&p| SentinelProcess::start_on_port(p, Self::MASTER_NAME, master.port(), quorum))
            .collect();
        let group = PrivateSentinel {
            master,
            replica,
            sentinels,
        };
        wait_until(
            READY_TIMEOUT,
            "the sentinels to see the replica and each other",
            || {
                group.sentinels.iter().all(|s| {
                    let m = sentinel_master(&s.addr(), Self::MASTER_NAME);
                    m.get("num-slaves").map(String::as_str) == Some("1")
                        && m.get("num-other-sentinels") == Some(&(n - 1).to_string())
                })
            },
        );
        group
    }

    /// `redis://` URLs of the sentinels.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(SentinelProcess::url).collect()
    }

    /// The master's `host:port` according to the first sentinel that answers.
    pub fn master_addr(&self) -> Option<String> {
        self.sentinels
            .iter()
            .find_map(|s| sentinel_master_addr(&s.addr(), Self::MASTER_NAME))
    }
}

impl fmt::Debug for PrivateSentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateSentinel")
            .field("master", &self.master)
            .field("replica", &self.replica)
            .field("sentinels", &self.sentinels)
            .finish()
    }
}

/// `SENTINEL get-master-addr-by-name` of the sentinel at `addr`, as `host:port`.
pub fn sentinel_master_addr(addr: &str, name: &str) -> Option<String> {
    let reply = resp_command(addr, &["SENTINEL", "get-master-addr-by-name", name]).ok()?;
    let parts = reply.as_array()?;
    Some(format!(
        "{}:{}",
        parts.first()?.as_str()?,
        parts.get(1)?.as_str()?
    ))
}

/// `SENTINEL MASTER name` of the sentinel at `addr`, as a map (empty when it fails).
pub fn sentinel_master(addr: &str, name: &str) -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    if let Ok(RespValue::Array(flat)) = resp_command(addr, &["SENTINEL", "MASTER", name]) {
        for pair in flat.chunks(2) {
            if let [k, v] = pair {
                if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                    out.insert(k.to_owned(), v.to_owned());
                }
            }
        }
    }
    out
}

// ------------------------------------------------------------------ helpers

fn text(addr: &str, args: &[&str]) -> Option<String> {
    match resp_command_timeout(addr, args, Duration::from_secs(1)) {
        Ok(v) => v.as_str().map(str::to_owned),
        Err(_) => None,
    }
}

/// One field of `INFO section` of the server at `addr`.
pub fn info_field(addr: &str, section: &str, field: &str) -> Option<String> {
    let info = text(addr, &["INFO", section])?;
    info.lines().find_map(|l| {
        l.trim_end()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::to_owned)
    })
}

/// Whether the master at `addr` has exactly one replica and counts it as `online` (a
/// replica that has just synced counts for `WAIT` only from its first acknowledgement,
/// up to a second after its own link shows `up`).
pub fn replica_online(addr: &str) -> bool {
    info_field(addr, "replication", "connected_slaves").as_deref() == Some("1")
        && info_field(addr, "replication", "slave0").is_some_and(|s| s.contains("state=online"))
}

/// Wait until a write on the master at `addr` is acknowledged by `replicas` replicas
/// (`SET` then `WAIT replicas 100`, on one connection, until it answers `replicas`).
///
/// A replica counts as `online` as soon as its initial sync is done, but Redis 7.0 may
/// leave `WAIT` unanswered for up to a second more; tests of `sync_replicas` need it
/// answered.
///
/// # Panics
/// If that does not happen within [`READY_TIMEOUT`].
pub fn wait_acknowledged(addr: &str, replicas: usize) {
    let n = replicas.to_string();
    wait_until(
        READY_TIMEOUT,
        &format!("{addr}: a write acknowledged by {replicas} replica(s)"),
        || {
            let Ok(stream) = std::net::TcpStream::connect(addr) else {
                return false;
            };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let mut writer = match stream.try_clone() {
                Ok(w) => w,
                Err(_) => return false,
            };
            let mut request = crate::encode_command(&["SET", "distlock:topology:probe", "1"]);
            request.extend(crate::encode_command(&["WAIT", &n, "100"]));
            if std::io::Write::write_all(&mut writer, &request).is_err() {
                return false;
            }
            let mut reader = std::io::BufReader::new(stream);
            let set = crate::read_resp(&mut reader);
            let wait = crate::read_resp(&mut reader);
            matches!(set, Ok(v) if v.is_ok())
                && matches!(wait, Ok(RespValue::Integer(k)) if k as usize >= replicas)
        },
    );
}

/// The role (`master` / `slave`) of the server at `addr`, when it answers.
pub fn role(addr: &str) -> Option<String> {
    info_field(addr, "replication", "role")
}
