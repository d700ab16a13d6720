//! What one server of a backend says about itself: a plain data type the topologies fill
//! and `Registry::probe` returns (kept apart from `inspect.rs`, which uses the backends).

/// What one server of a backend says about itself (`Registry::probe`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerReport {
    /// `host:port` (a cluster: its configured nodes).
    pub address: String,
    /// `redis_version` from `INFO server`.
    pub version: Option<String>,
    /// `maxmemory-policy` (`None`: `CONFIG GET` is not permitted). Anything but
    /// `noeviction` (or a `volatile-*` policy, which spares keys without expiry only) can
    /// evict a held lock under memory pressure.
    pub eviction: Option<String>,
    /// A cluster's `cluster_state` (`ok` or `fail`).
    pub cluster_state: Option<String>,
}

impl ServerReport {
    pub(crate) fn new(
        address: &str,
        info: &str,
        eviction: Option<String>,
        cluster_state: Option<String>,
    ) -> ServerReport {
        ServerReport {
            address: address.to_owned(),
            version: info
                .lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .map(|v| v.trim().to_owned()),
            eviction,
            cluster_state,
        }
    }
}
