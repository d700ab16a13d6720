//! Configuration for distlock: the TOML schema, validation and `${ENV}` interpolation.
//!
//! A configuration names one or more Redis *backends* and the defaults locks use. Every string
//! value may use `${ENV_VAR}` (replaced by that environment variable; `$$` is a literal `$`).
//! Every error names the source, the line and the dotted field, and says what is accepted.
//!
//! ```toml
//! [defaults]                      # optional
//! backend = "main"                # default backend; optional when there is only one
//! wait = "5s"                     # longest wait to acquire (default "5s")
//! lease = "auto"                  # "auto" (watchdog-renewed) or a duration such as "30s"
//! watchdog_timeout = "30s"        # lease kept alive by the watchdog (default "30s", >= 100ms)
//! key_prefix = "lock:"            # prefix of every key (default "lock:", no `{` or `}`)
//!
//! [backends.main]                 # one Redis server
//! mode = "single"
//! url = "redis://:${REDIS_PASSWORD}@127.0.0.1:6379/0"
//! response_timeout = "2s"         # every mode but memory (default "2s")
//! connect_timeout = "2s"          # every mode but memory (default "2s")
//! holder_info = true              # record who holds each lock; every mode but memory (default true; false with protocol = "redisson")
//! handoff = true                  # a release hands the lock to a waiter of this process; false: barging (default true)
//! required = true                 # false: init succeeds while it is down (default true)
//! tcp_nodelay = false             # true: each request sent at once, not gathered while others are answered (default false)
//! protocol = "distlock"           # "redisson": Redisson's on-Redis format; single, cluster, sentinel (default "distlock")
//! # mode = "cluster" with protocol = "redisson" also takes:
//! # sharded_subscription_mode = "auto"   # Redisson's shardedSubscriptionMode: "on", "off" (default "auto")
//!
//! [backends.secure]               # TLS: rediss:// URLs (every mode but memory)
//! mode = "single"
//! url = "rediss://app:${REDIS_PASSWORD}@redis.internal:6380/0"
//! tls_ca = "/etc/distlock/ca.pem"          # PEM bundle (default: the platform's roots)
//! tls_cert = "/etc/distlock/client.pem"    # mutual TLS: client certificate, with tls_key
//! tls_key = "/etc/distlock/client.key"
//! tls_insecure_skip_verify = false         # true: nothing verified, a warning at every init
//!
//! [backends.cluster]              # a Redis Cluster
//! mode = "cluster"
//! nodes = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]
//!
//! [backends.ha]                   # a master found through Sentinel
//! mode = "sentinel"
//! master_name = "mymaster"
//! sentinels = ["redis://10.0.1.1:26379", "redis://10.0.1.2:26379"]
//! sync_replicas = 1               # WAIT for this many replicas (default 0)
//! sync_timeout = "1s"             # (default "1s")
//! master_password = "${MASTER_PASSWORD}"   # the master's, when not the sentinels' (default: theirs)
//! master_username = "app"         # with it, the master's ACL user (default: the sentinels')
//!
//! [backends.quorum]               # a majority of independent masters ("multi": all of them)
//! mode = "redlock"
//! nodes = ["redis://10.0.2.1", "redis://10.0.2.2", "redis://10.0.2.3"]
//! node_timeout = "50ms"           # (default "50ms")
//! drift_factor = 0.01             # 0 <= x < 0.5 (default 0.01)
//! retry_delay = "50ms"            # (default "50ms")
//!
//! [backends.test]                 # in-process, for tests
//! mode = "memory"
//! ```
//!
//! ```
//! use std::time::Duration;
//! # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
//! use distlock::config::{Config, LeaseSpec, Mode};
//!
//! let config = Config::from_str(r#"
//!     [defaults]
//!     wait = "1s"
//!     lease = "10s"
//!
//!     [backends.main]
//!     mode = "single"
//!     url = "redis://127.0.0.1:6379"
//! "#).unwrap();
//!
//! assert_eq!(config.defaults.backend.as_deref(), Some("main"));
//! assert_eq!(config.defaults.wait, Duration::from_secs(1));
//! assert_eq!(config.defaults.lease, LeaseSpec::Fixed(Duration::from_secs(10)));
//! assert_eq!(config.defaults.key_prefix, "lock:");
//! let Mode::Single { url, .. } = &config.backends["main"].mode else { unreachable!() };
//! assert_eq!(url.address, "127.0.0.1:6379");
//!
//! let err = Config::from_str("[backends.main]\nmode = \"single\"\n").unwrap_err();
//! assert_eq!(err.to_string(),
//!     "<string>:1: backends.main.url: missing field `url` (required by mode \"single\")");
//! ```

