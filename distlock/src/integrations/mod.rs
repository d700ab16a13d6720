//! The web integrations, on top of everything they wrap: the tower layer that holds a lock
//! around each request, and the axum mapping of `LockError` to an HTTP response.

#[cfg(feature = "tower")]
pub mod tower;
#[cfg(feature = "axum")]
pub mod web;
// The HTTP mapping of `LockError` that the tower layer shares with the axum integration.
#[cfg(all(feature = "tower", not(feature = "axum")))]
pub(crate) mod web;
