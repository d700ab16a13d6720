//! axum integration (cargo feature `axum`): a [`LockError`] is an HTTP response.
//!
//! | error | status | headers |
//! |-------|--------|---------|
//! | `Timeout` | 409 Conflict: someone else holds the lock (the message says what, by kind: see below); the request was not carried out and may be retried | `Retry-After` (see below) |
//! | `Backend`, `QuorumNotReached`, `ReplicationFailed` | 503 Service Unavailable: the lock service failed before the request's work began; it was not carried out | `Retry-After: 1` |
//! | `ShuttingDown` | 503 Service Unavailable: this instance is shutting down ([`Registry::shutdown`](crate::Registry::shutdown)); another instance can serve it | `Retry-After: 1` |
//! | `InvalidKey` | 400 Bad Request: the key made from the request is unusable (e.g. longer than 1024 bytes) | |
//! | `InvalidDuration` | 500 Internal Server Error: a lease or `watchdog_timeout` over `MAX_LEASE` (a server bug or misconfiguration) | |
//! | `InvalidPermits` | 500 Internal Server Error: a semaphore of 0 permits, or asking for 0 or more than it has (a server bug) | |
//! | `LeaseLost` | 500 Internal Server Error: **the outcome is unknown** (see below) | none |
//! | `NotInitialized`, `NoSuchBackend`, `NoDefaultBackend`, `Unsupported`, `NotHeld`, `LockOrder`, `NestedKind` | 500 Internal Server Error: a bug or misconfiguration of the server | |
//!
//! **`LeaseLost` does not invite a retry.** The lock was lost while the handler's body ran:
//! part of its work may be done (with `on_lost = "cancel"` the body was dropped at an
//! `.await`, with `"signal"` it chose to stop), so repeating the request blindly may do it
//! twice (a second debit). The answer is a 500 without `Retry-After` (clients and proxies
//! retry 503s by themselves), with the code `lock_lease_lost` and the message "the request
//! may or may not have taken effect: check its outcome before repeating it". Make such
//! bodies cancel-safe (one transaction, or writes fenced by `distlock::fencing_token()`),
//! and requests idempotent (a request id) where clients must retry.
//!
//! **`Retry-After` of a `Timeout`** is measured, not the wait: the smaller of the holder's
//! remaining lease as the acquire script last reported it (`holder_lease`) and the recent
//! average hold time of the backend's locks in this process (`recent_hold`), rounded up to
//! whole seconds, between 1 and 60; 1 when neither is known. A holder with an auto-lease
//! keeps renewing it, so the recent hold time is usually the better estimate; a stuck
//! holder with a fixed lease is bounded by its lease.
//!
//! The body is a small JSON object: `{"error": CODE, "message": TEXT}`, with
//! `"retry_after_secs": N` when there is a `Retry-After`, e.g.
//! `{"error":"lock_timeout","message":"the lock is held by another request; try again later","retry_after_secs":3}`.
//!
//! **What holds it.** A 409's message names the holder by kind (`Timeout`'s
//! [`held_by`](crate::error::HeldBy)), never by key: "all permits of the semaphore are
//! taken by other holders" for a semaphore, "held by the elected leader" for an election,
//! and, from the holder information recorded next to the lock (one read of at most 250 ms,
//! [`LockError::with_holder`]; `distlock::tower::LockLayer` does it by itself), "held by a
//! \`distlock run\` command", "held by another request" (the layer's own lock site) or
//! "held by another part of the service"; "held by another holder" when it cannot tell.
//! **The body names neither the lock key nor the backend**: the key is rendered from the
//! request (`order:<email>` carries personal data into whatever logs and caches the
//! response passes through) and backend names and addresses are configuration. Both stay
//! in the service's own records: every answered error is logged in full (target
//! `distlock::web`) — at WARN the failures a running service expects now and then (503:
//! Redis down or failing over, a quorum not reached, replicas late, this instance shutting
//! down; and the 500 of a lost lease), at ERROR only the 500s that are a bug or a
//! misconfiguration, at DEBUG the 409s and 400s. The application decides from there: the
//! error is in the response's extensions (log it at the level it wants), and
//! `RUST_LOG=distlock::web=error` (or a tracing filter) silences the rest; and the lock's tracing span
//! carries the key. Bodies of 409, 503, 400 and `LeaseLost` carry a message for the client
//! (the 400 one says why the key was refused, without repeating it); other 500 bodies say
//! "internal lock error". The error itself is also put in the response's extensions, for
//! middleware.
//!
//! **Opt-in, for services whose keys are not personal** (internal tools, debugging):
//! [`LockError::into_response_with_key_and_backend`] answers the same status and headers,
//! with `"key"` and `"backend"` fields added to the body (on 409, 503 and `LeaseLost`; never
//! on a 400, nor on the other 500s) and the key named in the message.
//!
//! Handlers return `Result<_, distlock::LockError>`, or an application error type that is
//! `From<LockError>` and delegates to this impl:
//!
//! ```
//! use axum::http::StatusCode;
//! use axum::response::{IntoResponse, Response};
//! use distlock::{distributed_lock, Lock, LockError};
//!
//! // Straight `?` on a lock operation.
//! async fn rebuild_report() -> Result<&'static str, LockError> {
//!     let guard = Lock::new("report").try_acquire().await?;
//!     match guard {
//!         Some(guard) => {
//!             // ... rebuild ...
//!             guard.release().await?;
//!             Ok("rebuilt")
//!         }
//!         None => Ok("someone else is rebuilding it"),
//!     }
//! }
//!
//! // An application error wrapping LockError: `?` converts, IntoResponse delegates.
//! enum AppError {
//!     Lock(LockError),
//!     SoldOut,
//! }
//!
//! impl From<LockError> for AppError {
//!     fn from(e: LockError) -> Self {
//!         AppError::Lock(e)
//!     }
//! }
//!
//! impl IntoResponse for AppError {
//!     fn into_response(self) -> Response {
//!         match self {
//!             AppError::Lock(e) => e.into_response(), // 409 + Retry-After, 503 or 500
//!             AppError::SoldOut => (StatusCode::GONE, "sold out").into_response(),
//!         }
//!     }
//! }
//!
//! #[distributed_lock(key = "order:<user_id>", wait = "100ms", lease = "auto")]
//! async fn place_order(user_id: u64) -> Result<String, AppError> {
//!     if user_id == 0 {
//!         return Err(AppError::SoldOut);
//!     }
//!     Ok(format!("order for user {user_id}"))
//! }
//!
//! // A handler using the attribute's function.
//! async fn order(
//!     axum::extract::Path(user_id): axum::extract::Path<u64>,
//! ) -> Result<String, AppError> {
//!     let order = place_order(user_id).await?;
//!     Ok(order)
//! }
//!
//! let app: axum::Router = axum::Router::new()
//!     .route("/report", axum::routing::post(rebuild_report))
//!     .route("/orders/{user_id}", axum::routing::post(order));
//! # let _ = app;
//! ```

