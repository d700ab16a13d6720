//! The lock protocol on Redis, shared by three kinds of connection:
//!
//! - `mode = "single"` (and each node of the quorum modes): one auto-reconnecting
//!   multiplexed connection ([`ConnectionManager`]) shared by every task;
//! - `mode = "cluster"`: redis-rs's async cluster connection, which routes every command by
//!   the slot of its first key (all keys of one lock share a slot), follows `MOVED`/`ASK`
//!   and refreshes its slot map after a failover;
//! - `mode = "sentinel"`: a [`ConnectionManager`] to the master the sentinels name, swapped
//!   for a new one when they fail over (see `sentinel.rs`).
//!
//! Every command is bounded by the response timeout; scripts run by EVALSHA, falling back to
//! EVAL after `NOSCRIPT` (a promoted replica or a restarted server has an empty script cache).

use std::sync::Arc;
use std::time::Duration;

use distlock_config::RedisUrl;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};

use super::sentinel::SentinelMaster;
use super::{Attempt, Released};
use crate::keys::LockKeys;
use crate::owner::OwnerId;
use crate::scripts::{LuaScript, Scripts};
use crate::LockKind;

/// One script call: the script, its keys and its arguments.
struct Call {
    script: &'static LuaScript,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

impl Call {
    fn new(script: &'static LuaScript, keys: &LockKeys, with_extra: bool) -> Call {
        let mut names = vec![keys.hash.clone()];
        if with_extra {
            names.extend(keys.extra());
        }
        Call {
            script,
            keys: names,
            args: Vec::new(),
        }
    }

    fn with_fence(mut self, keys: &LockKeys) -> Call {
        self.keys.push(keys.fence.clone());
        self
    }

    fn arg(mut self, a: impl AsRef<[u8]>) -> Call {
        self.args.push(a.as_ref().to_vec());
        self
    }

    /// Append it to `pipe`, by SHA or with the source.
    fn add_to(&self, pipe: &mut Pipeline, by_sha: bool) {
        if by_sha {
            pipe.cmd("EVALSHA").arg(&self.script.sha);
        } else {
            pipe.cmd("EVAL").arg(self.script.source);
        }
        pipe.arg(self.keys.len());
        for k in &self.keys {
            pipe.arg(k);
        }
        for a in &self.args {
            pipe.arg(&a[..]);
        }
    }
}

/// `read` or `write`, as the read-write scripts take it.
fn rw_mode(kind: LockKind) -> &'static str {
    if kind == LockKind::Write {
        "write"
    } else {
        "read"
    }
}

/// Where a driver sends its commands.
#[derive(Clone)]
enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
    /// The current master of a Sentinel-monitored group.
    Sentinel(Arc<SentinelMaster>),
}

