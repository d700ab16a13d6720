//! The backend contract: what one topology (single, cluster, sentinel, quorum, memory)
//! does, in one small trait each implements in its own file. [`super::Backend`] holds its
//! driver behind [`Topology`], and turns every [`DriverError`] into a public error, in one
//! place; a new topology is one more implementation.
//!
//! The futures are boxed (as redis-rs's `aio::ConnectionLike` does) so that a backend holds
//! any topology behind one pointer.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::Value;

use super::capabilities::Facts;
use super::resend::Resends;
use crate::check::probe::Probe;
use crate::check::report::ServerReport;
use crate::errors::backend::DriverError;
use crate::protocol::keys::LockKeys;
use crate::protocol::{Attempt, Call, HandedOff, Released};
use crate::terms::owner::{Hold, OwnerId};

/// A result already known, as a boxed future (the memory backend answers at once).
pub(super) fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

/// Each server's reply to a script, and how many must agree (1, or the quorum).
pub(super) type ScriptReplies = (Vec<Result<Value, DriverError>>, usize);

/// What a fenced write on a quorum backend came to (`quorum/fenced.rs`).
#[derive(Debug)]
pub(super) enum FencedSet {
    /// Stored on a quorum; no node that answered holds a newer token.
    Stored,
    /// A node that answered holds a newer token: refused (and undone where it was taken).
    Stale,
    /// Too few nodes answered (undone where it was taken): how many stored it, of how
    /// many nodes, how many were needed, and the first node's error.
    Failed {
        stored: usize,
        needed: usize,
        nodes: usize,
        error: Option<DriverError>,
    },
}

/// One topology: the lock protocol's operations on its servers (or in this process).
pub(super) trait Topology: Send + Sync + std::fmt::Debug {
    /// What it offers, asked once when the backend is built (`Capabilities`).
    fn facts(&self) -> Facts;

    /// One acquire attempt; `wait`: how long the caller may still queue.
    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Attempt, DriverError>>;

    /// Release `hold`.
    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
    ) -> BoxFuture<'a, Result<Released, DriverError>>;

    /// Release `hold` and hand the lock to `to` when that frees it; `None`: not offered.
    fn hand_off<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        to: Hold,
        lease: Duration,
        holder: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<HandedOff>, DriverError>>;

    /// A queued waiter leaves the queue; whether it was queued.
    fn cancel<'a>(
        &'a self,
        keys: &'a LockKeys,
        owner: OwnerId,
    ) -> BoxFuture<'a, Result<bool, DriverError>>;

    /// Renew many leases, each with its own outcome.
    fn renew_each<'a>(
        &'a self,
        items: &'a [(&'a LockKeys, OwnerId)],
        lease: Duration,
    ) -> BoxFuture<'a, Vec<Result<bool, DriverError>>>;

    /// Delete a lock whoever holds it, telling its holders on the channel `revocation`.
    fn force_release<'a>(
        &'a self,
        keys: &'a LockKeys,
        revocation: &'a str,
    ) -> BoxFuture<'a, Result<bool, DriverError>>;

    /// INCR `key`, giving it `ttl` when new.
    fn next_sequence<'a>(
        &'a self,
        key: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<u64, DriverError>>;

    /// SCAN for `pattern`, at most `limit` names; `None`: no keys to scan (memory).
    fn scan<'a>(
        &'a self,
        pattern: &'a str,
        limit: usize,
    ) -> Option<BoxFuture<'a, Result<Vec<String>, DriverError>>>;

    /// Each server's self-check; `None`: no servers (memory).
    fn probe<'a>(
        &'a self,
        probe: &'a Probe,
    ) -> Option<BoxFuture<'a, Vec<Result<ServerReport, DriverError>>>>;

    /// Run `call` on its server, or on every node: the replies and how many must agree;
    /// `None`: no scripts (memory).
    fn run_script<'a>(&'a self, call: &'a Call) -> Option<BoxFuture<'a, ScriptReplies>>;

    /// A fenced write stored on a quorum of nodes (`quorum/fenced.rs`); `None` on the
    /// topologies where one script does it.
    fn fenced_set<'a>(
        &'a self,
        _name: &'a str,
        _value: &'a [u8],
        _token: u64,
        _ttl_ms: u64,
    ) -> Option<BoxFuture<'a, FencedSet>> {
        None
    }

    /// The re-sends of its own (a quorum's to single nodes), besides the backend's.
    fn resends(&self) -> Option<&Arc<Resends>> {
        None
    }

    /// The store, when it lives in this process (memory).
    fn local(&self) -> Option<&dyn LocalStore> {
        None
    }
}

/// A store in this process: what is done there at once, with no round trip and no
/// script (the memory backend, a product feature).
pub(super) trait LocalStore {
    /// Release `hold` now.
    fn release_now(&self, keys: &LockKeys, hold: Hold);

    /// Leave the queue now.
    fn cancel_now(&self, keys: &LockKeys, owner: OwnerId);

    /// Wake the watchers of `channel` in this process.
    fn deliver(&self, channel: &str);

    /// The fenced write of `crate::ops::fence`; whether it was stored.
    fn fenced_set(&self, name: &str, value: &[u8], token: u64, ttl: Option<Duration>) -> bool;

    /// The fenced claim of `crate::ops::fence`; whether it was claimed.
    fn fenced_claim(&self, name: &str, token: u64, ttl: Option<Duration>) -> bool;

    /// The fenced value and its token, if any.
    fn fenced_get(&self, name: &str) -> Option<(Vec<u8>, u64)>;

    /// The holder text of the reentrant lock `keys`, its token and what is left of its
    /// lease, while it is held.
    fn holder(&self, keys: &LockKeys) -> Option<(Arc<str>, u64, Duration)>;

    /// How many holders it keeps now.
    #[cfg(feature = "test-support")]
    fn holders(&self) -> usize;
}