use std::time::Duration;

// The mapping is plain `http` (the crate axum re-exports as `axum::http`), shared by the
// axum `IntoResponse` impl and the tower layer (`distlock::tower`).
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;

#[cfg(feature = "axum")]
use axum::response::{IntoResponse, Response};

use crate::errors::HeldBy;
use crate::LockError;

/// The longest `Retry-After` a `Timeout` response advises, in seconds.
const MAX_RETRY_AFTER_SECS: u64 = 60;

impl LockError {
    /// The HTTP status this error maps to: 409 for `Timeout` and `Skipped`, 503 for `Backend`,
    /// `QuorumNotReached`, `ReplicationFailed` and `ShuttingDown`, 400 for `InvalidKey`, 500 for `LeaseLost`
    /// (the outcome is unknown) and the rest (see the module `distlock::web`).
    ///
    /// ```
    /// use http::StatusCode; // also `axum::http::StatusCode`
    /// let e = distlock::LockError::NotInitialized;
    /// assert_eq!(e.http_status(), StatusCode::INTERNAL_SERVER_ERROR);
    /// ```
    pub fn http_status(&self) -> StatusCode {
        match self {
            LockError::Timeout { .. } | LockError::Skipped { .. } => StatusCode::CONFLICT,
            LockError::Backend { .. }
            | LockError::QuorumNotReached { .. }
            | LockError::ReplicationFailed { .. }
            | LockError::ShuttingDown { .. } => StatusCode::SERVICE_UNAVAILABLE,
            LockError::InvalidKey { .. } => StatusCode::BAD_REQUEST,
            LockError::LeaseLost { .. }
            | LockError::NotInitialized
            | LockError::NoSuchBackend { .. }
            | LockError::NoDefaultBackend { .. }
            | LockError::InvalidDuration { .. }
            | LockError::InvalidPermits { .. }
            | LockError::LockOrder { .. }
            | LockError::NestedKind { .. }
            | LockError::Unsupported { .. }
            | LockError::NotHeld { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `Retry-After` this error's response carries, in whole seconds (at least 1).
    ///
    /// `Timeout`: the smaller of the holder's remaining lease (`holder_lease`) and the
    /// recent average hold time (`recent_hold`), rounded up, between 1 and 60 seconds; 1
    /// when neither was measured. 503 errors: 1 second. Others, `LeaseLost` and `Skipped`
    /// (the job ran elsewhere) included:
    /// `None` (a retry does not help, or must not be blind).
    ///
    /// ```
    /// use std::time::Duration;
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await?;
    /// let holder = registry.lock("report").acquire().await?;
    /// let err = registry.lock("report").wait(Duration::from_millis(50)).acquire().await.unwrap_err();
    /// // The holder's lease (30 s, the default watchdog_timeout) is the only measure yet.
    /// assert_eq!(err.retry_after_secs(), Some(30));
    /// # drop(holder); Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            LockError::Timeout {
                holder_lease,
                recent_hold,
                ..
            } => {
                let estimate = match (holder_lease, recent_hold) {
                    (Some(a), Some(b)) => Some(*a.min(b)),
                    (a, b) => a.or(*b),
                };
                Some(estimate.map_or(1, ceil_secs).clamp(1, MAX_RETRY_AFTER_SECS))
            }
            _ if self.http_status() == StatusCode::SERVICE_UNAVAILABLE => Some(1),
            _ => None,
        }
    }

