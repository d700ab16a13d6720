//! `distlock`: operate the locks of a distlock configuration from the command line.
//!
//! ```text
//! distlock [--config FILE] check [--json]
//! distlock [--config FILE] list [PATTERN] [--backend B] [--json]
//! distlock [--config FILE] show KEY [--backend B] [--json]
//! distlock [--config FILE] unlock KEY [--backend B] [--yes] [--holder ID]
//! distlock [--config FILE] run KEY [--wait D] [--lease auto|D] [--backend B] -- CMD ARGS...
//! distlock [--config FILE] watch [PATTERN] [--backend B] [--interval D] [--count N]
//! ```
//!
//! The configuration is the TOML file of the application (`--config`, else
//! `$DISTLOCK_CONFIG`, else `./distlock.toml`). Exit codes: 0 success; 1 an error (named
//! with its backend and address); `run`: the child's status, 75 when the lock stayed busy
//! for `--wait`, 74 when the lease was lost (the child got SIGTERM, then SIGKILL after
//! `--grace`).
//!
//! `run` starts the command in a process group of its own and stops the whole group, not
//! only the command: on a lost lease, when `run` gets SIGINT/SIGTERM/SIGHUP (forwarded to
//! the group), and when the command exits leaving background processes behind (stopped
//! before the lock is released). If `run` itself dies (SIGKILL, a crash) the command
//! dies with it (`PR_SET_PDEATHSIG`) and a small guard process (`distlock` again, started
//! first, holding nothing but a pipe from `run`) kills the group when the pipe closes.
//! The command stops with `run`: SIGTSTP (Ctrl-Z) is forwarded to the group; while `run`
//! is stopped by SIGSTOP the guard stops the group; continued, `run` continues it if its
//! lease is still held, else stops it as for a lost lease (exit 74). Every way out
//! releases the lock, answered, before `run` exits; a command that cannot be started
//! exits 127 (not found) or 126.

