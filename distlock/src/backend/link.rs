//! The one-call operations of the lock protocol over any Redis connection: a [`Link`] is a
//! connection, the address errors name, the response timeout, and the publish verb of its
//! topology. `server.rs` (one server: `Link<ConnectionManager>`) and `cluster.rs`
//! (`Link<Routed>`: by slot on a connection to each master, see `cluster_slots.rs`; and
//! `Link<ClusterConnection>` for Redisson-format acquisitions) add what differs —
//! connecting, pipelined or concurrent renewal, `WAIT`, inspection — and share these.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;

use super::direct::Direct;
use crate::errors::backend::{bounded, redirected, DriverError};
use crate::errors::reply::UnexpectedReply;
use crate::protocol::exec::{eval, Functions};
use crate::protocol::keys::LockKeys;
use crate::protocol::{Attempt, Call, HandedOff, Publish, Released};
use crate::terms::owner::{Hold, OwnerId};

/// A connection speaking the lock protocol.
#[derive(Clone)]
pub(crate) struct Link<C> {
    pub(super) conn: C,
    /// `host:port` (a cluster: its configured nodes), for errors.
    pub(super) address: String,
    pub(super) response_timeout: Duration,
    /// How releases are announced on this topology.
    pub(super) publish: Publish,
    /// Connections the calling task drives itself, used for one call at a time when idle
    /// (`direct.rs`); `None`: every call goes through `conn`.
    pub(super) direct: Option<Arc<Direct>>,
    /// Whether the server runs the protocol as distlock's function library (shared by the
    /// link's clones).
    pub(super) functions: Arc<Functions>,
}

impl<C> std::fmt::Debug for Link<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("address", &self.address)
            .field("response_timeout", &self.response_timeout)
            .field("publish", &self.publish)
            .finish_non_exhaustive()
    }
}

/// A connection that may have direct connections of its own for some calls (a cluster's
/// masters, by the slot of the call's key: `cluster_slots.rs`).
pub(crate) trait DirectRoutes {
    /// The direct connections for `call`, if any.
    fn direct_for(&self, _call: &Call) -> Option<Arc<Direct>> {
        None
    }

    /// A call on a direct connection was answered `MOVED` or `ASK` (it ran nowhere), or
    /// its connection failed: the map that chose that connection may be out of date.
    fn stale(&self) {}
}

impl DirectRoutes for redis::aio::ConnectionManager {}
impl DirectRoutes for redis::cluster_async::ClusterConnection {}

impl<C: ConnectionLike + DirectRoutes + Clone + Send + Sync> Link<C> {
    /// `host:port`, or a cluster's configured nodes.
    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// Run one call, bounded by the response timeout: on the caller's idle direct
    /// connection where there is one (the server's, or the cluster master's of the call's
    /// key) and no other call is under way on that server, else on the shared connection.
    pub(crate) async fn run(&self, call: &Call, what: &'static str) -> Result<Value, DriverError> {
        let routed;
        let direct = match &self.direct {
            Some(d) => Some(d),
            None => {
                routed = self.conn.direct_for(call);
                routed.as_ref()
            }
        };
        let _counted = match direct {
            Some(direct) => {
                let (counted, alone) = direct.call();
                if let Some(mut lease) = alone.then(|| direct.lease()).flatten() {
                    let r = bounded(
                        &self.address,
                        what,
                        self.response_timeout,
                        eval(&mut lease, call, &self.functions),
                    )
                    .await;
                    let redirect = match &r {
                        Ok(v) => redirected(v),
                        Err(e) => e.is_redirect(),
                    };
                    if !redirect {
                        if r.as_ref().is_err_and(DriverError::is_connection_failure) {
                            self.conn.stale();
                        }
                        return r;
                    }
                    // Not run (a cluster's slot moved): the shared connection follows it.
                    self.conn.stale();
                }
                // After whatever a dropped caller wrote on a direct connection.
                direct.drained().await;
                Some(counted)
            }
            None => None,
        };
        let mut conn = self.conn.clone();
        bounded(
            &self.address,
            what,
            self.response_timeout,
            eval(&mut conn, call, &self.functions),
        )
        .await
    }