    /// The level the response of this error is logged at (target `distlock::web`): WARN
    /// for what a running service expects now and then and the client is told to retry
    /// (503: Redis down or failing over, a quorum not reached, replicas late, this
    /// instance shutting down) and for a lost lease (500, the outcome unknown); ERROR only
    /// for a 500 that is a bug or a misconfiguration of the service; DEBUG for the
    /// client's 409 and 400. The error is in the response's extensions: an application
    /// that wants another level logs it from there (and filters the target).
    fn log_level(&self) -> tracing::Level {
        match self {
            LockError::Timeout { .. }
            | LockError::Skipped { .. }
            | LockError::InvalidKey { .. } => tracing::Level::DEBUG,
            LockError::Backend { .. }
            | LockError::QuorumNotReached { .. }
            | LockError::ReplicationFailed { .. }
            | LockError::ShuttingDown { .. }
            | LockError::LeaseLost { .. } => tracing::Level::WARN,
            LockError::NotInitialized
            | LockError::NoSuchBackend { .. }
            | LockError::NoDefaultBackend { .. }
            | LockError::InvalidDuration { .. }
            | LockError::InvalidPermits { .. }
            | LockError::LockOrder { .. }
            | LockError::NestedKind { .. }
            | LockError::Unsupported { .. }
            | LockError::NotHeld { .. } => tracing::Level::ERROR,
        }
    }