mod group;
mod table;

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use distlock::inspect::{Kind, LockInfo};
use distlock::{InitError, Lease, LockError, LockKind, Registry};
use distlock_config::{check_duration, parse_duration, Config, DurationUse};
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
    /// The init self-check of every backend, one row per server (reachable, TLS, auth,
    /// version, permissions, eviction policy, cluster state); exit 1 if any failed.
    Check {
        /// JSON output: an array of servers.
        #[arg(long)]
        json: bool,
    },
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
    /// Force-release a lock (or a semaphore's permits) whoever holds it, waking its
    /// waiters; prints who held it. `--holder ID` frees one holder of a semaphore only.
    ///
    /// The holder is not asked; it is told at once by the revocation message the forced
    /// release publishes (else at its next renewal): its `lost()` resolves, an annotated
    /// body is cancelled with `LeaseLost` (or signalled with on_lost = "signal"), a
    /// `distlock run` child gets SIGTERM and run exits 74. Until then it still believes it
    /// holds the lock while a waiter may already be inside. Use it for a holder that is
    /// gone or stuck, and fence the resource (docs/operations.md).
    Unlock {
        key: String,
        #[arg(long)]
        backend: Option<String>,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
        /// Free only this holder of the key's semaphore: its id (`owner` in `show --json`,
        /// `id` in `show`), or the start of it when that names one holder.
        #[arg(long)]
        holder: Option<String>,
    },
    /// Run a command while holding the lock (the child sees DISTLOCK_FENCING_TOKEN).
    Run {
        key: String,
        /// Longest wait for the lock (default: the configuration's `wait`); busy → exit 75.
        #[arg(long, value_parser = wait)]
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
    /// Internal: the guard of `run` (kills the process group named on stdin when stdin
    /// closes without a `done` line, i.e. when `run` died).
    #[command(name = "__guard", hide = true)]
    Guard,
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

/// `--wait`: checked against the one table of valid durations, as everywhere else.
fn wait(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    check_duration(DurationUse::Wait, d).map_err(|e| e.to_string())
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
    check_duration(DurationUse::Lease, d)
        .map(Lease::Fixed)
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Guard = cli.command {
        return group::guard();
    }
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
        Command::Check { json } => check(&config, json).await,
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
        Command::Unlock {
            key,
            backend,
            yes,
            holder,
        } => unlock(&config, key, backend, yes, holder).await,
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
        Command::Guard => Ok(group::guard()),
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

/// One row of `distlock check`: one server of a backend (or the backend, when it could
/// not be connected or has no servers).
struct CheckRow {
    backend: String,
    mode: String,
    address: String,
    /// `ok`, `WARN` or `FAILED`.
    status: &'static str,
    /// `None`: not known (the configuration failed first).
    reachable: Option<bool>,
    tls: Option<bool>,
    auth: Option<String>,
    /// `Redis 7.0.15`, `Valkey 8.1.8` (`ServerReport::server`).
    server: Option<String>,
    /// `Redis`, `Valkey` (`None`: INFO not permitted).
    flavour: Option<String>,
    /// The server's own version (Valkey's `valkey_version`), else the Redis version.
    version: Option<String>,
    /// The Redis version the minimum is judged on (Valkey: the one it is compatible with).
    redis_version: Option<String>,
    /// `None`: not checked.
    missing: Option<Vec<String>>,
    eviction: Option<String>,
    cluster: Option<String>,
    notes: Vec<String>,
}

impl CheckRow {
    fn of(backend: &distlock::inspect::BackendReport) -> CheckRow {
        CheckRow {
            backend: backend.backend.clone(),
            mode: backend.mode.clone(),
            address: backend.address.clone(),
            status: "ok",
            reachable: None,
            tls: None,
            auth: None,
            server: None,
            flavour: None,
            version: None,
            redis_version: None,
            missing: None,
            eviction: None,
            cluster: None,
            notes: Vec::new(),
        }
    }

    fn failed(mut self, why: String) -> CheckRow {
        self.status = "FAILED";
        self.notes.push(why);
        self
    }

    fn cells(&self) -> Vec<String> {
        let dash = || "-".to_owned();
        vec![
            self.backend.clone(),
            self.mode.clone(),
            self.address.clone(),
            self.status.to_owned(),
            self.reachable
                .map_or_else(dash, |r| if r { "yes" } else { "no" }.to_owned()),
            self.tls
                .map_or_else(dash, |t| if t { "yes" } else { "no" }.to_owned()),
            self.auth.clone().unwrap_or_else(dash),
            self.server.clone().unwrap_or_else(dash),
            match &self.missing {
                None => dash(),
                Some(m) if m.is_empty() => "ok".to_owned(),
                Some(m) => m.join("; "),
            },
            self.eviction.clone().unwrap_or_else(dash),
            self.cluster.clone().unwrap_or_else(dash),
            self.notes.join("; "),
        ]
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "backend": self.backend,
            "mode": self.mode,
            "address": self.address,
            "status": self.status,
            "reachable": self.reachable,
            "tls": self.tls,
            "auth": self.auth,
            "server": self.flavour,
            "version": self.version,
            "redis_version": self.redis_version,
            "permissions": match &self.missing {
                None => serde_json::Value::Null,
                Some(m) if m.is_empty() => json!("ok"),
                Some(_) => json!("missing"),
            },
            "missing_rights": self.missing,
            "eviction": self.eviction,
            "cluster_state": self.cluster,
            "notes": self.notes,
        })
    }
}

