//! `distlock`: operate the locks of a distlock configuration from the command line.
//!
//! ```text
//! distlock [--config FILE] check
//! distlock [--config FILE] list [PATTERN] [--backend B] [--json]
//! distlock [--config FILE] show KEY [--backend B] [--json]
//! distlock [--config FILE] unlock KEY [--backend B] [--yes]
//! distlock [--config FILE] run KEY [--wait D] [--lease auto|D] [--backend B] -- CMD ARGS...
//! distlock [--config FILE] watch [PATTERN] [--backend B] [--interval D] [--count N]
//! ```
//!
//! The configuration is the TOML file of the application (`--config`, else
//! `$DISTLOCK_CONFIG`, else `./distlock.toml`). Exit codes: 0 success; 1 an error (named
//! with its backend and address); `run`: the child's status, 75 when the lock stayed busy
//! for `--wait`, 74 when the lease was lost (the child got SIGTERM, then SIGKILL after
//! `--grace`).

mod table;

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use distlock::{Lease, LockError, LockInfo, LockKind, Registry};
use distlock_config::{parse_duration, Config};
use serde_json::json;

use crate::table::Table;

/// Exit status of `run` when the lock stayed busy for `--wait`.
const EXIT_BUSY: u8 = 75;
/// Exit status of `run` when the lease was lost while the command ran.
const EXIT_LOST: u8 = 74;

