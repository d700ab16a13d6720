//! A lock per request in any tower stack (cargo feature `tower`): [`LockLayer`].
//!
//! The layer renders a lock key from each request (a route parameter with
//! [`LockLayer::route`] — `account:{id}` for `/accounts/{id}/withdraw`, the key an
//! attribute's `account:<id>` takes — its path, a header, or a closure of yours; no key:
//! no lock), takes the lock, calls the inner service holding it, in the
//! lock's task-scoped context (so the handler sees [`fencing_token()`](crate::fencing_token)
//! and [`lease_lost()`](crate::lease_lost), and its own `#[distributed_lock]` calls on the
//! same key re-enter), and releases it when the inner service's response future has
//! completed, or when the request's future is dropped (a client gone, a timeout layer).
//!
//! A request whose lock is not taken gets the response of `distlock::web`,
//! without calling the inner service: **409 Conflict with `Retry-After`** when another
//! holder kept the key for the whole wait (the message says what holds it, by kind, from
//! the holder information next to the lock: another request through this layer, a
//! `distlock run` command, another part of the service; one read of at most 250 ms), **503 with `Retry-After: 1`** when the backend
//! is down or this instance is shutting down ([`Registry::shutdown`]), **400** when the key is unusable (over 1024 bytes), 500 for configuration
//! errors; a small JSON body that names neither key nor backend (unless
//! [`with_key_and_backend`](LockLayer::with_key_and_backend)), the [`LockError`] in the
//! response's extensions. With a lease lost while the inner service ran (`Lease::Auto`,
//! the default `OnLost::Cancel`) its future is dropped at its next `.await` and the
//! answer is the 500 of a `LeaseLost` (the outcome is unknown).
//!
//! **gRPC** (tonic): a request whose `content-type` is `application/grpc*` gets a gRPC
//! error instead (HTTP 200, `grpc-status` and `grpc-message` headers, no body): `ABORTED`
//! (10) for a busy lock, `UNAVAILABLE` (14) for a backend down, `INVALID_ARGUMENT` (3) for
//! an unusable key, `INTERNAL` (13) otherwise; `retry-after` stays as a header.
//!
//! The response body is [`LockBody<B>`]: the inner service's body `B` (any
//! `http_body::Body<Data = Bytes>`: axum's, tonic's, hyper's, `Full<Bytes>`), or the
//! error's. The lock covers the inner service's future, not the streaming of the
//! response body after it.
//!
//! With axum (`Router::layer` or `route_layer`, or on one route):
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use distlock::tower::LockLayer;
//! use std::time::Duration;
//!
//! async fn rebuild() -> &'static str {
//!     "rebuilt"
//! }
//!
//! let app: axum::Router = axum::Router::new()
//!     .route("/reports/{name}/rebuild", axum::routing::post(rebuild))
//!     // One rebuild per report at a time; a second one waits up to 100 ms, then gets 409.
//!     .layer(
//!         LockLayer::new(|req: &http::Request<_>| Some(format!("report:{}", req.uri().path())))
//!             .wait(Duration::from_millis(100)),
//!     );
//! # let _ = app;
//! # }
//! ```
//!
//! In a plain tower stack (hyper, tonic's `Server::layer`):
//!
//! ```
//! use bytes::Bytes;
//! use distlock::tower::LockLayer;
//! use http_body_util::Full;
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = distlock::Registry::from_str("[backends.m]\nmode = \"memory\"").await?;
//! let service = ServiceBuilder::new()
//!     .layer(
//!         LockLayer::header(http::HeaderName::from_static("x-account"), "account:")
//!             .wait(Duration::ZERO)
//!             .registry(registry.clone()),
//!     )
//!     .service(service_fn(|_req: http::Request<()>| async {
//!         // `Some` inside the request's lock (the handler runs in its context).
//!         let token = distlock::fencing_token();
//!         Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(format!("{token:?}")))))
//!     }));
//!
//! let request = || http::Request::builder().header("x-account", "42").body(()).unwrap();
//! assert_eq!(service.clone().oneshot(request()).await?.status(), 200);
//!
//! let held = registry.lock("account:42").acquire().await?;
//! let busy = service.clone().oneshot(request()).await?;
//! assert_eq!(busy.status(), 409);
//! assert!(busy.headers().contains_key("retry-after"));
//! held.release().await?;
//!
//! // No header, no key: the request goes through without a lock.
//! assert_eq!(service.oneshot(http::Request::new(())).await?.status(), 200);
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};

