//! The one error type of the drivers, and its mapping to the public errors.
//!
//! Every failure a driver meets is a [`DriverError`] that knows the address concerned;
//! [`DriverError::into_lock_error`] and [`DriverError::into_init_error`] are the only places
//! it becomes a [`LockError`] or an [`InitError`]. Conditions distlock detects itself (a
//! timeout, a node not connected yet, too few nodes) are variants of their own, not made-up
//! Redis errors.

use std::time::Duration;

use redis::RedisError;

use crate::protocol::UnexpectedReply;
use crate::{BackendError, InitError, LockError};

/// Why a driver could not do what was asked.
#[derive(Debug, Clone)]
pub(crate) enum DriverError {
    /// Redis answered with an error, or the connection failed.
    Redis { address: String, source: RedisError },
    /// No reply within the time allowed.
    TimedOut {
        address: String,
        what: &'static str,
        after: Duration,
    },
    /// A node of a quorum backend that has not been reached yet (it is being connected in
    /// the background).
    NotConnected { address: String },
    /// A quorum backend: too few nodes answered; each node's failure is kept.
    TooFewNodes {
        what: &'static str,
        needed: usize,
        nodes: usize,
        failures: Vec<DriverError>,
    },
    /// sentinel `sync_replicas`: the master granted the lock, too few replicas acknowledged.
    NotReplicated {
        address: String,
        acked: u32,
        needed: u32,
        timeout: Duration,
        released: bool,
    },
    /// A script answered something it cannot answer.
    Unexpected {
        address: String,
        reply: UnexpectedReply,
    },
    /// The sentinels could not name a usable master (each sentinel's answer kept).
    NoMaster { addresses: String, detail: String },
    /// A server that should be a master is not one.
    NotMaster { address: String, role: String },
}

impl DriverError {
    /// A Redis error on the server at `address`.
    pub(crate) fn redis(address: &str, source: RedisError) -> DriverError {
        DriverError::Redis {
            address: address.to_owned(),
            source,
        }
    }

