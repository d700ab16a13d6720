//! The runtime underneath: distlock's own tokio runtime, the clock, backoff and the hub
//! that wakes waiters.

pub(crate) mod backoff;
pub(crate) mod clock;
pub(crate) mod hub;
pub(crate) mod runtime;
