//! Around the locks: inspection and reports, fencing at the resource, ids, metrics, the
//! attribute's sites and the web integrations.

pub mod fence;
pub mod ids;
pub(crate) mod inspect;
#[cfg(feature = "tower")]
pub mod tower;
#[cfg(feature = "axum")]
pub mod web;
// The HTTP mapping of `LockError` that the tower layer shares with the axum integration.
#[cfg(all(feature = "tower", not(feature = "axum")))]
pub(crate) mod web;
