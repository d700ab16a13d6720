//! The torture run: real faults against real servers, several worker processes taking one
//! lock, and the history checker (`distlock_tests::history`) on what they recorded.
//!
//! `torture [--quick|--long] [--dir DIR] [SCENARIO...]` (usually through
//! `scripts/torture.sh`). Prints one table row per scenario × backend, and exits 1 when
//! any run had an unsignalled overlap or an accepted stale write (2 on a usage or set-up
//! error).
//!
//! Every server listens on 127.0.0.1 in 17300..17319 (the resource 17300, the backend's
//! servers from 17301), proxies in 17320..17339. Servers and workers are child processes
//! killed when their owner is dropped; workers also die with this process
//! (`PR_SET_PDEATHSIG`), and `scripts/torture.sh` kills this process's group on exit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use distlock_tests::history::{self, now_ns, Interventions, Report, Section};
use distlock_tests::proxy::Proxy;
use distlock_tests::{resp_command, RedisProcess};

const RESOURCE_PORT: u16 = 17300;
const FIRST_NODE_PORT: u16 = 17301;
const WATCHDOG: Duration = Duration::from_secs(1);
const HOLD_MS: u64 = 60;
const WORKERS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Single,
    Redlock,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Single => "single",
            Backend::Redlock => "redlock(5)",
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
    what: &'static str,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "pause",
        backend: Backend::Single,
        proxied: false,
        persistent: false,
        limit: false,
        what: "holder SIGSTOPped for 2.5 leases, then SIGCONT",
    },
    Scenario {
        name: "kill",
        backend: Backend::Single,
        proxied: false,
        persistent: false,
        limit: false,
        what: "holder SIGKILLed (a new worker takes its place)",
    },
    Scenario {
        name: "restart",
        backend: Backend::Single,
        proxied: false,
        persistent: true,
        limit: false,
        what: "redis-server SIGKILLed and restarted (AOF appendfsync always)",
    },
    Scenario {
        name: "latency",
        backend: Backend::Single,
        proxied: true,
        persistent: false,
        limit: false,
        what: "proxy latency 0 / 150 ms / 700 ms each way",
    },
    Scenario {
        name: "blackhole",
        backend: Backend::Single,
        proxied: true,
        persistent: false,
        limit: false,
        what: "proxy blackhole for 1.5 s at a time",
    },
    Scenario {
        name: "reset",
        backend: Backend::Single,
        proxied: true,
        persistent: false,
        limit: false,
        what: "proxy resets connections, also right after a reply",
    },
    Scenario {
        name: "partition",
        backend: Backend::Single,
        proxied: true,
        persistent: false,
        limit: false,
        what: "the holder alone cut off from Redis (its own proxy blackholed) for 2.5 leases",
    },
    Scenario {
        name: "redlock-minority",
        backend: Backend::Redlock,
        proxied: false,
        persistent: true,
        limit: false,
        what: "2 of 5 masters SIGKILLed, restarted (AOF) 1 s later",
    },
    Scenario {
        name: "redlock-blackhole",
        backend: Backend::Redlock,
        proxied: true,
        persistent: false,
        limit: false,
        what: "2 of 5 masters blackholed through the proxy",
    },
    Scenario {
        name: "restart-nopersist",
        backend: Backend::Single,
        proxied: false,
        persistent: false,
        limit: true,
        what: "redis-server SIGKILLed, restarted EMPTY (no persistence): documented limit",
    },
];