/// The `init` self-check of every backend, each connected on its own so that each one's
/// failure is reported: one row per server. Exit 1 when a backend cannot be connected, a
/// server is too old, lacks a right, or (a cluster) its state is not ok.
async fn check(path: &PathBuf, as_json: bool) -> Result<ExitCode, String> {
    let config = Config::from_path(path).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for backend in Registry::check(config).await {
        let servers = match &backend.servers {
            Err(e) => {
                let mut row = CheckRow::of(&backend);
                row.reachable = match e {
                    InitError::Connect { .. } | InitError::NotRedis { .. } => Some(false),
                    InitError::MissingRights { .. } | InitError::ServerTooOld { .. } => Some(true),
                    _ => None,
                };
                rows.push(row.failed(e.to_string()));
                continue;
            }
            Ok(servers) => servers,
        };
        if servers.is_empty() {
            rows.push(CheckRow::of(&backend));
        }
        for server in servers {
            let s = match server {
                Ok(s) => s,
                Err(e) => {
                    let mut row = CheckRow::of(&backend);
                    row.reachable = Some(false);
                    rows.push(row.failed(e.to_string()));
                    continue;
                }
            };
            let mut row = CheckRow::of(&backend);
            row.reachable = Some(true);
            row.address = s.address.clone();
            row.tls = Some(s.tls);
            row.auth = Some(s.user.clone().unwrap_or_else(|| "none".into()));
            row.server = s.server();
            row.flavour = s.flavour.clone();
            row.version = s.flavour_version.clone().or_else(|| s.version.clone());
            row.redis_version = s.version.clone();
            row.missing = s.missing_rights.clone();
            row.eviction = s.eviction.clone();
            row.cluster = s.cluster_state.clone();
            if let Some(why) = &s.too_old {
                row = row.failed(format!(
                    "too old: distlock needs Redis {} or later: {why}",
                    distlock::inspect::MIN_REDIS_VERSION
                ));
            }
            if s.missing_rights.as_ref().is_some_and(|m| !m.is_empty()) {
                row.status = "FAILED";
                row.notes
                    .push("the ACL user lacks rights (see PERMISSIONS)".into());
            }
            if s.cluster_state.as_deref().is_some_and(|c| c != "ok") {
                row.status = "FAILED";
                row.notes.push("the cluster state is not ok".into());
            }
            if let Some(problem) = &s.problem {
                if row.status == "ok" {
                    row.status = "WARN";
                }
                row.notes.push(problem.clone());
            }
            if s.evicts_locks() {
                if row.status == "ok" {
                    row.status = "WARN";
                }
                row.notes.push(
                    "this eviction policy can evict held locks and fencing counters under memory pressure; use noeviction".into(),
                );
            } else if s.eviction.is_none() {
                row.notes
                    .push("INFO not permitted: eviction policy unknown".into());
            }
            rows.push(row);
        }
    }
    let failed = rows.iter().any(|r| r.status == "FAILED");
    if as_json {
        let all: Vec<serde_json::Value> = rows.iter().map(CheckRow::json).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?
        );
    } else {
        let mut table = Table::new(&[
            "BACKEND",
            "MODE",
            "ADDRESS",
            "STATUS",
            "REACHABLE",
            "TLS",
            "AUTH",
            "SERVER",
            "PERMISSIONS",
            "EVICTION",
            "CLUSTER",
            "NOTE",
        ]);
        for row in &rows {
            table.row(row.cells());
        }
        table.print();
    }
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
        "permits": l.permits,
        "holders": l.holders.iter().map(|h| json!({
            "owner": h.owner,
            "count": h.count,
            "permits": (l.kind == Kind::Semaphore).then_some(h.count),
            "lease_left_ms": h.lease_left.map(|d| d.as_millis() as u64),
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
        "waiting_processes": l.waiting_processes,
    })
}

/// `host:pid site for AGE token T xN` of one holder, for tables; a semaphore's holder
/// adds its permits, its lease left and its id (for `unlock --holder`).
fn holder_line(h: &distlock::inspect::Holder, kind: Kind) -> String {
    let round = |d: Duration| Duration::from_millis(d.as_millis() as u64 / 100 * 100);
    let mut s = format!(
        "{}:{}",
        h.host.as_deref().unwrap_or("?"),
        h.pid.map_or_else(|| "?".to_owned(), |p| p.to_string())
    );
    if let Some(site) = &h.site {
        s.push_str(&format!(" {site}"));
    }
    if let Some(age) = h.held_for {
        s.push_str(&format!(
            " for {}",
            distlock_config::format_duration(round(age))
        ));
    }
    if let Some(t) = h.token {
        s.push_str(&format!(" token {t}"));
    }
    if kind == Kind::Semaphore {
        if h.host.is_none() {
            s = "(no holder info)".to_owned();
        }
        s.push_str(&format!(
            " {} permit{}",
            h.count,
            if h.count == 1 { "" } else { "s" }
        ));
        if let Some(left) = h.lease_left {
            s.push_str(&format!(
                " lease {}",
                distlock_config::format_duration(round(left))
            ));
        }
        s.push_str(&format!(" id {}", h.owner));
        return s;
    }
    if h.count > 1 {
        s.push_str(&format!(" x{}", h.count));
    }
    if h.host.is_none() {
        s = format!("owner {} (no holder info)", h.owner);
    }
    s
}

/// The KIND cell: the kind's name; for a semaphore also the permits held and its permits.
fn kind_cell(l: &LockInfo) -> String {
    if l.kind != Kind::Semaphore {
        return l.kind.name().to_owned();
    }
    let held: u64 = l.holders.iter().map(|h| h.count).sum();
    match l.permits {
        Some(p) => format!("semaphore {held}/{p}"),
        None => format!("semaphore {held}/?"),
    }
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
        let holders: Vec<String> = l.holders.iter().map(|h| holder_line(h, l.kind)).collect();
        table.row(vec![
            l.key.clone(),
            kind_cell(l),
            l.ttl
                .map_or_else(|| "-".into(), distlock_config::format_duration),
            l.token.map_or_else(|| "-".into(), |t| t.to_string()),
            if holders.is_empty() {
                "-".into()
            } else {
                holders.join("; ")
            },
            waiters_cell(l),
        ]);
    }
    table.print();
}