    /// A stable, machine-readable name of the variant, as used in response bodies.
    fn code(&self) -> &'static str {
        match self {
            LockError::Timeout { .. } => "lock_timeout",
            LockError::Skipped { .. } => "lock_skipped",
            LockError::LeaseLost { .. } => "lock_lease_lost",
            LockError::NotHeld { .. } => "lock_not_held",
            LockError::NotInitialized => "lock_not_initialized",
            LockError::NoSuchBackend { .. } => "lock_no_such_backend",
            LockError::NoDefaultBackend { .. } => "lock_no_default_backend",
            LockError::QuorumNotReached { .. } => "lock_quorum_not_reached",
            LockError::ReplicationFailed { .. } => "lock_replication_failed",
            LockError::Backend { .. } => "lock_backend_unavailable",
            LockError::Unsupported { .. } => "lock_unsupported",
            LockError::InvalidKey { .. } => "lock_invalid_key",
            LockError::InvalidDuration { .. } => "lock_invalid_duration",
            LockError::InvalidPermits { .. } => "lock_invalid_permits",
            LockError::LockOrder { .. } => "lock_order",
            LockError::NestedKind { .. } => "lock_nested_kind",
            LockError::ShuttingDown { .. } => "lock_shutting_down",
        }
    }

    /// What the client is told; the key only `with_key` (see
    /// [`LockError::into_response_with_key_and_backend`]).
    fn public_message(&self, with_key: bool) -> String {
        let lock = match (with_key, self.key()) {
            (true, Some(key)) => format!("lock `{key}`"),
            _ => "the lock".to_owned(),
        };
        match self {
            LockError::Timeout {
                held_by: HeldBy::Permits,
                ..
            } => {
                let semaphore = match (with_key, self.key()) {
                    (true, Some(key)) => format!("semaphore `{key}`"),
                    _ => "the semaphore".to_owned(),
                };
                format!("all permits of {semaphore} are taken by other holders; try again later")
            }
            LockError::Timeout { held_by, .. } => {
                format!("{lock} is held by {}; try again later", held_by.describe())
            }
            LockError::ShuttingDown { .. } => {
                "this instance of the service is shutting down; try again".to_owned()
            }
            LockError::Skipped { .. } => {
                format!("{lock} is held by a run of this job elsewhere, or was taken too recently; not run again here")
            }
            LockError::LeaseLost { .. } => {
                format!("{lock} was lost while the request ran: the request may or may not have taken effect; check its outcome before repeating it")
            }
            LockError::InvalidKey { reason, .. } => {
                format!("the lock key made from this request cannot be used: {reason}")
            }
            LockError::QuorumNotReached { .. } => {
                format!("{lock} could not be acquired: too few lock servers answered")
            }
            LockError::ReplicationFailed { .. } => {
                format!("{lock} could not be acquired safely: its replicas did not confirm it; try again")
            }
            LockError::Backend { .. } => "the lock service is unavailable".to_owned(),
            _ => "internal lock error".to_owned(),
        }
    }

    /// Like its [`IntoResponse`] (same status, headers and `error` code), and the body also
    /// names the lock key and the backend: `"key"` and `"backend"` fields, and the key in
    /// the message, on 409, 503 and `LeaseLost` responses (never on a 400, whose key is the
    /// client's own input, nor on the other 500s, which are configuration).
    ///
    /// **Opt-in**: the key is rendered from the request and may carry personal data (an
    /// e-mail address in `order:<email>`); the plain `into_response` leaves both out. Use
    /// this only where keys and backend names are fit for every client to see.
    ///
    /// ```
    /// use std::time::Duration;
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await?;
    /// let holder = registry.lock("report:weekly").acquire().await?;
    /// let err = registry.lock("report:weekly").wait(Duration::ZERO).acquire().await.unwrap_err();
    /// let response = err.into_response_with_key_and_backend();
    /// assert_eq!(response.status(), axum::http::StatusCode::CONFLICT);
    /// let body = axum::body::to_bytes(response.into_body(), 4096).await?;
    /// let body = String::from_utf8(body.to_vec())?;
    /// assert!(body.contains(r#""key":"report:weekly","backend":"m""#), "{body}");
    /// # drop(holder); Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
    /// ```
    #[cfg(feature = "axum")]
    pub fn into_response_with_key_and_backend(self) -> Response {
        self.http_response(true).map(axum::body::Body::from)
    }

    /// Whether a response that may name the key (`with_key`) names it for this error.
    fn shows_key(&self, with_key: bool) -> bool {
        // Only on request: the key (the request's data) and the backend's name. Never on a
        // 500 other than a lost lease (configuration), nor a 400 (the client's own input).
        let lost = matches!(self, LockError::LeaseLost { .. });
        let invalid = matches!(self, LockError::InvalidKey { .. });
        with_key && (self.http_status() != StatusCode::INTERNAL_SERVER_ERROR || lost) && !invalid
    }

    /// The message of this error's response body (`with_key`: naming the key where the
    /// body names it).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn client_message(&self, with_key: bool) -> String {
        self.public_message(self.shows_key(with_key))
    }

    /// The response of this error (see the [module docs](crate::integrations::web)), its JSON body as a
    /// `String`; `with_key`: with the key and the backend (on 409, 503 and `LeaseLost`).
    /// Shared by axum's `IntoResponse` and `distlock::tower`.
    pub(crate) fn http_response(self, with_key: bool) -> http::Response<String> {
        let status = self.http_status();
        match self.log_level() {
            tracing::Level::ERROR => {
                tracing::error!(target: "distlock::web", error = %self, status = status.as_u16(), "distlock: lock error answered with {status}");
            }
            tracing::Level::WARN => {
                tracing::warn!(target: "distlock::web", error = %self, status = status.as_u16(), "distlock: lock error answered with {status}");
            }
            _ => {
                tracing::debug!(target: "distlock::web", error = %self, status = status.as_u16(), "distlock: lock error answered with {status}");
            }
        }
        let retry_after = self.retry_after_secs();
        let mut body = String::from("{");
        push_field(&mut body, "error", self.code());
        let with_key = self.shows_key(with_key);
        if with_key {
            if let Some(key) = self.key() {
                push_field(&mut body, "key", key);
            }
            if let Some(backend) = self.backend() {
                push_field(&mut body, "backend", backend);
            }
        }
        push_field(&mut body, "message", &self.public_message(with_key));
        if let Some(secs) = retry_after {
            body.push_str(&format!(",\"retry_after_secs\":{secs}"));
        }
        body.push('}');

        let mut response = http::Response::new(body);
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(secs) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        response.extensions_mut().insert(self);
        response
    }
}