mod duration;
mod error;
mod interp;
mod limits;
mod redis_url;
mod schema;

pub use duration::{format_duration, parse_duration};
pub use error::ConfigError;
pub use limits::{
    check_duration, range_text, DurationOutOfRange, DurationUse, MAX_FENCE_TTL, MAX_LEASE,
};
pub use redis_url::DEFAULT_PORT;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use std::collections::BTreeMap;
use std::time::Duration;

/// Where a configuration came from: a file path, or a name given to a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Read from this file.
    File(std::path::PathBuf),
    /// Given as a string (`init_from_str`); shown as `<string>` in messages.
    Str,
}

/// A parsed, validated configuration.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// Where it came from.
    pub source: Source,
    /// `[defaults]`, with every default filled in.
    pub defaults: Defaults,
    /// `[backends.NAME]`, by name.
    pub backends: BTreeMap<String, BackendConfig>,
}

/// How long a lock is leased for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseSpec {
    /// Renewed by the watchdog while held; the lease length is `watchdog_timeout`.
    Auto,
    /// A fixed lease, never renewed.
    Fixed(Duration),
}

/// `[defaults]`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Defaults {
    /// The default backend: explicit, or the only backend when there is exactly one;
    /// `None` when there are several and none is named.
    pub backend: Option<String>,
    /// Default longest wait to acquire (`"5s"` when absent).
    pub wait: Duration,
    /// Default lease (`Auto` when absent).
    pub lease: LeaseSpec,
    /// Lease length kept alive by the watchdog for `Auto` (`"30s"` when absent).
    pub watchdog_timeout: Duration,
    /// Prefix of every Redis key distlock writes (`"lock:"` when absent).
    pub key_prefix: String,
}

/// A Redis URL that parsed and passed validation.
///
/// `Debug` and `Display` show it with the password replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisUrl {
    /// The URL as written (after `${ENV}` interpolation), credentials included.
    pub url: String,
    /// `host:port`, without credentials: what messages show.
    pub address: String,
    /// `true` for `rediss://`.
    pub tls: bool,
}

