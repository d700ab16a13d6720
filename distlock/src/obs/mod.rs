//! What distlock tells about itself, written by every layer above: metrics, the
//! `#[distributed_lock]` sites linked into the binary, and the holder text a lock records
//! of its holder.

pub(crate) mod holder;
pub mod metrics;
pub(crate) mod sites;