/// `Timeout` → 409 Conflict with `Retry-After`; `Backend`, `QuorumNotReached`,
/// `ReplicationFailed` → 503 Service Unavailable with `Retry-After: 1`; `InvalidKey` →
/// 400; `LeaseLost` → 500 without `Retry-After` (the outcome is unknown); the rest → 500.
/// The body is JSON without the lock key and the backend; see the [module docs](crate::integrations::web).
#[cfg(feature = "axum")]
impl IntoResponse for LockError {
    fn into_response(self) -> Response {
        self.http_response(false).map(axum::body::Body::from)
    }
}

/// The longest a 409 waits for the holder information it names the holder from.
const HOLDER_READ: Duration = Duration::from_millis(250);

impl LockError {
    /// A `Timeout` whose holder is not known yet ([`HeldBy::Unknown`]) names it, by kind,
    /// from the holder information recorded next to the lock (one read, at most 250 ms;
    /// on the memory backend, with `holder_info = false`, or when the read fails, it stays
    /// unknown): [`HeldBy::Command`] for a `distlock run` command, [`HeldBy::Leader`] for an
    /// election's lock (`leader:NAME`). Any other error is returned as it is. The 409
    /// answer then says what holds the lock ("held by a `distlock run` command").
    ///
    /// For an axum handler that answers with the error (the attribute's `Timeout`s of
    /// semaphores and elections are named already; `distlock::tower::LockLayer` does this
    /// by itself, and tells another request of its own apart):
    ///
    /// ```
    /// use axum::response::{IntoResponse, Response};
    /// use distlock::{Lock, Registry};
    ///
    /// async fn rebuild(registry: Registry) -> Response {
    ///     match registry.lock("report").wait(std::time::Duration::ZERO).acquire().await {
    ///         Ok(guard) => {
    ///             // ... rebuild ...
    ///             drop(guard);
    ///             "rebuilt".into_response()
    ///         }
    ///         Err(e) => e.with_holder(&registry).await.into_response(),
    ///     }
    /// }
    /// # async fn f() {
    /// # let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
    /// # let held = registry.lock("report").acquire().await.unwrap();
    /// # assert_eq!(rebuild(registry.clone()).await.status(), 409);
    /// # drop(held);
    /// # }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(f());
    /// ```
    pub async fn with_holder(self, registry: &crate::Registry) -> LockError {
        self.with_holder_from(registry, None).await
    }