use crate::obs::sites::LockSite;
use crate::ops::target::Target;
use crate::{Lease, Lock, LockError, LockKind, OnLost, Registry};

/// How [`LockLayer`] makes the lock key of a request; `None`: the request takes no lock.
///
/// Implemented by closures `Fn(&http::Request<B>) -> Option<String>`, and by the keys of
/// [`LockLayer::path`] and [`LockLayer::header`].
///
/// ```
/// use distlock::tower::RequestKey;
///
/// /// The tenant of the request's host name: `tenant:acme` for `acme.example.com`.
/// struct Tenant;
///
/// impl<B> RequestKey<B> for Tenant {
///     fn key(&self, req: &http::Request<B>) -> Option<String> {
///         let host = req.headers().get(http::header::HOST)?.to_str().ok()?;
///         Some(format!("tenant:{}", host.split('.').next()?))
///     }
/// }
///
/// let req = http::Request::builder().header("host", "acme.example.com").body(()).unwrap();
/// assert_eq!(Tenant.key(&req).as_deref(), Some("tenant:acme"));
/// let layer = distlock::tower::LockLayer::with_key(Tenant);
/// # drop(layer);
/// ```
pub trait RequestKey<B>: Send + Sync + 'static {
    /// The lock key of `req`, or `None` for no lock.
    fn key(&self, req: &Request<B>) -> Option<String>;
}

impl<B, F> RequestKey<B> for F
where
    F: Fn(&Request<B>) -> Option<String> + Send + Sync + 'static,
{
    fn key(&self, req: &Request<B>) -> Option<String> {
        self(req)
    }
}

/// The key of [`LockLayer::path`]: a prefix and the request's path.
#[derive(Debug, Clone)]
pub struct PathKey {
    prefix: String,
}

impl<B> RequestKey<B> for PathKey {
    fn key(&self, req: &Request<B>) -> Option<String> {
        Some(format!("{}{}", self.prefix, req.uri().path()))
    }
}

/// The key of [`LockLayer::route`]: route patterns, each with the key template its
/// requests are locked on, as a tower or axum user writes them: `"/accounts/{id}/withdraw"`
/// with `"account:{id}"` locks `POST /accounts/5/withdraw` on `account:5`, the key a
/// `#[distributed_lock(key = "account:<id>")]` on that `id` takes.
///
/// - A pattern is axum's (0.8) route syntax: segments that are literal, a parameter
///   `{name}` (one whole segment), or a catch-all `{*name}` as the last segment (the rest
///   of the path, without its leading `/`). A template is text with `{name}` for a
///   parameter of its pattern (`{{` and `}}` for braces).
/// - Parameters are percent-decoded as axum's `Path` extractor decodes them (`%20` → a
///   space), so the key is the value the handler sees.
/// - The first pattern that matches the request's path (without the query) gives the key.
///   **A request no pattern matches takes no lock**: give the layer to the routes it
///   covers (axum's `route_layer` on those routes, or `Router::route(..)` with the layer
///   on the method router), with their own patterns.
///
/// ```
/// use distlock::tower::{RequestKey, RouteKey};
///
/// let key = RouteKey::new("/accounts/{id}/withdraw", "account:{id}")?
///     .route("/accounts/{id}/deposit", "account:{id}")?
///     .route("/files/{*path}", "file:{path}")?;
/// let req = |path: &str| http::Request::builder().uri(path).body(()).unwrap();
/// assert_eq!(key.key(&req("/accounts/5/withdraw?amount=3")).as_deref(), Some("account:5"));
/// assert_eq!(key.key(&req("/accounts/5/deposit")).as_deref(), Some("account:5"));
/// assert_eq!(key.key(&req("/files/a/b%20c.txt")).as_deref(), Some("file:a/b c.txt"));
/// assert_eq!(key.key(&req("/accounts/5")), None); // no route: no lock
/// # Ok::<(), distlock::tower::InvalidRoute>(())
/// ```
#[derive(Debug, Clone)]
pub struct RouteKey {
    routes: Vec<Route>,
}

