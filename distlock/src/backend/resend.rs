//! Background re-sends: the releases, undos and queue cancels whose outcome is not known
//! (their future was dropped after the request was sent, or Redis failed in a blip) are
//! sent again on distlock's background runtime until the server answers. Each of them is
//! safe to run twice (a release counts its level once, an undo is a release, a cancel
//! removes an entry that may be gone), so sending one again never changes more than the
//! first run would have.
//!
//! - A transient failure (connection refused or reset, a time-out, `LOADING`, a failover
//!   under way) is retried with backoff (20 ms doubling up to [`PAUSE_MAX`], jittered):
//!   once the server answers again, the next re-send reaches it within about
//!   `PAUSE_MAX` plus a reconnect, so a lock released in a blip is free about 0.3 s
//!   (documented: within 1 s) after the server answers, not at the end of its lease.
//! - Any other failure (the script refused it, the server answered an error) is logged
//!   and dropped: the server answered, and a second run would answer the same.
//! - Bounded per backend: at most [`MAX_PENDING`] re-sends retry at a time (beyond that a
//!   request is sent once, as before, and its lease frees the lock), and each for at most
//!   [`Resends::retry_for`] (distlock's format: [`RETRY_FOR`]; Redisson's: within its
//!   unlock latch's life, the window in which an unlock run twice is answered once).
//! - [`Resends::flush`] waits for every re-send under way to end (a graceful shutdown
//!   calls it before the runtime goes), waking those asleep in their backoff at once.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::rt::backoff::Backoff;
use crate::LockError;

/// The longest pause between two re-sends of one request.
pub(crate) const PAUSE_MAX: Duration = Duration::from_millis(250);

/// How long a request of distlock's format is re-sent, at most: past every lease but a
/// long fixed one (the watchdog's default is 30 s); a lease longer than this still ends.
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(300);

/// How long a request of Redisson's format is re-sent, at most: well inside the life of
/// its unlock latch (`protocol::redisson_calls::LATCH_TTL`, 20 s), so that a re-send of
/// an unlock that ran already is answered from the latch rather than counted again.
pub(crate) const RETRY_FOR_REDISSON: Duration = Duration::from_secs(10);

/// How many re-sends a backend keeps retrying at a time.
pub(crate) const MAX_PENDING: usize = 4096;

/// What a re-send is, for its logs.
pub(crate) struct Label {
    /// What is sent ("a background release").
    pub(crate) what: &'static str,
    pub(crate) backend: Arc<str>,
    pub(crate) key: String,
}

/// The re-sends of one backend under way.
#[derive(Debug, Default)]
pub(crate) struct Resends {
    pending: AtomicUsize,
    /// Woken when `pending` drops to zero.
    idle: Notify,
    /// Woken by [`Resends::flush`]: re-sends asleep in their backoff try at once.
    hurry: Notify,
}

/// Counts one re-send while it lives (its task ending, or dropped with its runtime).
struct Counted(Arc<Resends>);

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Resends {
    /// How many re-sends are under way (tests, diagnostics).
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// How long a request in `redisson`'s format or distlock's is re-sent at most.
    pub(crate) fn retry_for(redisson: bool) -> Duration {
        if redisson {
            RETRY_FOR_REDISSON
        } else {
            RETRY_FOR
        }
    }

    /// Run `attempt` on `runtime` until it succeeds, fails for good, or `retry_for`
    /// passes; then `done` (always, however the attempts ended, unless the runtime
    /// shuts down first). `label` names it in the logs.
    pub(crate) fn spawn<F, Fut>(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        label: Label,
        retry_for: Duration,
        mut attempt: F,
        done: impl FnOnce() + Send + 'static,
    ) where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), LockError>> + Send,
    {
        // Over the bound: sent once, as if it could not be retried.
        let retrying = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_PENDING).then_some(n + 1)
            })
            .is_ok();
        let counted = retrying.then(|| Counted(self.clone()));
        let this = self.clone();
        let Label { what, backend, key } = label;
        drop(runtime.spawn(async move {
            let _counted = counted;
            let start = Instant::now();
            let mut backoff = Backoff::new(Duration::from_millis(20), PAUSE_MAX);
            loop {
                let hurry = this.hurry.notified();
                tokio::pin!(hurry);
                hurry.as_mut().enable();
                match attempt().await {
                    Ok(()) => break,
                    Err(e) if e.is_transient() && retrying && start.elapsed() < retry_for => {
                        let pause = backoff.pause();
                        tracing::debug!(backend = %backend, key = %key, error = %e, retry_in = ?pause,
                            "distlock: {what} failed; sending it again when the server answers");
                        tokio::select! {
                            _ = tokio::time::sleep(pause) => {}
                            _ = hurry => {}
                        }
                    }
                    Err(e) => {
                        let why = if !e.is_transient() {
                            "the server refused it"
                        } else if !retrying {
                            "too many re-sends under way on this backend"
                        } else {
                            "the server did not answer in time"
                        };
                        tracing::warn!(backend = %backend, key = %key, error = %e, waited = ?start.elapsed(),
                            "distlock: {what} failed and is not sent again ({why}); the lease will run out");
                        break;
                    }
                }
            }
            done();
        }));
    }

    /// Wait until no re-send is under way; those asleep in their backoff try again at
    /// once. Bound it with a timeout: while the server does not answer, a re-send goes
    /// on for up to its `retry_for`. For a graceful shutdown, before distlock's runtime
    /// goes (the re-sends run there).
    pub(crate) async fn flush(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.pending() == 0 {
                return;
            }
            self.hurry.notify_waiters();
            // Woken when the last one ends; a re-send that starts meanwhile is waited for
            // too (looked at again after each wake-up, and every backoff's length).
            tokio::select! {
                _ = idle => {}
                _ = tokio::time::sleep(PAUSE_MAX) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn transient() -> LockError {
        crate::errors::backend::DriverError::NotConnected {
            address: "a".into(),
        }
        .into_lock_error("b", Some("k"))
    }

    #[tokio::test]
    async fn a_transient_failure_is_sent_again_until_it_succeeds_and_flush_waits() {
        let r = Arc::new(Resends::default());
        let tries = Arc::new(AtomicU32::new(0));
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let t = tries.clone();
        r.spawn(
            &tokio::runtime::Handle::current(),
            Label {
                what: "a release",
                backend: "b".into(),
                key: "k".into(),
            },
            RETRY_FOR,
            move || {
                let n = t.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < 3 {
                        Err(transient())
                    } else {
                        Ok(())
                    }
                }
            },
            move || {
                let _ = done_tx.send(());
            },
        );
        tokio::time::timeout(Duration::from_secs(5), r.flush())
            .await
            .expect("flushed");
        done_rx.await.expect("done ran");
        assert_eq!(tries.load(Ordering::SeqCst), 4);
        assert_eq!(r.pending(), 0);
    }
}