    /// [`LockError::with_holder`], telling [`HeldBy::Request`] (the holder's lock site is
    /// `own_site`, the waiter's) from [`HeldBy::OtherSite`].
    pub(crate) async fn with_holder_from(
        self,
        registry: &crate::Registry,
        own_site: Option<&str>,
    ) -> LockError {
        let LockError::Timeout {
            key,
            backend,
            waited,
            holder_lease,
            recent_hold,
            held_by: HeldBy::Unknown,
        } = self
        else {
            return self;
        };
        let read = tokio::time::timeout(HOLDER_READ, registry.inspect(&key, Some(&backend))).await;
        let held_by = match read {
            Ok(Ok(infos)) => held_by(&key, infos.iter().flat_map(|i| i.holders.iter()), own_site),
            _ => HeldBy::Unknown,
        };
        LockError::Timeout {
            key,
            backend,
            waited,
            holder_lease,
            recent_hold,
            held_by,
        }
    }
}

/// What the holders of the lock `key` are, by kind (see [`LockError::with_holder`]).
fn held_by<'a>(
    key: &str,
    holders: impl Iterator<Item = &'a crate::ops::inspect::Holder>,
    own_site: Option<&str>,
) -> HeldBy {
    if key.starts_with("leader:") {
        return HeldBy::Leader;
    }
    let mut kind = HeldBy::Unknown;
    for h in holders {
        let this = match (h.site.as_deref(), own_site) {
            (Some(crate::obs::sites::RUN_SITE), _) => HeldBy::Command,
            (Some(site), Some(own)) if site == own => HeldBy::Request,
            (Some(_), Some(_)) => HeldBy::OtherSite,
            (Some(_), None) | (None, _) => HeldBy::Unknown,
        };
        // A command is named first: it is what an operator looks for.
        if kind != HeldBy::Command {
            kind = this;
        }
    }
    kind
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Append `"name":"value"` (with a leading comma unless first) to a JSON object being built.
fn push_field(out: &mut String, name: &str, value: &str) {
    if !out.ends_with('{') {
        out.push(',');
    }
    push_json_string(out, name);
    out.push(':');
    push_json_string(out, value);
}

fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(all(test, feature = "axum"))]
mod tests {
    use super::*;

    fn timeout(holder_lease: Option<Duration>, recent_hold: Option<Duration>) -> LockError {
        LockError::Timeout {
            key: "order:42".into(),
            backend: "main".into(),
            waited: Duration::from_secs(5),
            holder_lease,
            recent_hold,
            held_by: HeldBy::Unknown,
        }
    }

