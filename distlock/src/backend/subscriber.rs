//! The one subscriber connection of a Redis backend: subscribes the channels waiters wait
//! on, turns release messages into wake-ups, and reconnects (re-subscribing and waking
//! every waiter once, since releases may have been missed) when the connection drops,
//! after a pause that doubles on every reconnect until a connection stays up for
//! [`STABLE_AFTER`]. While it is down, waiters poll (an attempt after a pause of 10 ms
//! doubling to 1 s, within the lease they wait on and their wait) until the reconnect's
//! wake-up.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::errors::backend::DriverError;
use crate::rt::backoff::Backoff;
use crate::rt::hub::{Hub, SubscribeRequest, SWEEP_EVERY};

/// The subscriber PINGs its server this often; with `connect_timeout` for the answer, a
/// dead connection is found within `PING_EVERY + connect_timeout` (7 s by default), and
/// the waiters are woken to try again. Every other request of the subscriber (SUBSCRIBE,
/// UNSUBSCRIBE) gets `connect_timeout` for its answer too: a connection that dies while
/// one is under way is given up as fast (docs/design.md, "Half-open subscriber connections").
const PING_EVERY: Duration = Duration::from_secs(5);

/// A connection that stayed up this long was a healthy one: the reconnect after it starts
/// from the first (shortest) pause again. Every other reconnect, however the connection
/// ended (an error, a failed PING, or a clean close by the server: `CLIENT KILL TYPE
/// pubsub`, an output-buffer limit, a proxy's idle FIN), waits the next, doubled pause
/// ([`Backoff::reconnect`]: 20 ms doubling to 1 s), so a server that keeps closing the
/// connection sees a few reconnects a second, not hundreds.
pub(crate) const STABLE_AFTER: Duration = Duration::from_secs(5);

/// Something that opens a pub/sub connection (a fixed server, or one found through sentinels).
pub(crate) type Connector = Arc<
    dyn Fn() -> futures_util::future::BoxFuture<'static, Result<redis::aio::PubSub, DriverError>>
        + Send
        + Sync,
>;

/// Run every time the subscriber connected (the first time too): it knows the server is
/// back, so the command connection is made to reconnect now, before the waiters are woken
/// and before the next request, instead of failing that request first. Answers whether
/// the server is known to have changed since the last connection ([`RunId`]), for the
/// log: the leases held there are checked at once (`Revoked::All`) on every connection
/// anyway.
pub(crate) type Reconnected =
    Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, bool> + Send + Sync>;

/// The run id (`INFO server`'s `run_id`) a server had at the last connection: a new one
/// means the server restarted (without persistence it lost every lock) or another server
/// answers now (a failover). It is first recorded when the command connection is first
/// made (at init, or when a node that was down at start-up is first reached), so the
/// subscriber compares its first connection too: on a busy machine that may come only
/// after a lock was taken and the server restarted.
#[derive(Debug, Default)]
pub(crate) struct RunId(std::sync::Mutex<(bool, Option<String>)>);

impl RunId {
    /// Recorded as `id` (`None`: not known, e.g. `INFO` refused).
    pub(crate) fn recorded(id: Option<String>) -> RunId {
        RunId(std::sync::Mutex::new((true, id)))
    }

    /// The run id of `server` now, recorded.
    pub(crate) async fn of(server: &super::server::Server) -> RunId {
        RunId::recorded(server.run_id().await.ok().flatten())
    }

    /// Record `now` (`None`: not known); whether the server is known to have changed since
    /// the last record (two run ids known, and different). It decides a log line only:
    /// every connection checks the leases anyway, so a run id not known (`INFO` refused, as
    /// under the least-privilege ACL) is not reported as a change on every connection.
    pub(crate) fn changed(&self, now: Option<String>) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (called, before) = &mut *seen;
        let changed = match (&*before, &now) {
            _ if !*called => false,
            (Some(a), Some(b)) => a != b,
            _ => false,
        };
        *called = true;
        *before = now;
        changed
    }
}

/// A [`Reconnected`] hook for the command connection of `server`: PING it until it answers
/// (the first PING may get the error of a reconnect attempt made while the server was
/// down; that error starts a new attempt), at most three times; then compare its run id
/// with `seen` (recorded when `server` connected).
pub(crate) fn refresh(server: super::server::Server, seen: RunId) -> Reconnected {
    let seen = Arc::new(seen);
    Arc::new(move || {
        let (server, seen) = (server.clone(), seen.clone());
        Box::pin(async move {
            let _ = refresh_now(&server).await;
            seen.changed(server.run_id().await.ok().flatten())
        })
    })
}

/// PING `server` until it answers, at most three times; the last outcome.
pub(crate) async fn refresh_now(server: &super::server::Server) -> Result<(), DriverError> {
    let mut last = server.ping().await;
    for _ in 1..3 {
        if last.is_ok() {
            break;
        }
        last = server.ping().await;
    }
    last
}