    /// A release (cancel, forced release) that did its work but could not publish it: not a
    /// failure (the lock is free), but waiters sleep until the lease's end, so say why.
    fn warn_unannounced(&self, key: &str, v: &Value) {
        if let Some(error) = Call::publish_failure(v) {
            tracing::warn!(address = %self.address, key, error = %error,
                "distlock: the lock was released, but announcing it failed (PUBLISH refused: grant the ACL user the channel pattern of the key prefix); waiters wake at the lease's end");
        }
    }

    pub(super) fn unexpected(&self, reply: UnexpectedReply) -> DriverError {
        DriverError::Unexpected {
            address: self.address.clone(),
            reply,
        }
    }

    /// One acquire attempt. `wait`: how long the caller may still wait (fair and write
    /// locks queue for that long).
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
    ) -> Result<Attempt, DriverError> {
        let call = crate::protocol::acquire(keys, hold, lease, wait, self.publish);
        let v = self.run(&call, "acquire timed out").await?;
        call.attempt(&v).map_err(|r| self.unexpected(r))
    }

    /// Release one level.
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        hold: Hold,
    ) -> Result<Released, DriverError> {
        let call = crate::protocol::release(keys, hold, self.publish);
        let v = self.run(&call, "release timed out").await?;
        self.warn_unannounced(&keys.user, &v);
        let released = call.released(&v).map_err(|r| self.unexpected(r))?;
        if let Some(latch) = call.redisson_latch() {
            // Answered: the unlock latch has done its work (`RedissonBaseLock` deletes it
            // likewise); should this fail, it expires on its own.
            let mut del = redis::cmd("DEL");
            del.arg(latch);
            let mut conn = self.conn.clone();
            if let Err(e) = bounded(
                &self.address,
                "DEL of the unlock latch timed out",
                self.response_timeout,
                del.query_async::<()>(&mut conn),
            )
            .await
            {
                tracing::debug!(address = %self.address, error = %e,
                    "distlock: deleting the unlock latch failed; it expires on its own");
            }
        }
        Ok(released)
    }

    /// Release `hold` and hand the lock to the local waiter's acquisition `to` when that
    /// frees it (`protocol/handoff.lua`); `None` for what does not hand off.
    pub(crate) async fn handoff(
        &self,
        keys: &LockKeys,
        hold: Hold,
        to: Hold,
        lease: Duration,
        holder: Option<&str>,
    ) -> Result<Option<HandedOff>, DriverError> {
        let Some(call) = crate::protocol::handoff(keys, hold, to, lease, holder, self.publish)
        else {
            return Ok(None);
        };
        let v = self.run(&call, "hand-off timed out").await?;
        self.warn_unannounced(&keys.user, &v);
        call.handed_off(&v)
            .map(Some)
            .map_err(|r| self.unexpected(r))
    }

    /// A fair or write waiter leaves the queue. Returns whether it was queued.
    pub(crate) async fn cancel(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
    ) -> Result<bool, DriverError> {
        let Some(call) = crate::protocol::cancel(keys, owner, self.publish) else {
            return Ok(false);
        };
        let v = self.run(&call, "cancel timed out").await?;
        self.warn_unannounced(&keys.user, &v);
        call.done(&v).map_err(|r| self.unexpected(r))
    }

    /// Delete the lock whoever holds it, telling the holders on `revocation`. Returns
    /// whether there was one.
    pub(crate) async fn force_release(
        &self,
        keys: &LockKeys,
        revocation: &str,
    ) -> Result<bool, DriverError> {
        let call = crate::protocol::force_release(keys, self.publish, revocation);
        let v = self.run(&call, "force release timed out").await?;
        self.warn_unannounced(&keys.user, &v);
        call.done(&v).map_err(|r| self.unexpected(r))
    }

    /// `INCR key`, giving it `ttl` when new (a plain counter, outside the lock layout).
    pub(crate) async fn next_sequence(&self, key: &str, ttl: Duration) -> Result<u64, DriverError> {
        let mut pipe = redis::pipe();
        pipe.cmd("INCR")
            .arg(key)
            .cmd("EXPIRE")
            .arg(key)
            .arg(ttl.as_secs().max(1))
            .arg("NX")
            .ignore();
        let mut conn = self.conn.clone();
        let (n,): (u64,) = bounded(
            &self.address,
            "INCR timed out",
            self.response_timeout,
            pipe.query_async(&mut conn),
        )
        .await?;
        Ok(n)
    }
}
