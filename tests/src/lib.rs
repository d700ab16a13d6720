//! Test harness: where the test servers are, and private redis-server processes.
//!
//! Every test of Redis behaviour runs against a real `redis-server`. The shared
//! topologies (single, cluster, sentinel, independent masters for redlock) are
//! started by `scripts/servers.sh start`, or by `scripts/test.sh`, which starts
//! them, runs `cargo test --workspace` and stops them again. Their addresses
//! come from environment variables (printed by `scripts/servers.sh env`), with
//! the default ports as a fallback:
//!
//! | variable                        | default                                      |
//! |---------------------------------|----------------------------------------------|
//! | `DISTLOCK_TEST_SINGLE`          | `redis://127.0.0.1:17379`                    |
//! | `DISTLOCK_TEST_CLUSTER`         | `redis://127.0.0.1:17001` … `17006`          |
//! | `DISTLOCK_TEST_SENTINELS`       | `redis://127.0.0.1:17110`, `17111`, `17112`  |
//! | `DISTLOCK_TEST_SENTINEL_MASTER` | `distlock-master`                            |
//! | `DISTLOCK_TEST_REDLOCK`         | `redis://127.0.0.1:17201` … `17205`          |
//!
//! The accessors ([`single_url`], [`cluster_urls`], …) check that every server
//! answers `PING` and **panic** otherwise, naming the command that starts the
//! servers: a test never skips silently because no server is up.
//!
//! The servers `scripts/servers.sh` starts are `redis-server`, `redis-sentinel` and
//! `redis-cli` from `PATH`; `scripts/test.sh --server valkey8|redis8` puts Valkey 8.1's or
//! Redis 8.2's first there. Moved to other ports (`DISTLOCK_SERVERS_*_PORT(S)`, see the
//! script), `scripts/servers.sh env` prints the variables above for them.
//!
//! Tests that kill and restart servers own a private [`RedisProcess`] instead
//! (ports 17400..17499; `redis-server` from `PATH`, or `$DISTLOCK_REDIS_SERVER`), or a
//! whole private cluster or sentinel group from [`topology`] (`redis-sentinel` from `PATH`,
//! or `$DISTLOCK_REDIS_SENTINEL`). The TLS fixtures of [`tls`] run a TLS-capable build
//! ([`tls::tls_binaries`]). [`resp_command`] talks RESP2 over a plain
//! [`TcpStream`] for inspecting keys, `DEBUG SLEEP`, `SHUTDOWN`, and so on,
//! without going through the client library under test.

pub mod explore;
pub mod history;
mod postgres;
pub mod proxy;
pub mod redisson;
pub mod tls;
pub mod topology;

pub use postgres::postgres_url;

use std::fmt;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// What to do when the shared test servers are not running; part of every
/// "server is down" panic message.
pub const START_HINT: &str =
    "start the test servers with `scripts/servers.sh start`, or run the whole suite with `scripts/test.sh`";

/// Connect, read and write timeout of [`resp_command`] and of the `PING`
/// checks done by the URL accessors.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);

const SINGLE_VAR: &str = "DISTLOCK_TEST_SINGLE";
const CLUSTER_VAR: &str = "DISTLOCK_TEST_CLUSTER";
const SENTINELS_VAR: &str = "DISTLOCK_TEST_SENTINELS";
const SENTINEL_MASTER_VAR: &str = "DISTLOCK_TEST_SENTINEL_MASTER";
const REDLOCK_VAR: &str = "DISTLOCK_TEST_REDLOCK";

const DEFAULT_SINGLE: &[&str] = &["redis://127.0.0.1:17379"];
const DEFAULT_CLUSTER: &[&str] = &[
    "redis://127.0.0.1:17001",
    "redis://127.0.0.1:17002",
    "redis://127.0.0.1:17003",
    "redis://127.0.0.1:17004",
    "redis://127.0.0.1:17005",
    "redis://127.0.0.1:17006",
];
const DEFAULT_SENTINELS: &[&str] = &[
    "redis://127.0.0.1:17110",
    "redis://127.0.0.1:17111",
    "redis://127.0.0.1:17112",
];
const DEFAULT_SENTINEL_MASTER: &str = "distlock-master";
const DEFAULT_REDLOCK: &[&str] = &[
    "redis://127.0.0.1:17201",
    "redis://127.0.0.1:17202",
    "redis://127.0.0.1:17203",
    "redis://127.0.0.1:17204",
    "redis://127.0.0.1:17205",
];

