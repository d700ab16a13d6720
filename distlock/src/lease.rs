//! Lease and lock kinds.

use std::time::Duration;

/// How long a lock is held before it expires on its own.
///
/// ```
/// use distlock::Lease;
/// use std::time::Duration;
/// let auto = Lease::Auto; // renewed by the watchdog while held
/// let fixed = Lease::Fixed(Duration::from_secs(30)); // never renewed
/// assert_ne!(auto, fixed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// The lease is `watchdog_timeout` long and the backend's watchdog renews it every third
    /// of that while the guard is held, so a crashed holder frees the lock within
    /// `watchdog_timeout`.
    Auto,
    /// A fixed lease, never renewed: the lock expires this long after it was acquired.
    Fixed(Duration),
}

impl From<distlock_config::LeaseSpec> for Lease {
    fn from(l: distlock_config::LeaseSpec) -> Lease {
        match l {
            distlock_config::LeaseSpec::Auto => Lease::Auto,
            distlock_config::LeaseSpec::Fixed(d) => Lease::Fixed(d),
        }
    }
}

/// What sort of lock.
///
/// ```
/// use distlock::{Lock, LockKind};
/// let lock = Lock::new("report").kind(LockKind::Reentrant);
/// # let _ = lock;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LockKind {
    /// Exclusive and reentrant within one task (the default).
    #[default]
    Reentrant,
    /// Exclusive, granted in the order waiters asked.
    Fair,
    /// Shared with other readers, exclusive of writers.
    Read,
    /// Exclusive of readers and writers.
    Write,
}

impl LockKind {
    /// The name used by the attribute's `kind = "..."`.
    pub fn name(&self) -> &'static str {
        match self {
            LockKind::Reentrant => "reentrant",
            LockKind::Fair => "fair",
            LockKind::Read => "read",
            LockKind::Write => "write",
        }
    }
}