#[derive(Parser, Debug)]
#[command(
    name = "distlock",
    version,
    about = "Inspect and operate distlock's Redis locks"
)]
struct Cli {
    /// The configuration file (default: $DISTLOCK_CONFIG, else ./distlock.toml).
    #[arg(long, global = true, env = "DISTLOCK_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Connect to every backend and report; exit 1 if any failed.
    Check,
    /// Held (and waited-for) locks whose key matches PATTERN (a glob; SCAN, never KEYS).
    List {
        /// `*` any run, `?` one character (default: every lock).
        pattern: Option<String>,
        /// The backend (default: the configuration's default backend).
        #[arg(long)]
        backend: Option<String>,
        /// JSON output: an array of locks.
        #[arg(long)]
        json: bool,
    },
    /// Everything about the locks on one key.
    Show {
        key: String,
        #[arg(long)]
        backend: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Force-release a lock whoever holds it (its holder finds its lease lost).
    Unlock {
        key: String,
        #[arg(long)]
        backend: Option<String>,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Run a command while holding the lock (the child sees DISTLOCK_FENCING_TOKEN).
    Run {
        key: String,
        /// Longest wait for the lock (default: the configuration's `wait`); busy → exit 75.
        #[arg(long, value_parser = duration)]
        wait: Option<Duration>,
        /// `auto` (watchdog-renewed, the default) or a fixed duration.
        #[arg(long, default_value = "auto", value_parser = lease)]
        lease: Lease,
        /// The kind of lock: reentrant (default), fair, read or write.
        #[arg(long, default_value = "reentrant", value_parser = kind)]
        kind: LockKind,
        /// How long the child has between SIGTERM and SIGKILL after a lost lease.
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
        #[arg(long)]
        backend: Option<String>,
        /// The command and its arguments.
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<String>,
    },
    /// A live view of the locks matching PATTERN, refreshed every --interval.
    Watch {
        pattern: Option<String>,
        #[arg(long)]
        backend: Option<String>,
        /// Refresh interval, 100ms to 1h (default 1s).
        #[arg(long, default_value = "1s", value_parser = interval)]
        interval: Duration,
        /// Stop after N refreshes (default: until Ctrl-C). For scripts and tests.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

fn interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(3600) {
        return Err(format!("{s}: the interval must be between 100ms and 1h"));
    }
    Ok(d)
}

fn kind(s: &str) -> Result<LockKind, String> {
    match s {
        "reentrant" => Ok(LockKind::Reentrant),
        "fair" => Ok(LockKind::Fair),
        "read" => Ok(LockKind::Read),
        "write" => Ok(LockKind::Write),
        other => Err(format!(
            "{other:?}: expected reentrant, fair, read or write"
        )),
    }
}

fn lease(s: &str) -> Result<Lease, String> {
    if s == "auto" {
        return Ok(Lease::Auto);
    }
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("the lease must be longer than 0".into());
    }
    Ok(Lease::Fixed(d))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DISTLOCK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("distlock: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = cli.config.unwrap_or_else(|| PathBuf::from("distlock.toml"));
    match runtime.block_on(dispatch(config, cli.command)) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("distlock: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(config: PathBuf, command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Check => check(&config).await,
        Command::List {
            pattern,
            backend,
            json,
        } => {
            let registry = connect(&config).await?;
            let locks = registry
                .list(pattern.as_deref(), backend.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            print_locks(&locks, json);
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { key, backend, json } => {
            let registry = connect(&config).await?;
            let locks = registry
                .inspect(&key, backend.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            if locks.is_empty() && !json {
                println!("{key}: not held");
            } else {
                print_locks(&locks, json);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Unlock { key, backend, yes } => unlock(&config, key, backend, yes).await,
        Command::Run {
            key,
            wait,
            lease,
            kind,
            grace,
            backend,
            command,
        } => {
            let opts = RunOptions {
                wait,
                lease,
                kind,
                grace,
                backend,
            };
            run(&config, key, opts, command).await
        }
        Command::Watch {
            pattern,
            backend,
            interval,
            count,
        } => watch(&config, pattern, backend, interval, count).await,
    }
}

async fn connect(config: &PathBuf) -> Result<Registry, String> {
    Registry::from_path(config).await.map_err(|e| e.to_string())
}

/// Connect every backend on its own, so that each one's failure is reported, and ask each
/// server its version, eviction policy and (cluster) state.
async fn check(path: &PathBuf) -> Result<ExitCode, String> {
    let config = Config::from_path(path).map_err(|e| e.to_string())?;
    let mut table = Table::new(&[
        "BACKEND", "MODE", "ADDRESS", "STATUS", "VERSION", "EVICTION", "CLUSTER", "ERROR",
    ]);
    let mut failed = false;
    for (name, backend) in &config.backends {
        let mut one = config.clone();
        one.backends.retain(|n, _| n == name);
        one.defaults.backend = Some(name.clone());
        let mode = backend.mode.name().to_owned();
        let address = match backend.mode.urls().as_slice() {
            [] => "memory".to_owned(),
            urls => urls
                .iter()
                .map(|u| u.address.as_str())
                .collect::<Vec<_>>()
                .join(","),
        };
        let registry = match Registry::connect(one).await {
            Ok(r) => r,
            Err(e) => {
                failed = true;
                table.row(vec![
                    name.clone(),
                    mode,
                    address,
                    "FAILED".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    e.to_string(),
                ]);
                continue;
            }
        };
        let servers = registry.probe(None).await.map_err(|e| e.to_string())?;
        if servers.is_empty() {
            table.row(vec![
                name.clone(),
                mode.clone(),
                address.clone(),
                "ok".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                String::new(),
            ]);
        }
        for server in servers {
            let row = match server {
                Ok(s) => {
                    let evicts = s
                        .eviction
                        .as_deref()
                        .is_some_and(|p| p.starts_with("allkeys-"));
                    let cluster_bad = s.cluster_state.as_deref().is_some_and(|c| c != "ok");
                    failed |= cluster_bad;
                    let (status, note) = if cluster_bad {
                        ("FAILED", "the cluster state is not ok".to_owned())
                    } else if evicts {
                        (
                            "WARN",
                            "this eviction policy can evict held locks under memory pressure; use noeviction or volatile-*".to_owned(),
                        )
                    } else if s.eviction.is_none() {
                        (
                            "ok",
                            "CONFIG GET not permitted: eviction policy unknown".to_owned(),
                        )
                    } else {
                        ("ok", String::new())
                    };
                    vec![
                        name.clone(),
                        mode.clone(),
                        s.address,
                        status.into(),
                        s.version.unwrap_or_else(|| "?".into()),
                        s.eviction.unwrap_or_else(|| "?".into()),
                        s.cluster_state.unwrap_or_else(|| "-".into()),
                        note,
                    ]
                }
                Err(e) => {
                    failed = true;
                    vec![
                        name.clone(),
                        mode.clone(),
                        address.clone(),
                        "FAILED".into(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        e.to_string(),
                    ]
                }
            };
            table.row(row);
        }
    }
    table.print();
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn lock_json(l: &LockInfo) -> serde_json::Value {
    json!({
        "key": l.key,
        "kind": l.kind.name(),
        "backend": l.backend,
        "address": l.address,
        "ttl_ms": l.ttl.map(|t| t.as_millis() as u64),
        "token": l.token,
        "holders": l.holders.iter().map(|h| json!({
            "owner": h.owner,
            "count": h.count,
            "host": h.host,
            "pid": h.pid,
            "site": h.site,
            "since": h.since_ms,
            "held_for_ms": h.held_for.map(|d| d.as_millis() as u64),
            "token": h.token,
        })).collect::<Vec<_>>(),
        "waiters": l.waiters.iter().map(|w| json!({
            "owner": w.owner,
            "wait_left_ms": w.wait_left.as_millis() as u64,
        })).collect::<Vec<_>>(),
    })
}

/// `host pid site since(age) xN token` of one holder, for tables.
fn holder_line(h: &distlock::Holder) -> String {
    let mut s = format!(
        "{}:{}",
        h.host.as_deref().unwrap_or("?"),
        h.pid.map_or_else(|| "?".to_owned(), |p| p.to_string())
    );
    if let Some(site) = &h.site {
        s.push_str(&format!(" {site}"));
    }
    if let Some(age) = h.held_for {
        let age = Duration::from_millis(age.as_millis() as u64 / 100 * 100);
        s.push_str(&format!(" for {}", distlock_config::format_duration(age)));
    }
    if let Some(t) = h.token {
        s.push_str(&format!(" token {t}"));
    }
    if h.count > 1 {
        s.push_str(&format!(" x{}", h.count));
    }
    if h.host.is_none() {
        s = format!("owner {} (no holder info)", h.owner);
    }
    s
}

fn print_locks(locks: &[LockInfo], as_json: bool) {
    if as_json {
        let all: Vec<_> = locks.iter().map(lock_json).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&all).unwrap_or_else(|_| "[]".into())
        );
        return;
    }
    let mut table = Table::new(&["KEY", "KIND", "TTL", "TOKEN", "HOLDERS", "WAITERS"]);
    for l in locks {
        let holders: Vec<String> = l.holders.iter().map(holder_line).collect();
        table.row(vec![
            l.key.clone(),
            l.kind.name().to_owned(),
            l.ttl
                .map_or_else(|| "-".into(), distlock_config::format_duration),
            l.token.map_or_else(|| "-".into(), |t| t.to_string()),
            if holders.is_empty() {
                "-".into()
            } else {
                holders.join("; ")
            },
            l.waiters.len().to_string(),
        ]);
    }
    table.print();
}

async fn unlock(
    config: &PathBuf,
    key: String,
    backend: Option<String>,
    yes: bool,
) -> Result<ExitCode, String> {
    let registry = connect(config).await?;
    let locks = registry
        .inspect(&key, backend.as_deref())
        .await
        .map_err(|e| e.to_string())?;
    let held: Vec<&LockInfo> = locks.iter().filter(|l| !l.holders.is_empty()).collect();
    if held.is_empty() {
        println!("{key}: not held");
        return Ok(ExitCode::SUCCESS);
    }
    for l in &held {
        for h in &l.holders {
            println!("{key} ({}) held by {}", l.kind.name(), holder_line(h));
        }
    }
    if !yes {
        print!("force-release {key}? [y/N] ");
        let _ = std::io::stdout().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("not released");
            return Ok(ExitCode::FAILURE);
        }
    }
    // Read and write share one lock state: one forced release covers both.
    let mut kinds: Vec<LockKind> = held
        .iter()
        .map(|l| match l.kind {
            LockKind::Read => LockKind::Write,
            k => k,
        })
        .collect();
    kinds.dedup();
    for kind in kinds {
        let mut lock = registry.lock(key.clone()).kind(kind);
        if let Some(b) = &backend {
            lock = lock.backend(b.clone());
        }
        let freed = lock.force_unlock().await.map_err(|e| e.to_string())?;
        let holders: Vec<String> = locks
            .iter()
            .filter(|l| l.kind == kind || (kind == LockKind::Write && l.kind == LockKind::Read))
            .flat_map(|l| l.holders.iter().map(holder_line))
            .collect();
        tracing::warn!(target: "distlock::cli", key = %key, kind = kind.name(), freed,
            holders = %holders.join("; "), "distlock: lock force-released from the command line");
        println!(
            "{key} ({}): {}",
            kind.name(),
            if freed {
                "released"
            } else {
                "was already free"
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How `run` takes its lock.
struct RunOptions {
    wait: Option<Duration>,
    lease: Lease,
    kind: LockKind,
    grace: Duration,
    backend: Option<String>,
}

async fn run(
    config: &PathBuf,
    key: String,
    opts: RunOptions,
    command: Vec<String>,
) -> Result<ExitCode, String> {
    let RunOptions {
        wait,
        lease,
        kind,
        grace,
        backend,
    } = opts;
    let registry = connect(config).await?;
    let mut lock = registry
        .lock(key.clone())
        .lease(lease)
        .kind(kind)
        .site("distlock run");
    if let Some(w) = wait {
        lock = lock.wait(w);
    }
    if let Some(b) = &backend {
        lock = lock.backend(b.clone());
    }
    let guard = match lock.acquire().await {
        Ok(g) => g,
        Err(e @ LockError::Timeout { .. }) => {
            eprintln!("distlock: {e}");
            return Ok(ExitCode::from(EXIT_BUSY));
        }
        Err(e) => return Err(e.to_string()),
    };
    let token = guard.fencing_token();
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .env("DISTLOCK_FENCING_TOKEN", token.to_string())
        .env("DISTLOCK_KEY", &key)
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", command[0]))?;
    let status = tokio::select! {
        status = child.wait() => status.map_err(|e| e.to_string())?,
        lost = guard.lost() => {
            eprintln!("distlock: {lost}; stopping {:?} (SIGTERM, SIGKILL after {})",
                command[0], distlock_config::format_duration(grace));
            signal(&child, libc::SIGTERM);
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            let _ = guard.release().await;
            return Ok(ExitCode::from(EXIT_LOST));
        }
    };
    if let Err(e) = guard.release().await {
        eprintln!("distlock: release after the command failed: {e}");
    }
    Ok(exit_of(status))
}

fn signal(child: &tokio::process::Child, sig: libc::c_int) {
    if let Some(pid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) {
        // SAFETY: kill(2) with a pid of our own child that has not been reaped yet.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The child's exit status as ours: its code, or 128 + the signal that ended it.
fn exit_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        (None, Some(s)) => ExitCode::from(u8::try_from(128 + s).unwrap_or(1)),
        (None, None) => ExitCode::FAILURE,
    }
}

async fn watch(
    config: &PathBuf,
    pattern: Option<String>,
    backend: Option<String>,
    interval: Duration,
    count: Option<u64>,
) -> Result<ExitCode, String> {
    let registry = connect(config).await?;
    // On a terminal the screen is cleared before every refresh; otherwise (a pipe, a file)
    // the refreshes follow each other as plain text, without escape sequences.
    let tty = std::io::stdout().is_terminal();
    let mut shown = 0u64;
    loop {
        let listed = registry.list(pattern.as_deref(), backend.as_deref()).await;
        if tty {
            print!("\x1b[2J\x1b[H");
        }
        println!(
            "distlock watch {} — every {} (Ctrl-C to stop)",
            pattern.as_deref().unwrap_or("*"),
            distlock_config::format_duration(interval)
        );
        match listed {
            Ok(locks) => print_locks(&locks, false),
            Err(e) => println!("error: {e}"),
        }
        let _ = std::io::stdout().flush();
        shown += 1;
        if count.is_some_and(|n| shown >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}