// ------------------------------------------------------------------ topologies

/// URL of the single (standalone) test server, `DISTLOCK_TEST_SINGLE`.
///
/// # Panics
/// If the server does not answer `PING` within 2 s.
pub fn single_url() -> String {
    servers(SINGLE_VAR, DEFAULT_SINGLE, "redis-server").remove(0)
}

/// URLs of the six cluster nodes (3 masters, 3 replicas), `DISTLOCK_TEST_CLUSTER`.
///
/// # Panics
/// If any node does not answer `PING` within 2 s.
pub fn cluster_urls() -> Vec<String> {
    servers(CLUSTER_VAR, DEFAULT_CLUSTER, "redis-server (cluster node)")
}

/// URLs of the three sentinels, `DISTLOCK_TEST_SENTINELS`. They monitor the
/// master named by [`sentinel_master_name`] (127.0.0.1:17100, replica 17101).
///
/// # Panics
/// If any sentinel does not answer `PING` within 2 s.
pub fn sentinel_urls() -> Vec<String> {
    servers(SENTINELS_VAR, DEFAULT_SENTINELS, "redis-sentinel")
}

/// Name under which the sentinels monitor the master,
/// `DISTLOCK_TEST_SENTINEL_MASTER` (default `distlock-master`).
///
/// # Panics
/// If the sentinels do not answer `PING` (checked as for [`sentinel_urls`]).
pub fn sentinel_master_name() -> String {
    sentinel_urls();
    env_or(SENTINEL_MASTER_VAR, DEFAULT_SENTINEL_MASTER)
}

/// URLs of the five independent masters for redlock / multi-lock tests,
/// `DISTLOCK_TEST_REDLOCK`.
///
/// # Panics
/// If any of them does not answer `PING` within 2 s.
pub fn redlock_urls() -> Vec<String> {
    servers(REDLOCK_VAR, DEFAULT_REDLOCK, "redis-server")
}

fn env_or(var: &str, default: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => default.to_string(),
    }
}

/// Split a comma separated list of URLs.
fn split_urls(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn servers(var: &str, default: &[&str], kind: &str) -> Vec<String> {
    let urls = split_urls(&env_or(var, &default.join(",")));
    require_up(var, &urls, kind);
    urls
}

/// Panic, naming the command that starts the servers, unless every URL
/// answers `PING`. `var` names the environment variable the URLs came from.
fn require_up(var: &str, urls: &[String], kind: &str) {
    assert!(
        !urls.is_empty(),
        "{var} is set but lists no server: {START_HINT}"
    );
    for url in urls {
        let addr = addr_of(url);
        match resp_command(&addr, &["PING"]) {
            Ok(RespValue::Simple(s)) if s == "PONG" => {}
            Ok(other) => {
                panic!("no {kind} answers at {addr} ({var}): PING returned {other:?}; {START_HINT}")
            }
            Err(e) => {
                let e = e
                    .strip_prefix(&format!("{addr}: "))
                    .unwrap_or(&e)
                    .to_string();
                panic!("no {kind} answers at {addr} ({var}): {e}; {START_HINT}")
            }
        }
    }
}

/// The `host:port` part of a Redis URL: `redis://user:pw@127.0.0.1:17379/0`
/// becomes `127.0.0.1:17379`. A URL without port gets `:6379`; a bare
/// `host:port` is returned unchanged.
pub fn addr_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = rest.rsplit_once('@').map_or(rest, |(_, hp)| hp);
    let has_port = match hostport.rfind(']') {
        Some(i) => hostport[i..].contains(':'), // [::1]:port
        None => hostport.contains(':'),
    };
    if has_port {
        hostport.to_string()
    } else {
        format!("{hostport}:6379")
    }
}

// ------------------------------------------------------------------ RESP