/// One route of a [`RouteKey`].
#[derive(Debug, Clone)]
struct Route {
    segments: Vec<Segment>,
    template: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
    Rest(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Param(String),
}

/// A route pattern or key template [`RouteKey`] cannot use, with why.
///
/// ```
/// let err = distlock::tower::RouteKey::new("/accounts/{id}", "account:{user}").unwrap_err();
/// assert!(err.to_string().contains("`{user}`"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRoute {
    /// The route pattern.
    pub pattern: String,
    /// The key template.
    pub template: String,
    /// Why it was refused.
    pub reason: String,
}

impl fmt::Display for InvalidRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "route {:?} with key template {:?}: {}",
            self.pattern, self.template, self.reason
        )
    }
}

impl std::error::Error for InvalidRoute {}

impl RouteKey {
    /// A key for the requests whose path matches `pattern`, rendered from `template` (see
    /// the [type's docs](RouteKey)).
    ///
    /// # Errors
    ///
    /// [`InvalidRoute`] for a pattern that does not start with `/`, a parameter that is
    /// not a whole segment, a repeated or empty parameter name, a catch-all that is not
    /// last, or a template naming a parameter the pattern does not have (or with an
    /// unmatched brace).
    pub fn new(pattern: &str, template: &str) -> Result<RouteKey, InvalidRoute> {
        RouteKey { routes: Vec::new() }.route(pattern, template)
    }

    /// Another route, tried after the ones before it.
    ///
    /// # Errors
    ///
    /// As [`RouteKey::new`].
    pub fn route(mut self, pattern: &str, template: &str) -> Result<RouteKey, InvalidRoute> {
        let invalid = |reason: String| InvalidRoute {
            pattern: pattern.to_owned(),
            template: template.to_owned(),
            reason,
        };
        let segments = parse_pattern(pattern).map_err(invalid)?;
        let template_parts = parse_template(template).map_err(invalid)?;
        for part in &template_parts {
            if let Part::Param(name) = part {
                let known = segments
                    .iter()
                    .any(|s| matches!(s, Segment::Param(n) | Segment::Rest(n) if n == name));
                if !known {
                    return Err(invalid(format!(
                        "the template names `{{{name}}}`, which is not a parameter of the pattern"
                    )));
                }
            }
        }
        self.routes.push(Route {
            segments,
            template: template_parts,
        });
        Ok(self)
    }
}

fn parse_pattern(pattern: &str) -> Result<Vec<Segment>, String> {
    let Some(rest) = pattern.strip_prefix('/') else {
        return Err("a route pattern starts with `/`".into());
    };
    let mut segments = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let parts: Vec<&str> = rest.split('/').collect();
    for (i, seg) in parts.iter().enumerate() {
        let segment = match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(inner) => {
                let (rest, name) = match inner.strip_prefix('*') {
                    Some(name) => (true, name),
                    None => (false, inner),
                };
                if name.is_empty() || name.contains(['{', '}', '*']) {
                    return Err(format!(
                        "`{seg}` is not a parameter (`{{name}}` or `{{*name}}`)"
                    ));
                }
                if names.iter().any(|n| n == name) {
                    return Err(format!("the parameter `{name}` appears twice"));
                }
                names.push(name.to_owned());
                if rest {
                    if i + 1 != parts.len() {
                        return Err(format!("the catch-all `{seg}` must be the last segment"));
                    }
                    Segment::Rest(name.to_owned())
                } else {
                    Segment::Param(name.to_owned())
                }
            }
            None if seg.contains(['{', '}']) => {
                return Err(format!(
                    "`{seg}`: a parameter is a whole segment (`/{{name}}/`), not part of one"
                ));
            }
            None => Segment::Literal((*seg).to_owned()),
        };
        segments.push(segment);
    }
    Ok(segments)
}