    /// The address (`host:port`, several comma-separated) this error concerns.
    pub(crate) fn address(&self) -> String {
        match self {
            DriverError::Redis { address, .. }
            | DriverError::TimedOut { address, .. }
            | DriverError::NotConnected { address }
            | DriverError::NotReplicated { address, .. }
            | DriverError::Unexpected { address, .. }
            | DriverError::NotMaster { address, .. } => address.clone(),
            DriverError::NoMaster { addresses, .. } => addresses.clone(),
            DriverError::TooFewNodes { failures, .. } => failures
                .iter()
                .map(DriverError::address)
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// The Redis error behind it, if there is one.
    pub(crate) fn redis_error(&self) -> Option<&RedisError> {
        match self {
            DriverError::Redis { source, .. } => Some(source),
            DriverError::TooFewNodes { failures, .. } => {
                failures.iter().find_map(DriverError::redis_error)
            }
            DriverError::TimedOut { .. }
            | DriverError::NotConnected { .. }
            | DriverError::NotReplicated { .. }
            | DriverError::Unexpected { .. }
            | DriverError::NoMaster { .. }
            | DriverError::NotMaster { .. } => None,
        }
    }

    /// Whether Redis refused the command to the ACL user (`NOPERM`).
    pub(crate) fn is_no_perm(&self) -> bool {
        self.redis_error()
            .is_some_and(|e| e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm))
    }

    /// Whether it suggests the server is gone or no longer a master (a failover may be
    /// under way): a connection error, a timeout, or a `READONLY` reply.
    pub(crate) fn suggests_failover(&self) -> bool {
        match self {
            DriverError::Redis { source: e, .. } => {
                e.is_io_error()
                    || e.is_connection_refusal()
                    || e.is_connection_dropped()
                    || e.is_timeout()
                    || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
            }
            DriverError::TimedOut { .. } | DriverError::NotMaster { .. } => true,
            DriverError::NotConnected { .. }
            | DriverError::TooFewNodes { .. }
            | DriverError::NotReplicated { .. }
            | DriverError::Unexpected { .. }
            | DriverError::NoMaster { .. } => false,
        }
    }

    /// The public error of a lock operation on `key` (if one) of backend `backend`.
    pub(crate) fn into_lock_error(self, backend: &str, key: Option<&str>) -> LockError {
        match self {
            DriverError::NotReplicated {
                address,
                acked,
                needed,
                timeout,
                released,
            } => LockError::ReplicationFailed {
                key: key.unwrap_or_default().to_owned(),
                backend: backend.to_owned(),
                address,
                acked,
                needed,
                timeout,
                released,
            },
            other => LockError::Backend {
                backend: backend.to_owned(),
                address: other.address(),
                key: key.map(str::to_owned),
                source: BackendError::new(other),
            },
        }
    }

    /// The public error of a backend that could not be connected at start-up. A command
    /// refused to the ACL user while connecting (`NOPERM`: `ROLE` on a sentinel master)
    /// is a missing right, named.
    pub(crate) fn into_init_error(self, backend: &str) -> InitError {
        if self.is_no_perm() {
            let detail = self
                .redis_error()
                .and_then(|e| e.detail())
                .unwrap_or_default()
                .to_owned();
            // "this user has no permissions to run the 'role' command"
            let command = detail
                .split('\'')
                .nth(1)
                .filter(|_| detail.contains("command"))
                .map(str::to_lowercase);
            return InitError::MissingRights {
                backend: backend.to_owned(),
                address: self.address(),
                user: None,
                missing: vec![match &command {
                    Some(c) => format!("missing +{c} ({detail})"),
                    None => detail.clone(),
                }],
                grant: command.map(|c| format!("+{c}")).into_iter().collect(),
            };
        }
        InitError::Connect {
            backend: backend.to_owned(),
            address: self.address(),
            source: BackendError::new(self),
        }
    }
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverError::Redis { source, .. } => {
                write!(f, "{source}")?;
                match tls_hint(&source.to_string()) {
                    Some(hint) => write!(f, " ({hint})"),
                    None => Ok(()),
                }
            }
            DriverError::TimedOut { what, after, .. } => {
                write!(f, "{what}: no reply within {after:?}")
            }
            DriverError::NotConnected { .. } => f.write_str(
                "not connected: the node could not be reached yet; connecting in the background",
            ),
            DriverError::TooFewNodes {
                what,
                needed,
                nodes,
                failures,
            } => {
                write!(
                    f,
                    "{what}: {} of {nodes} nodes failed, {needed} of {nodes} needed",
                    failures.len()
                )?;
                for e in failures {
                    write!(f, "; {}: {e}", e.address())?;
                }
                Ok(())
            }
            DriverError::NotReplicated {
                acked,
                needed,
                timeout,
                ..
            } => write!(
                f,
                "only {acked} of {needed} replica(s) acknowledged the lock within {timeout:?}"
            ),
            DriverError::Unexpected { reply, .. } => write!(f, "{reply}"),
            DriverError::NoMaster { detail, .. } => {
                write!(f, "no sentinel named a usable master: {detail}")
            }
            DriverError::NotMaster { role, .. } => {
                write!(
                    f,
                    "the sentinels name it as master, but it answers ROLE with {role}"
                )
            }
        }
    }
}

impl std::error::Error for DriverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.redis_error().map(|e| e as _)
    }
}

/// What to do about a TLS failure the TLS library describes as `text`.
fn tls_hint(text: &str) -> Option<&'static str> {
    // redis-rs builds its TLS client config (with our client certificate) per connection:
    // a refusal there is about `tls_cert`/`tls_key`, whatever certificate error it quotes.
    if text.contains("InvalidClientConfig") {
        Some("TLS: the client certificate or key (`tls_cert`, `tls_key`) was refused")
    } else if text.contains("UnknownIssuer") {
        Some("TLS: the server's certificate is not signed by a CA of `tls_ca` (or, without it, of the platform's roots)")
    } else if text.contains("certificate expired") || text.contains("not valid yet") {
        Some("TLS: the server's certificate is outside its validity period")
    } else if text.contains("not valid for name") {
        Some("TLS: the server's certificate does not name the host of the URL")
    } else if text.contains("CertificateRequired") || text.contains("BadCertificate") {
        Some(
            "TLS: the server requires a client certificate it trusts: set `tls_cert` and `tls_key`",
        )
    } else if text.contains("invalid peer certificate") {
        Some("TLS: the server's certificate was rejected")
    } else {
        None
    }
}

/// Await `fut` (a Redis command on the server at `address`) for at most `after`.
pub(crate) async fn bounded<T>(
    address: &str,
    what: &'static str,
    after: Duration,
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, DriverError> {
    match tokio::time::timeout(after, fut).await {
        Ok(r) => r.map_err(|e| DriverError::redis(address, e)),
        Err(_) => Err(DriverError::TimedOut {
            address: address.to_owned(),
            what,
            after,
        }),
    }
}
