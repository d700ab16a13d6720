//! A lease's policy: how long a lease lasts ([`Lease`]), what losing it does ([`OnLost`]),
//! and the checks of the durations a lock is given.

use std::time::Duration;

/// [`Lease::MAX`].
pub(crate) const MAX_LEASE: Duration = distlock_config::MAX_LEASE;

/// [`Lock::MAX_WAIT`](crate::Lock::MAX_WAIT).
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(365 * 86_400);

/// `value` checked against the range of `what` (the one table of every entry point,
/// [`distlock_config::check_duration`]), as the `InvalidDuration` of lock `key` on
/// `backend`, whose `what` is `label`.
pub(crate) fn check_duration(
    what: distlock_config::DurationUse,
    label: &'static str,
    value: Duration,
    key: &str,
    backend: &str,
) -> Result<Duration, crate::LockError> {
    distlock_config::check_duration(what, value).map_err(|e| crate::LockError::InvalidDuration {
        key: key.to_owned(),
        backend: backend.to_owned(),
        what: label,
        value,
        min: e.min,
        limit: e.max,
    })
}

/// The lease of an acquisition (`len`: the fixed duration, or `watchdog_timeout` for an
/// auto lease) checked before anything is sent.
pub(crate) fn check_lease(
    lease: Lease,
    len: Duration,
    key: &str,
    backend: &str,
) -> Result<(), crate::LockError> {
    use distlock_config::DurationUse;
    match lease {
        Lease::Auto => check_duration(
            DurationUse::WatchdogTimeout,
            "lease (watchdog_timeout)",
            len,
            key,
            backend,
        ),
        Lease::Fixed(_) => check_duration(DurationUse::Lease, "lease", len, key, backend),
    }
    .map(|_| ())
}

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

impl Lease {
    /// The longest lease accepted (a fixed lease, or `watchdog_timeout` for `Lease::Auto`):
    /// 24 hours. A longer one is refused with [`LockError::InvalidDuration`](crate::LockError)
    /// before anything is sent: a lock that outlives a crashed holder by more than a day is a
    /// wedge, not a lease (use `Lease::Auto` for long work: it is renewed while held). The
    /// scripts check the same bound before their first write.
    ///
    /// ```
    /// assert_eq!(distlock::Lease::MAX, std::time::Duration::from_secs(24 * 3600));
    /// ```
    pub const MAX: Duration = MAX_LEASE;
}

impl From<distlock_config::LeaseSpec> for Lease {
    fn from(l: distlock_config::LeaseSpec) -> Lease {
        match l {
            distlock_config::LeaseSpec::Auto => Lease::Auto,
            distlock_config::LeaseSpec::Fixed(d) => Lease::Fixed(d),
        }
    }
}

/// What happens to the body of `Lock::run` (and of a `#[distributed_lock]` function) when
/// its auto-lease is lost while it runs: the renewal finds the lock gone (deleted, expired,
/// a Redis restart), or cannot renew it before it expires. From then on another owner may
/// hold the lock, so the body is no longer exclusive.
///
/// Neither choice makes a half-done body whole: a body that writes in several steps must
/// be cancel-safe (one transaction), or fence its writes with the lock's token
/// (`distlock::fencing_token()`), so that a stale holder's writes are refused.
///
/// ```
/// use distlock::{OnLost, Registry};
/// # async fn f() -> Result<(), distlock::LockError> {
/// # let registry = Registry::from_str("[backends.m]\nmode = \"memory\"").await.unwrap();
/// let done = registry
///     .lock("transfer:1")
///     .on_lost(OnLost::Signal)
///     .run(async {
///         // debit ...
///         distlock::lease_lost().check()?; // stop before the next step if lost
///         // credit ...
///         Ok::<_, distlock::LockError>("done")
///     })
///     .await??;
/// assert_eq!(done, "done");
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(f()).unwrap();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLost {
    /// The default: the body is dropped at its next `.await`, and the call returns
    /// `Err(LockError::LeaseLost { .. })`. Whatever the body did before that stays done.
    #[default]
    Cancel,
    /// The body keeps running to its end and its result is returned; the loss is visible
    /// to it through `distlock::lease_lost()` (and to a guard's holder through
    /// `LockGuard::lost`/`is_held`). The body decides: check before each irreversible
    /// step and return an error, or finish what cannot be left half done.
    Signal,
}