    fn redis_error() -> crate::error::BackendError {
        crate::error::BackendError::new(crate::errors::backend::DriverError::redis(
            "10.1.2.3:6379",
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            )),
        ))
    }

    async fn body_of(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), 64 * 1024)
            .await
            .expect("the body is small");
        String::from_utf8(bytes.to_vec()).expect("the body is UTF-8")
    }

    fn retry_after(response: &Response) -> Option<&str> {
        response
            .headers()
            .get(RETRY_AFTER)
            .map(|v| v.to_str().expect("ASCII"))
    }

    #[tokio::test]
    async fn timeout_is_409_with_retry_after_without_key_or_backend() {
        let response = timeout(None, Some(Duration::from_millis(100))).into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(retry_after(&response), Some("1"));
        assert_eq!(
            response.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(&b"application/json"[..])
        );
        assert!(response.extensions().get::<LockError>().is_some());
        let body = body_of(response).await;
        assert_eq!(
            body,
            "{\"error\":\"lock_timeout\",\"message\":\"the lock is held by another holder; try again later\",\"retry_after_secs\":1}"
        );

        // Opt-in: the key and the backend, same status and headers.
        let response =
            timeout(None, Some(Duration::from_millis(100))).into_response_with_key_and_backend();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(retry_after(&response), Some("1"));
        let body = body_of(response).await;
        assert_eq!(
            body,
            "{\"error\":\"lock_timeout\",\"key\":\"order:42\",\"backend\":\"main\",\"message\":\"lock `order:42` is held by another holder; try again later\",\"retry_after_secs\":1}"
        );
    }

    #[test]
    fn retry_after_follows_what_was_measured_not_the_wait() {
        let ms = Duration::from_millis;
        let secs = |lease, hold| timeout(lease, hold).retry_after_secs();
        // Waited 5 s, but holders free the lock in about a second.
        assert_eq!(secs(Some(ms(29_000)), Some(ms(900))), Some(1));
        assert_eq!(secs(Some(ms(29_000)), Some(ms(2_100))), Some(3));
        // A holder whose lease ends sooner than the usual hold time.
        assert_eq!(secs(Some(ms(1_500)), Some(ms(10_000))), Some(2));
        assert_eq!(secs(Some(ms(4_000)), None), Some(4));
        assert_eq!(secs(None, None), Some(1));
        assert_eq!(secs(Some(Duration::ZERO), None), Some(1));
        assert_eq!(secs(Some(Duration::from_secs(3600)), None), Some(60));
        let response = timeout(Some(ms(2_500)), None).into_response();
        assert_eq!(retry_after(&response), Some("3"));
    }

    #[tokio::test]
    async fn lease_lost_is_500_without_retry_after_and_says_the_outcome_is_unknown() {
        let lost = || LockError::LeaseLost {
            key: "transfer:1".into(),
            backend: "main".into(),
            reason: "the lock was gone when the watchdog renewed it".into(),
        };
        let response = lost().into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(retry_after(&response), None);
        let body = body_of(response).await;
        assert_eq!(
            body,
            "{\"error\":\"lock_lease_lost\",\"message\":\"the lock was lost while the request ran: the request may or may not have taken effect; check its outcome before repeating it\"}"
        );
        assert!(!body.contains("try again"), "{body}");
        let body = body_of(lost().into_response_with_key_and_backend()).await;
        assert_eq!(
            body,
            "{\"error\":\"lock_lease_lost\",\"key\":\"transfer:1\",\"backend\":\"main\",\"message\":\"lock `transfer:1` was lost while the request ran: the request may or may not have taken effect; check its outcome before repeating it\"}"
        );
    }

    #[tokio::test]
    async fn a_key_too_long_is_the_callers_400() {
        let key = "x".repeat(2000);
        let e = crate::Registry::from_str("[backends.m]\nmode = \"memory\"")
            .await
            .expect("memory")
            .lock(key.as_str())
            .acquire()
            .await
            .expect_err("a key over 1024 bytes");
        let want = "{\"error\":\"lock_invalid_key\",\"message\":\"the lock key made from this request cannot be used: the key is 2000 bytes long; at most 1024 are allowed\"}";
        // Not echoed even on request: it is the client's own input.
        let response = e.clone().into_response_with_key_and_backend();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(body_of(response).await, want);
        let response = e.into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(retry_after(&response), None);
        let body = body_of(response).await;
        assert_eq!(body, want);
    }

    #[tokio::test]
    async fn service_failures_are_503() {
        let errors = [
            LockError::Backend {
                backend: "be-main".into(),
                address: "10.1.2.3:6379".into(),
                key: Some("order:42".into()),
                source: redis_error(),
            },
            LockError::QuorumNotReached {
                key: "order:42".into(),
                backend: "be-quorum".into(),
                granted: 1,
                needed: 2,
                nodes: 3,
            },
            LockError::ReplicationFailed {
                key: "order:42".into(),
                backend: "be-ha".into(),
                address: "10.1.2.3:6379".into(),
                acked: 0,
                needed: 1,
                timeout: Duration::from_secs(1),
                released: true,
            },
        ];
        for e in errors {
            let backend = e.backend().expect("named").to_owned();
            let response = e.clone().into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(retry_after(&response), Some("1"));
            let body = body_of(response).await;
            for private in ["order:42", backend.as_str(), "10.1.2.3"] {
                assert!(!body.contains(private), "{body}");
            }
            let body = body_of(e.into_response_with_key_and_backend()).await;
            assert!(body.contains("\"key\":\"order:42\""), "{body}");
            assert!(
                body.contains(&format!("\"backend\":\"{backend}\"")),
                "{body}"
            );
            // The backend's address is not shown to clients, even on request.
            assert!(!body.contains("10.1.2.3"), "{body}");
        }
    }

    #[tokio::test]
    async fn server_bugs_are_500_without_details() {
        let errors = [
            LockError::NotInitialized,
            LockError::NoSuchBackend {
                backend: "orders".into(),
                known: vec!["main".into()],
            },
            LockError::NoDefaultBackend {
                known: vec!["a".into(), "b".into()],
            },
            LockError::Unsupported {
                backend: "main".into(),
                kind: crate::Feature::Lock(crate::LockKind::Fair),
                format: distlock_config::Protocol::Distlock,
                mode: distlock_config::ModeKind::Redlock,
                reason: "fair locks need one master".into(),
            },
            LockError::InvalidDuration {
                key: "order:42".into(),
                backend: "main".into(),
                what: "lease",
                value: Duration::MAX,
                min: Duration::from_millis(1),
                limit: crate::lease::policy::MAX_LEASE,
            },
            LockError::InvalidPermits {
                key: "export".into(),
                backend: "main".into(),
                asked: 5,
                permits: 4,
                reason: "more than the semaphore has",
            },
            LockError::NotHeld {
                key: "order:42".into(),
                backend: "main".into(),
            },
        ];
        for e in errors {
            let code = e.code();
            let want = format!("{{\"error\":\"{code}\",\"message\":\"internal lock error\"}}");
            // Configuration details stay out even on request.
            let body = body_of(e.clone().into_response_with_key_and_backend()).await;
            assert_eq!(body, want);
            let response = e.into_response();
            assert_eq!(
                response.status(),
                StatusCode::INTERNAL_SERVER_ERROR,
                "{code}"
            );
            assert_eq!(retry_after(&response), None, "{code}");
            let body = body_of(response).await;
            assert_eq!(body, want);
        }
    }

    #[tokio::test]
    async fn a_409_says_what_holds_the_lock_by_kind_without_the_key() {
        let busy = |held_by| LockError::Timeout {
            key: "export:acme".into(),
            backend: "main".into(),
            waited: Duration::from_secs(1),
            holder_lease: None,
            recent_hold: None,
            held_by,
        };
        let cases = [
            (
                HeldBy::Unknown,
                "the lock is held by another holder; try again later",
            ),
            (
                HeldBy::Permits,
                "all permits of the semaphore are taken by other holders; try again later",
            ),
            (
                HeldBy::Leader,
                "the lock is held by the elected leader; try again later",
            ),
            (
                HeldBy::Request,
                "the lock is held by another request; try again later",
            ),
            (
                HeldBy::Command,
                "the lock is held by a `distlock run` command; try again later",
            ),
            (
                HeldBy::OtherSite,
                "the lock is held by another part of the service; try again later",
            ),
        ];
        for (held_by, message) in cases {
            let response = busy(held_by).into_response();
            assert_eq!(response.status(), StatusCode::CONFLICT);
            let body = body_of(response).await;
            assert!(
                body.contains(&format!("\"message\":\"{}\"", message)),
                "{body}"
            );
            assert!(!body.contains("export:acme"), "{body}");
        }
        let body = body_of(busy(HeldBy::Permits).into_response_with_key_and_backend()).await;
        assert!(
            body.contains("all permits of semaphore `export:acme` are taken"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn shutting_down_is_a_503_to_retry_elsewhere() {
        let e = LockError::ShuttingDown {
            key: "order:42".into(),
            backend: "main".into(),
        };
        let response = e.clone().into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry_after(&response), Some("1"));
        let body = body_of(response).await;
        assert_eq!(
            body,
            "{\"error\":\"lock_shutting_down\",\"message\":\"this instance of the service is shutting down; try again\",\"retry_after_secs\":1}"
        );
        assert!(!e.is_transient());
    }

    #[test]
    fn expected_failures_are_logged_at_warn_and_only_bugs_at_error() {
        let lost = LockError::LeaseLost {
            key: "k".into(),
            backend: "main".into(),
            reason: "gone".into(),
        };
        let down = LockError::Backend {
            backend: "main".into(),
            address: "10.1.2.3:6379".into(),
            key: Some("k".into()),
            source: redis_error(),
        };
        let shutting = LockError::ShuttingDown {
            key: "k".into(),
            backend: "main".into(),
        };
        for e in [down, shutting, lost] {
            assert_eq!(e.log_level(), tracing::Level::WARN, "{e}");
        }
        assert_eq!(timeout(None, None).log_level(), tracing::Level::DEBUG);
        assert_eq!(LockError::NotInitialized.log_level(), tracing::Level::ERROR);
    }

    #[test]
    fn json_strings_are_escaped() {
        let mut out = String::new();
        push_json_string(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, r#""a\"b\\c\nd\u0001é""#);
    }
}