/// One concrete connection, for one command or pipeline.
#[derive(Clone)]
enum Link {
    Manager(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Manager(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Manager(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Manager(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// `WAIT` for replicas after acquiring (sentinel `sync_replicas`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncReplicas {
    /// Replica acknowledgements needed.
    pub needed: u32,
    /// How long to wait for them.
    pub timeout: Duration,
}

/// Why an acquire failed.
#[derive(Debug)]
pub(crate) enum AcquireError {
    /// Redis failed.
    Redis(RedisError),
    /// The lock was acquired on the master, but too few replicas acknowledged it in time;
    /// it was released again (`released`) or is left to expire.
    NotReplicated {
        acked: u32,
        needed: u32,
        timeout: Duration,
        released: bool,
    },
}

impl From<RedisError> for AcquireError {
    fn from(e: RedisError) -> Self {
        AcquireError::Redis(e)
    }
}

/// A connection to Redis (one server, a cluster, or a master found through sentinels)
/// speaking the lock protocol.
#[derive(Clone)]
pub(crate) struct RedisDriver {
    conn: Conn,
    response_timeout: Duration,
    sync: Option<SyncReplicas>,
}

impl std::fmt::Debug for RedisDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.conn {
            Conn::Single(_) => "single",
            Conn::Cluster(_) => "cluster",
            Conn::Sentinel(_) => "sentinel",
        };
        f.debug_struct("RedisDriver")
            .field("kind", &kind)
            .field("response_timeout", &self.response_timeout)
            .field("sync", &self.sync)
            .finish_non_exhaustive()
    }
}

pub(crate) fn timed_out(what: &'static str, after: Duration) -> RedisError {
    RedisError::from((ErrorKind::Io, what, format!("no reply within {after:?}")))
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// Whether `e` suggests the server is gone or no longer a master (a failover may be under
/// way): a connection error, a timeout, or a `READONLY` reply.
pub(crate) fn suggests_failover(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
        || e.to_string().contains("READONLY")
}

fn unexpected(what: &'static str, v: &Value) -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, what, format!("{v:?}")))
}

/// TCP settings of every connection: no Nagle delay (redis-rs 1.x leaves it on), since
/// every lock operation is a small request waiting for its reply.
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// A client for the server at `url`, with [`tcp_settings`].
pub(crate) fn client(url: &str) -> RedisResult<redis::Client> {
    let info = redis::IntoConnectionInfo::into_connection_info(url)?;
    redis::Client::open(info.set_tcp_settings(tcp_settings()))
}

/// The reconnection policy of a [`ConnectionManager`] to one server.
pub(crate) fn manager_config(
    connect_timeout: Duration,
    response_timeout: Duration,
) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout))
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(200))
}

/// Open a [`ConnectionManager`], bounded by twice `connect_timeout` (it retries once inside).
pub(crate) async fn open_manager(
    client: redis::Client,
    connect_timeout: Duration,
    config: ConnectionManagerConfig,
) -> RedisResult<ConnectionManager> {
    tokio::time::timeout(
        connect_timeout * 2,
        ConnectionManager::new_with_config(client, config),
    )
    .await
    .map_err(|_| timed_out("connect timed out", connect_timeout * 2))?
}

/// SCRIPT LOAD every script of the protocol on `link` (on a cluster: on every node).
async fn load_scripts_on(link: &mut Link, response_timeout: Duration) -> RedisResult<()> {
    let s = Scripts::get();
    for script in [
        &s.acquire,
        &s.release,
        &s.renew,
        &s.force_release,
        &s.rw_acquire,
        &s.rw_release,
        &s.rw_renew,
        &s.rw_cancel,
        &s.fair_acquire,
        &s.fair_cancel,
    ] {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(script.source);
        match tokio::time::timeout(response_timeout, cmd.query_async::<Value>(link)).await {
            Ok(r) => {
                r?;
            }
            Err(_) => return Err(timed_out("SCRIPT LOAD timed out", response_timeout)),
        }
    }
    Ok(())
}

/// SCRIPT LOAD every script on one server.
pub(crate) async fn load_scripts(
    conn: &ConnectionManager,
    response_timeout: Duration,
) -> RedisResult<()> {
    load_scripts_on(&mut Link::Manager(conn.clone()), response_timeout).await
}

