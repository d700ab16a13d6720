//! The one backoff of every loop that reconnects or retries: exponential from a first pause
//! to a ceiling, with jitter, so that many processes that lost the same server do not come
//! back in step.

use std::time::Duration;

/// Pauses that double from `first` up to `max`, each drawn from its upper half.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Reconnecting to a server: 20 ms doubling up to 1 s.
    pub(crate) fn reconnect() -> Backoff {
        Backoff::new(Duration::from_millis(20), Duration::from_secs(1))
    }

    /// Retrying a lock operation within its wait: 20 ms doubling up to 250 ms.
    pub(crate) fn retry() -> Backoff {
        Backoff::new(Duration::from_millis(20), Duration::from_millis(250))
    }

    /// A waiter polling the lock while its release channel is not confirmed (its
    /// subscriber is down, or too few nodes of a quorum backend confirmed it): 10 ms
    /// doubling up to 1 s, so a release costs it at most about a second meanwhile.
    pub(crate) fn poll() -> Backoff {
        Backoff::new(Duration::from_millis(10), Duration::from_secs(1))
    }

    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The next pause (in `next/2 ..= next`), doubling the one after.
    pub(crate) fn pause(&mut self) -> Duration {
        let top = self.next;
        self.next = (self.next * 2).min(self.max);
        let micros = u64::try_from(top.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(rand::random_range(micros / 2..=micros))
    }

    /// It worked: start from the first pause again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_ceiling_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(40));
        let tops = [10, 20, 40, 40, 40];
        for top in tops {
            let p = b.pause();
            assert!(
                p <= Duration::from_millis(top) && p >= Duration::from_millis(top / 2),
                "{p:?}"
            );
        }
        b.reset();
        assert!(b.pause() <= Duration::from_millis(10));
    }
}
