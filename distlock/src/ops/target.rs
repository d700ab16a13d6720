//! What every builder shares: which registry and backend it goes to, how long it waits,
//! which lease it takes and which call site it reports ([`Target`]), and the one way those
//! terms are resolved (the registry in force, the backend by name, the defaults for the
//! wait and the lease, the site's label) and an acquisition counted.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::obs::metrics::Outcome;
use crate::obs::sites::LockSite;
use crate::registry::Registry;
use crate::{Lease, LockError};

/// The terms a builder shares with the others: the registry (`None`: the one in force when
/// it runs), the backend by name (`None`: the registry's default), the longest wait and the
/// lease (`None`: the registry's `[defaults]`), and the call site metrics and holder
/// information name. A builder without a wait, a lease or a site of its own leaves them
/// unset and unread.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    registry: Option<Registry>,
    backend: Option<String>,
    wait: Option<Duration>,
    lease: Option<Lease>,
    site: LockSite,
}

/// A [`Target`] resolved for an acquisition: the backend it goes to, the wait and lease
/// in force, and the site's metrics label.
pub(crate) struct Resolved {
    pub(crate) backend: Arc<Backend>,
    pub(crate) wait: Duration,
    pub(crate) lease: Lease,
    pub(crate) site: &'static str,
}

impl Target {
    /// Nothing chosen yet; the site is the `file:line` of the caller (a `#[track_caller]`
    /// constructor passes its own caller's).
    #[track_caller]
    pub(crate) fn here() -> Target {
        Target {
            registry: None,
            backend: None,
            wait: None,
            lease: None,
            site: LockSite::Caller(std::panic::Location::caller()),
        }
    }

    /// Go to `registry` instead of the one in force.
    pub(crate) fn set_registry(&mut self, registry: Registry) {
        self.registry = Some(registry);
    }

    /// Go to the backend named `name` instead of the default.
    pub(crate) fn set_backend(&mut self, name: String) {
        self.backend = Some(name);
    }

    /// Wait at most `wait` instead of `[defaults].wait`.
    pub(crate) fn set_wait(&mut self, wait: Duration) {
        self.wait = Some(wait);
    }

    /// Take `lease` instead of `[defaults].lease`.
    pub(crate) fn set_lease(&mut self, lease: Lease) {
        self.lease = Some(lease);
    }

    /// Report `site` instead of where the builder was made.
    pub(crate) fn set_site(&mut self, site: LockSite) {
        self.site = site;
    }

    /// The wait chosen, if one was.
    pub(crate) fn wait(&self) -> Option<Duration> {
        self.wait
    }

    /// The lease chosen, if one was (what the tower layer's `Debug` shows).
    #[cfg(feature = "tower")]
    pub(crate) fn lease(&self) -> Option<Lease> {
        self.lease
    }

    /// The backend's name, if one was chosen (what the tower layer's `Debug` shows).
    #[cfg(feature = "tower")]
    pub(crate) fn backend_name(&self) -> Option<&str> {
        self.backend.as_deref()
    }

    /// The call site.
    pub(crate) fn site(&self) -> LockSite {
        self.site
    }

    /// The registry: the one chosen, else the innermost [`Registry::scope`] of this task,
    /// else the global one (`NotInitialized` when there is none).
    pub(crate) fn registry(&self) -> Result<Registry, LockError> {
        match &self.registry {
            Some(r) => Ok(r.clone()),
            None => crate::registry::current(),
        }
    }

    /// The registry and, in it, the backend chosen or its default (`NoSuchBackend`,
    /// `NoDefaultBackend`, or why a backend still connecting is not there).
    pub(crate) fn locate(&self) -> Result<(Registry, Arc<Backend>), LockError> {
        let registry = self.registry()?;
        let backend = registry.backend(self.backend.as_deref())?;
        Ok((registry, backend))
    }

    /// The backend, in the registry [`locate`](Self::locate) finds.
    pub(crate) fn backend(&self) -> Result<Arc<Backend>, LockError> {
        self.locate().map(|(_, backend)| backend)
    }

    /// The backend chosen in `registry` (`None`: its default), where it is known.
    pub(crate) fn backend_in(&self, registry: &Registry) -> Option<Arc<Backend>> {
        registry.backend(self.backend.as_deref()).ok()
    }

    /// The wait in force in `registry`: the one chosen, else `[defaults].wait`.
    pub(crate) fn wait_in(&self, registry: &Registry) -> Duration {
        self.wait.unwrap_or(registry.defaults().wait)
    }

    /// The lease in force in `registry`: the one chosen, else `[defaults].lease`.
    pub(crate) fn lease_in(&self, registry: &Registry) -> Lease {
        self.lease
            .unwrap_or_else(|| registry.defaults().lease.into())
    }

    /// The same terms, going to `registry` (an acquisition made on behalf of another, in
    /// the registry that one resolved).
    pub(crate) fn in_registry(&self, registry: Registry) -> Target {
        Target {
            registry: Some(registry),
            ..self.clone()
        }
    }

    /// Everything an acquisition needs: the backend, the wait and lease in force in its
    /// registry, the site's label. Fails as [`locate`](Self::locate).
    pub(crate) fn resolve(&self) -> Result<Resolved, LockError> {
        let (registry, backend) = self.locate()?;
        Ok(Resolved {
            wait: self.wait_in(&registry),
            lease: self.lease_in(&registry),
            site: crate::obs::metrics::site_label(self.site),
            backend,
        })
    }
}

/// Count an acquisition on `backend` from `site` that started at `start`, by its result:
/// `reentered` tells a nested acquisition from a new one.
pub(crate) fn count<T>(
    backend: &Arc<str>,
    site: &'static str,
    start: Instant,
    result: &Result<T, LockError>,
    reentered: impl FnOnce(&T) -> bool,
) {
    let outcome = match result {
        Ok(held) if reentered(held) => Outcome::Reentered,
        Ok(_) => Outcome::Acquired,
        Err(LockError::Timeout { .. }) => Outcome::Timeout,
        Err(LockError::Skipped { .. }) => Outcome::Skipped,
        Err(_) => Outcome::Error,
    };
    crate::obs::metrics::acquisition(backend, site, outcome, start.elapsed());
}
