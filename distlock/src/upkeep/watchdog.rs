//! The watchdog: one task per backend renews every held auto lease (the backend's
//! [`Leases`](crate::lease::state::Leases)), every third of `watchdog_timeout`. Not one timer per
//! lock; the backend's driver batches the renewals (pipelines of 512 on one server).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;

/// Retry interval after a failed renewal (bounded by the period).
const RETRY: Duration = Duration::from_millis(250);

/// Start the watchdog task of `backend`, and its revocation checks
/// ([`crate::upkeep::revoke`]); they end when the backend is dropped.
pub(crate) fn spawn(backend: &Arc<Backend>) {
    crate::upkeep::revoke::spawn(backend);
    let period = (backend.watchdog_timeout / 3).max(Duration::from_millis(10));
    let weak = Arc::downgrade(backend);
    backend.runtime.spawn(run(weak, period));
}

async fn run(backend: Weak<Backend>, period: Duration) {
    let mut next = Instant::now() + period;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(backend) = backend.upgrade() else {
            return;
        };
        // Rounds start every `period` (not `period` after the previous round ended), so a
        // slow round does not stretch the renewal interval.
        let started = Instant::now();
        let failed = renew_all(&backend).await;
        let every = if failed { RETRY.min(period) } else { period };
        next = (started + every).max(Instant::now());
    }
}

/// One round: renew every registered lease. Returns whether any renewal failed.
async fn renew_all(backend: &Backend) -> bool {
    let leases = backend.leases.all();
    if leases.is_empty() {
        return false;
    }
    let lease_len = backend.watchdog_timeout;
    let mut failed = false;
    // In rounds of at most this many, so a huge number of leases does not build one
    // enormous request; the driver pipelines each round.
    for chunk in leases.chunks(4096) {
        let items: Vec<_> = chunk.iter().map(|l| (&*l.keys, l.owner)).collect();
        let sent = Instant::now();
        // Each lease has its own outcome: on a cluster, a master that is down (failing over)
        // does not hold up the leases on the others.
        let results = backend.renew_each(&items, lease_len).await;
        let now = Instant::now();
        let mut failures = 0usize;
        let mut renewed = 0u64;
        let mut last_error = None;
        for (lease, result) in chunk.iter().zip(results) {
            match result {
                Ok(true) => {
                    renewed += 1;
                    lease.renewed_until(sent + backend.validity(lease_len));
                }
                Ok(false) => {
                    lease.mark_lost("the lock was gone when the watchdog renewed it".into());
                }
                Err(e) => {
                    failures += 1;
                    if lease.signal_at() <= now {
                        lease.mark_lost(format!(
                            "the watchdog could not renew it, and its lease ends on the server within the safety margin: {e}"
                        ));
                    }
                    last_error = Some(e);
                }
            }
        }
        crate::obs::metrics::renewals(&backend.name, renewed, failures as u64);
        if let Some(e) = last_error {
            failed = true;
            tracing::warn!(backend = %backend.name, leases = chunk.len(), failures, error = %e,
                "distlock: lease renewal failed; retrying");
        }
    }
    tracing::trace!(backend = %backend.name, leases = leases.len(), "distlock: leases renewed");
    failed
}
