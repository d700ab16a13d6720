//! A held lease's data, below the backend that owns it: its policy (`Lease`, `OnLost`), its
//! shared state, what was heard of it, its hold times, the task-scoped context of held
//! locks, the background work it leaves, and the local waiters a release hands a lock to.

pub(crate) mod background;
pub(crate) mod context;
pub(crate) mod handoff;
pub(crate) mod heard;
pub(crate) mod hold_times;
pub(crate) mod policy;
pub(crate) mod state;
