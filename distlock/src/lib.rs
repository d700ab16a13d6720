//! # distlock — distributed locks on Redis
//!
//! Mutual exclusion across processes and hosts, reentrant within a task, with waiting that
//! wakes promptly on release (pub/sub), leases kept alive by a watchdog, a signal when a
//! lease is lost, fencing tokens, and release on every way out.
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
//! See `Lock` for the builder, `Registry` for configuration without the global, and the
//! `#[distributed_lock]` attribute for annotated functions.

mod backend;
mod backoff;
mod clock;
mod context;
mod error;
mod guard;
mod held;
mod hub;
pub mod ids;
mod keys;
mod lease;
mod lock;
mod owner;
mod protocol;
mod registry;
mod sites;
mod watchdog;
#[cfg(feature = "axum")]
pub mod web;

pub use context::fencing_token;
pub use distlock_config as config;
pub use distlock_config::{Config, ConfigError};
pub use distlock_macros::distributed_lock;
pub use error::{BackendError, BackendErrorKind, InitError, LockError};
pub use guard::LockGuard;
pub use lease::{Lease, LockKind, MAX_LEASE, MAX_WAIT};
pub use lock::Lock;
pub use registry::{init, init_from_path, init_from_str, init_with, registry, Registry};
pub use sites::{sites, Site};

/// Used by the code `#[distributed_lock]` generates; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use inventory;

    /// The sources of the reentrant lock's scripts, for benchmarks that send the protocol
    /// raw (see `distlock/src/protocol/*.lua` for what each takes).
    pub mod scripts {
        /// `acquire.lua`.
        pub const ACQUIRE: &str = include_str!("protocol/acquire.lua");
        /// `release.lua` (its third argument is the publish verb).
        pub const RELEASE: &str = include_str!("protocol/release.lua");
        /// `renew.lua`.
        pub const RENEW: &str = include_str!("protocol/renew.lua");
    }

    /// Returns `f` unchanged. Wrapping an annotated function's body in it tells the compiler
    /// the body's output type (the function's return type), so `return` and `?` in the body
    /// convert as they would in the function itself.
    #[inline(always)]
    pub fn typed<T, F: core::future::Future<Output = T>>(f: F) -> F {
        f
    }

    /// The return type of an annotated function: a `Result` whose error type a `LockError`
    /// converts into.
    #[diagnostic::on_unimplemented(
        message = "`#[distributed_lock]` returns lock errors as the function's error: `{Self}` needs an error type `E: From<distlock::LockError>`",
        label = "the error type of this `Result` has no `From<distlock::LockError>`",
        note = "implement `From<distlock::LockError>` for the error type, or return `Result<T, distlock::LockError>`"
    )]
    pub trait LockResult {
        /// `Err(e.into())`.
        fn from_lock_error(e: crate::LockError) -> Self;
    }

    #[diagnostic::do_not_recommend]
    impl<T, E: From<crate::LockError>> LockResult for Result<T, E> {
        #[inline(always)]
        fn from_lock_error(e: crate::LockError) -> Self {
            Err(E::from(e))
        }
    }
}
