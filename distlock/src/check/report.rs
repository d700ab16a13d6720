//! What one server of a backend says about itself: a plain data type the topologies fill
//! (the `init` self-check, `check/probe.rs`) and `Registry::probe` returns (kept apart
//! from `inspect.rs`, which uses the backends).

/// What one server of a backend says about itself: what `init` checks on it, and
/// `Registry::probe` (`distlock check`) reports.
///
/// ```
/// # fn show(s: &distlock::inspect::ServerReport) {
/// if let Some(why) = &s.too_old {
///     println!("{} runs Redis {:?}: too old: {why}", s.address, s.version);
/// }
/// for right in s.missing_rights.iter().flatten() {
///     println!("{}: {right}", s.address);
/// }
/// if s.evicts_locks() {
///     println!("{}: maxmemory-policy {:?} can evict locks", s.address, s.eviction);
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerReport {
    /// `host:port` of the server (a cluster: each master).
    pub address: String,
    /// The Redis version (`redis.REDIS_VERSION` in the probe script, else `INFO server`;
    /// `None`: neither could be asked). On Valkey this is the Redis version it is
    /// compatible with (7.2.4 on Valkey 8); its own version is `flavour_version`. The
    /// minimum version is judged on this one.
    pub version: Option<String>,
    /// The server software, from `INFO server`: `"Redis"`, or `"Valkey"` when it says
    /// `server_name:valkey` (`None`: `INFO` is not permitted to the user).
    pub flavour: Option<String>,
    /// The version of `flavour`: `valkey_version` on Valkey, `redis_version` on Redis.
    pub flavour_version: Option<String>,
    /// `maxmemory_policy` from `INFO memory` (`None`: `INFO` is not permitted to the user).
    /// Under memory pressure an `allkeys-*` policy can evict any key, held locks and
    /// fencing counters included, and a `volatile-*` policy any key with an expiry, which
    /// every lock has; only `noeviction` never evicts a lock.
    pub eviction: Option<String>,
    /// A cluster master's `cluster_state` (`ok` or `fail`; `None`: not a cluster, or
    /// `CLUSTER INFO` not permitted).
    pub cluster_state: Option<String>,
    /// Whether the connection uses TLS (`rediss://`).
    pub tls: bool,
    /// The ACL user of the connection (`None`: no AUTH; `default` for a password alone).
    /// Never the password.
    pub user: Option<String>,
    /// The rights the ACL user lacks, in `ACL SETUSER` terms with the command that needs
    /// each (`missing +hincrby`, `missing channel permission &lock:* (PUBLISH ...)`).
    /// Empty: every right is there. `None`: the check could not run (see `problem`).
    pub missing_rights: Option<Vec<String>>,
    /// Why this server's Redis version is too old for distlock (`None`: it is not, or it
    /// is not known).
    pub too_old: Option<String>,
    /// What went wrong asking, when the permission check could not run.
    pub problem: Option<String>,
    /// The `ACL SETUSER` arguments that grant `missing_rights`.
    pub(crate) grant: Vec<String>,
}

impl ServerReport {
    /// A report with nothing known yet.
    pub(crate) fn new(address: &str) -> ServerReport {
        ServerReport {
            address: address.to_owned(),
            version: None,
            flavour: None,
            flavour_version: None,
            eviction: None,
            cluster_state: None,
            tls: false,
            user: None,
            missing_rights: None,
            too_old: None,
            problem: None,
            grant: Vec::new(),
        }
    }

    /// The server as `distlock check` shows it: `Valkey 8.1.8`, `Redis 7.0.15`; only the
    /// Redis version when `INFO` is not permitted (`7.0.15`); `None` when nothing is known.
    ///
    /// ```
    /// # fn show(s: &distlock::inspect::ServerReport) {
    /// println!("{}: {}", s.address, s.server().unwrap_or_else(|| "?".into()));
    /// # }
    /// ```
    pub fn server(&self) -> Option<String> {
        match (&self.flavour, &self.flavour_version, &self.version) {
            (Some(f), Some(v), _) => Some(format!("{f} {v}")),
            (Some(f), None, Some(v)) => Some(format!("{f} {v}")),
            (Some(f), None, None) => Some(f.clone()),
            (None, _, v) => v.clone(),
        }
    }

    /// Whether the eviction policy can evict held locks and fencing counters (any policy
    /// but `noeviction`: `allkeys-*` and `volatile-*`; every lock has an expiry).
    pub fn evicts_locks(&self) -> bool {
        self.eviction.as_deref().is_some_and(|p| p != "noeviction")
    }

    /// Whether the server is fit for distlock: not too old, no right missing, and (a
    /// cluster) its state is not `fail`. An unknown eviction policy or state is not a
    /// failure.
    pub fn is_ok(&self) -> bool {
        self.too_old.is_none()
            && self.missing_rights.as_ref().is_some_and(Vec::is_empty)
            && self.cluster_state.as_deref().is_none_or(|s| s == "ok")
    }
}

/// The oldest Redis version distlock runs on: `init` refuses an older server, naming what
/// needs the newer one (sharded pub/sub on a cluster, `EXPIRE ... NX`, the permission check's
/// `redis.acl_check_cmd`, ACL users, `TIME` in scripts that write).
///
/// ```
/// assert_eq!(distlock::inspect::MIN_REDIS_VERSION, "7.0");
/// ```
pub const MIN_REDIS_VERSION: &str = "7.0";

/// The self-check of one backend ([`Registry::check`](crate::Registry::check), `distlock
/// check`).
#[derive(Debug)]
#[non_exhaustive]
pub struct BackendReport {
    /// The backend's name.
    pub backend: String,
    /// Its `mode`.
    pub mode: String,
    /// The configured addresses (`memory` for the memory backend).
    pub address: String,
    /// Each server's report (or why it could not be asked; none for memory), or why the
    /// backend could not be connected.
    pub servers: Result<Vec<Result<ServerReport, crate::LockError>>, crate::InitError>,
}
