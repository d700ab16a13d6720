//! A held lease: its terms (`Lease`, `LockKind`, `OnLost`), its shared state, the task-scoped
//! context of held locks, owner ids, and the watchdog that renews auto leases.

pub(crate) mod context;
pub(crate) mod held;
pub(crate) mod holds;
pub(crate) mod owner;
pub(crate) mod terms;
pub(crate) mod watchdog;