fn usage() -> ! {
    eprintln!(
        "usage: torture [--quick|--long] [--keep] [--dir DIR] [SCENARIO...]\nscenarios: {}",
        SCENARIOS
            .iter()
            .map(|s| s.name)
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

/// Everything one run owns; dropped (servers, proxies, workers killed) on every way out.
struct Run {
    dir: PathBuf,
    resource: RedisProcess,
    nodes: Vec<RedisProcess>,
    proxies: Vec<Proxy>,
    workers: Vec<Worker>,
    /// The configuration of each worker (one for all, or one per worker when each has
    /// its own proxy).
    configs: Vec<PathBuf>,
    key: String,
    /// How long each section sleeps between its GET and SET.
    hold: Duration,
    done: Interventions,
    duration: Duration,
    spawned: usize,
}

impl Drop for Run {
    fn drop(&mut self) {
        // Stopped workers must be continued to die cleanly? SIGKILL works on them too.
        self.workers.clear();
        self.proxies.clear();
        self.nodes.clear();
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

fn start_server(port: u16, persistent: bool) -> RedisProcess {
    if !port_free(port) {
        eprintln!("torture: port {port} is in use (a previous run left a server?)");
        std::process::exit(2);
    }
    let args: &[&str] = if persistent {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &[]
    };
    RedisProcess::start_on_port(port, args)
}

impl Run {
    fn start(s: &Scenario, dir: &Path, duration: Duration) -> Run {
        let dir = dir.join(format!("{}-{}", s.name, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("run dir");
        let resource = start_server(RESOURCE_PORT, false);
        let n = match s.backend {
            Backend::Single => 1,
            Backend::Redlock => 5,
        };
        let nodes: Vec<RedisProcess> = (0..n)
            .map(|i| start_server(FIRST_NODE_PORT + i as u16, s.persistent))
            .collect();
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
        } else if s.proxied {
            vec![proxies.iter().map(Proxy::url).collect()]
        } else {
            vec![nodes.iter().map(RedisProcess::url).collect()]
        };
        let configs: Vec<PathBuf> = url_sets
            .iter()
            .enumerate()
            .map(|(i, urls)| {
                write_config(s, &dir.join(format!("distlock-{i}.toml")), urls, &resource)
            })
            .collect();
        let mut run = Run {
            dir,
            resource,
            nodes,
            proxies,
            workers: Vec::new(),
            configs,
            key: s.name.to_string(),
            // Partitioned holders must still be inside when their lease runs out; so must
            // a holder whose server restarts empty, for the limit to show.
            hold: if per_worker || s.name == "restart-nopersist" {
                WATCHDOG * 2
            } else {
                Duration::from_millis(HOLD_MS)
            },
            done: Interventions::default(),
            duration,
            spawned: 0,
        };
        for _ in 0..WORKERS {
            run.spawn_worker(duration);
        }
        run
    }
}

/// Write a worker configuration: `main` on `urls`, `resource` on the resource server.
fn write_config(s: &Scenario, path: &Path, urls: &[String], resource: &RedisProcess) -> PathBuf {
    let main = match s.backend {
        Backend::Single => format!(
            "mode = \"single\"\nurl = \"{}\"\nresponse_timeout = \"300ms\"\nconnect_timeout = \"300ms\"",
            urls[0]
        ),
        Backend::Redlock => format!(
            "mode = \"redlock\"\nnodes = [{}]\nnode_timeout = \"100ms\"\nresponse_timeout = \"300ms\"\nconnect_timeout = \"300ms\"",
            urls.iter()
                .map(|u| format!("\"{u}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    std::fs::write(
        path,
        format!(
            "[defaults]\nbackend = \"main\"\nwatchdog_timeout = \"{}ms\"\nwait = \"5s\"\nkey_prefix = \"torture:\"\n\n[backends.main]\n{main}\n\n[backends.resource]\nmode = \"single\"\nurl = \"{}\"\n",
            WATCHDOG.as_millis(),
            resource.url()
        ),
    )
    .expect("config");
    path.to_path_buf()
}

impl Run {
    fn spawn_worker(&mut self, duration: Duration) {
        let exe = std::env::current_exe().expect("current_exe");
        let bin = exe.with_file_name("torture-worker");
        let history = self.dir.join(format!("worker-{}.log", self.spawned));
        let config = &self.configs[self.spawned.min(self.configs.len() - 1)];
        self.spawned += 1;
        let child = Command::new(&bin)
            .arg(config)
            .arg(&self.key)
            .arg(self.resource.url())
            .arg(&history)
            .arg(duration.as_millis().to_string())
            .arg(self.hold.as_millis().to_string())
            .arg("100000")
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

    /// Stop worker `i` for `d` while it is inside a section whose acquire it has recorded.
    /// If, once stopped, its history shows it between sections (it may have acquired again
    /// without recording it yet), it is continued at once and tried again, so a recorded
    /// acquire instant is never delayed by a pause. Every stop is recorded.
    fn pause(&mut self, i: usize, d: Duration) {
        let pid = self.workers[i].child.id();
        for _ in 0..50 {
            signal(pid, libc::SIGSTOP);
            let from = now_ns();
            wait_stopped(pid);
            let inside = last_line(&self.workers[i].history)
                .is_some_and(|l| !l.starts_with('R') && !l.starts_with('E'));
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

    /// Wait for the workers to finish (bounded), then check.
    fn finish(mut self, started: Instant) -> (Report, Interventions) {
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
        let end = now_ns();
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
        let counter = resp_command(
            &self.resource.addr(),
            &["GET", &format!("torture:{}:counter", self.key)],
        )
        .ok()
        .and_then(|v| v.as_str().and_then(|s| s.parse::<u64>().ok()))
        .unwrap_or(0);
        let _ = self.duration;
        (
            history::check(sections, errors, &self.done, end, counter),
            self.done.clone(),
        )
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
    // Let the workers get going.
    std::thread::sleep(Duration::from_millis(500));
    while Instant::now() + Duration::from_millis(500) < deadline {
        *rounds += 1;
        match s.name {
            "pause" => {
                if let Some(i) = run.wait_holder() {
                    // Into its section (its GET done, asleep before the SET).
                    std::thread::sleep(Duration::from_millis(20));
                    run.pause(i, WATCHDOG * 5 / 2);
                }
                std::thread::sleep(Duration::from_millis(800));
            }
            "kill" => {
                if let Some(i) = run.wait_holder() {
                    run.kill_worker(i);
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
                std::thread::sleep(Duration::from_millis(2500));
            }
            "latency" => {
                let ms = [0u64, 150, 700][*rounds as usize % 3];
                run.proxies[0].set_latency(Duration::from_millis(ms));
                std::thread::sleep(Duration::from_millis(2000));
            }
            "blackhole" => {
                run.proxies[0].set_blackhole(true);
                std::thread::sleep(Duration::from_millis(1500));
                run.proxies[0].set_blackhole(false);
                std::thread::sleep(Duration::from_millis(1500));
            }
            "reset" => {
                for _ in 0..10 {
                    run.proxies[0].reset_after_replies(1);
                    std::thread::sleep(Duration::from_millis(150));
                }
                run.proxies[0].reset_all();
                std::thread::sleep(Duration::from_millis(300));
            }
            "partition" => {
                if let Some(i) = run.wait_holder() {
                    run.proxies[i].set_blackhole(true);
                    std::thread::sleep(WATCHDOG * 5 / 2);
                    run.proxies[i].set_blackhole(false);
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
                std::thread::sleep(Duration::from_millis(1500));
            }
            other => unreachable!("scenario {other}"),
        }
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
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--long" => quick = false,
            "--keep" => keep = true,
            "--dir" => dir = PathBuf::from(args.next().unwrap_or_else(|| usage())),
            "-h" | "--help" => usage(),
            s if s.starts_with('-') => usage(),
            s => names.push(s.to_string()),
        }
    }
    let chosen: Vec<&Scenario> = if names.is_empty() {
        SCENARIOS
            .iter()
            .filter(|s| !quick || s.name != "redlock-blackhole")
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
    let duration = if quick {
        Duration::from_secs(12)
    } else {
        Duration::from_secs(60)
    };
    std::fs::create_dir_all(&dir).expect("torture dir");
    println!(
        "distlock torture ({}), {WORKERS} worker processes, watchdog_timeout {:?}, hold {HOLD_MS} ms, {:?} per scenario",
        if quick { "--quick" } else { "--long" },
        WATCHDOG,
        duration
    );
    println!(
        "{:<19} {:<11} {:>8} {:>12} {:>10} {:>11} {:>11} {:>10} {:>7} {:>6}  faults / notes",
        "scenario",
        "backend",
        "sections",
        "unsignalled",
        "signalled",
        "stale-acc.",
        "stale-ref.",
        "lost-upd.",
        "tok-reg",
        "time",
    );
    let mut failed = false;
    for s in chosen {
        let started = Instant::now();
        let mut run = Run::start(s, &dir, duration);
        let deadline = started + duration;
        let mut rounds = 0;
        inject(s, &mut run, deadline, &mut rounds);
        let run_dir = run.dir.clone();
        let (r, done_debug) = run.finish(started);
        let bad = r.failed() && !s.limit;
        failed |= bad;
        let mut notes = format!("{rounds}× {}", s.what);
        if let Some(lead) = r.min_signal_lead_ns {
            notes.push_str(&format!(
                "; lost() came >= {:.0} ms before the next acquire",
                lead as f64 / 1e6
            ));
        }
        if !r.acquire_errors.is_empty() {
            let errs: Vec<String> = r
                .acquire_errors
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            notes.push_str(&format!("; acquire errors {}", errs.join(",")));
        }
        if r.failed() && s.limit {
            notes.push_str("; EXPECTED (documented limit)");
        }
        println!(
            "{:<19} {:<11} {:>8} {:>12} {:>10} {:>11} {:>11} {:>10} {:>7} {:>5.0}s  {}{}",
            s.name,
            s.backend.name(),
            r.sections,
            r.unsignalled_overlaps,
            r.signalled_overlaps,
            r.stale_writes_accepted,
            r.stale_writes_refused,
            r.lost_updates_unfenced,
            r.token_regressions,
            started.elapsed().as_secs_f64(),
            if bad { "FAIL: " } else { "" },
            notes
        );
        for d in &r.details {
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
    if failed {
        println!("torture: FAILED (unsignalled overlap or accepted stale write)");
        std::process::exit(1);
    }
    println!("torture: ok (0 unsignalled overlaps, 0 accepted stale writes)");
}
