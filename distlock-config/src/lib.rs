//! Configuration for distlock: the TOML schema, validation and `${ENV}` interpolation.
//!
//! STATUS: public types are fixed (the runtime codes against them); the parser is being written.

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
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// `mode = "..."` and the fields that mode takes.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// One Redis server.
    Single { url: RedisUrl },
    /// A Redis Cluster, reached through any of `nodes`.
    Cluster { nodes: Vec<RedisUrl> },
    /// A master found through Redis Sentinel.
    Sentinel {
        master_name: String,
        sentinels: Vec<RedisUrl>,
        /// WAIT for this many replica acknowledgements after acquiring (default 0).
        sync_replicas: u32,
        /// How long to WAIT for them (default `"1s"`).
        sync_timeout: Duration,
    },
    /// A majority of independent masters.
    Redlock { nodes: Vec<RedisUrl>, quorum: QuorumOptions },
    /// All of several independent masters.
    Multi { nodes: Vec<RedisUrl>, quorum: QuorumOptions },
    /// In-process.
    Memory,
}

/// Options shared by `redlock` and `multi`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuorumOptions {
    /// Per-node timeout for one request (`node_timeout`, default `"50ms"`).
    pub node_timeout: Duration,
    /// Clock drift allowance as a fraction of the lease (`drift_factor`, default 0.01).
    pub drift_factor: f64,
    /// Upper bound of the random delay between attempts (`retry_delay`, default `"50ms"`).
    pub retry_delay: Duration,
}

impl Mode {
    /// The name used in TOML: `"single"`, `"cluster"`, ...
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Single { .. } => "single",
            Mode::Cluster { .. } => "cluster",
            Mode::Sentinel { .. } => "sentinel",
            Mode::Redlock { .. } => "redlock",
            Mode::Multi { .. } => "multi",
            Mode::Memory => "memory",
        }
    }
}

/// A configuration error that names where it is: source, line and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {field}: {message}")]
pub struct ConfigError {
    /// `path:line`, `<string>:line`, or just the path when no line applies.
    pub location: String,
    /// The dotted field, e.g. `backends.main.url`; `(file)` when the whole file is concerned.
    pub field: String,
    /// What is wrong.
    pub message: String,
}
