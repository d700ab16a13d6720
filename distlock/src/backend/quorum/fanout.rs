//! Wake-up on a quorum backend: every node has its own subscriber connection (reconnecting
//! in the background while the node is down) feeding a hub of its own, which relays to the
//! backend's one hub; a release published on *any* node wakes the waiters of that lock.
//!
//! A fan-out task passes each subscribe request of the backend's hub on to every node's
//! subscriber. A waiter's channel counts as subscribed once N − Q + 1 nodes confirmed it
//! (Q being the quorum): any holder holds it on Q nodes, and those two sets of nodes share
//! at least one, whose release message is therefore received. A subscriber that reconnects
//! wakes every waiter, since it may have missed a release.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::super::subscriber;
use super::node::{self, Node};
use crate::rt::hub::{Channel, Hub, SubscribeRequest, Watch, SWEEP_EVERY};

/// Start one subscriber per node (`clients`: `(node, client)`), each with a hub relaying
/// to `hub` and refreshing its node's command connection when it reconnects, and the fan-out task taking `hub`'s `requests`; a request is answered once
/// `needed` nodes confirmed it (waiting at most `patience`).
pub(super) fn spawn(
    backend: &Arc<str>,
    hub: &Arc<Hub>,
    requests: mpsc::UnboundedReceiver<SubscribeRequest>,
    clients: Vec<(Arc<Node>, redis::Client)>,
    needed: usize,
    patience: Duration,
) {
    let mut node_hubs = Vec::with_capacity(clients.len());
    for (node, client) in clients {
        let address = node.address.clone();
        let (node_hub, node_requests) = Hub::relaying_to(hub);
        subscriber::spawn(
            Arc::from(format!("{backend} (node {address})")),
            &node_hub,
            node_requests,
            subscriber::connector(&address, client),
            patience,
            None,
            Some(node::refresher(Arc::downgrade(&node))),
        );
        node_hubs.push(node_hub);
    }
    tokio::spawn(fan_out(
        Arc::downgrade(hub),
        node_hubs,
        requests,
        needed,
        patience,
    ));
}

/// A channel the fan-out keeps subscribed on the nodes.
struct Subscribed {
    /// The backend hub's channel it was asked for (a newer one replaces it after a sweep).
    channel: Weak<Channel>,
    /// One watch per node, keeping the channel subscribed on every node's connection
    /// (re-subscribed when that connection comes back).
    watches: Arc<Vec<Watch>>,
}

/// Takes the backend hub's subscribe requests and passes them on to every node's
/// subscriber; a request is answered once `needed` nodes confirmed it (waiting at most
/// `patience`). Ends when the backend's hub is gone.
async fn fan_out(
    hub: Weak<Hub>,
    node_hubs: Vec<Arc<Hub>>,
    mut requests: mpsc::UnboundedReceiver<SubscribeRequest>,
    needed: usize,
    patience: Duration,
) {
    let mut subscribed: HashMap<String, Subscribed> = HashMap::new();
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    sweep.tick().await;
    loop {
        tokio::select! {
            r = requests.recv() => {
                let Some(SubscribeRequest { channel, done }) = r else { return };
                let entry = subscribed
                    .entry(channel.name.clone())
                    .or_insert_with(|| Subscribed {
                        channel: Arc::downgrade(&channel),
                        watches: Arc::new(node_hubs.iter().map(|h| h.watch(&channel.name)).collect()),
                    });
                if entry.channel.strong_count() == 0 {
                    entry.channel = Arc::downgrade(&channel);
                }
                tokio::spawn(confirm(channel, done, entry.watches.clone(), needed, patience));
            }
            _ = sweep.tick() => {
                let Some(h) = hub.upgrade() else { return };
                for name in h.sweep() {
                    subscribed.remove(&name);
                }
                drop(h);
                subscribed.retain(|_, s| s.channel.strong_count() > 0);
            }
        }
    }
}

/// Subscribe `channel` on every node; confirm it and answer once `needed` nodes have.
async fn confirm(
    channel: Arc<Channel>,
    done: oneshot::Sender<()>,
    watches: Arc<Vec<Watch>>,
    needed: usize,
    patience: Duration,
) {
    let until = Instant::now() + patience;
    let mut live = 0;
    let mut pending: FuturesUnordered<_> = watches.iter().map(|w| w.subscribe(until)).collect();
    while let Some(ok) = pending.next().await {
        live += usize::from(ok);
        if live >= needed {
            channel.confirm();
            let _ = done.send(());
            return;
        }
    }
    // Too few nodes within `patience`: the waiter polls, and asks again on each of its
    // rounds (backing off). The nodes' subscribers keep trying meanwhile.
    tracing::debug!(channel = %channel.name, live, needed, "distlock: too few nodes confirmed a subscription");
}