/// One `[backends.NAME]` table.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BackendConfig {
    /// The NAME in `[backends.NAME]`.
    pub name: String,
    /// The 1-based line of the `[backends.NAME]` header.
    pub line: usize,
    /// The mode and its fields.
    pub mode: Mode,
    /// Longest wait for one Redis reply (`response_timeout`, default `"2s"`).
    pub response_timeout: Duration,
    /// Longest wait to open a connection (`connect_timeout`, default `"2s"`).
    pub connect_timeout: Duration,
    /// PEM bundle of the CAs that may sign the servers' certificates (`tls_ca`); `None`:
    /// the platform's roots. Used with `rediss://` URLs.
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate (chain) for mutual TLS (`tls_cert`, with `tls_key`).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert` (`tls_key`).
    pub tls_key: Option<PathBuf>,
    /// Accept any server certificate (`tls_insecure_skip_verify`, default `false`): a
    /// warning is logged at every `init`.
    pub tls_insecure_skip_verify: bool,
    /// Record who holds each lock (host, pid, lock site, since, token) in the lock's own
    /// hash, written by the acquiring command, for `distlock list`/`show` and
    /// `Registry::inspect` (`holder_info`, default `true`, and `false` with
    /// `protocol = "redisson"`, whose format has no place for it).
    pub holder_info: bool,
    /// How a release passes a contended reentrant lock on (`handoff`, default `true`; every
    /// mode but memory, like the fields above). `true`: *direct hand-off* — a release that
    /// frees the lock while a task of this process waits for it grants it to the first
    /// such waiter in the release's own script (first come, first served among this
    /// process's waiters, ahead of other processes'). `false`: *barging* — the release
    /// frees the lock and wakes the waiters, and whichever asks first gets it (another
    /// process's waiter, or the releasing task acquiring again). It applies where hand-off
    /// exists: distlock's format on single, cluster and sentinel without `sync_replicas`;
    /// elsewhere (redlock, multi, sentinel with `sync_replicas`, `protocol = "redisson"`)
    /// locks always barge and the field is accepted and changes nothing, so a
    /// configuration valid on one of these modes stays valid on another. Strict order
    /// across processes is the fair lock (`kind = "fair"`).
    ///
    /// ```
    /// let cfg = distlock_config::Config::from_str(
    ///     "[backends.main]\nmode = \"single\"\nurl = \"redis://127.0.0.1:6379\"\nhandoff = false",
    /// ).unwrap();
    /// assert!(!cfg.backends["main"].handoff);
    /// ```
    pub handoff: bool,
    /// `init` fails when this backend cannot be reached (`required`, default `true`).
    /// With `false`, `init` succeeds without it (logging a warning), it is connected in
    /// the background (retrying with backoff, 50 ms doubling up to 30 s), and until then
    /// every lock on it fails at once with a `Backend` error of kind `Connection` naming
    /// the backend, the address and why it cannot be reached.
    pub required: bool,
    /// Whether the shared command connections send every request at once (`tcp_nodelay`,
    /// default `false`; every mode but memory). With `false` they leave Nagle's algorithm
    /// on, as redis-rs does: a request written while an earlier one on the same connection
    /// is unanswered waits in the kernel until that answer comes, and goes with the others
    /// written meanwhile. Many tasks locking at once so send fewer, larger writes, and the
    /// server gets through more of them (10–20 % more lock+unlock pairs with 64 tasks on
    /// one server, in the project's benchmark). A request on an idle connection goes at
    /// once either way, so a lone caller waits no longer. `true` sends each request as it is
    /// written, at the cost of that throughput: a request waits for no earlier answer, which
    /// on a network with a long round trip can shorten a busy connection's latency, and a
    /// request longer than a network segment never waits for an acknowledgement (with the
    /// classic algorithm of some systems, not Linux's, its last segment can wait for the
    /// server's delayed ACK, up to 40 ms: set `true` there). The connections a caller drives
    /// itself, the subscribers and the sentinels always send at once (`TCP_NODELAY`).
    ///
    /// ```
    /// let cfg = distlock_config::Config::from_str(
    ///     "[backends.main]\nmode = \"single\"\nurl = \"redis://127.0.0.1:6379\"\ntcp_nodelay = true",
    /// ).unwrap();
    /// assert!(cfg.backends["main"].tcp_nodelay);
    /// ```
    pub tcp_nodelay: bool,
    /// The on-Redis lock format (`protocol`, default `"distlock"`; every mode but memory):
    /// `"redisson"` speaks Redisson's, so Java services locking with Redisson and distlock
    /// exclude and wake each other (see the repository's docs/redisson.md).
    pub protocol: Protocol,
}

