//! # distlock — distributed locks on Redis
//!
//! Mutual exclusion across processes and hosts, reentrant within a task, with waiting that
//! wakes promptly on release (pub/sub), leases kept alive by a watchdog, a signal when a
//! lease is lost, fencing tokens, and release on every way out.
//!
//! ```toml
//! [dependencies]
//! distlock = { version = "0.1", features = ["axum"] }   # "axum" only if you use axum
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! Cargo features:
//!
//! | feature | default | what it adds |
//! |---------|---------|--------------|
//! | `tls`   | on      | `rediss://` URLs: TLS through rustls (ring), the platform's root certificates by default; `tls_ca`, `tls_cert`/`tls_key` and `tls_insecure_skip_verify` per backend. No OpenSSL needed. `default-features = false` leaves it out (a `rediss://` URL then fails `init`, naming the feature) |
//! | `axum`  | off     | `impl axum::response::IntoResponse for LockError`, and the module `distlock::web` documenting the mapping (409 + `Retry-After` for a busy lock, 503 for Redis down, 400 for an unusable key, 500 without retry for a lost lease) |
//! | `tower` | off     | `distlock::tower::LockLayer`: a lock per request in any tower stack (axum, tonic, hyper), keyed by the request's path, a header or a closure, answering as `distlock::web` does |
//! | `test-support` | off | hooks for tests and benchmarks that wait for an event instead of sleeping: `Registry::waiting`, `Registry::subscriber_connections`, `Registry::watched_leases` |
//!
//! ```
//! use distlock::{Lease, Lock};
//! use std::time::Duration;
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! distlock::init_from_str(r#"
//!     [defaults]
//!     wait = "5s"
//!     lease = "auto"
//!
//!     [backends.main]
//!     mode = "memory"   # or: mode = "single", url = "redis://127.0.0.1:6379/0"
//! "#).await?;
//!
//! let guard = Lock::new("order:42").wait(Duration::from_secs(1)).lease(Lease::Auto).acquire().await?;
//! println!("fencing token {}", guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
//! ```
//!
//! The [`#[distributed_lock]`](distributed_lock) attribute locks an `async fn`; [`Lock`]
//! is the builder without the attribute ([`Lock::all`] for several keys at once, [`Leader`]
//! to elect one leader among replicas, [`Semaphore`] to let at most N holders in at once);
//! [`Registry`] is a configuration without the
//! global one (and, with [`Registry::scope`], the one annotated code uses in a test);
//! [`init`] reads the [configuration](#configuration-reference).
//!
//! ## Guides
//!
//! The repository's `README.md` is the guide (the two commands that run the demo and the
//! test suite, an axum service, the builder, a multi-key transfer, testing), and its
//! `docs/` folder has a page per topic:
//!
//! | page | what |
//! |---|---|
//! | `docs/locks.md` | cancel-safety; read-write and fair locks, multi-key locks, run-once jobs, leader election, semaphores |
//! | `docs/backends.md` | cluster, sentinel, redlock and multi; TLS; the least-privilege ACL; the `init` self-check |
//! | `docs/configuration.md` | every configuration field (also [below](#configuration-reference)); a backend down at start-up; Redis coming back |
//! | `docs/operations.md` | the `distlock` command (`distlock unlock` and what its holder sees), holder information, metrics with the matching Prometheus exporter ([`metrics`]) |
//! | `docs/design.md` | how it works: Redis keys, scripts safe to run twice, waiting, leases, reentrancy, connections; the source layout |
//! | `docs/fault-testing.md` | fencing ([`fence()`]) and the torture run's results |
//! | `docs/performance.md` | the benchmark against Redisson's protocol sent raw |
//! | `docs/redisson.md` | sharing locks with Java services using Redisson |
//!
//! ## When a lease is lost, the body is cancelled: make it cancel-safe
//!
//! With `lease = "auto"`, a lease is lost when the watchdog finds the lock gone (deleted,
//! or Redis restarted without it) or cannot renew it before it expires. From then on
//! another owner may hold the lock. By default (`on_lost = "cancel"`) the body is
//! **dropped at its next `.await`** and the call returns `LockError::LeaseLost`: whatever
//! the body did before stays done. A body that debits one account, awaits, then credits
//! another can stop half-way. So a body must be cancel-safe: do its writes in one
//! transaction, or fence them with [`fencing_token()`] so the store refuses a stale
//! holder's writes (for a value computed from a read, claim it before reading:
//! [`Fence::claim`](fence::Fence::claim)). With `on_lost = "signal"` ([`OnLost::Signal`]) the body runs on and
//! sees the loss through [`lease_lost()`], to stop or undo before its next irreversible
//! step. A `LeaseLost` means the outcome is unknown: never retry it blindly (the axum
//! mapping answers 500 without `Retry-After`, saying so).
//!
//! ## Testing
//!
//! Every `#[tokio::test]` runs on a runtime of its own. One global `init` shared by all of
//! them (a `OnceCell`) works on every backend: distlock connects its backends on a
//! background runtime of its own (threads named `distlock-background`, 2 to 4 of them, started by the first
//! connect), where the connections, the watchdog, the wake-up subscribers and the
//! releases of dropped guards live; a lock can be used from any runtime, also after the
//! one that ran `init` has ended.
//!
//! ```
//! use distlock::{distributed_lock, LockError, Registry};
//! use tokio::sync::OnceCell;
//!
//! static INIT: OnceCell<()> = OnceCell::const_new();
//!
//! async fn setup() {
//!     INIT.get_or_init(|| async {
//!         distlock::init_from_str("[backends.main]\nmode = \"memory\"").await.expect("init");
//!     })
//!     .await;
//! }
//!
//! #[distributed_lock(key = "account:<id>", wait = "1s")]
//! async fn touch(id: u64) -> Result<u64, LockError> {
//!     Ok(id)
//! }
//!
//! #[tokio::test]
//! async fn first() {
//!     setup().await;
//!     assert_eq!(touch(1).await.unwrap(), 1);
//! }
//!
//! // A test with a configuration of its own: annotated functions and `Lock::new` inside
//! // `scope` use this registry instead of the global one.
//! #[tokio::test]
//! async fn own_registry() {
//!     let registry = Registry::from_str("[backends.mine]\nmode = \"memory\"").await.unwrap();
//!     assert_eq!(registry.scope(touch(2)).await.unwrap(), 2);
//! }
//! # fn main() {
//! #     for _ in 0..2 {
//! #         let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! #         rt.block_on(async { setup().await; assert_eq!(touch(1).await.unwrap(), 1); });
//! #     }
//! # }
//! ```
//!
//! The scope is task-scoped: a task spawned inside it does not inherit it (wrap its future
//! in `scope` too). The `memory` backend has the same semantics in-process, for tests that
//! need no Redis.
//!
//! ## Configuration reference
//!
//! The TOML that [`init`] (from `$DISTLOCK_CONFIG`, else `./distlock.toml`),
//! [`init_from_path`], [`init_from_str`] and [`Registry::from_str`] read; parsed as a
//! [`Config`](config::Config) (module [`config`]).
//!

#![doc = include_str!("../docs/configuration.md")]

mod backend;
mod check;
mod errors;
#[cfg(any(feature = "tower", feature = "axum"))]
mod integrations;
mod lease;
mod obs;
mod ops;
mod primitives;
mod protocol;
mod registry;
mod rt;
mod terms;
mod upkeep;

// The everyday API: 25 names (the attribute, the primitives and their guards, the lease
// terms, the two errors, the registry and `init*`, the task-scoped queries, `fence`).
pub use distlock_macros::distributed_lock;
pub use errors::{Feature, InitError, LockError};
pub use lease::context::{fencing_token, fencing_token_of, fencing_tokens, lease_lost};
pub use lease::policy::{Lease, OnLost};
pub use ops::fence::fence;
pub use primitives::call_wait::with_wait;
pub use primitives::guard::LockGuard;
pub use primitives::leader::{Leader, LeaderGuard};
pub use primitives::lock::Lock;
pub use primitives::multi::{MultiLock, MultiLockGuard};
pub use primitives::semaphore::{Semaphore, SemaphoreGuard};
pub use registry::{init, init_from_path, init_from_str, init_with, shutdown, Registry};
pub use terms::kind::LockKind;

// Modules: the configuration, the errors in full, diagnostics, and what sits around locks.
#[doc(inline)]
pub use distlock_config as config;
#[cfg(feature = "tower")]
pub use integrations::tower;
#[cfg(feature = "axum")]
pub use integrations::web;
pub use obs::metrics;
pub use ops::{fence, ids};

pub mod error {
    //! The errors in full: [`LockError`] and [`InitError`] (also at the crate root), the
    //! opaque [`BackendError`] inside them with its [`BackendErrorKind`], the [`LockResult`]
    //! bound of `#[distributed_lock]` functions, and [`LeaseLost`], what
    //! [`lease_lost()`](crate::lease_lost) returns.
    //!
    //! ```
    //! use distlock::error::{BackendErrorKind, LockError};
    //! fn retry_later(e: &LockError) -> bool {
    //!     matches!(e, LockError::Backend { source, .. } if source.kind() == BackendErrorKind::TimedOut)
    //! }
    //! assert!(!retry_later(&LockError::NotInitialized));
    //! ```
    pub use crate::errors::backend::{BackendError, BackendErrorKind};
    pub use crate::errors::{HeldBy, InitError, LockError, LockResult};
    pub use crate::lease::context::LeaseLost;
}

pub mod inspect {
    //! Diagnostics: what a lock looks like on the server ([`LockInfo`], its [`Holder`]s and
    //! [`Waiter`]s, from [`Registry::inspect`](crate::Registry)), a backend's self-check
    //! ([`BackendReport`], [`ServerReport`]), the `#[distributed_lock]` sites linked into
    //! the binary ([`sites`]) and a leader's published information ([`LeaderInfo`]).
    //!
    //! ```
    //! // The `#[distributed_lock]` sites linked into this binary: none in this example.
    //! assert_eq!(distlock::inspect::sites().count(), 0);
    //! ```
    //!
    //! ```no_run
    //! # async fn f() -> Result<(), distlock::LockError> {
    //! let registry = distlock::Registry::from_str("[backends.main]\nmode = \"single\"\nurl = \"redis://127.0.0.1:6379\"").await.unwrap();
    //! let locks: Vec<distlock::inspect::LockInfo> = registry.inspect("order:42", None).await?;
    //! for lock in locks {
    //!     println!("{:?}: {} holder(s)", lock.kind, lock.holders.len());
    //! }
    //! # Ok(()) }
    //! ```
    pub use crate::check::report::{BackendReport, ServerReport, MIN_REDIS_VERSION};
    pub use crate::obs::sites::{sites, Site};
    pub use crate::ops::inspect::{Holder, Kind, LockInfo, Waiter};
    pub use crate::primitives::leader::LeaderInfo;
}

/// Used by the code `#[distributed_lock]` generates; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use inventory;

    /// The sources of the protocol's scripts, for benchmarks and tests that send the
    /// protocol raw (see `distlock/src/protocol/*.lua` for what each takes), each exactly as
    /// distlock sends it, prologues included (`protocol/script.rs` builds them).
    pub use crate::protocol::script::sources as scripts;

    /// The name of the function distlock calls (`FCALL`) on a server that loaded its
    /// function library, for the script whose source is `source` (one of [`scripts`]).
    pub fn function_of(source: &str) -> Option<&'static str> {
        crate::protocol::Script::of_source(source).map(crate::protocol::Script::function)
    }

    /// The fencing counter a cluster backend with key prefix `prefix` draws the tokens of
    /// the lock whose hash is `lock_hash` from: the counter of its slot, `PREFIX{{fence:N}`
    /// (single and sentinel draw from `PREFIX{{fence}`, redlock and multi from the key's
    /// own `PREFIX{KEY}:fence`; see `protocol/keys.rs`).
    pub fn slot_fence_counter(prefix: &str, lock_hash: &str) -> String {
        use crate::protocol::slot::{counter_tag, slot, COUNTER_TAG};
        let n = counter_tag(slot(lock_hash.as_bytes()));
        format!("{prefix}{{{COUNTER_TAG}{n}}}")
    }

    /// A placeholder's value in a key template, rendered with `Display` and escaped: `%`
    /// and the `stop` character (the first one of the template's text after the
    /// placeholder) are written as `%XX` (their UTF-8 bytes), so that two different
    /// argument tuples never render the same key. Other characters are left as they are.
    pub struct KeyPart<'a, T: ?Sized> {
        value: &'a T,
        stop: Option<char>,
    }

    impl<'a, T: core::fmt::Display + ?Sized> KeyPart<'a, T> {
        /// `value`, escaping `%` and `stop`.
        #[inline]
        pub fn new(value: &'a T, stop: Option<char>) -> Self {
            KeyPart { value, stop }
        }
    }

    impl<T: core::fmt::Display + ?Sized> core::fmt::Display for KeyPart<'_, T> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            use core::fmt::Write;
            let text = self.value.to_string();
            for c in text.chars() {
                if c == '%' || Some(c) == self.stop {
                    let mut bytes = [0u8; 4];
                    for b in c.encode_utf8(&mut bytes).bytes() {
                        write!(f, "%{b:02X}")?;
                    }
                } else {
                    f.write_char(c)?;
                }
            }
            Ok(())
        }
    }

    /// The wait `distlock::with_wait` set for the annotated calls made here, if any.
    #[inline]
    pub fn wait_override() -> Option<core::time::Duration> {
        crate::primitives::call_wait::current()
    }

    /// `body` run without the `with_wait` override (an annotated function's body: the
    /// annotated calls it makes wait as their own attributes say).
    #[inline]
    pub fn without_wait_override<F: core::future::Future>(
        body: F,
    ) -> impl core::future::Future<Output = F::Output> {
        crate::primitives::call_wait::outside(body)
    }

    /// Returns `f` unchanged. Wrapping an annotated function's body in it tells the compiler
    /// the body's output type (the function's return type), so `return` and `?` in the body
    /// convert as they would in the function itself.
    #[inline(always)]
    pub fn typed<T, F: core::future::Future<Output = T>>(f: F) -> F {
        f
    }
}

/// The README's Rust snippets, compiled and run as doc tests (its axum example needs the
/// `axum` feature, which the workspace's test run enables). The README and the `docs/`
/// pages live in the repository, outside this crate's package: included only when doc
/// tests are built from the repository.
#[cfg(all(doctest, feature = "axum"))]
#[doc = include_str!("../../README.md")]
mod readme {}

/// The Rust snippets of the repository's `docs/` pages, compiled and run as doc tests.
#[cfg(doctest)]
mod docs_pages {
    #[doc = include_str!("../../docs/locks.md")]
    mod locks {}
    #[doc = include_str!("../../docs/fault-testing.md")]
    mod fault_testing {}
    #[doc = include_str!("../../docs/redisson.md")]
    mod redisson {}
    #[doc = include_str!("../../docs/operations.md")]
    mod operations {}
}

#[cfg(test)]
mod docs {
    /// The repository's configuration page carries the same reference as the crate docs.
    #[test]
    fn the_configuration_page_carries_the_reference() {
        let page = include_str!("../../docs/configuration.md");
        let reference = include_str!("../docs/configuration.md");
        assert!(
            page.contains(reference.trim()),
            "docs/configuration.md must contain distlock/docs/configuration.md verbatim"
        );
    }
}
