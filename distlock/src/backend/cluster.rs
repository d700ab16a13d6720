//! `mode = "cluster"`: a Redis Cluster.
//!
//! The lock commands go by slot straight to a connection of distlock's own to the master
//! serving it (`cluster_slots.rs`: all keys of one lock share a slot); everything else,
//! and a command redirected by `MOVED`/`ASK`, goes through redis-rs's async cluster
//! connection, which follows redirections and refreshes its slot map after a failover;
//! requests that meet a failover are retried by it within `response_timeout`, which bounds
//! every call — except Redisson-format
//! acquisitions, which go on a second connection that never sends a command twice (see
//! [`Cluster`]). Renewals are sent concurrently,
//! one call each (a pipeline must stay in one slot), so a master that is down does not hold
//! up the leases on the others.
//!
//! Wake-up uses sharded pub/sub. The release script announces a release with SPUBLISH
//! (the verb is passed to it: see `protocol`), and this module's subscriber SSUBSCRIBEs each lock channel
//! on the node serving the channel's slot (the lock's own master: the channel shares the
//! lock's hash tag). The message then goes straight from the master that ran the release to
//! the subscriber, without the hop over the cluster bus that a plain PUBLISH takes to reach
//! a subscriber on another node: the bus has no `TCP_NODELAY` and such hops regularly take
//! tens of milliseconds (Nagle's algorithm against delayed ACKs), where a sharded message
//! takes a round trip. It also spares every other node a copy of every release.
//!
//! The subscriptions ride on redis-rs's cluster connection speaking RESP3 (a connection to
//! each master, pushes forwarded to this task), which follows `MOVED` and failovers and
//! re-subscribes after reconnecting. On top of that, as the single-server subscriber does:
//! a dropped node connection marks every channel unconfirmed and wakes every waiter
//! (releases may have been missed; each waiter subscribes again on its next round), and a
//! (re)subscription confirmation wakes that channel's waiters.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use distlock_config::{RedisUrl, ShardedSubscriptionMode};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;

use futures_util::future::BoxFuture;

use super::capabilities::{Announce, Facts};
use super::cluster_slots::Routed;
use super::conn::{addresses, Settings};
use super::link::Link;
use super::redisson_once::{self, InFlight};
use super::topology::{ScriptReplies, Topology};
use crate::check::probe::Probe;
use crate::check::report::ServerReport;
use crate::errors::backend::{bounded, DriverError};
use crate::protocol::exec::{load_all, Functions};
use crate::protocol::keys::{FenceScope, Format, LockKeys};
use crate::protocol::{Attempt, Call, HandedOff, Publish, Released};
use crate::rt::hub::{Hub, SubscribeRequest, SWEEP_EVERY};
use crate::terms::owner::{Hold, OwnerId};

/// A connection to a Redis Cluster speaking the lock protocol (its address: the
/// configured nodes, comma-separated); every operation but Redisson's acquisitions runs on
/// it (through `Deref`).
#[derive(Debug)]
pub(crate) struct Cluster {
    link: Link<Routed>,
    /// Redisson's format only: a second cluster connection that never sends a command twice
    /// (`retries(0)`), for the acquire scripts (`redisson_once.rs`). redis-rs's cluster
    /// client sends a command again after a dropped connection (and some time-outs);
    /// Redisson's acquire scripts cannot tell that run again from a re-entry, so it would
    /// count twice (a "re-entry" with token 0, and a lock still held after its release
    /// until the lease ends). On this connection such a failure is returned instead, and
    /// the acquire engine retries as a fresh acquisition, releasing what the first run may
    /// have taken. Distlock's own scripts mark every acquisition's level and are safe to
    /// run twice.
    once: Option<Link<ClusterConnection>>,
    /// The acquisitions under way on `once`, which their undo waits for.
    in_flight: Arc<InFlight>,
}

impl std::ops::Deref for Cluster {
    type Target = Link<Routed>;

