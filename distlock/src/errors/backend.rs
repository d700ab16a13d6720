//! The one error type of the drivers, and its mapping to the public errors.
//!
//! Every failure a driver meets is a [`DriverError`] that knows the address concerned;
//! [`DriverError::into_lock_error`] and [`DriverError::into_init_error`] are the only places
//! it becomes a [`LockError`] or an [`InitError`]. Conditions distlock detects itself (a
//! timeout, a node not connected yet, too few nodes) are variants of their own, not made-up
//! Redis errors.

use std::time::Duration;

use redis::{RedisError, Value};

use crate::errors::reply::UnexpectedReply;

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

    /// The connection failed (not a reply, not a timeout).
    pub(crate) fn is_connection_failure(&self) -> bool {
        matches!(self, DriverError::Redis { source, .. } if connection_failed(source))
    }

    /// A cluster node's `MOVED` or `ASK`: the command ran nowhere.
    pub(crate) fn is_redirect(&self) -> bool {
        matches!(self, DriverError::Redis { source, .. } if source.redirect_node().is_some())
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

    /// The sort of failure, from redis-rs's typed error kinds (never from message text).
    pub(crate) fn kind(&self) -> BackendErrorKind {
        match self {
            DriverError::Redis { source, .. } => {
                if source.is_timeout() {
                    BackendErrorKind::TimedOut
                } else if source.is_io_error()
                    || source.is_connection_refusal()
                    || source.is_connection_dropped()
                {
                    BackendErrorKind::Connection
                } else if source.kind() == redis::ErrorKind::Parse {
                    BackendErrorKind::Protocol
                } else {
                    BackendErrorKind::Server
                }
            }
            DriverError::TimedOut { .. } => BackendErrorKind::TimedOut,
            DriverError::NotConnected { .. } => BackendErrorKind::Connection,
            DriverError::TooFewNodes { .. } => BackendErrorKind::TooFewNodes,
            DriverError::NotReplicated { .. } => BackendErrorKind::NotReplicated,
            DriverError::Unexpected { .. } => BackendErrorKind::Protocol,
            DriverError::NoMaster { .. } | DriverError::NotMaster { .. } => {
                BackendErrorKind::NoMaster
            }
        }
    }

    /// Whether the server said it cannot serve the command *now* (a failover or a restart
    /// under way): `READONLY`, `LOADING`, `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`; and a
    /// cluster redirect (`MOVED`, `ASK`) that reached the caller (the connection that never
    /// sends twice does not follow redirects): the command did not run, the slot map is
    /// being refreshed, and the next attempt goes to the new owner.
    fn is_server_busy_with_failover(&self) -> bool {
        use redis::ServerErrorKind as S;
        self.redis_error().is_some_and(|e| {
            matches!(
                e.kind(),
                redis::ErrorKind::Server(
                    S::ReadOnly
                        | S::BusyLoading
                        | S::MasterDown
                        | S::TryAgain
                        | S::ClusterDown
                        | S::Moved
                        | S::Ask
                )
            )
        })
    }

    /// Whether trying again may succeed: the connection failed or timed out, no master or
    /// too few nodes answered, or the server is busy with a failover or a restart.
    pub(crate) fn is_transient(&self) -> bool {
        match self.kind() {
            BackendErrorKind::Connection
            | BackendErrorKind::TimedOut
            | BackendErrorKind::NoMaster
            | BackendErrorKind::TooFewNodes => true,
            BackendErrorKind::Server => self.is_server_busy_with_failover(),
            BackendErrorKind::Protocol | BackendErrorKind::NotReplicated => false,
        }
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

/// Whether `e` says the connection failed (an I/O error, the connection dropped or
/// unusable), rather than a reply.
pub(crate) fn connection_failed(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

/// Whether a reply is a `MOVED` or `ASK` error (the multiplexed connection hands server
/// errors back as values).
pub(crate) fn redirected(v: &Value) -> bool {
    matches!(v, Value::ServerError(e)
        if matches!(e.kind(), Some(redis::ServerErrorKind::Moved | redis::ServerErrorKind::Ask)))
}

/// What went wrong on a backend: opaque, so that the Redis client distlock uses stays an
/// implementation detail. Its [`kind`](BackendError::kind) says what sort of failure it was;
/// `Display` says what happened, and [`std::error::Error::source`] leads to the client's
/// own error where there is one.
///
/// ```
/// # async fn f() {
/// let err = distlock::Registry::from_str(r#"
///     [backends.main]
///     mode = "single"
///     url = "redis://127.0.0.1:1"
///     connect_timeout = "200ms"
/// "#).await.unwrap_err();
/// match err {
///     distlock::InitError::Connect { source, .. } => {
///         assert_eq!(source.kind(), distlock::error::BackendErrorKind::Connection)
///     }
///     other => panic!("{other}"),
/// }
/// # }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f());
/// ```
#[derive(Clone)]
pub struct BackendError(std::sync::Arc<DriverError>);

/// The sort of failure a [`BackendError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The server could not be reached, or the connection broke.
    Connection,
    /// No reply in time (`response_timeout`, `connect_timeout`, `node_timeout`).
    TimedOut,
    /// The server answered with an error (permissions, out of memory, wrong type, ...).
    Server,
    /// The server's reply made no sense for the lock protocol.
    Protocol,
    /// redlock/multi: too few nodes answered (each node's failure is in the message).
    TooFewNodes,
    /// sentinel: no sentinel named a usable master, or the one named is not a master.
    NoMaster,
    /// sentinel `sync_replicas`: too few replicas acknowledged.
    NotReplicated,
}

impl BackendError {
    pub(crate) fn new(e: DriverError) -> BackendError {
        BackendError(std::sync::Arc::new(e))
    }

    /// The sort of failure.
    pub fn kind(&self) -> BackendErrorKind {
        self.0.kind()
    }

    /// Whether the server refused the connection's password (`AUTH`).
    pub(crate) fn is_auth_refused(&self) -> bool {
        matches!(&*self.0, DriverError::Redis { source, .. }
            if source.kind() == redis::ErrorKind::AuthenticationFailed)
    }

    /// Whether the server's answer was not a Redis reply at all (another kind of server).
    pub(crate) fn is_not_redis(&self) -> bool {
        matches!(&*self.0, DriverError::Redis { source, .. }
            if source.kind() == redis::ErrorKind::Parse)
    }

    /// Whether trying again may succeed (see [`LockError::is_transient`]).
    ///
    /// [`LockError::is_transient`]: crate::LockError::is_transient
    pub fn is_transient(&self) -> bool {
        self.0.is_transient()
    }

    /// Whether it was a time-out.
    pub fn is_timeout(&self) -> bool {
        self.kind() == BackendErrorKind::TimedOut
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendError")
            .field("kind", &self.kind())
            .field("message", &self.0.to_string())
            .finish()
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&*self.0)
    }
}
