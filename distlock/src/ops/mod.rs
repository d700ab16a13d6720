//! What users call around the locks: inspection, fencing at the resource, and ids. Above
//! the registry they go through, below the primitives (a leader reads its record through
//! inspection).

pub mod fence;
pub mod ids;
pub(crate) mod inspect;