fn parse_template(template: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => return Err("the template has a `{` without its `}`".into()),
                    }
                }
                if name.is_empty() {
                    return Err("the template has an empty `{}`".into());
                }
                if !text.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut text)));
                }
                parts.push(Part::Param(name));
            }
            '}' => return Err("the template has a `}` without its `{` (write `}}`)".into()),
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

/// `%XX` decoded, as UTF-8; `None` when it is not (axum's `Path` refuses such a path).
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).ok()?);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

impl Route {
    /// The key of `path`, if this route matches it.
    fn key(&self, path: &str) -> Option<String> {
        let mut rest = path.strip_prefix('/')?;
        let mut params: Vec<(&str, String)> = Vec::new();
        let last = self.segments.len().checked_sub(1)?;
        for (i, segment) in self.segments.iter().enumerate() {
            let (given, after) = match rest.split_once('/') {
                Some((s, a)) => (s, Some(a)),
                None => (rest, None),
            };
            match segment {
                Segment::Rest(name) => {
                    if rest.is_empty() {
                        return None;
                    }
                    params.push((name, percent_decode(rest)?));
                    break;
                }
                Segment::Literal(lit) if given == lit => {}
                Segment::Literal(_) => return None,
                Segment::Param(_) if given.is_empty() => return None,
                Segment::Param(name) => params.push((name, percent_decode(given)?)),
            }
            match (after, i == last) {
                (Some(a), false) => rest = a,
                (None, true) => rest = "",
                // More path than pattern, or more pattern than path.
                (Some(_), true) | (None, false) => return None,
            }
        }
        let mut key = String::new();
        for part in &self.template {
            match part {
                Part::Text(t) => key.push_str(t),
                Part::Param(name) => {
                    let (_, v) = params.iter().find(|(n, _)| n == name)?;
                    key.push_str(v);
                }
            }
        }
        Some(key)
    }
}

impl<B> RequestKey<B> for RouteKey {
    fn key(&self, req: &Request<B>) -> Option<String> {
        let path = req.uri().path();
        self.routes.iter().find_map(|r| r.key(path))
    }
}

/// The key of [`LockLayer::header`]: a prefix and a header's value.
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
    prefix: String,
}

impl<B> RequestKey<B> for HeaderKey {
    fn key(&self, req: &Request<B>) -> Option<String> {
        let value = req.headers().get(&self.name)?;
        // Not UTF-8: lossily (two such values may share a lock; never one value two locks).
        Some(format!(
            "{}{}",
            self.prefix,
            String::from_utf8_lossy(value.as_bytes())
        ))
    }
}

/// How the layer's locks are taken.
#[derive(Clone)]
struct Settings {
    /// The registry, backend, wait, lease and site of every lock.
    target: Target,
    kind: LockKind,
    on_lost: OnLost,
    with_key: bool,
}

impl Settings {
    /// The registry the locks are taken in (`None`: none in force).
    fn registry(&self) -> Option<Registry> {
        self.target.registry().ok()
    }

    /// The lock of a request's `key`.
    fn lock(&self, key: String) -> Lock {
        Lock::with_target(key, self.target.clone())
            .kind(self.kind)
            .on_lost(self.on_lost)
    }
}

/// A tower [`Layer`](tower_layer::Layer) taking a distributed lock around each request:
/// see the [module docs](self).
///
/// The locks are taken as [`Lock::new`] takes them: on the default backend of the
/// registry in force (the global one of `distlock::init`, or a [`Registry::scope`] around
/// the server), with the `[defaults]` wait and lease, unless set here. The lock site
/// (holder information, metrics) is where the layer was made, or [`site`](LockLayer::site).
pub struct LockLayer<K> {
    key: Arc<K>,
    settings: Arc<Settings>,
}

