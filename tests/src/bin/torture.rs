//! The torture run: real faults against real servers, several worker processes taking one
//! lock, and the history checker (`distlock_tests::history`) on what they recorded.
//!
//! `torture [--quick|--long] [--kind KIND]... [--dir DIR] [SCENARIO...]` (usually through
//! `scripts/torture.sh`). Prints one table row per scenario × backend × lock kind, and
//! exits 1 when any run had an unsignalled overlap or an accepted stale write, lost an
//! update on the fenced balance (that one in every scenario, documented limits included),
//! made no progress, recovered from a fault later than its bound, or had a free lock refused
//! ([`Liveness`], [`Run::quiet_window`]; 2 on a usage or set-up error).
//!
//! The lock kinds are `distlock_tests::history::KINDS` (reentrant, write, read-write mix,
//! one-permit semaphore, leader, and the Redisson format's reentrant and read-write mix),
//! each with the exclusion rule the checker applies. Every scenario runs `reentrant`; the
//! others run on the scenarios of [`KIND_SCENARIOS_QUICK`] in `--quick` (for
//! [`KIND_SECS_QUICK`] s each), and in `--long` on every scenario whose backend offers
//! them (not redlock). `--kind` picks the kinds instead.
//!
//! Every server listens on 127.0.0.1 in 17300..17319 (the resource 17300, the backend's
//! servers from 17301: up to six nodes 17301..17306, sentinels 17307..17309, the cluster
//! bus 17310..17315), proxies in 17320..17339. Servers and workers are child processes
//! killed when their owner is dropped; workers also die with this process
//! (`PR_SET_PDEATHSIG`), and `scripts/torture.sh` kills this process's group on exit.
//!
//! `partition-netns` puts each worker in a network namespace of its own (`dlt<PID>n<I>`,
//! a veth pair 10.213.I.1 (host) / 10.213.I.2 (namespace)), deleted with its veth pair
//! and iptables rules when the run ends (and by `scripts/torture.sh` on every way out).
//! The `redlock-clock` scenarios run redis-server with `tests/clockshift/clockshift.c`
//! preloaded (compiled with `cc` into the run's directory), which shifts its wall clock.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distlock_tests::history::{self, now_ns, Interventions, LockKindSpec, Report, Section};
use distlock_tests::proxy::Proxy;
use distlock_tests::topology::{self, PrivateCluster, PrivateSentinel};
use distlock_tests::{resp_command, RedisProcess};

const RESOURCE_PORT: u16 = 17300;
const FIRST_NODE_PORT: u16 = 17301;
const WATCHDOG: Duration = Duration::from_secs(1);
const HOLD_MS: u64 = 60;
/// A holder is paused only while at least this much of its hold's sleep is left.
const HOLD_LEFT: Duration = Duration::from_millis(15);
const WORKERS: usize = 3;
/// Sentinels of the `sentinel` backend.
const SENTINEL_PORTS: [u16; 3] = [17307, 17308, 17309];
/// The cluster bus of the `cluster` backend's six nodes (17301..17306).
const CLUSTER_BUS_PORTS: [u16; 6] = [17310, 17311, 17312, 17313, 17314, 17315];
/// The scenarios `--quick` runs every lock kind on (the others: `reentrant` only).
const KIND_SCENARIOS_QUICK: &[&str] = &["pause", "kill"];
/// Seconds each lock kind but `reentrant` runs per scenario in `--quick`.
const KIND_SECS_QUICK: u64 = 5;
/// How soon after a fault ends the next section must start (docs/fault-testing.md), on
/// top of one section's hold (a holder inside when the fault ends finishes first) and, for
/// a killed holder, its lease.
const RECOVERY: Duration = Duration::from_secs(1);
/// How long a quiet window for a "free means available" check lasts ([`Run::quiet_window`]).
const QUIET: Duration = Duration::from_millis(400);
/// How long the run waits for the first section before the first fault.
const FIRST_SECTION_WITHIN: Duration = Duration::from_secs(10);
/// How far one step of the `redlock-clock` scenarios moves a node's wall clock.
const CLOCK_STEP_SECS: u64 = 3600;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Single,
    Redlock,
    Sentinel,
    Cluster,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Single => "single",
            Backend::Redlock => "redlock(5)",
            Backend::Sentinel => "sentinel",
            Backend::Cluster => "cluster(3+3)",
        }
    }
}

/// One scenario: a fault, on a backend.
struct Scenario {
    name: &'static str,
    backend: Backend,
    /// Through a fault proxy per node.
    proxied: bool,
    /// redis-server with AOF `appendfsync always` (locks and fencing counters survive a crash).
    persistent: bool,
    /// Shows a documented limit (not a library bug): its overlaps do not fail the run.
    limit: bool,
    /// Seconds it runs in `--quick` (`None`: not in the default `--quick` set; 12 s when
    /// named); `--long` runs every scenario 60 s.
    quick: Option<u64>,
    what: &'static str,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "pause",
        backend: Backend::Single,
        proxied: false,
        persistent: false,
        limit: false,
        quick: Some(12),
        what: "holder SIGSTOPped for 2.5 leases, then SIGCONT",
    },
    Scenario {
        name: "kill",
        backend: Backend::Single,
        proxied: false,
        persistent: false,
        limit: false,
        quick: Some(12),
        what: "holder SIGKILLed (a new worker takes its place)",
    },
    Scenario {
        name: "restart",
        backend: Backend::Single,
        proxied: false,
        persistent: true,
        limit: false,
        quick: Some(12),
        what: "redis-server SIGKILLed and restarted (AOF appendfsync always)",
    },
    Scenario {
        name: "latency",
        backend: Backend::Single,
        proxied: true,
        persistent: false,
        limit: false,
        quick: Some(12),
        what: "proxy latency 0 / 150 ms / 700 ms each way",
    },
    Scenario {
        name: "blackhole",
        backend: Backend::Single,
        proxied: true,
        persistent: false,
        limit: false,
        quick: Some(12),
        what: "proxy blackhole for 1.5 s at a time",
    },
    Scenario {
        name: "reset",
        backend: Backend::Single,
        proxied: true,
        persistent: false,
        limit: false,
        quick: Some(12),
        what: "proxy resets connections, also right after a reply",
    },
    Scenario {
        name: "partition",
        backend: Backend::Single,
        proxied: true,
        persistent: false,
        limit: false,
        quick: Some(12),
        what: "the holder alone cut off from Redis (its own proxy blackholed) for 2.5 leases",
    },
    Scenario {
        name: "redlock-minority",
        backend: Backend::Redlock,
        proxied: false,
        persistent: true,
        limit: false,
        quick: Some(12),
        what: "2 of 5 masters SIGKILLed, restarted (AOF) 1 s later",
    },
    Scenario {
        name: "redlock-blackhole",
        backend: Backend::Redlock,
        proxied: true,
        persistent: false,
        limit: false,
        quick: None,
        what: "2 of 5 masters blackholed through the proxy",
    },
    Scenario {
        name: "restart-nopersist",
        backend: Backend::Single,
        proxied: false,
        persistent: false,
        limit: true,
        quick: Some(12),
        what: "redis-server SIGKILLed, restarted EMPTY (no persistence): documented limit",
    },
    Scenario {
        name: "partition-netns",
        backend: Backend::Single,
        proxied: false,
        persistent: false,
        limit: false,
        quick: Some(8),
        what: "the holder's network namespace cut off from Redis (iptables DROP on its veth) for 2.5 leases",
    },
    Scenario {
        name: "redlock-clock",
        backend: Backend::Redlock,
        proxied: false,
        persistent: false,
        limit: true,
        quick: Some(8),
        what: "the wall clock of 1 of 5 masters jumps 1 h forward (its lock keys expire at once): documented limit",
    },
    Scenario {
        name: "redlock-clock-2",
        backend: Backend::Redlock,
        proxied: false,
        persistent: false,
        limit: true,
        quick: None,
        what: "the wall clocks of 2 of 5 masters jump 1 h forward: documented limit",
    },
    Scenario {
        name: "sentinel-failover",
        backend: Backend::Sentinel,
        proxied: false,
        persistent: false,
        limit: true,
        quick: Some(8),
        what: "SENTINEL FAILOVER and master SIGKILL, alternately (sync_replicas = 0): documented limit",
    },
    Scenario {
        name: "sentinel-failover-wait",
        backend: Backend::Sentinel,
        proxied: false,
        persistent: false,
        limit: true,
        quick: None,
        what: "SENTINEL FAILOVER and master SIGKILL, alternately (sync_replicas = 1): documented limit",
    },
    Scenario {
        name: "cluster-failover",
        backend: Backend::Cluster,
        proxied: false,
        persistent: false,
        limit: false,
        quick: Some(8),
        what: "CLUSTER FAILOVER on the replica of the lock's master (coordinated hand-over)",
    },
    Scenario {
        name: "cluster-kill",
        backend: Backend::Cluster,
        proxied: false,
        persistent: false,
        limit: true,
        quick: None,
        what: "the lock's master SIGKILLed, its replica promoted, the old one back as replica: documented limit",
    },
];

