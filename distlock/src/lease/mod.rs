//! A held lease: its terms (`Lease`, `LockKind`, `OnLost`), its shared state, the task-scoped
//! context of held locks, owner ids, the watchdog that renews auto leases, and the
//! revocation checks that find a lease lost at once, and the graceful shutdown that gives
//! every lease back.

pub(crate) mod background;
pub(crate) mod context;
pub(crate) mod handoff;
pub(crate) mod heard;
pub(crate) mod hold_times;
pub(crate) mod revoke;
pub(crate) mod shutdown;
pub(crate) mod state;
pub(crate) mod terms;
pub(crate) mod watchdog;