impl<K> Clone for LockLayer<K> {
    fn clone(&self) -> Self {
        LockLayer {
            key: self.key.clone(),
            settings: self.settings.clone(),
        }
    }
}

impl<K> fmt::Debug for LockLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockLayer")
            .field("wait", &self.settings.target.wait())
            .field("lease", &self.settings.target.lease())
            .field("backend", &self.settings.target.backend_name())
            .field("kind", &self.settings.kind)
            .field("site", &format_args!("{}", self.settings.target.site()))
            .finish_non_exhaustive()
    }
}

impl<F> LockLayer<F> {
    /// A layer locking each request on the key `key_of` renders from it (`None`: no lock).
    /// Keep the rendering unambiguous: two requests that must not run together render the
    /// same key, two that may render different ones.
    ///
    /// ```
    /// use distlock::tower::LockLayer;
    ///
    /// // One write per document at a time; reads take no lock.
    /// let layer = LockLayer::new(|req: &http::Request<()>| {
    ///     (req.method() != http::Method::GET).then(|| format!("doc:{}", req.uri().path()))
    /// });
    /// # drop(layer);
    /// ```
    #[track_caller]
    pub fn new<B>(key_of: F) -> LockLayer<F>
    where
        F: Fn(&Request<B>) -> Option<String> + Send + Sync + 'static,
    {
        LockLayer::with_key(key_of)
    }
}

impl LockLayer<PathKey> {
    /// A layer locking each request on `prefix` followed by its path (without the query):
    /// `LockLayer::path("doc:")` locks `POST /docs/7` on `doc:/docs/7`. The key is the
    /// whole path: to lock on a path parameter (`account:5` for `/accounts/5/withdraw`,
    /// the key an attribute's `account:<id>` takes), use [`LockLayer::route`].
    ///
    /// ```
    /// let layer = distlock::tower::LockLayer::path("doc:");
    /// # drop(layer);
    /// ```
    #[track_caller]
    pub fn path(prefix: impl Into<String>) -> LockLayer<PathKey> {
        LockLayer::with_key(PathKey {
            prefix: prefix.into(),
        })
    }
}

impl LockLayer<RouteKey> {
    /// A layer locking each request whose path matches the route `pattern` on the key
    /// `template` renders from its parameters: `LockLayer::route("/accounts/{id}/withdraw",
    /// "account:{id}")` locks `POST /accounts/5/withdraw` on `account:5`, the key of a
    /// `#[distributed_lock(key = "account:<id>")]` taking the same account. A request the
    /// pattern does not match takes no lock; more routes: [`RouteKey::route`] and
    /// [`LockLayer::with_key`]. See [`RouteKey`].
    ///
    /// ```
    /// use distlock::tower::LockLayer;
    /// use std::time::Duration;
    ///
    /// async fn withdraw(axum::extract::Path(id): axum::extract::Path<u64>) -> String {
    ///     // Runs holding `account:{id}`, the lock the attribute's `account:<id>` takes.
    ///     format!("withdrew from {id}, token {:?}", distlock::fencing_token())
    /// }
    ///
    /// # fn main() -> Result<(), distlock::tower::InvalidRoute> {
    /// let app: axum::Router = axum::Router::new().route(
    ///     "/accounts/{id}/withdraw",
    ///     axum::routing::post(withdraw).layer(
    ///         LockLayer::route("/accounts/{id}/withdraw", "account:{id}")?
    ///             .wait(Duration::from_millis(100)),
    ///     ),
    /// );
    /// # let _ = app; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`InvalidRoute`] as [`RouteKey::new`].
    #[track_caller]
    pub fn route(pattern: &str, template: &str) -> Result<LockLayer<RouteKey>, InvalidRoute> {
        let key = RouteKey::new(pattern, template)?;
        Ok(LockLayer::with_key(key))
    }

