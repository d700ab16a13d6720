//! Instants as numbers, for atomics: nanoseconds on the monotonic clock since a process-wide
//! epoch.

use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// `t` as nanoseconds since the epoch (0 for anything before it).
pub(crate) fn to_nanos(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

/// The instant `nanos` after the epoch.
pub(crate) fn from_nanos(nanos: u64) -> Instant {
    *EPOCH + Duration::from_nanos(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let t = Instant::now() + Duration::from_millis(5);
        let back = from_nanos(to_nanos(t));
        assert!(back <= t && t - back < Duration::from_micros(1));
    }
}
