//! Wake-up on a Redis Cluster: sharded pub/sub.
//!
//! On a cluster the release script announces a release with SPUBLISH (see
//! [`crate::scripts::RELEASE`]), and this module's subscriber SSUBSCRIBEs each lock channel
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

use distlock_config::RedisUrl;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc;

use super::redis::{tcp_settings, timed_out};
use crate::hub::{Hub, SubscribeRequest};

/// Channels nobody waits on are unsubscribed this often.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Connect the subscriber's own cluster connection (RESP3, pushes to this module) and start
/// serving `hub`'s subscription requests. It ends when the hub is dropped.
pub(crate) async fn spawn_subscriber(
    backend: Arc<str>,
    hub: &Arc<Hub>,
    requests: mpsc::UnboundedReceiver<SubscribeRequest>,
    nodes: &[RedisUrl],
    connect_timeout: Duration,
    response_timeout: Duration,
) -> RedisResult<()> {
    let (push_tx, pushes) = mpsc::unbounded_channel::<PushInfo>();
    let client = ClusterClientBuilder::new(nodes.iter().map(|u| u.url.as_str()))
        .tcp_settings(tcp_settings())
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(push_tx)
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        .min_retry_wait(10)
        .max_retry_wait(100)
        .build()?;
    let conn = tokio::time::timeout(connect_timeout * 2, client.get_async_connection())
        .await
        .map_err(|_| timed_out("connect timed out", connect_timeout * 2))??;
    tokio::spawn(run(
        backend,
        Arc::downgrade(hub),
        requests,
        pushes,
        conn,
        response_timeout,
    ));
    Ok(())
}

/// The channel a push is about (its first element), when it names one.
fn channel_of(push: &PushInfo) -> Option<&str> {
    match push.data.first() {
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

async fn run(
    backend: Arc<str>,
    hub: Weak<Hub>,
    mut requests: mpsc::UnboundedReceiver<SubscribeRequest>,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    mut conn: ClusterConnection,
    response_timeout: Duration,
) {
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
                match push.kind {
                    PushKind::SMessage => {
                        if let Some(name) = channel_of(&push) {
                            h.deliver(name);
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
                    }
                    _ => {}
                }
            }
            r = requests.recv() => {
                let Some(r) = r else { return };
                if !r.channel.is_confirmed() {
                    match tokio::time::timeout(response_timeout, conn.ssubscribe(&r.channel.name)).await {
                        Ok(Ok(())) => r.channel.confirm(),
                        Ok(Err(e)) => tracing::warn!(backend = %backend, channel = %r.channel.name, error = %e,
                            "distlock: SSUBSCRIBE failed; the waiter falls back to the lease's end"),
                        Err(_) => tracing::warn!(backend = %backend, channel = %r.channel.name,
                            "distlock: SSUBSCRIBE timed out; the waiter falls back to the lease's end"),
                    }
                }
                let _ = r.done.send(());
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
                    let unsubscribed =
                        tokio::time::timeout(response_timeout, conn.sunsubscribe(&name)).await;
                    if !matches!(unsubscribed, Ok(Ok(()))) {
                        leaving.remove(&name);
                    }
                }
            }
        }
    }
}
