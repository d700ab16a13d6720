//! The lock protocol on one Redis server: `mode = "single"`, the current master of
//! `mode = "sentinel"`, and each node of `redlock`/`multi` speak it through a [`Server`].
//!
//! One auto-reconnecting multiplexed connection ([`ConnectionManager`]) is shared by every
//! task; every call is bounded by the response timeout.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::Value;

use super::conn::Settings;
use super::direct::Direct;
use super::link::Link;
use crate::check::probe::Probe;
use crate::check::report::ServerReport;
use crate::errors::backend::{bounded, DriverError};
use crate::protocol::exec::{eval_pipelined, load_all};
use crate::protocol::keys::LockKeys;
use crate::protocol::{Attempt, Call, Publish};
use crate::terms::owner::OwnerId;

/// The life of a fencing counter from when it is started, in ms: 24 h (as
/// `fence_prologue.lua` sets it).
const COUNTER_LIFE_MS: u64 = 86_400_000;

/// Renewals sent in one pipeline.
const RENEW_BATCH: usize = 512;

/// A connection to one server, speaking the lock protocol.
pub(crate) type Server = Link<ConnectionManager>;

impl Server {
    /// Connect to the server of `client` (at `address`) and load the scripts. `direct`:
    /// one-call operations may also go over connections their callers drive
    /// (`direct.rs`).
    pub(crate) async fn connect(
        settings: &Settings,
        address: &str,
        client: redis::Client,
        direct: bool,
    ) -> Result<Server, DriverError> {
        let direct = if direct {
            Direct::of(
                client.get_connection_info(),
                settings.connect_timeout,
                settings.response_timeout,
            )
        } else {
            None
        };
        let conn = settings.manager(address, &client, Duration::ZERO).await?;
        let server = Link {
            address: address.to_owned(),
            conn,
            response_timeout: settings.response_timeout,
            publish: Publish::Plain,
            direct,
            functions: Arc::default(),
        };
        let mut c = server.conn.clone();
        let loaded = bounded(
            address,
            "SCRIPT LOAD timed out",
            settings.response_timeout,
            load_all(&mut c, &server.functions),
        )
        .await;
        match loaded {
            Ok(()) => {}
            // An ACL user without `+script|load`: the scripts go by EVAL; the init
            // self-check names the missing right.
            Err(e) if e.is_no_perm() => {
                tracing::debug!(address, error = %e, "distlock: SCRIPT LOAD refused");
            }
            Err(e) => return Err(e),
        }
        Ok(server)
    }

    /// PING, bounded by the response timeout (a failure makes the connection reconnect).
    pub(crate) async fn ping(&self) -> Result<(), DriverError> {
        let mut conn = self.conn.clone();
        bounded(
            &self.address,
            "PING timed out",
            self.response_timeout,
            redis::cmd("PING").query_async::<()>(&mut conn),
        )
        .await
    }

    /// The server's run id (`INFO server`), bounded by the response timeout.
    pub(crate) async fn run_id(&self) -> Result<Option<String>, DriverError> {
        let mut conn = self.conn.clone();
        let info: String = bounded(
            &self.address,
            "INFO timed out",
            self.response_timeout,
            redis::cmd("INFO").arg("server").query_async(&mut conn),
        )
        .await?;
        Ok(crate::check::version::info_field(&info, "run_id").map(str::to_owned))
    }

    /// The connection, for commands outside the protocol (`ROLE`).
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Acquire, then `WAIT` for `needed` replicas (at most `timeout`), on `conn` (a
    /// connection of its own: WAIT blocks it, and counts the writes made on it). Returns
    /// the attempt and how many replicas acknowledged.
    pub(crate) async fn acquire_replicated(
        &self,
        conn: &ConnectionManager,
        call: &Call,
        needed: u32,
        timeout: Duration,
    ) -> Result<(Attempt, u32), DriverError> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(needed).arg(timeout.as_millis().max(1) as u64);
        let mut conn = conn.clone();
        let replies = bounded(
            &self.address,
            "acquire + WAIT timed out",
            self.response_timeout + timeout,
            eval_pipelined(
                &mut conn,
                std::slice::from_ref(call),
                Some(&wait),
                &self.functions,
            ),
        )
        .await?;
        let mut replies = replies.into_iter();
        let redis_err = |e| DriverError::redis(&self.address, e);
        let attempt = replies
            .next()
            .transpose()
            .map_err(redis_err)?
            .unwrap_or(Value::Nil);
        let attempt = call.attempt(&attempt).map_err(|r| self.unexpected(r))?;
        let acked = match replies.next().transpose().map_err(redis_err)? {
            Some(Value::Int(n)) => u32::try_from(n).unwrap_or(0),
            _ => 0,
        };
        Ok((attempt, acked))
    }