    /// A layer locking each request whose path matches `pattern` on `prefix` followed by
    /// its parameter `param`: `LockLayer::path_param("account:", "/accounts/{id}/withdraw",
    /// "id")` is `LockLayer::route("/accounts/{id}/withdraw", "account:{id}")`.
    ///
    /// ```
    /// let layer = distlock::tower::LockLayer::path_param("account:", "/accounts/{id}/withdraw", "id")?;
    /// # drop(layer); Ok::<(), distlock::tower::InvalidRoute>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`InvalidRoute`] as [`RouteKey::new`] (`param` must be a parameter of `pattern`).
    #[track_caller]
    pub fn path_param(
        prefix: &str,
        pattern: &str,
        param: &str,
    ) -> Result<LockLayer<RouteKey>, InvalidRoute> {
        let template = format!(
            "{}{{{param}}}",
            prefix.replace('{', "{{").replace('}', "}}")
        );
        let key = RouteKey::new(pattern, &template)?;
        Ok(LockLayer::with_key(key))
    }
}

impl LockLayer<HeaderKey> {
    /// A layer locking each request on `prefix` followed by the value of its header `name`;
    /// a request without that header takes no lock. A value that is not UTF-8 is rendered
    /// lossily (such values may share a lock; one value never has two).
    ///
    /// ```
    /// let layer = distlock::tower::LockLayer::header(http::HeaderName::from_static("x-account"), "account:");
    /// # drop(layer);
    /// ```
    #[track_caller]
    pub fn header(name: HeaderName, prefix: impl Into<String>) -> LockLayer<HeaderKey> {
        LockLayer::with_key(HeaderKey {
            name,
            prefix: prefix.into(),
        })
    }
}

impl<K> LockLayer<K> {
    /// A layer locking each request on the key `key` renders (any [`RequestKey`]).
    #[track_caller]
    pub fn with_key(key: K) -> LockLayer<K> {
        LockLayer {
            key: Arc::new(key),
            settings: Arc::new(Settings {
                target: Target::here(),
                kind: LockKind::Reentrant,
                on_lost: OnLost::Cancel,
                with_key: false,
            }),
        }
    }

    fn set(mut self, f: impl FnOnce(&mut Settings)) -> Self {
        f(Arc::make_mut(&mut self.settings));
        self
    }

    /// Longest wait for a busy key; `Duration::ZERO` tries once (a busy key answers 409 at
    /// once). Default: `[defaults].wait`.
    pub fn wait(self, wait: Duration) -> Self {
        self.set(|s| s.target.set_wait(wait))
    }

    /// The lease of the locks (see [`Lock::lease`]). Default: `[defaults].lease`.
    pub fn lease(self, lease: Lease) -> Self {
        self.set(|s| s.target.set_lease(lease))
    }

    /// Take the locks on the backend of this name instead of the default one.
    pub fn backend(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.set(|s| s.target.set_backend(name))
    }

    /// The kind of lock (see [`Lock::kind`]): e.g. `LockKind::Fair` to serve waiting
    /// requests in arrival order. Default: reentrant.
    pub fn kind(self, kind: LockKind) -> Self {
        self.set(|s| s.kind = kind)
    }

    /// What happens to the inner service's future when a lease is lost (see
    /// [`Lock::on_lost`]). Default: [`OnLost::Cancel`] (dropped; the answer is the 500 of
    /// `LeaseLost`).
    pub fn on_lost(self, on_lost: OnLost) -> Self {
        self.set(|s| s.on_lost = on_lost)
    }

    /// Take the locks in this registry instead of the one in force when a request comes.
    pub fn registry(self, registry: Registry) -> Self {
        self.set(|s| s.target.set_registry(registry))
    }

    /// Name the lock site (see [`Lock::site`]) instead of where the layer was made.
    pub fn site(self, name: &'static str) -> Self {
        self.set(|s| s.target.set_site(LockSite::Named(name)))
    }

