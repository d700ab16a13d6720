//! The one table of valid durations: every entry point (the builders of the `distlock`
//! crate, the `#[distributed_lock]` attribute, the TOML configuration and the `distlock`
//! command) checks a duration with [`check_duration`], so a value refused in one is
//! refused in all, with the same range.

use std::time::Duration;

use crate::format_duration;

/// The longest lease: 24 hours (see `distlock::Lease::MAX`).
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);

/// The longest fence ttl: 365 days (Redis stores it as an absolute time in milliseconds;
/// a value meant to live longer is written without a ttl).
pub const MAX_FENCE_TTL: Duration = Duration::from_secs(365 * 86_400);

/// What a duration is for; each use has its own valid range ([`DurationUse::range`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurationUse {
    /// A fixed lease (`Lease::Fixed`, `lease = "30s"`, `--lease 30s`): 1 ms to 24 h. A
    /// shorter one would be over before the reply that grants it arrives.
    Lease,
    /// `watchdog_timeout`, the length of an auto lease: 100 ms to 24 h (renewed every
    /// third of it: a shorter one leaves no time for a renewal's round trip).
    WatchdogTimeout,
    /// How long to wait for a lock: any value; `0s` tries once, and a value over
    /// `distlock::Lock::MAX_WAIT` (365 days, `Duration::MAX` included) waits that long.
    Wait,
    /// `Fence::ttl`: 1 ms to 365 days ([`MAX_FENCE_TTL`]).
    FenceTtl,
    /// `hold_at_least` of a run-once job: 1 ms to 24 h (and at most the fixed lease).
    HoldAtLeast,
    /// `retry_delay` of a redlock/multi backend (the longest random pause between two
    /// attempts): 1 ms to 1 min. `0s` would retry without a pause.
    RetryDelay,
}

impl DurationUse {
    /// The name the user wrote it under.
    ///
    /// ```
    /// use distlock_config::DurationUse;
    /// assert_eq!(DurationUse::RetryDelay.name(), "retry_delay");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            DurationUse::Lease => "lease",
            DurationUse::WatchdogTimeout => "watchdog_timeout",
            DurationUse::Wait => "wait",
            DurationUse::FenceTtl => "fence ttl",
            DurationUse::HoldAtLeast => "hold_at_least",
            DurationUse::RetryDelay => "retry_delay",
        }
    }

    /// The valid range, both ends included.
    ///
    /// ```
    /// use distlock_config::DurationUse;
    /// use std::time::Duration;
    /// let (min, max) = DurationUse::Lease.range();
    /// assert_eq!(min, Duration::from_millis(1));
    /// assert_eq!(max, Duration::from_secs(24 * 3600));
    /// ```
    pub fn range(self) -> (Duration, Duration) {
        let ms = Duration::from_millis;
        match self {
            DurationUse::Lease | DurationUse::HoldAtLeast => (ms(1), MAX_LEASE),
            DurationUse::WatchdogTimeout => (ms(100), MAX_LEASE),
            DurationUse::Wait => (Duration::ZERO, Duration::MAX),
            DurationUse::FenceTtl => (ms(1), MAX_FENCE_TTL),
            DurationUse::RetryDelay => (ms(1), Duration::from_secs(60)),
        }
    }
}

/// A duration out of its range ([`check_duration`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationOutOfRange {
    /// What it is for.
    pub what: DurationUse,
    /// The value given.
    pub value: Duration,
    /// The shortest accepted.
    pub min: Duration,
    /// The longest accepted.
    pub max: Duration,
}

impl std::fmt::Display for DurationOutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` must be {}, got {}",
            self.what.name(),
            range_text(self.min, self.max),
            format_duration(self.value)
        )?;
        if self.value < self.min {
            write!(f, " (write e.g. \"250ms\", \"5s\")")?;
        }
        Ok(())
    }
}

impl std::error::Error for DurationOutOfRange {}

/// `"between 1ms and 24h"`, `"at least 1ms"`.
///
/// ```
/// use distlock_config::range_text;
/// use std::time::Duration;
/// assert_eq!(range_text(Duration::from_millis(1), Duration::from_secs(60)), "between 1ms and 1m");
/// assert_eq!(range_text(Duration::from_millis(1), Duration::MAX), "at least 1ms");
/// ```
pub fn range_text(min: Duration, max: Duration) -> String {
    if max == Duration::MAX {
        format!("at least {}", format_duration(min))
    } else {
        format!(
            "between {} and {}",
            format_duration(min),
            format_duration(max)
        )
    }
}

/// Whether `value` is in the range of `what` ([`DurationUse::range`]): the check of every
/// entry point.
///
/// ```
/// use distlock_config::{check_duration, DurationUse};
/// use std::time::Duration;
/// assert!(check_duration(DurationUse::Lease, Duration::from_secs(30)).is_ok());
/// let e = check_duration(DurationUse::Lease, Duration::ZERO).unwrap_err();
/// assert_eq!(e.to_string(), "`lease` must be between 1ms and 24h, got 0s (write e.g. \"250ms\", \"5s\")");
/// assert!(check_duration(DurationUse::FenceTtl, Duration::MAX).is_err());
/// assert!(check_duration(DurationUse::Wait, Duration::MAX).is_ok()); // saturates
/// ```
pub fn check_duration(what: DurationUse, value: Duration) -> Result<Duration, DurationOutOfRange> {
    let (min, max) = what.range();
    if value < min || value > max {
        return Err(DurationOutOfRange {
            what,
            value,
            min,
            max,
        });
    }
    Ok(value)
}
