//! The upkeep of held leases, driving a backend: the watchdog that renews auto leases, the
//! revocation checks that find a lease lost at once, and the graceful shutdown that gives
//! every lease back. Above the backends they drive, below the registry that starts them.

pub(crate) mod revoke;
pub(crate) mod shutdown;
pub(crate) mod watchdog;