/// The on-Redis lock format of a backend (`protocol = "distlock" | "redisson"`).
///
/// ```
/// let cfg = distlock_config::Config::from_str(
///     "[backends.java]\nmode = \"single\"\nurl = \"redis://127.0.0.1:6379\"\nprotocol = \"redisson\"",
/// ).unwrap();
/// assert_eq!(cfg.backends["java"].protocol, distlock_config::Protocol::Redisson);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    /// distlock's own format (the default).
    #[default]
    Distlock,
    /// Redisson's format (reentrant and fenced locks; see the repository's docs/redisson.md).
    Redisson,
}

/// Redisson's `ClusterServersConfig.shardedSubscriptionMode`, for a cluster backend with
/// `protocol = "redisson"` (`sharded_subscription_mode = "auto" | "on" | "off"`): both sides
/// must announce releases the same way, since a sharded message never reaches a plain
/// subscriber and vice versa.
///
/// ```
/// let cfg = distlock_config::Config::from_str(
///     "[backends.java]\nmode = \"cluster\"\nnodes = [\"redis://127.0.0.1:7000\"]\nprotocol = \"redisson\"\nsharded_subscription_mode = \"off\"",
/// ).unwrap();
/// match &cfg.backends["java"].mode {
///     distlock_config::Mode::Cluster { sharded_subscription_mode, .. } => assert_eq!(
///         *sharded_subscription_mode,
///         distlock_config::ShardedSubscriptionMode::Off
///     ),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ShardedSubscriptionMode {
    /// Sharded when the servers know `PUBSUB SHARDNUMSUB` (Redis 7 and later), as Redisson's
    /// `AUTO` (the default).
    #[default]
    Auto,
    /// Always `SPUBLISH`/`SSUBSCRIBE` (Redisson's `ON`).
    On,
    /// Always `PUBLISH`/`SUBSCRIBE` (Redisson's `OFF`).
    Off,
}

/// `mode = "..."` and the fields that mode takes.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// One Redis server.
    #[non_exhaustive]
    Single {
        /// The server.
        url: RedisUrl,
    },
    /// A Redis Cluster, reached through any of `nodes`.
    #[non_exhaustive]
    Cluster {
        /// Seed nodes (the client discovers the rest).
        nodes: Vec<RedisUrl>,
        /// With `protocol = "redisson"`: sharded (`SPUBLISH`/`SSUBSCRIBE`) or plain pub/sub
        /// for wake-ups, as Redisson's `shardedSubscriptionMode` (`sharded_subscription_mode`,
        /// default `"auto"`). distlock's own protocol always uses sharded pub/sub.
        sharded_subscription_mode: ShardedSubscriptionMode,
    },
    /// A master found through Redis Sentinel.
    #[non_exhaustive]
    Sentinel {
        /// The name the sentinels monitor the master under.
        master_name: String,
        /// The sentinels (their credentials and database are used for the master too).
        sentinels: Vec<RedisUrl>,
        /// WAIT for this many replica acknowledgements after acquiring (default 0).
        sync_replicas: u32,
        /// How long to WAIT for them (default `"1s"`).
        sync_timeout: Duration,
        /// The ACL user for the master and replicas (`master_username`), when it differs
        /// from the sentinels'; default: the sentinel URL's user.
        master_username: Option<String>,
        /// The password for the master and replicas (`master_password`), when it differs
        /// from the sentinels'; default: the sentinel URL's password.
        master_password: Option<Secret>,
    },
    /// A majority of independent masters.
    #[non_exhaustive]
    Redlock {
        /// The independent masters.
        nodes: Vec<RedisUrl>,
        /// Timeouts, drift and retry delay.
        quorum: QuorumOptions,
    },
    /// All of several independent masters.
    #[non_exhaustive]
    Multi {
        /// The independent masters.
        nodes: Vec<RedisUrl>,
        /// Timeouts, drift and retry delay.
        quorum: QuorumOptions,
    },
    /// In-process.
    Memory,
}

