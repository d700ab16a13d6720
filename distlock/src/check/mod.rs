//! The self-check of a backend's servers, run when it connects (and by `distlock check`):
//! what a probe asks each server and how its reply reads (`probe.rs`, `probe.lua`: the
//! version, the maxmemory policy, the ACL rights on the lock's keys and channels), which
//! versions and flavours distlock supports (`version.rs`), and the report the answers make
//! (`report.rs`, public as [`crate::inspect::ServerReport`]). The backend decides what a
//! report fails (`backend/check.rs`).

pub(crate) mod probe;
pub(crate) mod report;
pub(crate) mod version;