fn usage() -> ! {
    eprintln!(
        "usage: torture [--quick|--long] [--keep] [--kind KIND]... [--dir DIR] [SCENARIO...]\nscenarios: {}\nkinds: {}",
        SCENARIOS
            .iter()
            .map(|s| s.name)
            .collect::<Vec<_>>()
            .join(" "),
        history::KINDS
            .iter()
            .map(|k| k.name)
            .collect::<Vec<_>>()
            .join(" ")
    );
    std::process::exit(2)
}

/// A worker process and its history file.
struct Worker {
    child: Child,
    history: PathBuf,
    /// Killed by the scenario (never signalled again: its pid may be reused).
    dead: bool,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child process of ours.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Run a command to its end; its failure, with its stderr, as the error.
fn run_cmd(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A network namespace of the run, joined to the host by a veth pair: the host end
/// 10.213.I.1/30, the namespace end 10.213.I.2/30. Deleting the namespace (on drop)
/// deletes its veth pair and its iptables rules with it.
struct Netns {
    name: String,
    host_if: String,
    /// The host end's address: where the namespace reaches the servers.
    host_ip: String,
}

impl Netns {
    /// Create namespace `i` of this process (`ip` and `iptables` must be installed; root).
    ///
    /// # Panics
    /// If a step fails (the message names the command); what was created is removed.
    fn create(i: usize) -> Netns {
        let pid = std::process::id();
        let ns = Netns {
            name: format!("dlt{pid}n{i}"),
            host_if: format!("dlt{pid}h{i}"),
            host_ip: format!("10.213.{i}.1"),
        };
        let peer = format!("dlt{pid}p{i}");
        let ns_ip = format!("10.213.{i}.2/30");
        let host_cidr = format!("{}/30", ns.host_ip);
        let n = ns.name.as_str();
        let steps: Vec<(&str, Vec<&str>)> = vec![
            ("ip", vec!["netns", "add", n]),
            (
                "ip",
                vec![
                    "link",
                    "add",
                    &ns.host_if,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &peer,
                ],
            ),
            ("ip", vec!["link", "set", &peer, "netns", n]),
            ("ip", vec!["addr", "add", &host_cidr, "dev", &ns.host_if]),
            ("ip", vec!["link", "set", &ns.host_if, "up"]),
            (
                "ip",
                vec![
                    "netns", "exec", n, "ip", "addr", "add", &ns_ip, "dev", &peer,
                ],
            ),
            (
                "ip",
                vec!["netns", "exec", n, "ip", "link", "set", &peer, "up"],
            ),
            (
                "ip",
                vec!["netns", "exec", n, "ip", "link", "set", "lo", "up"],
            ),
            // iptables works in the namespace (fail now rather than at the first cut).
            (
                "ip",
                vec!["netns", "exec", n, "iptables", "-L", "OUTPUT", "-n"],
            ),
        ];
        for (program, args) in steps {
            if let Err(e) = run_cmd(program, &args) {
                panic!(
                    "partition-netns needs root, iproute2 and iptables (apt-get install -y iproute2 iptables; scripts/test.sh installs them): {e}"
                );
            }
        }
        ns
    }

    /// Drop (`on`) or let through again every TCP packet between the namespace and the
    /// host's `port`, both ways.
    fn cut(&self, port: u16, on: bool) {
        let op = if on { "-I" } else { "-D" };
        let port = port.to_string();
        for (chain, addr, dir) in [("OUTPUT", "-d", "--dport"), ("INPUT", "-s", "--sport")] {
            let args = [
                "netns",
                "exec",
                &self.name,
                "iptables",
                op,
                chain,
                "-p",
                "tcp",
                addr,
                &self.host_ip,
                dir,
                &port,
                "-j",
                "DROP",
            ];
            if let Err(e) = run_cmd("ip", &args) {
                eprintln!("torture: {e}");
            }
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run_cmd("ip", &["netns", "del", &self.name]);
        // Gone with the namespace already, unless the namespace never got its end.
        let _ = run_cmd("ip", &["link", "del", &self.host_if]);
    }
}

/// Compile the wall-clock shifter (`tests/clockshift/clockshift.c`) into `dir`.
///
/// # Panics
/// If `cc` fails (it is the C compiler Rust links with, so it is there wherever this
/// was built).
fn build_clockshift(dir: &Path) -> PathBuf {
    let src = dir.join("clockshift.c");
    let lib = dir.join("libclockshift.so");
    std::fs::write(&src, include_str!("../../clockshift/clockshift.c")).expect("clockshift.c");
    let (src_s, lib_s) = (src.to_string_lossy(), lib.to_string_lossy());
    if let Err(e) = run_cmd("cc", &["-shared", "-fPIC", "-O2", "-o", &lib_s, &src_s]) {
        panic!("the redlock-clock scenarios need a C compiler (cc): {e}");
    }
    lib
}

/// Everything one run owns; dropped (servers, proxies, workers killed) on every way out.
struct Run {
    dir: PathBuf,
    resource: RedisProcess,
    nodes: Vec<RedisProcess>,
    /// The `sentinel` backend's master, replica and sentinels.
    sentinel: Option<PrivateSentinel>,
    /// The `cluster` backend's six nodes.
    cluster: Option<PrivateCluster>,
    /// One per worker in `partition-netns`.
    netns: Vec<Netns>,
    /// Per node of the `redlock-clock` scenarios: the file its wall-clock offset is read
    /// from, and the offset now (seconds).
    clocks: Vec<(PathBuf, u64)>,
    /// `redlock-clock*`: on how many nodes the lock key was when a clock jumped, and how
    /// often (index = nodes).
    held_at_jump: [u32; 6],
    proxies: Vec<Proxy>,
    workers: Vec<Worker>,
    /// The configuration of each worker (one for all, or one per worker when each has
    /// its own proxy or namespace).
    configs: Vec<PathBuf>,
    /// The resource's URL as each configuration's worker reaches it.
    resource_urls: Vec<String>,
    key: String,
    /// The lock kind the workers take.
    kind: &'static LockKindSpec,
    /// How long each section sleeps between its GET and SET.
    hold: Duration,
    done: Interventions,
    duration: Duration,
    spawned: usize,
    /// Each fault's end (when the server answers again, or the holder was killed), with
    /// the bound on the time until the next section starts.
    fault_ends: Vec<(u64, Duration)>,
    /// When the last worker stops taking sections (each runs for the time it was given).
    sections_until: u64,
    /// A fault began and is not over yet (no quiet window meanwhile).
    fault_active: bool,
}

impl Drop for Run {
    fn drop(&mut self) {
        // Stopped workers must be continued to die cleanly? SIGKILL works on them too.
        self.workers.clear();
        self.proxies.clear();
        self.nodes.clear();
        self.sentinel = None;
        self.cluster = None;
        self.netns.clear();
    }
}

/// The last complete line of a history file.
fn last_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.split_inclusive('\n')
        .rfind(|l| l.ends_with('\n'))
        .map(|l| l.trim_end().to_string())
}

/// Wait (at most 1 s) until the kernel shows `pid` stopped (state `T` in /proc).
fn wait_stopped(pid: u32) {
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // "pid (comm) STATE ...": the state follows the last ')'.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next());
        if matches!(state, Some('T' | 't') | None) {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn start_server(
    port: u16,
    persistent: bool,
    extra: &[String],
    env: &[(&str, &str)],
) -> RedisProcess {
    if !port_free(port) {
        eprintln!("torture: port {port} is in use (a previous run left a server?)");
        std::process::exit(2);
    }
    let mut args: Vec<&str> = if persistent {
        vec!["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        Vec::new()
    };
    args.extend(extra.iter().map(String::as_str));
    RedisProcess::start_on_port_env(port, &args, env)
}

impl Run {
    fn start(s: &Scenario, kind: &'static LockKindSpec, dir: &Path, duration: Duration) -> Run {
        let dir = dir.join(format!("{}-{}-{}", s.name, kind.name, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("run dir");
        // "partition-netns": every worker in a namespace of its own; the servers listen on
        // the host ends of the veth pairs too (not only loopback, hence protected-mode off).
        let netns: Vec<Netns> = if s.name == "partition-netns" {
            (0..WORKERS).map(Netns::create).collect()
        } else {
            Vec::new()
        };
        let mut extra: Vec<String> = Vec::new();
        if !netns.is_empty() {
            extra.push("--bind".into());
            extra.push("127.0.0.1".into());
            extra.extend(netns.iter().map(|n| n.host_ip.clone()));
            extra.extend(["--protected-mode".into(), "no".into()]);
        }
        let resource = start_server(RESOURCE_PORT, false, &extra, &[]);
        let n = match s.backend {
            Backend::Single => 1,
            Backend::Redlock => 5,
            Backend::Sentinel | Backend::Cluster => 0,
        };
        // "redlock-clock*": every node's wall clock shifted by the offset in its file.
        let clockshift = s
            .name
            .starts_with("redlock-clock")
            .then(|| build_clockshift(&dir));
        let mut clocks = Vec::new();
        let nodes: Vec<RedisProcess> = (0..n)
            .map(|i| {
                let port = FIRST_NODE_PORT + i as u16;
                match &clockshift {
                    Some(lib) => {
                        let file = dir.join(format!("clock-{port}"));
                        std::fs::write(&file, "0\n").expect("clock file");
                        let (lib, f) = (lib.to_string_lossy(), file.to_string_lossy());
                        let node = start_server(
                            port,
                            s.persistent,
                            &extra,
                            &[("LD_PRELOAD", &lib), ("DISTLOCK_CLOCK_FILE", &f)],
                        );
                        clocks.push((file, 0));
                        node
                    }
                    None => start_server(port, s.persistent, &extra, &[]),
                }
            })
            .collect();
        let sentinel = (s.backend == Backend::Sentinel).then(|| {
            for p in [FIRST_NODE_PORT, FIRST_NODE_PORT + 1]
                .into_iter()
                .chain(SENTINEL_PORTS)
            {
                if !port_free(p) {
                    eprintln!("torture: port {p} is in use (a previous run left a server?)");
                    std::process::exit(2);
                }
            }
            PrivateSentinel::start_on_ports(FIRST_NODE_PORT, FIRST_NODE_PORT + 1, &SENTINEL_PORTS)
        });
        let cluster = (s.backend == Backend::Cluster).then(|| {
            let ports: Vec<u16> = (0..6).map(|i| FIRST_NODE_PORT + i).collect();
            for &p in ports.iter().chain(&CLUSTER_BUS_PORTS) {
                if !port_free(p) {
                    eprintln!("torture: port {p} is in use (a previous run left a server?)");
                    std::process::exit(2);
                }
            }
            PrivateCluster::start_on_ports(&ports, Some(&CLUSTER_BUS_PORTS))
        });
        // "partition": every worker reaches the server through a proxy of its own.
        let per_worker = s.name == "partition";
        let proxies: Vec<Proxy> = if per_worker {
            (0..WORKERS)
                .map(|_| Proxy::start_torture(&nodes[0].addr()))
                .collect()
        } else if s.proxied {
            nodes
                .iter()
                .map(|n| Proxy::start_torture(&n.addr()))
                .collect()
        } else {
            Vec::new()
        };
        let url_sets: Vec<Vec<String>> = if per_worker {
            proxies.iter().map(|p| vec![p.url()]).collect()
        } else if !netns.is_empty() {
            netns
                .iter()
                .map(|ns| vec![format!("redis://{}:{}", ns.host_ip, nodes[0].port())])
                .collect()
        } else if s.proxied {
            vec![proxies.iter().map(Proxy::url).collect()]
        } else if let Some(g) = &sentinel {
            vec![g.sentinel_urls()]
        } else if let Some(c) = &cluster {
            vec![c.urls()]
        } else {
            vec![nodes.iter().map(RedisProcess::url).collect()]
        };
        let resource_urls: Vec<String> = if netns.is_empty() {
            vec![resource.url()]
        } else {
            netns
                .iter()
                .map(|ns| format!("redis://{}:{}", ns.host_ip, resource.port()))
                .collect()
        };
        let configs: Vec<PathBuf> = url_sets
            .iter()
            .enumerate()
            .map(|(i, urls)| {
                let resource_url = &resource_urls[i.min(resource_urls.len() - 1)];
                write_config(
                    s,
                    kind,
                    &dir.join(format!("distlock-{i}.toml")),
                    urls,
                    resource_url,
                )
            })
            .collect();
        let mut run = Run {
            dir,
            resource,
            nodes,
            sentinel,
            cluster,
            netns,
            clocks,
            held_at_jump: [0; 6],
            proxies,
            workers: Vec::new(),
            configs,
            resource_urls,
            key: s.name.to_string(),
            kind,
            // Partitioned holders must still be inside when their lease runs out; so must
            // a holder whose server restarts empty, for the limit to show.
            hold: if per_worker || s.name == "partition-netns" || s.name == "restart-nopersist" {
                WATCHDOG * 2
            } else {
                Duration::from_millis(HOLD_MS)
            },
            done: Interventions::default(),
            duration,
            spawned: 0,
            fault_ends: Vec::new(),
            sections_until: 0,
            fault_active: false,
        };
        for _ in 0..WORKERS {
            run.spawn_worker(duration);
        }
        run
    }
}

/// Write a worker configuration: `main` on `urls`, `resource` on `resource_url`.
fn write_config(
    s: &Scenario,
    kind: &LockKindSpec,
    path: &Path,
    urls: &[String],
    resource_url: &str,
) -> PathBuf {
    let list = |urls: &[String]| {
        urls.iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let timeouts = format!(
        "response_timeout = \"300ms\"\nconnect_timeout = \"300ms\"{}",
        if kind.redisson {
            "\nprotocol = \"redisson\""
        } else {
            ""
        }
    );
    let main = match s.backend {
        Backend::Single => format!("mode = \"single\"\nurl = \"{}\"\n{timeouts}", urls[0]),
        Backend::Redlock => format!(
            "mode = \"redlock\"\nnodes = [{}]\nnode_timeout = \"100ms\"\n{timeouts}",
            list(urls)
        ),
        // "-wait": acquisitions WAIT for the replica, so a crash of the master alone loses
        // no lock granted (renewals are not WAITed: see the README).
        Backend::Sentinel => format!(
            "mode = \"sentinel\"\nmaster_name = \"{}\"\nsentinels = [{}]\n{}{timeouts}",
            PrivateSentinel::MASTER_NAME,
            list(urls),
            if s.name.ends_with("-wait") {
                "sync_replicas = 1\nsync_timeout = \"200ms\"\n"
            } else {
                ""
            }
        ),
        Backend::Cluster => format!("mode = \"cluster\"\nnodes = [{}]\n{timeouts}", list(urls)),
    };
    std::fs::write(
        path,
        format!(
            "[defaults]\nbackend = \"main\"\nwatchdog_timeout = \"{}ms\"\nwait = \"5s\"\nkey_prefix = \"torture:\"\n\n[backends.main]\n{main}\n\n[backends.resource]\nmode = \"single\"\nurl = \"{resource_url}\"\n",
            WATCHDOG.as_millis(),
        ),
    )
    .expect("config");
    path.to_path_buf()
}

impl Run {
    fn spawn_worker(&mut self, duration: Duration) {
        let until = now_ns() + u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.sections_until = self.sections_until.max(until);
        let exe = std::env::current_exe().expect("current_exe");
        let bin = exe.with_file_name("torture-worker");
        let history = self.dir.join(format!("worker-{}.log", self.spawned));
        let idx = self.spawned.min(self.configs.len() - 1);
        let config = &self.configs[idx];
        let resource_url = &self.resource_urls[idx.min(self.resource_urls.len() - 1)];
        self.spawned += 1;
        // In its namespace: `ip netns exec` execs the worker (same pid).
        let mut command = match self.netns.get(idx) {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.name]).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let servers = self.backend_servers(self.netns.get(idx)).join(",");
        let child = command
            .env("TORTURE_NODES", servers)
            .arg(config)
            .arg(&self.key)
            .arg(resource_url)
            .arg(&history)
            .arg(duration.as_millis().to_string())
            .arg(self.hold.as_millis().to_string())
            .arg("100000")
            .arg(self.kind.name)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(history.with_extension("err")).expect("stderr file"),
            ))
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {}: {e} (build it: cargo build -p distlock-tests --bins)",
                    bin.display()
                )
            });
        self.workers.push(Worker {
            child,
            history,
            dead: false,
        });
    }

    /// The worker inside a critical section now (its history's last event is not a
    /// release), if any.
    fn holder(&self) -> Option<usize> {
        self.workers.iter().position(|w| {
            !w.dead
                && last_line(&w.history).is_some_and(|l| !l.starts_with('R') && !l.starts_with('E'))
        })
    }

    /// Wait (bounded) for a holder; `None` if nobody got in within 3 s.
    fn wait_holder(&self) -> Option<usize> {
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            if let Some(i) = self.holder() {
                return Some(i);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Worker `i`'s section, while it is asleep in its hold (its acquire recorded, no
    /// write yet, and at least [`HOLD_LEFT`] of the hold left): how long ago it acquired.
    fn asleep_in_hold(&self, i: usize) -> Option<Duration> {
        let line = last_line(&self.workers[i].history)?;
        let mut fields = line.split_whitespace();
        if fields.next()? != "A" {
            return None;
        }
        let at: u64 = fields.nth(1)?.parse().ok()?;
        let ago = Duration::from_nanos(now_ns().saturating_sub(at));
        (ago + HOLD_LEFT <= Duration::from_millis(HOLD_MS)).then_some(ago)
    }

    /// Stop worker `i` for `d` while it is asleep in its hold ([`Run::asleep_in_hold`]).
    /// If, once stopped, it is anywhere else (between sections: it may have acquired again
    /// without recording it yet; or at its hold's end, where the stop could land between
    /// its last look at `lost()` and its write, which no library can tell it of), it is
    /// continued at once and tried again, so a recorded instant is never delayed by a
    /// pause. Every stop is recorded.
    fn pause(&mut self, i: usize, d: Duration) {
        let pid = self.workers[i].child.id();
        // About 0.4 s of tries: the worker's next section comes within it.
        for _ in 0..100 {
            signal(pid, libc::SIGSTOP);
            let from = now_ns();
            wait_stopped(pid);
            let inside = self.asleep_in_hold(i).is_some();
            if inside {
                std::thread::sleep(d);
            }
            let until = now_ns();
            signal(pid, libc::SIGCONT);
            self.done.paused.entry(pid).or_default().push((from, until));
            if inside {
                return;
            }
            std::thread::sleep(Duration::from_millis(3));
        }
    }

    fn kill_worker(&mut self, i: usize) {
        let w = &mut self.workers[i];
        if w.dead {
            return;
        }
        let pid = w.child.id();
        let t = now_ns();
        let _ = w.child.kill();
        let _ = w.child.wait();
        w.dead = true;
        self.done.killed.entry(pid).or_insert(t);
    }

    /// A fault ended now: the next section must start within `extra` (a killed holder's
    /// lease; zero for the others) + one section's hold + [`RECOVERY`].
    fn fault_over(&mut self, extra: Duration) {
        self.fault_active = false;
        let bound = extra + self.hold + RECOVERY;
        self.fault_ends.push((now_ns(), bound));
        // Still "a fault" for the workers' free checks until its recovery bound has passed.
        let ms = bound.as_millis().to_string();
        let _ = resp_command(
            &self.resource.addr(),
            &["SET", &self.fault_key(), "1", "PX", &ms],
        );
        self.log(&format!("fault over; the next section within {bound:?}"));
    }

    /// The resource's key that says a fault is active (the workers' free checks wait).
    fn fault_key(&self) -> String {
        format!("torture:{}:fault", self.key)
    }

    /// A fault begins (or may, this round): the workers' free checks wait until it is over.
    fn fault_begins(&mut self) {
        self.fault_active = true;
        let _ = resp_command(&self.resource.addr(), &["SET", &self.fault_key(), "1"]);
    }

    /// Every server of the backend as `host:port`, as a worker of namespace `ns` reaches
    /// it: for the workers' free checks.
    fn backend_servers(&self, ns: Option<&Netns>) -> Vec<String> {
        let host = ns.map_or("127.0.0.1", |n| n.host_ip.as_str());
        let mut ports: Vec<u16> = self.nodes.iter().map(RedisProcess::port).collect();
        if let Some(g) = &self.sentinel {
            ports.extend([g.master.port(), g.replica.port()]);
        }
        if let Some(c) = &self.cluster {
            ports.extend(c.nodes.iter().map(RedisProcess::port));
        }
        ports.iter().map(|p| format!("{host}:{p}")).collect()
    }

    /// A quiet window for a "free means available" check, while no fault is active: before
    /// the first fault or once the last fault's recovery bound has passed (waiting for it at most 1 s; else none this round): for
    /// [`QUIET`], one live worker (by turns) checks while the others take no new
    /// section (`torture-worker`).
    fn quiet_window(&mut self, round: u32, deadline: Instant) {
        // Not while a fault lasts (the latency rounds keep one from round to round).
        if self.fault_active {
            return;
        }
        // Before the first fault: at once.
        let over = self.fault_ends.last().map_or(0, |&(at, bound)| {
            at + u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX)
        });
        let wait = Duration::from_nanos(over.saturating_sub(now_ns()));
        if wait > Duration::from_secs(1) || Instant::now() + wait + QUIET >= deadline {
            return;
        }
        std::thread::sleep(wait);
        let live: Vec<u32> = self
            .workers
            .iter()
            .filter(|w| !w.dead)
            .map(|w| w.child.id())
            .collect();
        if live.is_empty() {
            return;
        }
        let pid = live[round as usize % live.len()];
        let ms = QUIET.as_millis().to_string();
        let key = format!("torture:{}:quiet", self.key);
        let _ = resp_command(
            &self.resource.addr(),
            &["SET", &key, &pid.to_string(), "PX", &ms],
        );
        self.log(&format!("quiet window: worker {pid} checks"));
        std::thread::sleep(QUIET);
    }

    /// Whether any worker has started a section yet.
    fn progressed(&self) -> bool {
        self.workers.iter().any(|w| {
            std::fs::read_to_string(&w.history).is_ok_and(|t| t.lines().any(|l| l.starts_with('A')))
        })
    }

    /// Wait for the workers to finish (bounded), then check.
    fn finish(mut self, started: Instant) -> (Report, Interventions, Option<String>, Liveness) {
        let until = Instant::now() + Duration::from_secs(20);
        for w in &mut self.workers {
            loop {
                match w.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() >= until => {
                        let pid = w.child.id();
                        let t = now_ns();
                        let _ = w.child.kill();
                        let _ = w.child.wait();
                        self.done.killed.entry(pid).or_insert(t);
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        // No section starts once the workers' time is up: a fault that ended less than its
        // bound before that is not judged (the driver's last fault may end up to 500 ms
        // before the deadline).
        let end = now_ns().min(self.sections_until);
        let _ = started;
        let mut sections: Vec<Section> = Vec::new();
        let mut errors: HashMap<String, u64> = HashMap::new();
        for w in &self.workers {
            let text = std::fs::read_to_string(&w.history).unwrap_or_default();
            let (s, e) = history::parse(w.child.id(), &text);
            sections.extend(s);
            for (k, v) in e {
                *errors.entry(k).or_insert(0) += v;
            }
        }
        let mut free = FreeChecks::default();
        for w in &self.workers {
            let text =
                std::fs::read_to_string(w.history.with_extension("free")).unwrap_or_default();
            for line in text.lines() {
                match line.split_whitespace().next() {
                    Some("ok") => free.ok += 1,
                    Some("raced") => free.raced += 1,
                    Some("refused") => free.refused.push(format!("pid {}: {line}", w.child.id())),
                    _ => {}
                }
            }
        }
        let mut starts: Vec<u64> = sections.iter().map(|s| s.acquired).collect();
        starts.sort_unstable();
        let mut liveness = Liveness::judge(&starts, &self.fault_ends, end);
        liveness.failures.extend(
            free.refused
                .iter()
                .map(|r| format!("a free lock was refused: {r}")),
        );
        liveness.free = free;
        let counter = resp_command(
            &self.resource.addr(),
            &["GET", &format!("torture:{}:counter", self.key)],
        )
        .ok()
        .and_then(|v| v.as_str().and_then(|s| s.parse::<u64>().ok()))
        .unwrap_or(0);
        // The fenced balance (`distlock::fence` on the `resource` backend, prefix `torture:`).
        let balance = resp_command(
            &self.resource.addr(),
            &[
                "HGET",
                &format!("torture:{{torture:{}:fenced}}:fenced", self.key),
                "v",
            ],
        )
        .ok()
        .and_then(|v| v.as_str().and_then(|s| s.parse::<u64>().ok()))
        .unwrap_or(0);
        let lost_fenced = history::fenced_lost_updates(&sections, balance);
        let _ = self.duration;
        let jumps: Vec<String> = (0..=5)
            .rev()
            .filter(|&h| self.held_at_jump[h] > 0)
            .map(|h| format!("{h} of 5: {}×", self.held_at_jump[h]))
            .collect();
        let note = (!jumps.is_empty())
            .then(|| format!("the lock was on {} when a clock jumped", jumps.join(", ")));
        let mut report = history::check(
            self.kind.exclusion,
            sections,
            errors,
            &self.done,
            end,
            counter,
        );
        report.lost_updates_fenced = lost_fenced;
        (report, self.done.clone(), note, liveness)
    }
}

/// The workers' "free means available" checks (`torture-worker`): a try_acquire when no
/// server held a key of the lock and no fault was active.
#[derive(Debug, Default)]
struct FreeChecks {
    /// It succeeded.
    ok: u64,
    /// Refused, and another worker held the lock by then (not a verdict).
    raced: u64,
    /// Refused while the lock stayed free: each is a failure.
    refused: Vec<String>,
}

/// The run's liveness: sections at all, and after each fault the time until the next
/// section started (its recovery) against that fault's bound.
#[derive(Debug, Default)]
struct Liveness {
    /// The workers' "free means available" checks.
    free: FreeChecks,
    /// Per fault judged: its recovery and its bound.
    recoveries: Vec<(Duration, Duration)>,
    /// What failed: no section at all, a recovery past its bound, no section after a fault.
    failures: Vec<String>,
}

impl Liveness {
    /// `starts`: every section's start, sorted; `faults`: each fault's end and bound;
    /// `end`: when the run ended (a fault that ended less than its bound before it, with
    /// no section after it, is not judged).
    fn judge(starts: &[u64], faults: &[(u64, Duration)], end: u64) -> Liveness {
        let mut l = Liveness::default();
        if starts.is_empty() {
            l.failures
                .push("no progress: not one section in the whole run".into());
            return l;
        }
        for &(at, bound) in faults {
            let next = starts.get(starts.partition_point(|&s| s < at)).copied();
            let ms = |ns: u64| ns as f64 / 1e6;
            match next {
                Some(t) => {
                    let r = Duration::from_nanos(t - at);
                    l.recoveries.push((r, bound));
                    if r > bound {
                        l.failures.push(format!(
                            "recovery {:.0} ms after the fault that ended at {:.1} ms (bound {} ms)",
                            r.as_secs_f64() * 1e3,
                            ms(at),
                            bound.as_millis()
                        ));
                    }
                }
                None if Duration::from_nanos(end.saturating_sub(at)) > bound => {
                    l.failures.push(format!(
                        "no section in the {:.0} ms after the fault that ended at {:.1} ms (bound {} ms)",
                        ms(end - at),
                        ms(at),
                        bound.as_millis()
                    ));
                }
                None => {}
            }
        }
        l
    }

    fn failed(&self) -> bool {
        !self.failures.is_empty()
    }

    /// The worst recovery, in ms ("-": no fault judged).
    fn worst(&self) -> String {
        self.recoveries
            .iter()
            .map(|(r, _)| *r)
            .max()
            .map_or_else(|| "-".into(), |r| format!("{}", r.as_millis()))
    }
}

impl Run {
    /// Note a fault step in the run's `driver.log` (kept with the histories), stamped on
    /// the same clock as the histories.
    fn log(&self, what: &str) {
        use std::io::Write as _;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("driver.log"))
        {
            let _ = writeln!(f, "{} {what}", now_ns());
        }
    }
}

/// Poll `f` every 20 ms until it holds or `limit` has passed; whether it held.
fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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

impl Run {
    /// One round on the sentinel group: `SENTINEL FAILOVER`, or (`kill`) the master
    /// SIGKILLed, the sentinels' promotion awaited, the old master restarted (empty; the
    /// sentinels turn it into a replica). Then until the new master's replica is online
    /// again (at most 15 s, and not past `deadline`). Returns whether it is: the fault is
    /// over only then.
    fn sentinel_round(&mut self, kill: bool, deadline: Instant) -> bool {
        let Some(master) = self
            .sentinel
            .as_ref()
            .and_then(PrivateSentinel::master_addr)
        else {
            // No fault was made: nothing to recover from.
            return true;
        };
        self.log(&format!(
            "sentinel: {} master {master}",
            if kill {
                "SIGKILL"
            } else {
                "SENTINEL FAILOVER from"
            }
        ));
        let g = self.sentinel.as_mut().expect("sentinel backend");
        if kill {
            let first = if g.master.addr() == master {
                true
            } else if g.replica.addr() == master {
                false
            } else {
                // No fault was made: nothing to recover from.
                return true;
            };
            if first {
                g.master.kill();
            } else {
                g.replica.kill();
            }
            wait_for(Duration::from_secs(15), || {
                g.master_addr().is_some_and(|m| m != master)
            });
            if first {
                g.master.restart();
            } else {
                g.replica.restart();
            }
        } else {
            for sentinel in &g.sentinels {
                let r = resp_command(
                    &sentinel.addr(),
                    &["SENTINEL", "FAILOVER", PrivateSentinel::MASTER_NAME],
                );
                if r.is_ok_and(|v| v.is_ok()) {
                    break;
                }
            }
            wait_for(Duration::from_secs(10), || {
                g.master_addr().is_some_and(|m| m != master)
            });
        }
        let new = g.master_addr();
        self.log(&format!("sentinel: master now {new:?}"));
        let g = self.sentinel.as_mut().expect("sentinel backend");
        let limit = deadline.saturating_duration_since(Instant::now());
        let healthy = wait_for(limit.min(Duration::from_secs(15)), || {
            g.master_addr()
                .is_some_and(|m| topology::replica_online(&m))
        });
        self.log(&format!("sentinel: replica online again: {healthy}"));
        healthy
    }

    /// One round on the cluster: the master of the lock's slot (the one master holding
    /// keys: the lock and its fencing counter share a slot) is replaced by its replica,
    /// with `CLUSTER FAILOVER` sent to the replica, or (`kill`) by SIGKILLing the master
    /// and restarting it (empty; it rejoins as a replica). Then until the new master's
    /// replica is online again (at most 15 s, and not past `deadline`). Returns whether it
    /// is: the fault is over only then.
    fn cluster_round(&mut self, kill: bool, deadline: Instant) -> bool {
        let c = self.cluster.as_mut().expect("cluster backend");
        let addrs: Vec<String> = c.nodes.iter().map(RedisProcess::addr).collect();
        let dbsize = |a: &str| {
            resp_command(a, &["DBSIZE"])
                .ok()
                .and_then(|v| v.as_int())
                .unwrap_or(0)
        };
        let Some(master) = addrs
            .iter()
            .find(|a| topology::role(a).as_deref() == Some("master") && dbsize(a) > 0)
            .cloned()
        else {
            // No fault was made: nothing to recover from.
            return true;
        };
        let Some(replica) = first_replica(&master) else {
            // No fault was made: nothing to recover from.
            return true;
        };
        self.log(&format!(
            "cluster: {} (master {master}, replica {replica})",
            if kill {
                "SIGKILL master"
            } else {
                "CLUSTER FAILOVER"
            }
        ));
        let c = self.cluster.as_mut().expect("cluster backend");
        let promoted = || topology::role(&replica).as_deref() == Some("master");
        if kill {
            let Some(i) = c.index_of(&master) else {
                // No fault was made: nothing to recover from.
                return true;
            };
            c.nodes[i].kill();
            wait_for(Duration::from_secs(15), promoted);
            c.nodes[i].restart();
        } else {
            let _ = resp_command(&replica, &["CLUSTER", "FAILOVER"]);
            wait_for(Duration::from_secs(10), promoted);
        }
        let limit = deadline.saturating_duration_since(Instant::now());
        let healthy = wait_for(limit.min(Duration::from_secs(15)), || {
            topology::replica_online(&replica)
        });
        self.log(&format!(
            "cluster: {replica} master with its replica online: {healthy}"
        ));
        healthy
    }

    /// Move the wall clocks of `k` distinct random nodes `CLOCK_STEP_SECS` forward.
    fn jump_clocks(&mut self, k: usize, rand: &mut impl FnMut(usize) -> usize) {
        let n = self.clocks.len();
        let mut picked: Vec<usize> = Vec::new();
        while picked.len() < k.min(n) {
            let i = rand(n);
            if !picked.contains(&i) {
                picked.push(i);
            }
        }
        let lock = format!("torture:{{{}}}", self.key);
        let held = self
            .nodes
            .iter()
            .filter(|n| {
                resp_command(&n.addr(), &["EXISTS", &lock]).is_ok_and(|v| v.as_int() == Some(1))
            })
            .count();
        self.held_at_jump[held.min(5)] += 1;
        self.log(&format!(
            "clock: nodes {picked:?} jump {CLOCK_STEP_SECS} s forward; the lock is on {held} of 5"
        ));
        for i in picked {
            let (file, offset) = &mut self.clocks[i];
            *offset += CLOCK_STEP_SECS;
            let tmp = file.with_extension("tmp");
            std::fs::write(&tmp, format!("{offset}\n")).expect("clock file");
            std::fs::rename(&tmp, &*file).expect("clock file");
        }
    }
}

/// The fault loop of a scenario, until `deadline`. Bounded: every step sleeps, and the
/// loop ends at the deadline.
fn inject(s: &Scenario, run: &mut Run, deadline: Instant, rounds: &mut u32) {
    let mut rng_state = now_ns();
    let mut rand = move |n: usize| {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        (rng_state % n as u64) as usize
    };
    // Let the workers get going: no fault before the first section (a worker still
    // starting up would meet the first fault in its connect), within a bound.
    let first = Instant::now() + FIRST_SECTION_WITHIN;
    while !run.progressed() && Instant::now() < first.min(deadline) {
        std::thread::sleep(Duration::from_millis(20));
    }
    run.log(&format!("first section: {}", run.progressed()));
    std::thread::sleep(Duration::from_millis(200));
    run.quiet_window(0, deadline);
    while Instant::now() + Duration::from_millis(500) < deadline {
        *rounds += 1;
        run.fault_begins();
        match s.name {
            "pause" => {
                if let Some(i) = run.wait_holder() {
                    // Into its section (its GET done, asleep before the SET), if it has
                    // just acquired; `pause` waits for its next section otherwise.
                    if run
                        .asleep_in_hold(i)
                        .is_some_and(|ago| ago < Duration::from_millis(20))
                    {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    run.pause(i, WATCHDOG * 5 / 2);
                    run.fault_over(Duration::ZERO);
                }
                std::thread::sleep(Duration::from_millis(800));
            }
            "kill" => {
                if let Some(i) = run.wait_holder() {
                    run.kill_worker(i);
                    // Its lease must run out first.
                    run.fault_over(WATCHDOG);
                    let left = deadline.saturating_duration_since(Instant::now());
                    run.spawn_worker(left);
                }
                std::thread::sleep(Duration::from_millis(1500));
            }
            "restart" | "restart-nopersist" => {
                run.wait_holder();
                run.nodes[0].kill();
                std::thread::sleep(Duration::from_millis(300));
                run.nodes[0].restart();
                run.fault_over(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(2500));
            }
            "latency" => {
                const STEPS: [u64; 3] = [0, 150, 700];
                let ms = STEPS[*rounds as usize % 3];
                run.proxies[0].set_latency(Duration::from_millis(ms));
                if ms == 0 && *rounds > 1 {
                    // What the proxy queued under the last latency is still delivered at
                    // its due time: a request sent just before, and its reply, take up
                    // to twice that latency; the fault ends when they have drained.
                    run.fault_over(Duration::from_millis(2 * STEPS[2]));
                }
                std::thread::sleep(Duration::from_millis(2000));
            }
            "blackhole" => {
                run.proxies[0].set_blackhole(true);
                std::thread::sleep(Duration::from_millis(1500));
                run.proxies[0].set_blackhole(false);
                run.fault_over(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(1500));
            }
            "reset" => {
                for _ in 0..10 {
                    run.proxies[0].reset_after_replies(1);
                    std::thread::sleep(Duration::from_millis(150));
                }
                run.proxies[0].reset_all();
                run.fault_over(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(300));
            }
            "partition" => {
                if let Some(i) = run.wait_holder() {
                    run.proxies[i].set_blackhole(true);
                    std::thread::sleep(WATCHDOG * 5 / 2);
                    run.proxies[i].set_blackhole(false);
                    run.fault_over(Duration::ZERO);
                }
                std::thread::sleep(Duration::from_millis(800));
            }
            "redlock-minority" => {
                let a = rand(5);
                let b = (a + 1 + rand(4)) % 5;
                run.nodes[a].kill();
                run.nodes[b].kill();
                std::thread::sleep(Duration::from_millis(1000));
                run.nodes[a].restart();
                run.nodes[b].restart();
                run.fault_over(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(1500));
            }
            "redlock-blackhole" => {
                let a = rand(5);
                let b = (a + 1 + rand(4)) % 5;
                run.proxies[a].set_blackhole(true);
                run.proxies[b].set_blackhole(true);
                std::thread::sleep(Duration::from_millis(1500));
                run.proxies[a].set_blackhole(false);
                run.proxies[b].set_blackhole(false);
                run.fault_over(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(1500));
            }
            "partition-netns" => {
                if let Some(i) = run.wait_holder() {
                    let port = run.nodes[0].port();
                    run.netns[i].cut(port, true);
                    std::thread::sleep(WATCHDOG * 5 / 2);
                    run.netns[i].cut(port, false);
                    run.fault_over(Duration::ZERO);
                }
                std::thread::sleep(Duration::from_millis(800));
            }
            "redlock-clock" | "redlock-clock-2" => {
                run.wait_holder();
                let k = if s.name == "redlock-clock" { 1 } else { 2 };
                run.jump_clocks(k, &mut rand);
                run.fault_over(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(1500));
            }
            "sentinel-failover" | "sentinel-failover-wait" => {
                run.wait_holder();
                // SIGKILL first: the sentinels notice a returning old master within a
                // second; after SENTINEL FAILOVER they take up to 10 s (their INFO period).
                // Not healthy again before the deadline: the fault lasts to the run's end
                // (with `sync_replicas`, acquisitions are refused until the replica is back).
                if run.sentinel_round(*rounds % 2 == 1, deadline) {
                    run.fault_over(Duration::ZERO);
                }
                std::thread::sleep(Duration::from_millis(1000));
            }
            "cluster-failover" | "cluster-kill" => {
                run.wait_holder();
                if run.cluster_round(s.name == "cluster-kill", deadline) {
                    run.fault_over(Duration::ZERO);
                }
                std::thread::sleep(Duration::from_millis(1000));
            }
            other => unreachable!("scenario {other}"),
        }
        run.quiet_window(*rounds, deadline);
    }
    for p in &run.proxies {
        p.clear();
    }
}

fn main() {
    let mut quick = true;
    let mut dir = std::env::temp_dir().join("distlock-torture");
    let mut names: Vec<String> = Vec::new();
    let mut keep = false;
    let mut kinds: Vec<&'static LockKindSpec> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--long" => quick = false,
            "--keep" => keep = true,
            "--kind" => {
                let n = args.next().unwrap_or_else(|| usage());
                kinds.push(history::kind(&n).unwrap_or_else(|| {
                    eprintln!("torture: unknown kind {n}");
                    usage()
                }));
            }
            "--dir" => dir = PathBuf::from(args.next().unwrap_or_else(|| usage())),
            "-h" | "--help" => usage(),
            s if s.starts_with('-') => usage(),
            s => names.push(s.to_string()),
        }
    }
    let chosen: Vec<&Scenario> = if names.is_empty() {
        SCENARIOS
            .iter()
            .filter(|s| !quick || s.quick.is_some())
            .collect()
    } else {
        names
            .iter()
            .map(|n| {
                SCENARIOS.iter().find(|s| s.name == n).unwrap_or_else(|| {
                    eprintln!("torture: unknown scenario {n}");
                    usage()
                })
            })
            .collect()
    };
    let duration_of = |s: &Scenario, k: &LockKindSpec| {
        Duration::from_secs(match (quick, s.quick) {
            (true, _) if k.name != history::KINDS[0].name => KIND_SECS_QUICK,
            (true, Some(secs)) => secs,
            (true, None) => 12,
            (false, _) => 60,
        })
    };
    // Scenario × kind: the chosen kinds, else reentrant everywhere and the others where
    // the mode (`--quick`: a few scenarios; redlock offers no leader) lets them run.
    let runs: Vec<(&Scenario, &'static LockKindSpec)> = chosen
        .iter()
        .flat_map(|&s| {
            let picked: Vec<&'static LockKindSpec> = if !kinds.is_empty() {
                kinds.clone()
            } else if s.backend == Backend::Redlock
                || (quick && !KIND_SCENARIOS_QUICK.contains(&s.name))
            {
                vec![&history::KINDS[0]]
            } else {
                history::KINDS.iter().collect()
            };
            picked.into_iter().map(move |k| (s, k))
        })
        .collect();
    std::fs::create_dir_all(&dir).expect("torture dir");
    println!(
        "distlock torture ({}), {WORKERS} worker processes, watchdog_timeout {:?}, hold {HOLD_MS} ms, {}",
        if quick { "--quick" } else { "--long" },
        WATCHDOG,
        if quick {
            format!("8-12 s per scenario (other lock kinds than reentrant: {KIND_SECS_QUICK} s)")
        } else {
            "60 s per scenario and kind".to_string()
        }
    );
    println!(
        "{:<22} {:<12} {:<11} {:>8} {:>12} {:>10} {:>11} {:>11} {:>10} {:>9} {:>7} {:>6}  faults / notes",
        "scenario",
        "backend",
        "kind",
        "sections",
        "unsignalled",
        "signalled",
        "stale-acc.",
        "stale-ref.",
        "lost-upd.",
        "lost-fen.",
        "tok-reg",
        "time",
    );
    let mut failed = false;
    // A scenario without progress, or a recovery past its bound.
    let mut stalled = false;
    // Per kind: sections, unsignalled overlaps, signalled overlaps (failing runs aside:
    // documented limits).
    let mut totals: Vec<(&str, u64, u64, u64)> = Vec::new();
    for (s, kind) in runs {
        let started = Instant::now();
        let duration = duration_of(s, kind);
        let mut run = Run::start(s, kind, &dir, duration);
        let deadline = started + duration;
        let mut rounds = 0;
        inject(s, &mut run, deadline, &mut rounds);
        let run_dir = run.dir.clone();
        let (r, done_debug, run_note, live) = run.finish(started);
        // Liveness and the fenced balance hold on every scenario, documented limits too.
        let bad = (r.failed() && !s.limit) || r.fencing_broken() || live.failed();
        failed |= bad;
        stalled |= live.failed();
        let mut notes = format!("{rounds}× {}", s.what);
        notes.push_str(&format!(
            "; free locks tried: {} taken, {} raced, {} refused",
            live.free.ok,
            live.free.raced,
            live.free.refused.len()
        ));
        if !live.recoveries.is_empty() {
            let bound = live
                .recoveries
                .iter()
                .map(|(_, b)| *b)
                .max()
                .unwrap_or_default();
            notes.push_str(&format!(
                "; {} recoveries, worst {} ms (bound {} ms)",
                live.recoveries.len(),
                live.worst(),
                bound.as_millis()
            ));
        }
        if let Some(lead) = r.min_signal_lead_ns {
            notes.push_str(&format!(
                "; lost() came >= {:.0} ms before the next acquire",
                lead as f64 / 1e6
            ));
        }
        if r.shared_overlaps > 0 {
            notes.push_str(&format!(
                "; readers shared {}× (allowed)",
                r.shared_overlaps
            ));
        }
        if let Some(n) = run_note {
            notes.push_str(&format!("; {n}"));
        }
        if !r.acquire_errors.is_empty() {
            let errs: Vec<String> = r
                .acquire_errors
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            notes.push_str(&format!("; acquire errors {}", errs.join(",")));
        }
        if r.failed() && s.limit && !bad {
            notes.push_str("; EXPECTED (documented limit)");
        }
        if !s.limit {
            match totals.iter_mut().find(|t| t.0 == kind.name) {
                Some(t) => {
                    t.1 += r.sections;
                    t.2 += r.unsignalled_overlaps;
                    t.3 += r.signalled_overlaps;
                }
                None => totals.push((
                    kind.name,
                    r.sections,
                    r.unsignalled_overlaps,
                    r.signalled_overlaps,
                )),
            }
        }
        println!(
            "{:<22} {:<12} {:<11} {:>8} {:>12} {:>10} {:>11} {:>11} {:>10} {:>9} {:>7} {:>5.0}s  {}{}",
            s.name,
            s.backend.name(),
            kind.name,
            r.sections,
            r.unsignalled_overlaps,
            r.signalled_overlaps,
            r.stale_writes_accepted,
            r.stale_writes_refused,
            r.lost_updates_unfenced,
            r.lost_updates_fenced,
            r.token_regressions,
            started.elapsed().as_secs_f64(),
            if bad { "FAIL: " } else { "" },
            notes
        );
        for d in r.details.iter().chain(&live.failures) {
            println!("    {d}");
        }
        if bad {
            println!("    interventions: {:?}", done_debug);
        }
        if !bad && !keep {
            let _ = std::fs::remove_dir_all(&run_dir);
        } else {
            println!("    histories kept in {}", run_dir.display());
        }
    }
    println!(
        "per kind (documented-limit scenarios aside): sections / unsignalled / signalled overlaps"
    );
    for (name, sections, unsignalled, signalled) in &totals {
        println!("  {name:<11} {sections:>8} {unsignalled:>12} {signalled:>10}");
    }
    if failed {
        println!(
            "torture: FAILED ({})",
            if stalled {
                "no progress, a recovery past its bound or a free lock refused; or an unsafe overlap, write or lost update"
            } else {
                "unsignalled overlap, accepted stale write or lost update on the fenced balance"
            }
        );
        std::process::exit(1);
    }
    println!("torture: ok (0 unsignalled overlaps, 0 accepted stale writes, 0 lost updates on the fenced balance, progress in every scenario, every recovery within its bound, no free lock refused)");
}