    fn deref(&self) -> &Link<Routed> {
        &self.link
    }
}

/// Connect to a Redis Cluster through any of `nodes` (the client discovers the rest), and
/// start the wake-up subscriber. `redisson`: the backend speaks Redisson's format, with this
/// `shardedSubscriptionMode` (`None`: distlock's own format, always sharded).
pub(crate) async fn connect(
    backend: &Arc<str>,
    nodes: &[RedisUrl],
    redisson: Option<ShardedSubscriptionMode>,
    settings: &Settings,
) -> Result<(Cluster, Arc<Hub>), DriverError> {
    let address = addresses(nodes);
    let client = settings
        .cluster_commands(nodes)
        .build()
        .map_err(|e| DriverError::redis(&address, e))?;
    let conn = bounded(
        &address,
        "connect timed out",
        settings.connect_timeout * 2,
        client.get_async_connection(),
    )
    .await?;
    let publish = match redisson {
        None | Some(ShardedSubscriptionMode::On) => Publish::Sharded,
        Some(ShardedSubscriptionMode::Off) => Publish::Plain,
        // As Redisson's checkShardingSupport: sharded when the servers know it.
        Some(ShardedSubscriptionMode::Auto) => {
            let mut c = conn.clone();
            let mut ask = redis::cmd("PUBSUB");
            ask.arg("SHARDNUMSUB");
            let asked =
                tokio::time::timeout(settings.response_timeout, ask.query_async::<Value>(&mut c))
                    .await;
            match asked {
                Ok(Ok(_)) => Publish::Sharded,
                // An error reply (Redis 6: unknown subcommand): plain, as Redisson decides.
                Ok(Err(e)) if e.code().is_some() => {
                    tracing::info!(backend = %backend, error = %e,
                        "distlock: sharded_subscription_mode = \"auto\": the cluster does not answer PUBSUB SHARDNUMSUB; using PUBLISH/SUBSCRIBE as Redisson does");
                    Publish::Plain
                }
                Ok(Err(e)) => return Err(DriverError::redis(&address, e)),
                Err(_) => {
                    return Err(DriverError::TimedOut {
                        address,
                        what: "PUBSUB SHARDNUMSUB timed out",
                        after: settings.response_timeout,
                    })
                }
            }
        }
    };
    let functions = Arc::<Functions>::default();
    let once = match redisson {
        None => None,
        Some(_) => Some(
            redisson_once::connect(settings, nodes, &address, publish, functions.clone()).await?,
        ),
    };
    let template = match nodes.first() {
        Some(url) => Some(settings.info(url)?),
        None => None,
    };
    let conn = Routed::new(conn, settings, template).await;
    let cluster = Cluster {
        link: Link {
            conn,
            address,
            response_timeout: settings.response_timeout,
            publish,
            direct: None,
            functions,
        },
        once,
        in_flight: Arc::default(),
    };
    // A node down now only means its script cache is filled by EVAL later.
    let mut c = cluster.conn.fallback.clone();
    if let Err(e) = bounded(
        &cluster.address,
        "SCRIPT LOAD timed out",
        settings.response_timeout,
        load_all(&mut c, &cluster.functions),
    )
    .await
    {
        tracing::warn!(backend = %backend, error = %e, "distlock: SCRIPT LOAD failed on some cluster node; scripts will be sent with EVAL there");
    }
    let (hub, requests) = Hub::subscribed(settings.revocation.clone());
    spawn_subscriber(
        backend.clone(),
        &hub,
        requests,
        nodes,
        settings,
        &cluster.address,
        publish == Publish::Sharded,
    )
    .await?;
    Ok((cluster, hub))
}

