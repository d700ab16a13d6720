//! What users call around the locks: inspection, fencing at the resource, and ids, and the
//! terms every builder shares ([`target`]). Above the registry they go through, below the
//! primitives (a leader reads its record through inspection).

pub mod fence;
pub mod ids;
pub(crate) mod inspect;
pub(crate) mod target;