/// Options shared by `redlock` and `multi`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct QuorumOptions {
    /// Per-node timeout for one request (`node_timeout`, default `"50ms"`).
    pub node_timeout: Duration,
    /// Clock drift allowance as a fraction of the lease (`drift_factor`, default 0.01).
    pub drift_factor: f64,
    /// Upper bound of the random delay between attempts (`retry_delay`, default `"50ms"`).
    pub retry_delay: Duration,
}

/// Which mode a backend runs in, without the mode's fields: what
/// `LockError::Unsupported` names, and what a caller can match on.
///
/// ```
/// let cfg = distlock_config::Config::from_str(
///     "[backends.main]\nmode = \"redlock\"\nnodes = [\"redis://127.0.0.1:7000\", \"redis://127.0.0.1:7001\", \"redis://127.0.0.1:7002\"]",
/// ).unwrap();
/// assert_eq!(cfg.backends["main"].mode.kind(), distlock_config::ModeKind::Redlock);
/// assert_eq!(distlock_config::ModeKind::Redlock.to_string(), "redlock");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModeKind {
    /// `mode = "single"`.
    Single,
    /// `mode = "cluster"`.
    Cluster,
    /// `mode = "sentinel"`.
    Sentinel,
    /// `mode = "redlock"`.
    Redlock,
    /// `mode = "multi"`.
    Multi,
    /// `mode = "memory"`.
    Memory,
}

impl ModeKind {
    /// The name used in TOML: `"single"`, `"cluster"`, ...
    pub fn name(self) -> &'static str {
        match self {
            ModeKind::Single => "single",
            ModeKind::Cluster => "cluster",
            ModeKind::Sentinel => "sentinel",
            ModeKind::Redlock => "redlock",
            ModeKind::Multi => "multi",
            ModeKind::Memory => "memory",
        }
    }
}

impl std::fmt::Display for ModeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Protocol {
    /// The name used in TOML: `"distlock"` or `"redisson"`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Distlock => "distlock",
            Protocol::Redisson => "redisson",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Mode {
    /// Which mode this is, without its fields.
    pub fn kind(&self) -> ModeKind {
        match self {
            Mode::Single { .. } => ModeKind::Single,
            Mode::Cluster { .. } => ModeKind::Cluster,
            Mode::Sentinel { .. } => ModeKind::Sentinel,
            Mode::Redlock { .. } => ModeKind::Redlock,
            Mode::Multi { .. } => ModeKind::Multi,
            Mode::Memory => ModeKind::Memory,
        }
    }

    /// The Redis servers the mode names (sentinels for `sentinel`); none for `memory`.
    pub fn urls(&self) -> Vec<&RedisUrl> {
        match self {
            Mode::Single { url } => vec![url],
            Mode::Cluster { nodes, .. }
            | Mode::Redlock { nodes, .. }
            | Mode::Multi { nodes, .. } => nodes.iter().collect(),
            Mode::Sentinel { sentinels, .. } => sentinels.iter().collect(),
            Mode::Memory => Vec::new(),
        }
    }

    /// The name used in TOML: `"single"`, `"cluster"`, ...
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }
}

/// A password: kept out of `Debug` (which shows `Secret(***)`); [`Secret::expose`] gives
/// the value to whoever must send it.
///
/// ```
/// let s = distlock_config::Secret::new("hunter2".to_owned());
/// assert_eq!(format!("{s:?}"), "Secret(***)");
/// assert_eq!(s.expose(), "hunter2");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap `value`.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The secret itself (to send it; never to print it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Never the password: `RedisUrl { url: "redis://user:***@host:6379", .. }`.
impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisUrl")
            .field("url", &self.to_string())
            .field("address", &self.address)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Shows a file's path, or `<string>`.
impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(path) => write!(f, "{}", path.display()),
            Source::Str => f.write_str("<string>"),
        }
    }
}