/// A RESP2 reply.
#[derive(Clone, PartialEq, Eq)]
pub enum RespValue {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`: the server's error reply (not a transport error).
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nfoo`
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`
    Null,
    /// `*2\r\n...`
    Array(Vec<RespValue>),
}

impl RespValue {
    /// The text of a simple string, or of a bulk string that is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            RespValue::Simple(s) => Some(s),
            RespValue::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            RespValue::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The elements of an array reply.
    pub fn as_array(&self) -> Option<&[RespValue]> {
        match self {
            RespValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// True for the simple string `OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, RespValue::Simple(s) if s == "OK")
    }

    /// True for `Null`.
    pub fn is_null(&self) -> bool {
        matches!(self, RespValue::Null)
    }
}

impl fmt::Debug for RespValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespValue::Simple(s) => write!(f, "Simple({s:?})"),
            RespValue::Error(s) => write!(f, "Error({s:?})"),
            RespValue::Integer(i) => write!(f, "Integer({i})"),
            RespValue::Bulk(b) => write!(f, "Bulk({:?})", String::from_utf8_lossy(b)),
            RespValue::Null => write!(f, "Null"),
            RespValue::Array(a) => f.debug_tuple("Array").field(a).finish(),
        }
    }
}

/// Encode a command as a RESP array of bulk strings.
pub fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Read one RESP2 value from `r`.
pub fn read_resp<R: BufRead>(r: &mut R) -> Result<RespValue, String> {
    let line = read_line(r)?;
    let (kind, body) = match line.as_bytes().first() {
        Some(&k) => (k, &line[1..]),
        None => return Err("empty RESP line".into()),
    };
    let int = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| format!("bad RESP integer {s:?}"))
    };
    match kind {
        b'+' => Ok(RespValue::Simple(body.to_string())),
        b'-' => Ok(RespValue::Error(body.to_string())),
        b':' => Ok(RespValue::Integer(int(body)?)),
        b'$' => {
            let len = int(body)?;
            if len < 0 {
                return Ok(RespValue::Null);
            }
            let mut buf = vec![0; len as usize + 2];
            r.read_exact(&mut buf).map_err(io_err)?;
            if !buf.ends_with(b"\r\n") {
                return Err("bulk string not terminated by CRLF".into());
            }
            buf.truncate(len as usize);
            Ok(RespValue::Bulk(buf))
        }
        b'*' => {
            let len = int(body)?;
            if len < 0 {
                return Ok(RespValue::Null);
            }
            (0..len)
                .map(|_| read_resp(r))
                .collect::<Result<_, _>>()
                .map(RespValue::Array)
        }
        other => Err(format!(
            "unexpected RESP type byte {:?} in line {line:?}",
            other as char
        )),
    }
}

fn read_line<R: BufRead>(r: &mut R) -> Result<String, String> {
    let mut buf = Vec::new();
    let n = r.read_until(b'\n', &mut buf).map_err(io_err)?;
    if n == 0 {
        return Err("connection closed by the server".into());
    }
    if !buf.ends_with(b"\r\n") {
        return Err(format!(
            "truncated RESP line {:?}",
            String::from_utf8_lossy(&buf)
        ));
    }
    buf.truncate(buf.len() - 2);
    String::from_utf8(buf).map_err(|e| format!("RESP line is not UTF-8: {e}"))
}

fn io_err(e: std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("timed out ({e})")
        }
        std::io::ErrorKind::UnexpectedEof => "connection closed by the server".into(),
        _ => e.to_string(),
    }
}

/// The fields of the reentrant or fair lock `key` on `addr`, read from its record
/// (`protocol/record.lua`) as the inspection script answers them, the way a hash's
/// HGETALL would: owner id -> its level count, `l:<level id>` -> the token (the outermost
/// level) or `1` (a nested one), `i:<owner id>` -> `host\tpid\tsite\tsince\ttoken`,
/// `hold:until`, `w`. Empty when there is no lock; panics on a key that is not a record.
pub fn lock_fields(addr: &str, key: &str) -> Vec<(String, String)> {
    let text = match resp_command(addr, &["GET", key]).expect("GET") {
        RespValue::Null => return Vec::new(),
        v => v.as_str().expect("a lock record").to_owned(),
    };
    let parts: Vec<&str> = text.splitn(6, '\t').collect();
    let [owner, token, levels, until, waiting, holder] = parts[..] else {
        panic!("{key}: not a lock record: {text:?}");
    };
    let mut out = Vec::new();
    if !owner.is_empty() {
        let levels: Vec<&str> = levels.split(',').filter(|l| !l.is_empty()).collect();
        out.push((owner.to_owned(), levels.len().to_string()));
        for (i, level) in levels.iter().enumerate() {
            let mark = if i == 0 { token } else { "1" };
            out.push((format!("l:{level}"), mark.to_owned()));
        }
        if !holder.is_empty() {
            out.push((format!("i:{owner}"), format!("{holder}\t{token}")));
        }
    }
    if !until.is_empty() {
        out.push(("hold:until".to_owned(), until.to_owned()));
    }
    if !waiting.is_empty() {
        out.push(("w".to_owned(), waiting.to_owned()));
    }
    out
}

