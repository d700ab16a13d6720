//! The `init` self-check of a Redis backend (docs/backends.md, "TLS and least privilege"): once
//! connected, every server of the backend — the single server, the sentinel master, each
//! cluster master, each redlock/multi node — is asked at once, in one round trip each
//! (bounded by `response_timeout`), by `check/probe.rs`. Then:
//!
//! - a Redis older than [`MIN_REDIS_VERSION`](crate::check::report::MIN_REDIS_VERSION) fails `init`
//!   ([`InitError::ServerTooOld`]), naming what needs the newer version;
//! - a right the ACL user lacks fails `init` ([`InitError::MissingRights`]), naming each
//!   one in `ACL SETUSER` terms with the command that needs it;
//! - an eviction policy that can evict locks (`allkeys-*`, `volatile-*`) is a warning:
//!   evicted locks and fencing counters break exclusion and token order, but the
//!   operator may have sized memory so it never happens;
//! - a cluster master whose `cluster_state` is not `ok` is a warning, not a failure: the
//!   state is transient (a failover under way, a node unreachable for a moment), locks on
//!   the slots that are served work, and the others retry `CLUSTERDOWN` within their
//!   `wait`; refusing to start would turn a short outage into a crash loop;
//! - when the check itself cannot run for a reason other than a refusal (a proxy that
//!   rejects `EVAL` without keys, say) a warning says the rights were not checked;
//! - `INFO` refused to a least-privilege user is no failure: the probe script's
//!   `redis.REDIS_VERSION` gives the version, and the eviction policy stays unknown (logged
//!   at debug level).
//!
//! A redlock/multi node that does not answer only warns (the quorum tolerates nodes that
//! are down; a node connected later is not checked); on the other modes `init` fails. The
//! check runs at `init` only: a master a sentinel promotes later, or a right revoked
//! later, is not checked again (a refused PUBLISH then only costs waiters their wake-up:
//! the release scripts publish with `redis.pcall`).

use distlock_config::{BackendConfig, Mode, Protocol, ShardedSubscriptionMode};
use redis::IntoConnectionInfo;

use crate::check::probe::{Needs, Probe};
use crate::check::report::ServerReport;
use crate::errors::backend::DriverError;
use crate::protocol::Publish;
use crate::InitError;

/// What a backend checks on its servers, and how they are reached (for the reports).
#[derive(Debug)]
pub(crate) struct SelfCheck {
    pub(crate) probe: Probe,
    tls: bool,
    user: Option<String>,
    /// redlock/multi: a node that does not answer is tolerated.
    quorum: bool,
}

/// The ACL user of `url`: its user name, `default` with a password alone, `None` without.
fn user_of(url: &str) -> Option<String> {
    let info = url.into_connection_info().ok()?;
    let settings = info.redis_settings();
    match (settings.username(), settings.password()) {
        (Some(u), _) if !u.is_empty() => Some(u.to_owned()),
        (_, Some(_)) => Some("default".to_owned()),
        _ => None,
    }
}

/// Whether a cluster backend wakes waiters with plain pub/sub: only a Redisson one with
/// `sharded_subscription_mode = "off"`.
fn needs_plain(protocol: Protocol, mode: ShardedSubscriptionMode) -> bool {
    match (protocol, mode) {
        (Protocol::Redisson, ShardedSubscriptionMode::Off) => true,
        (Protocol::Redisson, ShardedSubscriptionMode::Auto | ShardedSubscriptionMode::On)
        | (Protocol::Distlock, _) => false,
    }
}

