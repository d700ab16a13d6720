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
mod context;
mod error;
mod guard;
mod holds;
mod hub;
pub mod ids;
mod keys;
mod lease;
mod lock;
mod owner;
mod registry;
mod runtime;
pub mod scripts;
mod sites;
mod subscriber;
mod watchdog;
#[cfg(feature = "axum")]
pub mod web;

pub use context::{fencing_token, lease_lost, LeaseLost};
pub use distlock_config as config;
pub use distlock_config::{Config, ConfigError};
pub use distlock_macros::distributed_lock;
pub use error::{InitError, LockError, LockResult};
pub use guard::LockGuard;
pub use lease::{Lease, LockKind, OnLost};
pub use lock::Lock;
pub use registry::{init, init_from_path, init_from_str, init_with, registry, Registry};
pub use sites::{sites, Site};

/// Used by the code `#[distributed_lock]` generates; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use inventory;

    /// Returns `f` unchanged. Wrapping an annotated function's body in it tells the compiler
    /// the body's output type (the function's return type), so `return` and `?` in the body
    /// convert as they would in the function itself.
    #[inline(always)]
    pub fn typed<T, F: core::future::Future<Output = T>>(f: F) -> F {
        f
    }
}