impl Cluster {
    /// One acquire attempt: Redisson's format on the connection that never sends twice.
    pub(crate) async fn acquire(
        &self,
        keys: &LockKeys,
        hold: crate::terms::owner::Hold,
        lease: Duration,
        wait: Duration,
    ) -> Result<crate::protocol::Attempt, DriverError> {
        match (&keys.format, &self.once) {
            (Format::Redisson(_), Some(once)) => {
                let (once, owned) = (once.clone(), keys.clone());
                // Boxed: inline, it would double this arm of every acquisition's future.
                let attempt =
                    Box::pin(async move { once.acquire(&owned, hold, lease, wait).await });
                let run = self
                    .in_flight
                    .run(&keys.hash, hold.owner, &self.address, attempt);
                run.await
            }
            (Format::Redisson(_) | Format::Distlock, _) => {
                self.link.acquire(keys, hold, lease, wait).await
            }
        }
    }

    /// Release one level: an undo waits for its acquisition first (`redisson_once.rs`).
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        hold: Hold,
    ) -> Result<Released, DriverError> {
        if hold.undo {
            let bound = self.response_timeout;
            self.in_flight.ended(&keys.hash, hold.owner, bound).await;
        }
        self.link.release(keys, hold).await
    }

    /// A fair or write waiter leaves the queue, after its acquisition (`redisson_once.rs`).
    pub(crate) async fn cancel(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
    ) -> Result<bool, DriverError> {
        let bound = self.response_timeout;
        self.in_flight.ended(&keys.hash, owner, bound).await;
        self.link.cancel(keys, owner).await
    }

    /// One command on every master: each master's reply (or error) by its address.
    async fn on_masters(
        &self,
        cmd: redis::Cmd,
    ) -> Result<Vec<(String, RedisResult<Value>)>, DriverError> {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
        let mut conn = self.conn.fallback.clone();
        let reply = bounded(
            &self.address,
            "self-check timed out",
            self.response_timeout,
            conn.route_command(
                cmd,
                RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
            ),
        )
        .await?;
        let Value::Map(pairs) = reply else {
            return Err(DriverError::redis(
                &self.address,
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "a command sent to every master did not answer a map by node",
                )),
            ));
        };
        Ok(pairs
            .into_iter()
            .map(|(addr, v)| {
                let addr = match addr {
                    Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => format!("{other:?}"),
                };
                let v = match v {
                    Value::ServerError(e) => Err(e.into()),
                    v => Ok(v),
                };
                (addr, v)
            })
            .collect())
    }

    /// The self-check of every master (`check/probe.rs`): the probe script, `INFO
    /// server`, `INFO memory` and `CLUSTER INFO`, each sent to all masters at once. A
    /// refused `INFO` or `CLUSTER INFO` (least privilege) leaves that part unknown.
    pub(crate) async fn probe(&self, probe: &Probe) -> Result<Vec<ServerReport>, DriverError> {
        let info = |section: &str| redis::cmd("INFO").arg(section).clone();
        let (script, server, memory, cluster) = tokio::join!(
            self.on_masters(probe.command()),
            self.on_masters(info("server")),
            self.on_masters(info("memory")),
            self.on_masters(redis::cmd("CLUSTER").arg("INFO").clone()),
        );
        let script = script?;
        let lookup = |replies: &Result<Vec<(String, RedisResult<Value>)>, DriverError>,
                      addr: &str| {
            match replies {
                Ok(list) => list
                    .iter()
                    .find(|(a, _)| a == addr)
                    .map(|(_, v)| v.clone())
                    .unwrap_or(Ok(Value::Nil)),
                Err(_) => Ok(Value::Nil),
            }
        };
        let mut out = Vec::with_capacity(script.len());
        for (addr, reply) in script {
            let answer = probe.answer(reply, lookup(&server, &addr), lookup(&memory, &addr));
            let mut report = probe.report(&addr, answer);
            report.cluster_state = match lookup(&cluster, &addr) {
                Ok(v) => redis::from_redis_value::<String>(v).ok().and_then(|text| {
                    crate::check::version::info_field(&text, "cluster_state").map(str::to_owned)
                }),
                Err(_) => None,
            };
            out.push(report);
        }
        out.sort_by(|a, b| a.address.cmp(&b.address));
        Ok(out)
    }

    /// The names of the keys matching `pattern` on every master (`CLUSTER NODES`, then
    /// SCAN on each), at most `limit`.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<String>, DriverError> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let mut conn = self.conn.fallback.clone();
        let nodes = bounded(
            &self.address,
            "CLUSTER NODES timed out",
            self.response_timeout,
            conn.route_command(
                redis::cmd("CLUSTER").arg("NODES").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            ),
        )
        .await?;
        let text: String = redis::from_redis_value(nodes)
            .map_err(|e| DriverError::redis(&self.address, e.into()))?;
        let mut out = Vec::new();
        for (host, port) in masters(&text) {
            let address = format!("{host}:{port}");
            let mut cursor: u64 = 0;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port,
                });
                let reply = bounded(
                    &address,
                    "SCAN timed out",
                    self.response_timeout,
                    conn.route_command(cmd, routing),
                )
                .await?;
                let (next, keys): (u64, Vec<String>) = redis::from_redis_value(reply)
                    .map_err(|e| DriverError::redis(&address, e.into()))?;
                out.extend(keys);
                cursor = next;
                if out.len() >= limit {
                    out.truncate(limit);
                    return Ok(out);
                }
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Renew many leases, each on its own (sent concurrently; the multiplexed node
    /// connections pipeline them on the wire).
    pub(crate) async fn renew_each(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Vec<Result<bool, DriverError>> {
        futures_util::future::join_all(items.iter().map(|(keys, owner)| async move {
            let call = crate::protocol::renew(keys, *owner, lease);
            let v = self.run(&call, "renewal timed out").await?;
            call.done(&v).map_err(|r| self.unexpected(r))
        }))
        .await
    }
}

/// Connect the subscriber's own cluster connection (RESP3, pushes to this module) and start
/// serving `hub`'s subscription requests. It ends when the hub is dropped.
/// The masters (`host`, `port`) a `CLUSTER NODES` reply lists as live.
fn masters(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let _id = fields.next()?;
            let addr = fields.next()?;
            let flags = fields.next()?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            let addr = addr.split('@').next()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

async fn spawn_subscriber(
    backend: Arc<str>,
    hub: &Arc<Hub>,
    requests: mpsc::UnboundedReceiver<SubscribeRequest>,
    nodes: &[RedisUrl],
    settings: &Settings,
    address: &str,
    sharded: bool,
) -> Result<(), DriverError> {
    let (push_tx, pushes) = mpsc::unbounded_channel::<PushInfo>();
    let client = settings
        .cluster(nodes)
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(push_tx)
        .build()
        .map_err(|e| DriverError::redis(address, e))?;
    let mut conn = bounded(
        address,
        "connect timed out",
        settings.connect_timeout * 2,
        client.get_async_connection(),
    )
    .await?;
    // The revocation channel is a plain one (a forced release of a lock in any slot
    // PUBLISHes on it; the cluster bus carries it to every node): subscribed once, on any
    // node; redis-rs subscribes again after a reconnection.
    if let Some(name) = hub.revocation() {
        let subscribed =
            tokio::time::timeout(settings.response_timeout, conn.subscribe(name)).await;
        if !matches!(subscribed, Ok(Ok(()))) {
            tracing::warn!(backend = %backend, channel = name,
                "distlock: cannot subscribe the revocation channel; a forced release is heard at the next renewal");
        }
    }
    let run_ids = run_ids(&mut conn, settings.response_timeout).await.ok();
    tokio::spawn(run(
        backend,
        Arc::downgrade(hub),
        requests,
        pushes,
        conn,
        settings.response_timeout,
        sharded,
        run_ids,
    ));
    Ok(())
}

/// What an error of [`run_ids`] starts with when the server refused `INFO` (an ACL user
/// without it): asking again will not help.
const REFUSED: &str = "refused: ";

/// The run id of every master, by address (`INFO server` on all of them).
async fn run_ids(
    conn: &mut ClusterConnection,
    limit: Duration,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
    let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    let asked = conn.route_command(redis::cmd("INFO").arg("server").clone(), routing);
    let reply = match tokio::time::timeout(limit, asked).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) if e.code() == Some("NOPERM") => return Err(format!("{REFUSED}{e}")),
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("no answer within {limit:?}")),
    };
    let Value::Map(pairs) = reply else {
        return Err("INFO on every master did not answer a map by node".into());
    };
    let mut out = std::collections::BTreeMap::new();
    for (addr, v) in pairs {
        let (Value::BulkString(a), Ok(text)) = (addr, redis::from_redis_value::<String>(v)) else {
            return Err("a master did not answer INFO".into());
        };
        let id = crate::check::version::info_field(&text, "run_id").unwrap_or_default();
        out.insert(String::from_utf8_lossy(&a).into_owned(), id.to_owned());
    }
    Ok(out)
}