impl SelfCheck {
    /// The check of the backend `cfg` with key prefix `prefix`; `None` for memory.
    pub(crate) fn of(cfg: &BackendConfig, prefix: &str) -> Option<SelfCheck> {
        let plain = Needs {
            publish: Publish::Plain,
            cluster: false,
            role: false,
            wait: false,
            incrby: false,
            redisson: cfg.protocol == Protocol::Redisson,
        };
        let (needs, quorum) = match &cfg.mode {
            Mode::Memory => return None,
            Mode::Single { .. } => (plain, false),
            Mode::Cluster {
                sharded_subscription_mode,
                ..
            } => (
                Needs {
                    // Redisson's OFF: plain pub/sub (AUTO: sharded on Redis 7, the baseline)
                    publish: if needs_plain(cfg.protocol, *sharded_subscription_mode) {
                        Publish::Plain
                    } else {
                        Publish::Sharded
                    },
                    cluster: true,
                    ..plain
                },
                false,
            ),
            Mode::Sentinel { sync_replicas, .. } => (
                Needs {
                    role: true,
                    wait: *sync_replicas > 0,
                    ..plain
                },
                false,
            ),
            Mode::Redlock { .. } | Mode::Multi { .. } => (
                Needs {
                    incrby: true,
                    ..plain
                },
                true,
            ),
        };
        let urls = cfg.mode.urls();
        Some(SelfCheck {
            probe: Probe::new(prefix, needs),
            tls: urls.iter().any(|u| u.tls),
            user: urls.first().and_then(|u| user_of(&u.driver_url())),
            quorum,
        })
    }

    /// The ACL user of the connections (for errors).
    pub(crate) fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// `report` with how the server is reached.
    pub(crate) fn label(&self, mut report: ServerReport) -> ServerReport {
        report.tls = self.tls;
        report.user = self.user.clone();
        report
    }

    /// Fail `init` on what the servers report (see the module documentation).
    pub(crate) fn enforce(
        &self,
        backend: &str,
        reports: Vec<Result<ServerReport, DriverError>>,
    ) -> Result<(), InitError> {
        for report in reports {
            let r = match report {
                Ok(r) => r,
                Err(e) if self.quorum => {
                    tracing::warn!(backend, address = %e.address(), error = %e,
                        "distlock: the self-check of a node failed; its version and rights are not checked");
                    continue;
                }
                Err(e) => return Err(e.into_init_error(backend)),
            };
            if let Some(needs) = r.too_old {
                return Err(InitError::ServerTooOld {
                    backend: backend.to_owned(),
                    address: r.address,
                    version: r.version.unwrap_or_else(|| "(unknown)".into()),
                    minimum: crate::check::report::MIN_REDIS_VERSION.to_owned(),
                    needs,
                });
            }
            match &r.missing_rights {
                Some(missing) if !missing.is_empty() => {
                    return Err(InitError::MissingRights {
                        backend: backend.to_owned(),
                        address: r.address,
                        user: r.user,
                        missing: missing.clone(),
                        grant: r.grant,
                    });
                }
                Some(_) => {}
                None => {
                    tracing::warn!(backend, address = %r.address, problem = r.problem.as_deref().unwrap_or("?"),
                        "distlock: the self-check could not run on this server; the ACL user's rights are not checked");
                }
            }
            match r.eviction.as_deref() {
                None => tracing::debug!(backend, address = %r.address,
                    "distlock: INFO is not permitted; the eviction policy is not checked"),
                Some(policy) if r.evicts_locks() => {
                    tracing::warn!(backend, address = %r.address, policy,
                    "distlock: maxmemory-policy can evict held locks and fencing counters under memory pressure (allkeys-* evicts any key, volatile-* any key with an expiry, which every lock has): two holders could then overlap, and tokens restart from the clock; use noeviction")
                }
                Some(_) => {}
            }
            if let Some(state) = r.cluster_state.as_deref().filter(|s| *s != "ok") {
                tracing::warn!(backend, address = %r.address, state,
                    "distlock: cluster_state is not ok: locks on slots without a live master fail (CLUSTERDOWN, retried within their wait) until the cluster recovers");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_of_a_url() {
        assert_eq!(user_of("redis://app:pw@h:1").as_deref(), Some("app"));
        assert_eq!(user_of("redis://:pw@h:1").as_deref(), Some("default"));
        assert_eq!(user_of("redis://h:1"), None);
        // A valkeys:// URL, as the self-check passes it (its driver URL).
        let url = distlock_config::RedisUrl::parse("valkeys://app:pw@h:1").unwrap();
        assert_eq!(user_of(&url.driver_url()).as_deref(), Some("app"));
    }
}