    /// Renew many leases in pipelines: `v[i]` is whether `items[i]` was renewed (`false`:
    /// the lock was gone), or why that is not known. Each item is judged on its own reply.
    pub(crate) async fn renew_each(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Vec<Result<bool, DriverError>> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(RENEW_BATCH) {
            let calls: Vec<Call> = chunk
                .iter()
                .map(|(keys, owner)| crate::protocol::renew(keys, *owner, lease))
                .collect();
            let mut conn = self.conn.clone();
            match bounded(
                &self.address,
                "renewal timed out",
                self.response_timeout,
                eval_pipelined(&mut conn, &calls, None, &self.functions),
            )
            .await
            {
                Ok(replies) => {
                    for (call, r) in calls.iter().zip(replies) {
                        out.push(match r {
                            Ok(v) => call.done(&v).map_err(|r| self.unexpected(r)),
                            Err(e) => Err(DriverError::redis(&self.address, e)),
                        });
                    }
                }
                Err(e) => out.extend(chunk.iter().map(|_| Err(e.clone()))),
            }
        }
        out
    }

    /// The self-check of this server (`check/probe.rs`): one pipeline of the probe
    /// script, `INFO server` and `INFO memory`.
    pub(crate) async fn probe(&self, probe: &Probe) -> Result<ServerReport, DriverError> {
        let mut conn = self.conn.clone();
        let mut pipe = probe.pipeline();
        pipe.ignore_errors();
        let replies: Vec<redis::RedisResult<Value>> = bounded(
            &self.address,
            "self-check timed out",
            self.response_timeout,
            pipe.query_async(&mut conn),
        )
        .await?;
        let mut replies = replies.into_iter();
        let mut next = || replies.next().unwrap_or(Ok(Value::Nil));
        let (script, server, memory) = (next(), next(), next());
        Ok(probe.report(&self.address, probe.answer(script, server, memory)))
    }

    /// The names of the keys matching `pattern` (SCAN, never KEYS), at most `limit`.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<String>, DriverError> {
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000);
            let (next, keys): (u64, Vec<String>) = bounded(
                &self.address,
                "SCAN timed out",
                self.response_timeout,
                cmd.query_async(&mut conn),
            )
            .await?;
            out.extend(keys);
            cursor = next;
            if cursor == 0 || out.len() >= limit {
                out.truncate(limit);
                return Ok(out);
            }
        }
    }

    /// `INCRBY key by`: raises a node's fencing counter that lags behind the token a quorum
    /// acquisition handed out (counters only ever grow, so overshooting is harmless). In
    /// the same round trip `PEXPIRE key 24h NX`: a counter keeps the expiry it was started
    /// with (`fence_prologue.lua`), and one the `INCRBY` created (the counter vanished since
    /// the acquisition) gets one, so no counter lives forever.
    pub(crate) async fn incr_by(&self, key: &str, by: u64) -> Result<u64, DriverError> {
        let mut pipe = redis::pipe();
        pipe.cmd("INCRBY").arg(key).arg(by);
        pipe.cmd("PEXPIRE")
            .arg(key)
            .arg(COUNTER_LIFE_MS)
            .arg("NX")
            .ignore();
        let mut conn = self.conn.clone();
        bounded(
            &self.address,
            "INCRBY timed out",
            self.response_timeout,
            pipe.query_async::<(u64,)>(&mut conn),
        )
        .await
        .map(|(counter,)| counter)
    }
}