/// Whether the masters changed between two [`run_ids`] answers: a master with a new run
/// id (restarted), or at a new address (a replica took over). Not known before: changed.
fn masters_changed(
    before: Option<&std::collections::BTreeMap<String, String>>,
    now: &std::collections::BTreeMap<String, String>,
) -> bool {
    let Some(before) = before else { return true };
    now.iter()
        .any(|(addr, id)| before.get(addr).is_none_or(|b| b != id))
}

/// The channel a push is about (its first element), when it names one.
fn channel_of(push: &PushInfo) -> Option<&str> {
    match push.data.first() {
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    backend: Arc<str>,
    hub: Weak<Hub>,
    mut requests: mpsc::UnboundedReceiver<SubscribeRequest>,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    mut conn: ClusterConnection,
    response_timeout: Duration,
    sharded: bool,
    mut known: Option<std::collections::BTreeMap<String, String>>,
) {
    // After a node connection dropped: when to ask every master's run id, and the pauses
    // between tries (a restarted or failed-over master lost the locks held there; the
    // masters answer once the cluster is whole again). At most `RECHECK_TRIES` tries.
    const RECHECK_TRIES: u32 = 60;
    let mut recheck: Option<(tokio::time::Instant, u32)> = None;
    let mut backoff = crate::rt::backoff::Backoff::reconnect();
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    sweep.tick().await;
    // Channels this task unsubscribed: their SUNSUBSCRIBE confirmations are expected.
    let mut leaving: HashSet<String> = HashSet::new();
    loop {
        tokio::select! {
            biased;
            push = pushes.recv() => {
                let Some(push) = push else { return };
                let Some(h) = hub.upgrade() else { return };
                if push.kind == PushKind::Message && channel_of(&push) == h.revocation() {
                    if let Some(Value::BulkString(payload)) = push.data.get(1) {
                        h.deliver_message(channel_of(&push).unwrap_or_default(), payload);
                    }
                    continue;
                }
                // Plain pub/sub (a Redisson backend with shardedSubscriptionMode off):
                // the same handling under the plain kinds.
                let kind = match (sharded, push.kind.clone()) {
                    (false, PushKind::Message) => PushKind::SMessage,
                    (false, PushKind::Subscribe) => PushKind::SSubscribe,
                    (false, PushKind::Unsubscribe) => PushKind::SUnsubscribe,
                    (false, PushKind::SMessage | PushKind::SSubscribe | PushKind::SUnsubscribe) => continue,
                    (_, k) => k,
                };
                match kind {
                    // A release for the waiters, and on the channel of a lock held here (in
                    // Redisson's format) a revocation to check: Redisson's own forceUnlock
                    // publishes there, as a single server's subscriber hears it too.
                    PushKind::SMessage => {
                        if let Some(name) = channel_of(&push) {
                            match push.data.get(1) {
                                Some(Value::BulkString(payload)) => h.deliver_message(name, payload),
                                _ => h.deliver_message(name, &[]),
                            }
                        }
                    }
                    // (Re)subscribed, e.g. by redis-rs after a reconnection or a failover:
                    // a release may have been missed meanwhile.
                    PushKind::SSubscribe => {
                        if let Some(name) = channel_of(&push) {
                            h.deliver(name);
                        }
                    }
                    // Unsubscribed by the server (its slot moved): subscribe again on the
                    // waiters' next round.
                    PushKind::SUnsubscribe => {
                        if let Some(name) = channel_of(&push) {
                            if !leaving.remove(name) {
                                tracing::debug!(backend = %backend, channel = name, "distlock: the server dropped a sharded subscription");
                                h.unconfirm(name);
                                h.deliver(name);
                            }
                        }
                    }
                    PushKind::Disconnection => {
                        tracing::warn!(backend = %backend, "distlock: a cluster node connection of the subscriber dropped; waking every waiter");
                        h.unconfirm_all();
                        h.wake_all();
                        backoff.reset();
                        recheck = Some((tokio::time::Instant::now() + backoff.pause(), 0));
                    }
                    _ => {}
                }
            }
            r = requests.recv() => {
                let Some(r) = r else { return };
                if !r.channel.is_confirmed() {
                    let subscribed = if sharded {
                        tokio::time::timeout(response_timeout, conn.ssubscribe(&r.channel.name)).await
                    } else {
                        tokio::time::timeout(response_timeout, conn.subscribe(&r.channel.name)).await
                    };
                    match subscribed {
                        Ok(Ok(())) => r.channel.confirm(),
                        Ok(Err(e)) => tracing::warn!(backend = %backend, channel = %r.channel.name, error = %e,
                            "distlock: SSUBSCRIBE failed; the waiter polls until it is subscribed"),
                        Err(_) => tracing::warn!(backend = %backend, channel = %r.channel.name,
                            "distlock: SSUBSCRIBE timed out; the waiter polls until it is subscribed"),
                    }
                }
                let _ = r.done.send(());
            }
            _ = tokio::time::sleep_until(recheck.map_or_else(tokio::time::Instant::now, |r| r.0)), if recheck.is_some() => {
                let tries = recheck.map_or(0, |r| r.1) + 1;
                match run_ids(&mut conn, response_timeout).await {
                    Ok(now) => {
                        recheck = None;
                        if masters_changed(known.as_ref(), &now) {
                            tracing::warn!(backend = %backend, "distlock: a cluster master restarted or was replaced; checking every lease");
                        }
                        // Checked after every disconnection, the masters changed or not: a
                        // revocation published while the subscription was down was missed.
                        if let Some(h) = hub.upgrade() {
                            h.revoked(crate::rt::hub::Revoked::All);
                        }
                        known = Some(now);
                    }
                    // Not known, and it will not be: check every lease once.
                    Err(e) if e.starts_with(REFUSED) => {
                        tracing::debug!(backend = %backend, error = %e, "distlock: INFO refused; checking every lease after the reconnect");
                        recheck = None;
                        if let Some(h) = hub.upgrade() {
                            h.revoked(crate::rt::hub::Revoked::All);
                        }
                    }
                    Err(e) if tries < RECHECK_TRIES => {
                        tracing::debug!(backend = %backend, error = %e, "distlock: the masters' run ids are not known yet");
                        recheck = Some((tokio::time::Instant::now() + backoff.pause(), tries));
                    }
                    Err(e) => {
                        tracing::warn!(backend = %backend, error = %e, "distlock: cannot ask the masters' run ids; the renewals find lost leases");
                        recheck = None;
                    }
                }
            }
            _ = sweep.tick() => {
                // Confirmations not seen by now are not coming (or not forwarded).
                leaving.clear();
                let Some(h) = hub.upgrade() else { return };
                let idle = h.sweep();
                drop(h);
                for name in idle {
                    // One channel per command: a sharded unsubscribe must stay in one slot.
                    leaving.insert(name.clone());
                    let unsubscribed = if sharded {
                        tokio::time::timeout(response_timeout, conn.sunsubscribe(&name)).await
                    } else {
                        tokio::time::timeout(response_timeout, conn.unsubscribe(&name)).await
                    };
                    if !matches!(unsubscribed, Ok(Ok(()))) {
                        leaving.remove(&name);
                    }
                }
            }
        }
    }
}

impl Topology for Cluster {
    fn facts(&self) -> Facts {
        Facts {
            fence_scope: FenceScope::Slot,
            hand_off: true,
            quorum: None,
            announce: Announce::Publish(Publish::Sharded),
            cluster: true,
            reply_addresses: None,
        }
    }

    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        lease: Duration,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Attempt, DriverError>> {
        Box::pin(Cluster::acquire(self, keys, hold, lease, wait))
    }

    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
    ) -> BoxFuture<'a, Result<Released, DriverError>> {
        Box::pin(Cluster::release(self, keys, hold))
    }

    fn hand_off<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        to: Hold,
        lease: Duration,
        holder: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<HandedOff>, DriverError>> {
        Box::pin(self.link.handoff(keys, hold, to, lease, holder))
    }

    fn cancel<'a>(
        &'a self,
        keys: &'a LockKeys,
        owner: OwnerId,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(Cluster::cancel(self, keys, owner))
    }

    fn renew_each<'a>(
        &'a self,
        items: &'a [(&'a LockKeys, OwnerId)],
        lease: Duration,
    ) -> BoxFuture<'a, Vec<Result<bool, DriverError>>> {
        Box::pin(Cluster::renew_each(self, items, lease))
    }

    fn force_release<'a>(
        &'a self,
        keys: &'a LockKeys,
        revocation: &'a str,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(self.link.force_release(keys, revocation))
    }

    fn next_sequence<'a>(
        &'a self,
        key: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<u64, DriverError>> {
        Box::pin(self.link.next_sequence(key, ttl))
    }

    fn scan<'a>(
        &'a self,
        pattern: &'a str,
        limit: usize,
    ) -> Option<BoxFuture<'a, Result<Vec<String>, DriverError>>> {
        Some(Box::pin(Cluster::scan(self, pattern, limit)))
    }

    fn probe<'a>(
        &'a self,
        probe: &'a Probe,
    ) -> Option<BoxFuture<'a, Vec<Result<ServerReport, DriverError>>>> {
        Some(Box::pin(async move {
            match Cluster::probe(self, probe).await {
                Ok(v) => v.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            }
        }))
    }

    fn run_script<'a>(&'a self, call: &'a Call) -> Option<BoxFuture<'a, ScriptReplies>> {
        Some(Box::pin(async move {
            (vec![self.link.run(call, "script timed out").await], 1)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::{masters, masters_changed};

    #[test]
    fn a_master_restarted_or_replaced_is_a_change() {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let before = map(&[("a:1", "x"), ("b:2", "y")]);
        assert!(!masters_changed(Some(&before), &before));
        assert!(masters_changed(
            Some(&before),
            &map(&[("a:1", "x"), ("b:2", "z")])
        ));
        assert!(masters_changed(
            Some(&before),
            &map(&[("a:1", "x"), ("c:3", "w")])
        ));
        assert!(
            !masters_changed(Some(&before), &map(&[("a:1", "x")])),
            "one fewer: nothing lost here"
        );
        assert!(masters_changed(None, &before), "not known before");
    }

    #[test]
    fn live_masters_from_cluster_nodes() {
        let nodes = "\
07c3 127.0.0.1:17001@27001 myself,master - 0 0 1 connected 0-5460
67ed 127.0.0.1:17004@27004 slave 07c3 0 1 4 connected
292f 127.0.0.1:17002@27002 master - 0 1 2 connected 5461-10922
e7d1 127.0.0.1:17003@27003 master,fail - 0 1 3 disconnected
";
        assert_eq!(
            masters(nodes),
            vec![
                ("127.0.0.1".to_string(), 17001),
                ("127.0.0.1".to_string(), 17002)
            ]
        );
    }
}