/// A connector to the fixed server of `client` (at `address`).
pub(crate) fn connector(address: &str, client: redis::Client) -> Connector {
    let address: Arc<str> = Arc::from(address);
    Arc::new(move || {
        let (client, address) = (client.clone(), address.clone());
        Box::pin(async move {
            client
                .get_async_pubsub()
                .await
                .map_err(|e| DriverError::redis(&address, e))
        })
    })
}

/// Spawn the subscriber of one backend (or one node). It ends when the hub is dropped.
/// With `reset`, every change of it drops the connection and connects again (through
/// `connect`, which may now reach another server: a sentinel failover), waking every waiter.
/// After every connection (the first one too), `reconnected` runs (bounded by
/// `connect_timeout`; a server it finds replaced is logged) before the waiters are woken,
/// and the hub is told to check every lease held there (`Revoked::All`): the server may
/// have changed, and revocations published while no subscription listened were missed.
/// Every connection also subscribes the hub's revocation channel (a refusal, e.g. an ACL
/// user without the channel right, is logged and leaves revocations to the renewals).
pub(crate) fn spawn(
    backend: Arc<str>,
    hub: &Arc<Hub>,
    requests: mpsc::UnboundedReceiver<SubscribeRequest>,
    connect: Connector,
    connect_timeout: Duration,
    reset: Option<watch::Receiver<u64>>,
    reconnected: Option<Reconnected>,
) {
    let hub = Arc::downgrade(hub);
    tokio::spawn(run(
        backend,
        hub,
        requests,
        connect,
        connect_timeout,
        reset,
        reconnected,
    ));
}

/// A request of the subscriber, given `limit` for its answer: a connection that went silent
/// (half-open: no FIN, no RST) would keep it waiting forever.
async fn answered(
    limit: Duration,
    request: impl std::future::Future<Output = redis::RedisResult<()>>,
) -> Result<(), String> {
    match tokio::time::timeout(limit, request).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {limit:?}")),
    }
}