impl RedisDriver {
    /// Connect to `client`'s server, bounded by `connect_timeout`.
    pub async fn connect(
        client: redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> RedisResult<RedisDriver> {
        let conn = open_manager(
            client,
            connect_timeout,
            manager_config(connect_timeout, response_timeout),
        )
        .await?;
        let driver = RedisDriver {
            conn: Conn::Single(conn),
            response_timeout,
            sync: None,
        };
        load_scripts_on(&mut driver.link(), response_timeout).await?;
        Ok(driver)
    }

    /// Connect to a Redis Cluster through any of `nodes` (the client discovers the rest).
    ///
    /// Requests that meet a failover are retried by redis-rs (after refreshing its slot
    /// map) within `response_timeout`, which bounds every call.
    pub async fn connect_cluster(
        nodes: &[RedisUrl],
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> RedisResult<RedisDriver> {
        let client = ClusterClientBuilder::new(nodes.iter().map(|u| u.url.as_str()))
            .tcp_settings(tcp_settings())
            .connection_timeout(connect_timeout)
            .response_timeout(response_timeout)
            .min_retry_wait(10)
            .max_retry_wait(100)
            .build()?;
        let conn = tokio::time::timeout(connect_timeout * 2, client.get_async_connection())
            .await
            .map_err(|_| timed_out("connect timed out", connect_timeout * 2))??;
        let driver = RedisDriver {
            conn: Conn::Cluster(conn),
            response_timeout,
            sync: None,
        };
        // A node down now only means its script cache is filled by EVAL later.
        if let Err(e) = load_scripts_on(&mut driver.link(), response_timeout).await {
            tracing::warn!(error = %e, "distlock: SCRIPT LOAD failed on some cluster node; scripts will be sent with EVAL there");
        }
        Ok(driver)
    }

    /// A driver on the master `master` keeps track of. `sync`: WAIT for replicas after
    /// every acquisition.
    pub fn sentinel(
        master: Arc<SentinelMaster>,
        response_timeout: Duration,
        sync: Option<SyncReplicas>,
    ) -> RedisDriver {
        RedisDriver {
            conn: Conn::Sentinel(master),
            response_timeout,
            sync,
        }
    }

    /// The connection for the next command.
    fn link(&self) -> Link {
        match &self.conn {
            Conn::Single(c) => Link::Manager(c.clone()),
            Conn::Cluster(c) => Link::Cluster(c.clone()),
            Conn::Sentinel(m) => Link::Manager(m.connection()),
        }
    }

    /// The address of the server commands go to now, when it is not fixed (sentinel).
    pub fn current_address(&self) -> Option<String> {
        match &self.conn {
            Conn::Sentinel(m) => Some(m.address()),
            _ => None,
        }
    }

    /// A command failed: a sentinel master checks whether it has changed.
    fn failed(&self, e: &RedisError) {
        if let Conn::Sentinel(m) = &self.conn {
            if suggests_failover(e) {
                m.suspect();
            }
        }
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &Cmd,
        what: &'static str,
    ) -> RedisResult<T> {
        let mut link = self.link();
        let r = match tokio::time::timeout(self.response_timeout, cmd.query_async(&mut link)).await
        {
            Ok(r) => r,
            Err(_) => Err(timed_out(what, self.response_timeout)),
        };
        if let Err(e) = &r {
            self.failed(e);
        }
        r
    }

    async fn query_pipe<T: redis::FromRedisValue>(
        &self,
        link: &mut Link,
        pipe: &Pipeline,
        timeout: Duration,
        what: &'static str,
    ) -> RedisResult<T> {
        let r = match tokio::time::timeout(timeout, pipe.query_async(link)).await {
            Ok(r) => r,
            Err(_) => Err(timed_out(what, timeout)),
        };
        if let Err(e) = &r {
            self.failed(e);
        }
        r
    }

    /// Run `call` (see [`RedisDriver::eval`]).
    async fn eval_call(&self, call: &Call) -> RedisResult<Value> {
        let keys: Vec<&str> = call.keys.iter().map(String::as_str).collect();
        let args: Vec<&[u8]> = call.args.iter().map(Vec::as_slice).collect();
        self.eval(call.script, &keys, &args).await
    }

    /// The acquire script call for a lock of `keys.kind`. `wait`: how long the caller may
    /// still wait (fair and write locks queue for that long).
    fn acquire_call(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
        lease: Duration,
        wait: Duration,
    ) -> Call {
        let s = Scripts::get();
        let lease_ms = lease_ms(lease);
        let wait_ms = wait.as_millis().min(i64::MAX as u128).to_string();
        match keys.kind {
            LockKind::Fair => Call::new(&s.fair_acquire, keys, true)
                .arg(owner.hex())
                .arg(lease_ms)
                .arg(wait_ms),
            LockKind::Read | LockKind::Write => Call::new(&s.rw_acquire, keys, true)
                .arg(owner.hex())
                .arg(lease_ms)
                .arg(rw_mode(keys.kind))
                .arg(wait_ms),
            _ => Call::new(&s.acquire, keys, false)
                .arg(owner.hex())
                .arg(lease_ms),
        }
        .with_fence(keys)
    }

    /// The renew script call for one lease.
    fn renew_call(keys: &LockKeys, owner: OwnerId, lease_ms: &str) -> Call {
        let s = Scripts::get();
        match keys.kind {
            LockKind::Read | LockKind::Write => Call::new(&s.rw_renew, keys, true)
                .arg(owner.hex())
                .arg(lease_ms)
                .arg(rw_mode(keys.kind)),
            _ => Call::new(&s.renew, keys, false)
                .arg(owner.hex())
                .arg(lease_ms),
        }
    }

    /// EVALSHA, falling back to EVAL (which caches the script again) after NOSCRIPT.
    async fn eval(&self, script: &LuaScript, keys: &[&str], args: &[&[u8]]) -> RedisResult<Value> {
        let build = |verb: &str, body: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(body).arg(keys.len());
            for k in keys {
                cmd.arg(*k);
            }
            for a in args {
                cmd.arg(*a);
            }
            cmd
        };
        match self
            .query(&build("EVALSHA", &script.sha), "EVALSHA timed out")
            .await
        {
            Err(e) if is_noscript(&e) => {
                tracing::debug!("distlock: NOSCRIPT; sending the script again");
                self.query(&build("EVAL", script.source), "EVAL timed out")
                    .await
            }
            r => r,
        }
    }

    pub async fn acquire(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
        lease: Duration,
        wait: Duration,
    ) -> RedisResult<Attempt> {
        let v = self
            .eval_call(&self.acquire_call(keys, owner, lease, wait))
            .await?;
        parse_attempt(&v)
    }

    /// Acquire; with `sync_replicas`, also WAIT for the replicas and undo the acquisition
    /// when too few acknowledge it.
    pub async fn acquire_checked(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
        lease: Duration,
        wait: Duration,
    ) -> Result<Attempt, AcquireError> {
        let (Some(sync), Conn::Sentinel(master)) = (self.sync, &self.conn) else {
            return Ok(self.acquire(keys, owner, lease, wait).await?);
        };
        // The acquire script and WAIT go together on a connection of their own: WAIT blocks
        // the connection it is sent on, and counts the writes made on it.
        let mut link = Link::Manager(master.sync_connection());
        let call = self.acquire_call(keys, owner, lease, wait);
        let build = |by_sha: bool| {
            let mut pipe = redis::pipe();
            call.add_to(&mut pipe, by_sha);
            pipe.cmd("WAIT")
                .arg(sync.needed)
                .arg(sync.timeout.as_millis().max(1) as u64);
            pipe
        };
        let timeout = self.response_timeout + sync.timeout;
        let (attempt, acked): (Value, i64) = match self
            .query_pipe(&mut link, &build(true), timeout, "acquire + WAIT timed out")
            .await
        {
            Err(e) if is_noscript(&e) => {
                self.query_pipe(
                    &mut link,
                    &build(false),
                    timeout,
                    "acquire + WAIT timed out",
                )
                .await?
            }
            r => r?,
        };
        let attempt = parse_attempt(&attempt)?;
        let acked = u32::try_from(acked).unwrap_or(0);
        if !matches!(attempt, Attempt::Acquired { .. }) || acked >= sync.needed {
            return Ok(attempt);
        }
        // Held on the master alone: a failover now would lose it. Undo it.
        let released = match self.release(keys, owner).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(key = %keys.user, error = %e,
                    "distlock: could not release a lock the replicas did not acknowledge; it expires with its lease");
                false
            }
        };
        Err(AcquireError::NotReplicated {
            acked,
            needed: sync.needed,
            timeout: sync.timeout,
            released,
        })
    }

    pub async fn release(&self, keys: &LockKeys, owner: OwnerId) -> RedisResult<Released> {
        let s = Scripts::get();
        let mut call = match keys.kind {
            LockKind::Read | LockKind::Write => Call::new(&s.rw_release, keys, true)
                .arg(owner.hex())
                .arg(rw_mode(keys.kind)),
            _ => Call::new(&s.release, keys, false).arg(owner.hex()),
        }
        .arg(&keys.channel);
        if self.sharded_pubsub() {
            call = call.arg("spublish");
        }
        let v = self.eval_call(&call).await?;
        match v {
            Value::Int(0) => Ok(Released::Freed),
            Value::Int(n) if n > 0 => Ok(Released::StillHeld),
            Value::Int(_) => Ok(Released::NotHeld),
            other => Err(unexpected("unexpected reply to the release script", &other)),
        }
    }

    /// A fair or write waiter gives up: it leaves the queue (waking the waiters it held
    /// back). Returns whether it was queued.
    pub async fn cancel(&self, keys: &LockKeys, owner: OwnerId) -> RedisResult<bool> {
        let s = Scripts::get();
        let script = match keys.kind {
            LockKind::Fair => &s.fair_cancel,
            LockKind::Write => &s.rw_cancel,
            _ => return Ok(false),
        };
        let mut call = Call::new(script, keys, true)
            .arg(owner.hex())
            .arg(&keys.channel);
        if self.sharded_pubsub() {
            call = call.arg("spublish");
        }
        Ok(matches!(self.eval_call(&call).await?, Value::Int(1)))
    }

    /// Whether releases are announced with SPUBLISH (a cluster: see `cluster.rs`).
    fn sharded_pubsub(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// Whether renewals can fail one by one (a cluster: some masters may be down while
    /// others answer); see [`RedisDriver::renew_each`].
    pub fn renews_per_item(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// Renew many leases, each on its own: `v[i]` is whether `items[i]` was renewed, or why
    /// it could not be. On a cluster the EVALSHAs are sent concurrently (a pipeline must
    /// stay in one slot there); the multiplexed node connections pipeline them on the wire.
    pub async fn renew_each(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Vec<RedisResult<bool>> {
        if self.renews_per_item() {
            return self.renew_concurrently(items, lease).await;
        }
        match self.renew_pipelined(items, lease).await {
            Ok(v) => v.into_iter().map(Ok).collect(),
            Err(e) => items.iter().map(|_| Err(e.clone())).collect(),
        }
    }

    /// Renew many leases. `Ok(v)`: `v[i]` tells whether `items[i]` was renewed.
    pub async fn renew(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> RedisResult<Vec<bool>> {
        if self.renews_per_item() {
            return self
                .renew_concurrently(items, lease)
                .await
                .into_iter()
                .collect();
        }
        self.renew_pipelined(items, lease).await
    }

    async fn renew_concurrently(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Vec<RedisResult<bool>> {
        let lease_ms = lease_ms(lease);
        futures_util::future::join_all(items.iter().map(|(k, o)| self.renew_one(k, *o, &lease_ms)))
            .await
    }

    async fn renew_one(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
        lease_ms: &str,
    ) -> RedisResult<bool> {
        let v = self
            .eval_call(&Self::renew_call(keys, owner, lease_ms))
            .await?;
        match v {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("unexpected reply to the renew script", &other)),
        }
    }

    /// Renew many leases in one pipeline (one server).
    async fn renew_pipelined(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> RedisResult<Vec<bool>> {
        let lease_ms = lease_ms(lease);
        let calls: Vec<Call> = items
            .iter()
            .map(|(keys, owner)| Self::renew_call(keys, *owner, &lease_ms))
            .collect();
        let build = |by_sha: bool| {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for call in &calls {
                call.add_to(&mut pipe, by_sha);
            }
            pipe
        };
        let mut link = self.link();
        let mut by_sha = true;
        loop {
            let pipe = build(by_sha);
            let replies: Vec<RedisResult<i64>> = self
                .query_pipe(&mut link, &pipe, self.response_timeout, "renewal timed out")
                .await?;
            if by_sha
                && replies
                    .iter()
                    .any(|r| matches!(r, Err(e) if is_noscript(e)))
            {
                by_sha = false;
                continue;
            }
            let replies = replies
                .into_iter()
                .map(|r| r.map(|n| n == 1))
                .collect::<RedisResult<Vec<bool>>>();
            if let Err(e) = &replies {
                self.failed(e);
            }
            return replies;
        }
    }

    pub async fn force_release(&self, keys: &LockKeys) -> RedisResult<bool> {
        let with_extra = matches!(keys.kind, LockKind::Fair | LockKind::Read | LockKind::Write);
        let mut call =
            Call::new(&Scripts::get().force_release, keys, with_extra).arg(&keys.channel);
        if self.sharded_pubsub() {
            call = call.arg("spublish");
        }
        let v = self.eval_call(&call).await?;
        Ok(matches!(v, Value::Int(1)))
    }

    pub async fn next_sequence(&self, key: &str, ttl: Duration) -> RedisResult<u64> {
        let mut pipe = redis::pipe();
        pipe.cmd("INCR")
            .arg(key)
            .cmd("EXPIRE")
            .arg(key)
            .arg(ttl.as_secs().max(1))
            .arg("NX")
            .ignore();
        let mut link = self.link();
        let (n,): (u64,) = self
            .query_pipe(&mut link, &pipe, self.response_timeout, "INCR timed out")
            .await?;
        Ok(n)
    }
}

fn parse_attempt(v: &Value) -> RedisResult<Attempt> {
    let pair = match v {
        Value::Array(items) if items.len() == 2 => (&items[0], &items[1]),
        other => return Err(unexpected("unexpected reply to the acquire script", other)),
    };
    match pair {
        (Value::Int(1), Value::Int(token)) => Ok(Attempt::Acquired {
            token: u64::try_from(*token).unwrap_or(0),
        }),
        (Value::Int(2), _) => Ok(Attempt::Reentered),
        (Value::Int(0), Value::Int(pttl)) => Ok(Attempt::Held {
            ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
        }),
        _ => Err(unexpected("unexpected reply to the acquire script", v)),
    }
}

fn lease_ms(lease: Duration) -> String {
    // At least 1 ms: PEXPIRE 0 would delete the lock at once.
    lease.as_millis().clamp(1, i64::MAX as u128).to_string()
}

// Used by the quorum backends (`quorum.rs`).
impl RedisDriver {
    /// `INCRBY key by`: raises a node's fencing counter that lags behind the token a quorum
    /// acquisition handed out (counters only ever grow, so overshooting is harmless).
    pub async fn incr_by(&self, key: &str, by: u64) -> RedisResult<u64> {
        let mut cmd = redis::cmd("INCRBY");
        cmd.arg(key).arg(by);
        self.query(&cmd, "INCRBY timed out").await
    }
}

// Hook for `crate::fence` (added by the fault-testing branch; port it along with the
// backend restructuring): fenced writes run their own script on this connection.
impl RedisDriver {
    /// Run a script outside the lock protocol: EVALSHA, EVAL after `NOSCRIPT`, bounded by
    /// the response timeout.
    pub async fn run_script(
        &self,
        script: &LuaScript,
        keys: &[&str],
        args: &[&[u8]],
    ) -> RedisResult<Value> {
        self.eval(script, keys, args).await
    }
}