    /// Error bodies name the key and the backend, as
    /// [`LockError::into_response_with_key_and_backend`](crate::LockError) does: only where
    /// keys and backend names are fit for every client to see.
    pub fn with_key_and_backend(self) -> Self {
        self.set(|s| s.with_key = true)
    }
}

impl<S, K> tower_layer::Layer<S> for LockLayer<K> {
    type Service = LockService<S, K>;

    fn layer(&self, inner: S) -> LockService<S, K> {
        LockService {
            inner,
            key: self.key.clone(),
            settings: self.settings.clone(),
        }
    }
}

/// The service of a [`LockLayer`] around `S`.
pub struct LockService<S, K> {
    inner: S,
    key: Arc<K>,
    settings: Arc<Settings>,
}

impl<S: Clone, K> Clone for LockService<S, K> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            key: self.key.clone(),
            settings: self.settings.clone(),
        }
    }
}

impl<S: fmt::Debug, K> fmt::Debug for LockService<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, K, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for LockService<S, K>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    K: RequestKey<ReqBody>,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<LockBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The service made ready goes with this request; the clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let Some(key) = self.key.key(&req) else {
            return ResponseFuture(Box::pin(async move {
                Ok(inner.call(req).await?.map(LockBody::inner))
            }));
        };
        let grpc = is_grpc(&req);
        let with_key = self.settings.with_key;
        let lock = self.settings.lock(key);
        let settings = self.settings.clone();
        ResponseFuture(Box::pin(async move {
            // Called inside the lock: a service doing work in `call` does it holding it.
            let e = match lock.run(async move { inner.call(req).await }).await {
                Ok(out) => return Ok(out?.map(LockBody::inner)),
                Err(e) => e,
            };
            // A busy lock: the answer says what holds it (another request of this layer,
            // a `distlock run` command, ...), from the holder information.
            let e = match (&e, settings.registry()) {
                (LockError::Timeout { .. }, Some(registry)) => {
                    let own = crate::obs::metrics::site_label(settings.target.site());
                    e.with_holder_from(&registry, Some(own)).await
                }
                _ => e,
            };
            if grpc {
                Ok(grpc_response(e, with_key))
            } else {
                Ok(e.http_response(with_key).map(LockBody::error))
            }
        }))
    }
}

/// The future of a [`LockService`]'s response.
#[must_use = "futures do nothing unless polled"]
pub struct ResponseFuture<B, E>(Pin<Box<dyn Future<Output = Outcome<B, E>> + Send>>);

type Outcome<B, E> = Result<Response<LockBody<B>>, E>;

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<LockBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// A gRPC "trailers-only" error: HTTP 200, `grpc-status`/`grpc-message` in the headers.
fn grpc_response<B>(e: LockError, with_key: bool) -> Response<LockBody<B>> {
    let status = match e.http_status() {
        StatusCode::CONFLICT => 10,            // ABORTED
        StatusCode::SERVICE_UNAVAILABLE => 14, // UNAVAILABLE
        StatusCode::BAD_REQUEST => 3,          // INVALID_ARGUMENT
        _ => 13,                               // INTERNAL
    };
    let message = grpc_message(&e.client_message(with_key));
    let (parts, _) = e.http_response(with_key).into_parts();
    let mut response = Response::new(LockBody::empty());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(status));
    if let Ok(v) = HeaderValue::from_str(&message) {
        headers.insert("grpc-message", v);
    }
    if let Some(v) = parts.headers.get(http::header::RETRY_AFTER) {
        headers.insert(http::header::RETRY_AFTER, v.clone());
    }
    *response.extensions_mut() = parts.extensions;
    response
}

/// Percent-encode a `grpc-message` (the gRPC spec: bytes outside 0x20..=0x7E, and `%`).
fn grpc_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pin_project_lite::pin_project! {
    /// The body of a response through a [`LockService`]: the inner service's body, or
    /// the JSON body of a lock error (see `distlock::web`).
    pub struct LockBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Error { data: Option<Bytes> },
    }
}