impl Config {
    /// Parses and validates a configuration given as a string.
    ///
    /// `${ENV_VAR}`s are replaced from the process environment. Errors are located as
    /// `<string>:LINE`.
    ///
    /// # Examples
    ///
    /// ```
    /// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
    /// use distlock::config::{Config, Mode};
    ///
    /// let config = Config::from_str(r#"
    /// [backends.main]
    /// mode = "redlock"
    /// nodes = ["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"]
    ///
    /// [backends.test]
    /// mode = "memory"
    /// "#).unwrap();
    /// assert_eq!(config.backends["main"].mode.name(), "redlock");
    /// assert_eq!(config.backends["test"].mode, Mode::Memory);
    /// assert_eq!(config.defaults.backend, None); // two backends, none named
    ///
    /// let err = Config::from_str("[backends.main]\nmode = \"single\"\nnodes = []\n").unwrap_err();
    /// assert_eq!(err.location, "<string>:3");
    /// assert_eq!(err.field, "backends.main.nodes");
    /// assert!(err.message.starts_with("field `nodes` is not used by mode \"single\""));
    /// ```
    #[allow(clippy::should_implement_trait)] // it is implemented too; this one needs no import
    pub fn from_str(text: &str) -> Result<Config, ConfigError> {
        Config::from_str_with_source(text, Source::Str)
    }

    /// Parses and validates a configuration file.
    ///
    /// Errors are located as `PATH:LINE`; a file that cannot be read gives an error located
    /// at the path, with the field `(file)`.
    ///
    /// # Examples
    ///
    /// ```
    /// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
    /// use distlock::config::Config;
    ///
    /// let err = Config::from_path("/nonexistent/distlock.toml").unwrap_err();
    /// assert_eq!(err.location, "/nonexistent/distlock.toml");
    /// assert_eq!(err.field, "(file)");
    /// ```
    pub fn from_path(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        match std::fs::read_to_string(path) {
            Ok(text) => Config::from_str_with_source(&text, Source::File(path.to_path_buf())),
            Err(e) => {
                let mut message = format!("cannot read the configuration file: {e}");
                if path.is_relative() {
                    match std::env::current_dir() {
                        Ok(dir) => message.push_str(&format!(
                            " (a relative path: looked in the working directory {})",
                            dir.display()
                        )),
                        Err(_) => message.push_str(
                            " (a relative path, and the working directory cannot be read)",
                        ),
                    }
                }
                Err(ConfigError {
                    location: path.display().to_string(),
                    field: "(file)".to_owned(),
                    message,
                })
            }
        }
    }

    /// Parses and validates `text`, locating errors in `source` (its path, or `<string>`).
    ///
    /// # Examples
    ///
    /// ```
    /// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
    /// use distlock::config::{Config, Source};
    ///
    /// let source = Source::File("conf/locks.toml".into());
    /// let err = Config::from_str_with_source("[backends.a]\nmode = \"nope\"\n", source).unwrap_err();
    /// assert_eq!(err.location, "conf/locks.toml:2");
    /// assert_eq!(err.field, "backends.a.mode");
    /// ```
    pub fn from_str_with_source(text: &str, source: Source) -> Result<Config, ConfigError> {
        schema::parse(text, source, &|name| std::env::var(name))
    }

    /// The default backend's configuration, if there is one.
    ///
    /// # Examples
    ///
    /// ```
    /// # mod distlock { pub(crate) use distlock_config as config; } // as seen from the `distlock` crate
    /// use distlock::config::Config;
    ///
    /// let config = Config::from_str("[backends.only]\nmode = \"memory\"\n").unwrap();
    /// assert_eq!(config.default_backend().map(|b| b.name.as_str()), Some("only"));
    /// ```
    pub fn default_backend(&self) -> Option<&BackendConfig> {
        self.backends.get(self.defaults.backend.as_deref()?)
    }
}

impl FromStr for Config {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Config, ConfigError> {
        Config::from_str_with_source(text, Source::Str)
    }
}