/// One field of [`lock_fields`], as HGET would answer it.
pub fn lock_field(addr: &str, key: &str, field: &str) -> Option<String> {
    lock_fields(addr, key)
        .into_iter()
        .find(|(f, _)| f == field)
        .map(|(_, v)| v)
}

/// A lock record (`protocol/record.lua`) as text, to write with SET: `owner` holding
/// `levels` (outermost first) with `token`, no `until`, `waiting`, no holder information.
pub fn lock_record(owner: &str, token: u64, levels: &[&str], waiting: &str) -> String {
    format!("{owner}\t{token}\t{}\t\t{waiting}\t", levels.join(","))
}

/// Send one command to `addr` (`host:port`) over a fresh TCP connection and
/// return its reply. Connect, read and write time out after 2 s
/// ([`IO_TIMEOUT`]). `Err` is a transport problem (refused, timeout, garbled
/// reply); a Redis error reply is `Ok(RespValue::Error(..))`.
///
/// `SHUTDOWN` closes the connection without a reply; for it, a closed
/// connection counts as success and gives `Ok(RespValue::Null)`.
pub fn resp_command(addr: &str, args: &[&str]) -> Result<RespValue, String> {
    resp_command_timeout(addr, args, IO_TIMEOUT)
}

/// [`resp_command`] with another read timeout, e.g. for `DEBUG SLEEP 3`.
/// Connecting still times out after [`IO_TIMEOUT`].
pub fn resp_command_timeout(
    addr: &str,
    args: &[&str],
    read_timeout: Duration,
) -> Result<RespValue, String> {
    let fail = |e: String| format!("{addr}: {e}");
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| fail(format!("bad address: {e}")))?
        .next()
        .ok_or_else(|| fail("address resolves to nothing".into()))?;
    let mut stream = TcpStream::connect_timeout(&sock, IO_TIMEOUT).map_err(|e| fail(io_err(e)))?;
    stream
        .set_read_timeout(Some(read_timeout))
        .and_then(|_| stream.set_write_timeout(Some(IO_TIMEOUT)))
        .and_then(|_| stream.set_nodelay(true))
        .map_err(|e| fail(io_err(e)))?;
    stream
        .write_all(&encode_command(args))
        .map_err(|e| fail(io_err(e)))?;
    let mut reader = BufReader::new(stream);
    let is_shutdown = args
        .first()
        .is_some_and(|c| c.eq_ignore_ascii_case("SHUTDOWN"));
    match read_resp(&mut reader) {
        // The server exits without replying; the socket reads EOF or is reset.
        Err(e) if is_shutdown && (e.starts_with("connection closed") || e.contains("reset")) => {
            Ok(RespValue::Null)
        }
        other => other.map_err(fail),
    }
}

// ------------------------------------------------------------------ waiting

