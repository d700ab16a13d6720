//! What users acquire: locks of every kind, semaphores, multi-key locks and leader
//! elections, all through one acquire engine, and the guards that hold them.

pub(crate) mod acquire;
pub(crate) mod call_wait;
pub(crate) mod guard;
pub(crate) mod leader;
pub(crate) mod lock;
pub(crate) mod multi;
mod nesting;
pub(crate) mod semaphore;
