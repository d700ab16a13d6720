//! Metrics through the [`metrics`] crate facade, **version 0.24**: the application installs
//! a recorder (an exporter); without one they cost next to nothing.
//!
//! **The exporter must be built on the same `metrics` major** (0.24): one on another major
//! installs a recorder distlock never sees and exports nothing, silently. For Prometheus
//! that is `metrics-exporter-prometheus` 0.17 (`cargo tree -i metrics` must show one
//! version of `metrics`):
//!
//! ```toml
//! [dependencies]
//! metrics-exporter-prometheus = { version = "0.17", default-features = false }
//! ```
//!
//! ```
//! use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};
//!
//! // Before distlock::init(); serve `handle.render()` at /metrics.
//! fn install_metrics() -> Result<PrometheusHandle, BuildError> {
//!     PrometheusBuilder::new().install_recorder()
//! }
//! ```
//!
//! (`docs/operations.md` in the repository has the whole set-up;
//! `examples/src/bin/flash-sale-server.rs` serves it with axum.)
//! Labels are the backend and the lock site (the `#[distributed_lock]` function,
//! the `file:line` of `Lock::new`, the name given to `Lock::site`, a leader election's
//! name), never the key: keys are unbounded. A multi-key acquisition counts once.
//!
//! | name                                  | kind      | labels                     |
//! |---------------------------------------|-----------|----------------------------|
//! | `distlock_acquisitions_total`         | counter   | backend, site, outcome (`acquired`, `reentered`, `timeout`, `skipped`, `error`) |
//! | `distlock_wait_seconds`               | histogram | backend, site (acquisitions that got the lock) |
//! | `distlock_hold_seconds`               | histogram | backend, site (outermost holds, at release) |
//! | `distlock_leases_lost_total`          | counter   | backend, site              |
//! | `distlock_renewals_total`             | counter   | backend                    |
//! | `distlock_renewal_failures_total`     | counter   | backend                    |
//! | `distlock_waiters`                    | gauge     | backend, site (tasks asleep waiting for a release) |

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::obs::sites::LockSite;

/// Acquisitions by outcome.
pub const ACQUISITIONS: &str = "distlock_acquisitions_total";
/// Time from the first attempt to getting the lock, seconds.
pub const WAIT_SECONDS: &str = "distlock_wait_seconds";
/// Time a lock was held (acquire to release), seconds.
pub const HOLD_SECONDS: &str = "distlock_hold_seconds";
/// Leases lost (the holder was told through `lost()`).
pub const LEASES_LOST: &str = "distlock_leases_lost_total";
/// Leases renewed by the watchdog.
pub const RENEWALS: &str = "distlock_renewals_total";
/// Renewals that failed (Redis did not answer; the lease may still be alive).
pub const RENEWAL_FAILURES: &str = "distlock_renewal_failures_total";
/// Tasks asleep waiting for a release.
pub const WAITERS: &str = "distlock_waiters";

/// How an acquisition ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Acquired,
    Reentered,
    Timeout,
    Skipped,
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Reentered => "reentered",
            Outcome::Timeout => "timeout",
            Outcome::Skipped => "skipped",
            Outcome::Error => "error",
        }
    }
}

/// The site as a `&'static str` label: named sites as they are, `file:line` sites
/// formatted once per call site (bounded by the code, so kept for the process's life).
pub(crate) fn site_label(site: LockSite) -> &'static str {
    static LABELS: Mutex<Option<HashMap<usize, &'static str>>> = Mutex::new(None);
    match site {
        LockSite::Named(n) => n,
        LockSite::Caller(loc) => {
            let mut map = LABELS.lock().unwrap_or_else(|e| e.into_inner());
            let map = map.get_or_insert_with(HashMap::new);
            map.entry(std::ptr::from_ref(loc) as usize)
                .or_insert_with(|| Box::leak(site.to_string().into_boxed_str()))
        }
    }
}

/// The most names [`name_label`] keeps (labels are kept for the process's life).
pub(crate) const MAX_NAME_LABELS: usize = 1024;

/// A name given at run time (a leader election's) as a `&'static str` label, kept once per
/// name; `None` once [`MAX_NAME_LABELS`] names are kept (a bounded set, as label values
/// must be).
pub(crate) fn name_label(name: &str) -> Option<&'static str> {
    static NAMES: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    let mut map = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(label) = map.get(name) {
        return Some(label);
    }
    if map.len() >= MAX_NAME_LABELS {
        return None;
    }
    let label: &'static str = Box::leak(name.to_owned().into_boxed_str());
    map.insert(name.to_owned(), label);
    Some(label)
}

pub(crate) fn acquisition(
    backend: &Arc<str>,
    site: &'static str,
    outcome: Outcome,
    waited: Duration,
) {
    // The backend's name goes in as its `Arc<str>` (a reference count, no copy): these
    // run on every acquisition and release.
    ::metrics::counter!(ACQUISITIONS, "backend" => backend.clone(), "site" => site, "outcome" => outcome.label())
        .increment(1);
    if matches!(outcome, Outcome::Acquired | Outcome::Reentered) {
        ::metrics::histogram!(WAIT_SECONDS, "backend" => backend.clone(), "site" => site)
            .record(waited.as_secs_f64());
    }
}

pub(crate) fn held(backend: &Arc<str>, site: &'static str, held: Duration) {
    ::metrics::histogram!(HOLD_SECONDS, "backend" => backend.clone(), "site" => site)
        .record(held.as_secs_f64());
}

pub(crate) fn lost(backend: &Arc<str>, site: &'static str) {
    ::metrics::counter!(LEASES_LOST, "backend" => backend.clone(), "site" => site).increment(1);
}

pub(crate) fn renewals(backend: &Arc<str>, renewed: u64, failed: u64) {
    if renewed > 0 {
        ::metrics::counter!(RENEWALS, "backend" => backend.clone()).increment(renewed);
    }
    if failed > 0 {
        ::metrics::counter!(RENEWAL_FAILURES, "backend" => backend.clone()).increment(failed);
    }
}

/// Counts one waiter in the gauge while it lives.
pub(crate) struct Waiting(::metrics::Gauge);

impl Waiting {
    pub(crate) fn new(backend: &Arc<str>, site: &'static str) -> Waiting {
        let g = ::metrics::gauge!(WAITERS, "backend" => backend.clone(), "site" => site);
        g.increment(1.0);
        Waiting(g)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