/// Poll `f` every 20 ms until it returns true; panic with `what` if that does
/// not happen within `timeout`. For conditions that have no event to await,
/// such as a server coming up or a failover completing.
pub fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    loop {
        if f() {
            return;
        }
        if start.elapsed() >= timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------------ RedisProcess

/// First port of the range [`RedisProcess`] allocates from (17400..17499).
pub const PRIVATE_PORT_BASE: u16 = 17400;
/// Number of ports in the [`RedisProcess`] range.
pub const PRIVATE_PORT_COUNT: u16 = 100;
/// How long [`RedisProcess`] waits for its server to answer `PING`.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

static NEXT_PORT: AtomicU32 = AtomicU32::new(0);
static NEXT_DIR: AtomicU32 = AtomicU32::new(0);
/// Ports of 17400..17499 handed out in this process: never handed out twice.
static TAKEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

/// Offset by which a cluster node's bus port follows its client port.
pub const CLUSTER_BUS_OFFSET: u16 = 10000;

/// A port of the private range (17400..17499) that nothing listens on now and that this
/// process has not handed out before (to a [`RedisProcess`] or a private topology of
/// [`topology`]), with its cluster bus port (+10000) free too.
///
/// Concurrent test binaries are spread over the range by their pid.
///
/// # Panics
/// If the whole range is in use.
pub fn allocate_port() -> u16 {
    try_allocate_port().unwrap_or_else(|| {
        panic!(
            "no free port in {}..{} (and +{CLUSTER_BUS_OFFSET} for the cluster bus)",
            PRIVATE_PORT_BASE,
            PRIVATE_PORT_BASE + PRIVATE_PORT_COUNT - 1
        )
    })
}

fn try_allocate_port() -> Option<u16> {
    let offset = std::process::id().wrapping_mul(7);
    for _ in 0..PRIVATE_PORT_COUNT {
        let n = offset.wrapping_add(NEXT_PORT.fetch_add(1, Ordering::Relaxed));
        let port = PRIVATE_PORT_BASE + (n % u32::from(PRIVATE_PORT_COUNT)) as u16;
        let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
        if taken.contains(&port) {
            continue;
        }
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if !free(port) || !free(port + CLUSTER_BUS_OFFSET) {
            continue;
        }
        taken.push(port);
        return Some(port);
    }
    None
}

/// A private `redis-server` owned by one test, for tests that kill, stop and
/// restart servers without disturbing the shared topologies.
///
/// Runs `redis-server --port P --bind 127.0.0.1 --save '' --appendonly no
/// --dir <tempdir>` as a child process (not daemonized) on a free port in
/// 17400..17499. Nothing is persisted, so a restarted server is empty.
/// Dropping it kills the server and removes its temporary directory.
///
/// The binary is `redis-server` from `PATH`, or `$DISTLOCK_REDIS_SERVER`.
pub struct RedisProcess {
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
    /// Extra environment of the server process (e.g. libfaketime's), kept across restarts.
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl RedisProcess {
    /// Start a server on a free port of 17400..17499 and wait until it answers
    /// `PING`.
    ///
    /// # Panics
    /// If `redis-server` cannot be run, or no port works, or the server does
    /// not come up within 10 s (the message names the port and shows the end
    /// of the server's log).
    pub fn start() -> RedisProcess {
        Self::start_with_args(&[])
    }

    /// Like [`RedisProcess::start`], with extra `redis-server` arguments (e.g.
    /// `["--replicaof", "127.0.0.1", "17401"]`). They are used again by
    /// [`RedisProcess::restart`].
    pub fn start_with_args(extra_args: &[&str]) -> RedisProcess {
        let dir = std::env::temp_dir().join(format!(
            "distlock-redis-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let mut process = RedisProcess {
            port: 0,
            dir,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            child: None,
        };
        // Spread concurrent test binaries over the range by pid; within one
        // binary, parallel tests take distinct ports (see `allocate_port`).
        let mut last_error = String::new();
        for _ in 0..PRIVATE_PORT_COUNT {
            let Some(port) = try_allocate_port() else {
                break;
            };
            process.port = port;
            match process.launch() {
                Ok(()) => return process,
                // Lost a race for the port to someone else: try the next one.
                Err(e) if e.contains("Address already in use") => last_error = e,
                Err(e) => panic!("{e}"),
            }
        }
        panic!(
            "RedisProcess: no free port in {}..{} could be used; last error: {last_error}",
            PRIVATE_PORT_BASE,
            PRIVATE_PORT_BASE + PRIVATE_PORT_COUNT - 1
        );
    }

    /// Start a server on `port` (from [`allocate_port`]) with extra arguments, and wait
    /// until it answers `PING`.
    ///
    /// # Panics
    /// If it does not come up within 10 s (the message shows the end of its log).
    pub fn start_on_port(port: u16, extra_args: &[&str]) -> RedisProcess {
        Self::start_on_port_env(port, extra_args, &[])
    }

    /// Like [`RedisProcess::start_on_port`], with extra environment variables for the
    /// server process (kept for [`RedisProcess::restart`]), e.g. libfaketime's
    /// `LD_PRELOAD` and `FAKETIME_TIMESTAMP_FILE`.
    ///
    /// # Panics
    /// If it does not come up within 10 s (the message shows the end of its log).
    pub fn start_on_port_env(port: u16, extra_args: &[&str], env: &[(&str, &str)]) -> RedisProcess {
        let dir = std::env::temp_dir().join(format!(
            "distlock-redis-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let mut process = RedisProcess {
            port,
            dir,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
        };
        if let Err(e) = process.launch() {
            panic!("{e}");
        }
        process
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Spawn the server on `self.port` and wait for it to answer `PING`.
    fn launch(&mut self) -> Result<(), String> {
        let port = self.port.to_string();
        let log_path = self.log_path();
        let log = File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let bin = std::env::var("DISTLOCK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // `DEBUG SLEEP` and `DEBUG POPULATE` from loopback (Redis 7 refuses DEBUG by
            // default): faults of the explorer and the tests.
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run `{bin}`: {e}; install redis-server (scripts/test.sh does it with apt-get)"
                )
            })?;
        let pid = child.id();
        self.child = Some(child);

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "redis-server on port {} exited during start-up ({status}); log {}:\n{}",
                    self.port,
                    log_path.display(),
                    self.log_tail()
                ));
            }
            // PONG alone is not enough: check that the server answering is
            // ours, not another process that won the port.
            if let Ok(RespValue::Bulk(info)) = resp_command(&self.addr(), &["INFO", "server"]) {
                let needle = format!("process_id:{pid}\r\n");
                if String::from_utf8_lossy(&info).contains(&needle) {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!(
                    "redis-server on port {} did not answer PING within {START_TIMEOUT:?}; log {}:\n{}",
                    self.port,
                    log_path.display(),
                    self.log_tail()
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The last lines of the server's log (stdout and stderr).
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port the server listens on; it keeps it across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, for [`resp_command`].
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's temporary working directory (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kill the server with SIGKILL and wait for it to exit: a crash, no
    /// goodbye to clients. No-op if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stop the server with `SHUTDOWN NOSAVE` and wait for it to exit (up to
    /// 10 s, then SIGKILL). No-op if it is not running.
    pub fn stop(&mut self) {
        if !self.is_running() {
            self.child = None;
            return;
        }
        let _ = resp_command(&self.addr(), &["SHUTDOWN", "NOSAVE"]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !self.is_running() {
                if let Some(mut child) = self.child.take() {
                    let _ = child.wait();
                }
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }

    /// Start the server again on the same port (same arguments, empty data
    /// set) and wait until it answers `PING`. A server that is still running
    /// is killed first.
    ///
    /// # Panics
    /// If it does not come up within 10 s, e.g. because another process took
    /// the port meanwhile.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.launch() {
            panic!("RedisProcess::restart: {e}");
        }
    }

    /// True while the server process is alive (it may still be starting).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }
}

impl fmt::Debug for RedisProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisProcess")
            .field("port", &self.port)
            .field("pid", &self.child.as_ref().map(Child::id))
            .field("dir", &self.dir)
            .finish()
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Make `user` (password `pw`) on the server at `addr` with the README's rights
/// ([`README_ACL_RIGHTS`]) and `more`, and return its URL.
///
/// # Panics
/// If the server refuses `ACL SETUSER`.
pub fn readme_acl_user(addr: &str, user: &str, more: &[&str]) -> String {
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw"];
    args.extend_from_slice(README_ACL_RIGHTS);
    args.extend_from_slice(more);
    let r = resp_command(addr, &args).expect("ACL SETUSER");
    assert!(r.is_ok(), "ACL SETUSER at {addr}: {r:?}");
    format!("redis://{user}:pw@{addr}")
}

/// The rights of the minimal `ACL SETUSER` line in docs/backends.md (key prefix `lock:`), as
/// arguments: the least-privilege tests grant exactly these (`tests/tests/acl.rs` checks
/// that line against them).
pub const README_ACL_RIGHTS: &[&str] = &[
    "~lock:*",
    "&lock:*",
    "+evalsha",
    "+eval",
    "+script|load",
    "+ping",
    "+incr",
    "+incrby",
    "+expire",
    "+publish",
    "+spublish",
    "+subscribe",
    "+unsubscribe",
    "+ssubscribe",
    "+sunsubscribe",
    "+del",
    "+exists",
    "+hdel",
    "+hexists",
    "+hget",
    "+hincrby",
    "+hmget",
    "+hset",
    "+get",
    "+set",
    "+lindex",
    "+lpop",
    "+lrem",
    "+persist",
    "+pexpire",
    "+pttl",
    "+rpush",
    "+time",
    "+zadd",
    "+zcard",
    "+zrange",
    "+zrangebyscore",
    "+zrem",
    "+zremrangebyscore",
    "+zscore",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<RespValue, String> {
        read_resp(&mut &bytes[..])
    }

    #[test]
    fn parses_every_resp2_type() {
        use RespValue::*;
        assert_eq!(parse(b"+OK\r\n"), Ok(Simple("OK".into())));
        assert_eq!(
            parse(b"-ERR unknown command\r\n"),
            Ok(Error("ERR unknown command".into()))
        );
        assert_eq!(parse(b":-42\r\n"), Ok(Integer(-42)));
        assert_eq!(parse(b"$5\r\nhe\r\no\r\n"), Ok(Bulk(b"he\r\no".to_vec())));
        assert_eq!(parse(b"$0\r\n\r\n"), Ok(Bulk(vec![])));
        assert_eq!(parse(b"$-1\r\n"), Ok(Null));
        assert_eq!(parse(b"*-1\r\n"), Ok(Null));
        assert_eq!(parse(b"*0\r\n"), Ok(Array(vec![])));
        assert_eq!(
            parse(b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n+x\r\n"),
            Ok(Array(vec![
                Integer(1),
                Array(vec![Bulk(b"a".to_vec()), Null]),
                Simple("x".into())
            ]))
        );
    }

    #[test]
    fn rejects_garbled_or_truncated_replies() {
        assert!(parse(b"").is_err());
        assert!(parse(b"+OK").is_err());
        assert!(parse(b"?what\r\n").is_err());
        assert!(parse(b":abc\r\n").is_err());
        assert!(parse(b"$5\r\nab\r\n").is_err());
        assert!(parse(b"*2\r\n:1\r\n").is_err());
    }

    #[test]
    fn encodes_commands_as_bulk_arrays() {
        assert_eq!(
            encode_command(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn addr_of_strips_scheme_auth_and_db() {
        assert_eq!(addr_of("redis://127.0.0.1:17379/0"), "127.0.0.1:17379");
        assert_eq!(addr_of("redis://127.0.0.1:17379"), "127.0.0.1:17379");
        assert_eq!(addr_of("rediss://u:p@h:1/2?x=y"), "h:1");
        assert_eq!(addr_of("redis://localhost"), "localhost:6379");
        assert_eq!(addr_of("redis://[::1]:7000/"), "[::1]:7000");
        assert_eq!(addr_of("127.0.0.1:17001"), "127.0.0.1:17001");
    }

    #[test]
    fn splits_url_lists() {
        assert_eq!(
            split_urls(" redis://a:1, redis://b:2 ,"),
            vec!["redis://a:1".to_string(), "redis://b:2".to_string()]
        );
    }

    #[test]
    fn down_server_panics_with_the_start_command() {
        // A port nobody listens on (bound then released).
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let urls = vec![format!("redis://127.0.0.1:{port}")];
        let err = std::panic::catch_unwind(|| require_up("DISTLOCK_TEST_X", &urls, "redis-server"))
            .expect_err("must panic");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains(&format!("127.0.0.1:{port} (DISTLOCK_TEST_X)")),
            "{msg}"
        );
        assert!(msg.contains("scripts/servers.sh start"), "{msg}");
        assert!(msg.contains("scripts/test.sh"), "{msg}");
    }

    #[test]
    fn wait_until_returns_or_panics() {
        let mut n = 0;
        wait_until(Duration::from_secs(1), "n to reach 3", || {
            n += 1;
            n >= 3
        });
        let err =
            std::panic::catch_unwind(|| wait_until(Duration::from_millis(50), "never", || false))
                .expect_err("must panic");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("never"), "{msg}");
    }
}