/// The WAITERS cell: the queue's length for a fair or write lock (its waiters are recorded
/// one by one); for a reentrant or read lock or a semaphore the processes waiting for it
/// (`2 proc`; `?` when the ACL user may not run PUBSUB).
fn waiters_cell(l: &LockInfo) -> String {
    match (l.kind, l.waiting_processes) {
        (Kind::Fair | Kind::Write, _) => l.waiters.len().to_string(),
        (_, Some(0)) => "0".to_owned(),
        (_, Some(n)) => format!("{n} proc"),
        (_, None) if !l.waiters.is_empty() => l.waiters.len().to_string(),
        (_, None) => "?".to_owned(),
    }
}

async fn unlock(
    config: &PathBuf,
    key: String,
    backend: Option<String>,
    yes: bool,
    holder: Option<String>,
) -> Result<ExitCode, String> {
    let registry = connect(config).await?;
    let locks = registry
        .inspect(&key, backend.as_deref())
        .await
        .map_err(|e| e.to_string())?;
    if let Some(wanted) = holder {
        return unlock_holder(&registry, &key, backend, yes, &locks, &wanted).await;
    }
    let held: Vec<&LockInfo> = locks.iter().filter(|l| !l.holders.is_empty()).collect();
    if held.is_empty() {
        println!("{key}: not held");
        return Ok(ExitCode::SUCCESS);
    }
    for l in &held {
        for h in &l.holders {
            println!(
                "{key} ({}) held by {}",
                l.kind.name(),
                holder_line(h, l.kind)
            );
        }
    }
    if !yes && !confirm(&format!("force-release {key}?")) {
        println!("not released");
        return Ok(ExitCode::FAILURE);
    }
    // Read and write share one lock state: one forced release covers both.
    let mut kinds: Vec<Kind> = held
        .iter()
        .map(|l| match l.kind {
            Kind::Read => Kind::Write,
            k => k,
        })
        .collect();
    kinds.dedup();
    for kind in kinds {
        let freed = match kind.lock_kind() {
            Some(lock_kind) => {
                let mut lock = registry.lock(key.clone()).kind(lock_kind);
                if let Some(b) = &backend {
                    lock = lock.backend(b.clone());
                }
                lock.force_unlock().await
            }
            None => {
                let permits = held.iter().find_map(|l| l.permits).unwrap_or(1);
                let mut sem = registry.semaphore(key.clone(), permits);
                if let Some(b) = &backend {
                    sem = sem.backend(b.clone());
                }
                sem.force_unlock().await
            }
        }
        .map_err(|e| e.to_string())?;
        let holders: Vec<String> = locks
            .iter()
            .filter(|l| l.kind == kind || (kind == Kind::Write && l.kind == Kind::Read))
            .flat_map(|l| l.holders.iter().map(|h| holder_line(h, l.kind)))
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

/// `unlock KEY --holder ID`: free one holder of the key's semaphore (its id, or a prefix
/// naming one holder); exit 1 when no holder (or more than one) matches.
async fn unlock_holder(
    registry: &Registry,
    key: &str,
    backend: Option<String>,
    yes: bool,
    locks: &[LockInfo],
    wanted: &str,
) -> Result<ExitCode, String> {
    let sem = locks.iter().find(|l| l.kind == Kind::Semaphore);
    let matching: Vec<&distlock::inspect::Holder> = sem
        .iter()
        .flat_map(|l| l.holders.iter())
        .filter(|h| !wanted.is_empty() && h.owner.starts_with(wanted))
        .collect();
    let (sem, h) = match (sem, matching.as_slice()) {
        (Some(sem), [h]) => (sem, *h),
        (_, []) => {
            eprintln!("distlock: {key}: no semaphore holder {wanted:?}");
            return Ok(ExitCode::FAILURE);
        }
        (_, _) => {
            eprintln!(
                "distlock: {key}: {} semaphore holders start with {wanted:?}; give more of the id",
                matching.len()
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    println!(
        "{key} (semaphore) held by {}",
        holder_line(h, Kind::Semaphore)
    );
    if !yes && !confirm(&format!("force-release this holder of {key}?")) {
        println!("not released");
        return Ok(ExitCode::FAILURE);
    }
    let mut semaphore = registry.semaphore(key.to_owned(), sem.permits.unwrap_or(1));
    if let Some(b) = backend {
        semaphore = semaphore.backend(b);
    }
    let freed = semaphore
        .force_unlock_holder(&h.owner)
        .await
        .map_err(|e| e.to_string())?;
    tracing::warn!(target: "distlock::cli", key = %key, kind = "semaphore", freed,
        holder = %holder_line(h, Kind::Semaphore), "distlock: semaphore holder force-released from the command line");
    println!(
        "{key} (semaphore) holder {}: {}",
        h.owner,
        if freed {
            "released"
        } else {
            "was already gone"
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Ask `question [y/N]` on the terminal.
fn confirm(question: &str) -> bool {
    print!("{question} [y/N] ");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    matches!(answer.trim(), "y" | "Y" | "yes")
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
    // Whatever happens from here, the lock is released, and the release answered, before
    // this returns (a guard dropped instead would release in a task the exit cuts short).
    let outcome = supervise(&guard, &key, &command, grace).await;
    let released = guard.release().await;
    // A lost lease's release finds nothing held; any other failure is said.
    if let (Err(e), false) = (released, matches!(outcome, Ok(Ended::Lost))) {
        eprintln!("distlock: release after the command failed: {e}");
    }
    match outcome {
        Ok(Ended::Exited(status)) => Ok(exit_of(status)),
        Ok(Ended::Lost) => Ok(ExitCode::from(EXIT_LOST)),
        Ok(Ended::Signal(sig)) => Ok(ExitCode::from(u8::try_from(128 + sig).unwrap_or(1))),
        Ok(Ended::NotStarted(code)) => Ok(ExitCode::from(code)),
        Err(e) => Err(e),
    }
}

/// Run `command` under the lock `guard` holds until it ends, the lease is lost or `run` is
/// told to stop; the command's process group is stopped on every way out.
async fn supervise(
    guard: &distlock::LockGuard,
    key: &str,
    command: &[String],
    grace: Duration,
) -> Result<Ended, String> {
    let token = guard.fencing_token();
    // The signals first: one that comes as the command starts is handled, not taken with
    // its default action (a SIGTSTP would stop `run` alone).
    let mut signals = group::Signals::new()?;
    // The guard next: from the moment the command exists, `run` dying kills its group.
    let mut watcher = group::Guard::start()?;
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..])
        .env("DISTLOCK_FENCING_TOKEN", token.to_string())
        .env("DISTLOCK_KEY", key);
    group::own_group_dying_with_us(&mut cmd, &watcher);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            watcher.done();
            eprintln!("distlock: cannot run {:?}: {e}", command[0]);
            // As env(1): 127 when the command is not found, 126 when it cannot be run.
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Ok(Ended::NotStarted(code));
        }
    };
    let Some(pgid) = child.id().and_then(|p| libc::pid_t::try_from(p).ok()) else {
        watcher.done();
        return Err(format!(
            "{:?} exited before it could be watched",
            command[0]
        ));
    };
    watcher.watch(pgid);
    let ended = loop {
        tokio::select! {
            status = child.wait() => match status {
                Ok(status) => break Ended::Exited(status),
                Err(e) => {
                    eprintln!("distlock: waiting for {:?} failed: {e}; stopping its process group", command[0]);
                    break Ended::Signal(libc::SIGTERM);
                }
            },
            lost = guard.lost() => {
                eprintln!("distlock: {lost}; stopping {:?} and its process group (SIGTERM, SIGKILL after {})",
                    command[0], distlock_config::format_duration(grace));
                break Ended::Lost;
            }
            sig = signals.recv() => match sig {
                group::Signalled::End(sig) => break Ended::Signal(sig),
                group::Signalled::Stop => {
                    // Ctrl-Z: the command stops with `run` (its renewals stop now).
                    group::signal_group(pgid, libc::SIGTSTP);
                    group::stop_self();
                }
                group::Signalled::Continued => {
                    if guard.is_held() {
                        group::signal_group(pgid, libc::SIGCONT);
                        watcher.cont();
                    } else {
                        eprintln!("distlock: the lease ran out while `run` was stopped; stopping {:?} and its process group (SIGTERM, SIGKILL after {})",
                            command[0], distlock_config::format_duration(grace));
                        break Ended::Lost;
                    }
                }
            },
        }
    };
    match ended {
        // Whatever the command left running still works under the lock: stop it before
        // the release.
        Ended::Exited(_) | Ended::NotStarted(_) => {
            group::stop(pgid, libc::SIGTERM, grace, None, &mut watcher).await;
        }
        Ended::Lost => {
            group::stop(pgid, libc::SIGTERM, grace, Some(&mut child), &mut watcher).await;
        }
        Ended::Signal(sig) => {
            group::stop(pgid, sig, grace, Some(&mut child), &mut watcher).await;
        }
    }
    watcher.done();
    Ok(ended)
}

/// How the command's run ended.
enum Ended {
    Exited(std::process::ExitStatus),
    /// The command could not be started: exit with this (127 not found, else 126).
    NotStarted(u8),
    Lost,
    /// `run` got this signal (forwarded to the group).
    Signal(libc::c_int),
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