impl<B> LockBody<B> {
    fn inner(body: B) -> Self {
        LockBody {
            kind: Kind::Inner { body },
        }
    }

    fn error(body: String) -> Self {
        LockBody {
            kind: Kind::Error {
                data: Some(Bytes::from(body)),
            },
        }
    }

    fn empty() -> Self {
        LockBody {
            kind: Kind::Error { data: None },
        }
    }
}

impl<B> fmt::Debug for LockBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("LockBody::Inner"),
            Kind::Error { data } => f.debug_tuple("LockBody::Error").field(data).finish(),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for LockBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Error { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Error { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Error { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(key: &RouteKey, path: &str) -> Option<String> {
        key.key(&Request::builder().uri(path).body(()).unwrap())
    }

    #[test]
    fn a_route_key_is_the_attributes_key_of_the_same_parameter() {
        let key = RouteKey::new("/accounts/{id}/withdraw", "account:{id}").unwrap();
        assert_eq!(
            key_of(&key, "/accounts/5/withdraw").as_deref(),
            Some("account:5")
        );
        assert_eq!(
            key_of(&key, "/accounts/5/withdraw?x=1").as_deref(),
            Some("account:5")
        );
        // Decoded as axum's `Path` decodes it.
        assert_eq!(
            key_of(&key, "/accounts/a%20b%2Fc/withdraw").as_deref(),
            Some("account:a b/c")
        );
        for other in [
            "/accounts/5",
            "/accounts/5/withdraw/",
            "/accounts//withdraw",
            "/accounts/5/deposit",
            "/x/accounts/5/withdraw",
            "/accounts/%FF/withdraw",
        ] {
            assert_eq!(key_of(&key, other), None, "{other}");
        }
        let layer = LockLayer::path_param("account{x}:", "/accounts/{id}/withdraw", "id").unwrap();
        assert_eq!(
            layer
                .key
                .key(
                    &Request::builder()
                        .uri("/accounts/7/withdraw")
                        .body(())
                        .unwrap()
                )
                .as_deref(),
            Some("account{x}:7")
        );
    }

    #[test]
    fn route_keys_try_their_routes_in_order_and_take_catch_alls() {
        let key = RouteKey::new("/", "root")
            .and_then(|k| k.route("/t/{tenant}/docs/{doc}", "doc:{tenant}/{doc}"))
            .and_then(|k| k.route("/files/{*path}", "file:{{{path}}}"))
            .unwrap();
        assert_eq!(key_of(&key, "/").as_deref(), Some("root"));
        assert_eq!(
            key_of(&key, "/t/acme/docs/7").as_deref(),
            Some("doc:acme/7")
        );
        assert_eq!(
            key_of(&key, "/files/a/b.txt").as_deref(),
            Some("file:{a/b.txt}")
        );
        assert_eq!(key_of(&key, "/files/"), None);
        assert_eq!(key_of(&key, "/files"), None);
    }

    #[test]
    fn bad_routes_are_refused_with_why() {
        let bad = [
            ("accounts/{id}", "a:{id}", "starts with `/`"),
            ("/accounts/{id}", "a:{user}", "`{user}`"),
            ("/accounts/x{id}", "a:{id}", "whole segment"),
            ("/a/{id}/{id}", "a:{id}", "twice"),
            ("/a/{*rest}/b", "a:{rest}", "last segment"),
            ("/a/{}", "a", "not a parameter"),
            ("/a/{id}", "a:{id", "without its `}`"),
            ("/a/{id}", "a:}", "without its `{`"),
            ("/a/{id}", "a:{}", "empty"),
        ];
        for (pattern, template, why) in bad {
            let e = RouteKey::new(pattern, template).unwrap_err();
            assert!(e.to_string().contains(why), "{pattern} {template}: {e}");
        }
        assert!(LockLayer::path_param("a:", "/a/{id}", "user").is_err());
    }

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(
            grpc_message("lock `a\"b\u{e9}` is held; 100%"),
            "lock `a\"b%C3%A9` is held; 100%25"
        );
    }
}