/// Resolves when `reset` changes; never without one (or once its sender is gone).
async fn reset_signal(reset: &mut Option<watch::Receiver<u64>>) {
    match reset {
        Some(r) => {
            if r.changed().await.is_err() {
                *reset = None;
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

async fn run(
    backend: Arc<str>,
    hub: Weak<Hub>,
    mut requests: mpsc::UnboundedReceiver<SubscribeRequest>,
    connect: Connector,
    connect_timeout: Duration,
    mut reset: Option<watch::Receiver<u64>>,
    reconnected: Option<Reconnected>,
) {
    let mut backoff = Backoff::reconnect();
    let mut pending: Vec<SubscribeRequest> = Vec::new();
    // After a failure, the pause before the next connection (every reconnect backs off:
    // a server that refuses our subscriptions, e.g. an ACL user without channel rights,
    // must not be hammered).
    let mut delay: Option<Duration> = None;
    loop {
        if let Some(d) = delay.take() {
            // Keep taking requests meanwhile, so they are answered once connected.
            let sleep = tokio::time::sleep(d);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = &mut sleep => break,
                    _ = reset_signal(&mut reset) => break,
                    r = requests.recv() => match r {
                        Some(r) => {
                            // A request nobody waits for any more is dropped: its channel,
                            // if still waited on, is in the hub and subscribed on connecting
                            // anyway (a waiter that polls asks again every round).
                            pending.retain(|r| !r.done.is_closed());
                            pending.push(r);
                        }
                        None => return,
                    },
                }
            }
        }
        // Changes from here on are after the connector looked: they call for a reconnect.
        if let Some(r) = reset.as_mut() {
            r.borrow_and_update();
        }
        let pubsub = match tokio::time::timeout(connect_timeout, connect()).await {
            Ok(Ok(p)) => p,
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no connection within {connect_timeout:?}"),
                };
                tracing::warn!(backend = %backend, error = %why, "distlock: subscriber cannot connect; waiters poll meanwhile");
                delay = Some(backoff.pause());
                continue;
            }
        };
        let (mut sink, mut stream) = pubsub.split();

        // Re-subscribe what is waited on, then wake everybody: a release may have been missed.
        let Some(h) = hub.upgrade() else { return };
        let channels = h.unconfirm_all();
        drop(h);
        if !channels.is_empty() {
            let names: Vec<&str> = channels.iter().map(|c| c.name.as_str()).collect();
            if let Err(e) = answered(connect_timeout, sink.subscribe(&names)).await {
                tracing::warn!(backend = %backend, error = %e, "distlock: re-subscribing failed");
                delay = Some(backoff.pause());
                continue;
            }
            for c in &channels {
                c.confirm();
            }
        }
        let revocation = hub
            .upgrade()
            .and_then(|h| h.revocation().map(str::to_owned));
        if let Some(name) = &revocation {
            if let Err(e) = answered(connect_timeout, sink.subscribe(name)).await {
                tracing::warn!(backend = %backend, channel = %name, error = %e,
                    "distlock: cannot subscribe the revocation channel; a forced release is heard at the next renewal");
            }
        }
        let changed = match &reconnected {
            // Not answered in time: not known either.
            Some(hook) => tokio::time::timeout(connect_timeout, hook())
                .await
                .unwrap_or(false),
            None => false,
        };
        if let Some(h) = hub.upgrade() {
            if changed {
                tracing::warn!(backend = %backend, "distlock: the server restarted or another one took over; checking every lease held there");
            }
            // Every connection, the first one too, checks the leases held there (none at
            // init: nothing is sent): a revocation published while no subscription
            // listened (before this connection, or while reconnecting) is heard now, not
            // at the next renewal.
            h.revoked(crate::rt::hub::Revoked::All);
            h.connected();
            h.wake_all();
        }
        tracing::debug!(backend = %backend, channels = channels.len(), "distlock: subscriber connected");

        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        sweep.tick().await;
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        let mut todo = std::mem::take(&mut pending);
        let connected_at = tokio::time::Instant::now();
        // Whether the server moved (a sentinel switch): connect to the new one at once.
        let mut moved = false;
        'connected: loop {
            while let Some(r) = todo.pop() {
                if !r.channel.is_confirmed() {
                    if let Err(e) = answered(connect_timeout, sink.subscribe(&r.channel.name)).await
                    {
                        tracing::warn!(backend = %backend, error = %e, "distlock: subscribe failed");
                        pending.push(r);
                        break 'connected;
                    }
                    r.channel.confirm();
                }
                let _ = r.done.send(());
            }
            tokio::select! {
                biased;
                msg = stream.next() => match msg {
                    Some(m) => match hub.upgrade() {
                        Some(h) => h.deliver_message(m.get_channel_name(), m.get_payload_bytes()),
                        None => return,
                    },
                    None => break 'connected,
                },
                r = requests.recv() => match r {
                    Some(r) => todo.push(r),
                    None => return,
                },
                _ = reset_signal(&mut reset) => {
                    tracing::info!(backend = %backend, "distlock: the server moved; subscribing on the new one");
                    moved = true;
                    break 'connected;
                }
                _ = sweep.tick() => {
                    let Some(h) = hub.upgrade() else { return };
                    let idle = h.sweep();
                    drop(h);
                    if !idle.is_empty() {
                        if let Err(e) = answered(connect_timeout, sink.unsubscribe(&idle)).await {
                            tracing::warn!(backend = %backend, error = %e, "distlock: unsubscribe failed");
                            break 'connected;
                        }
                    }
                }
                // A connection that died without a FIN (a NAT or load balancer dropped it)
                // delivers nothing and reports nothing: a PING that gets no answer within
                // `connect_timeout` ends it.
                _ = ping.tick() => {
                    if !matches!(tokio::time::timeout(connect_timeout, sink.ping::<redis::Value>()).await, Ok(Ok(_))) {
                        tracing::warn!(backend = %backend, "distlock: the subscriber's connection does not answer PING");
                        break 'connected;
                    }
                }
            }
        }
        pending.append(&mut todo);
        if connected_at.elapsed() >= STABLE_AFTER {
            backoff.reset();
        }
        if !moved {
            let pause = backoff.pause();
            tracing::warn!(backend = %backend, ?pause, "distlock: subscriber connection lost; reconnecting");
            delay = Some(pause);
        }
        // Waiters go on waiting (for a message, or their lease's end) until the reconnect
        // wakes them all, once: a wake-up now would only send them to a server that is
        // not listening for them yet.
        if let Some(h) = hub.upgrade() {
            h.unconfirm_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RunId;

    #[test]
    fn a_new_run_id_is_a_change_and_an_unknown_one_is_not() {
        let seen = RunId::default();
        assert!(
            !seen.changed(Some("a".into())),
            "nothing recorded: only records"
        );
        assert!(!seen.changed(Some("a".into())));
        assert!(seen.changed(Some("b".into())), "restarted");
        assert!(!seen.changed(None), "not known: not reported");
        assert!(!seen.changed(Some("b".into())), "not known before");
        assert!(!seen.changed(Some("b".into())));
        assert!(seen.changed(Some("c".into())));
    }

    #[test]
    fn the_first_connection_is_compared_with_the_recorded_run_id() {
        let seen = RunId::recorded(Some("a".into()));
        assert!(seen.changed(Some("b".into())), "restarted before it");
        assert!(!seen.changed(Some("b".into())));
        let unknown = RunId::recorded(None);
        assert!(
            !unknown.changed(Some("a".into())),
            "not known at the connect: not reported"
        );
    }
}
