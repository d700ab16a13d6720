//! Wake-up of waiters: one entry per lock channel that somebody waits on, shared by all
//! waiters of that lock in this process.
//!
//! For Redis backends the channels are subscribed on one subscriber connection per backend
//! (see `subscriber.rs`); for the memory backend a release notifies directly.
//!
//! The hub also carries revocations to the backend (`crate::upkeep::revoke`): a message on
//! the backend-wide revocation channel (a forced release names the lock it deleted), a
//! message on the channel of a lock this process holds (a channel watched with
//! [`Hub::watch_held`]), or a subscriber that found its server changed (a restart, a
//! failover) are handed to the callback set with [`Hub::on_revoked`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

/// Every subscriber unsubscribes the channels nobody waits on this often.
pub(crate) const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// A channel that waiters wait on.
#[derive(Debug)]
pub(crate) struct Channel {
    pub name: String,
    notify: Notify,
    /// Live `Watch`es; changed from 0 only under the hub's map lock.
    users: AtomicUsize,
    /// Live `Watch`es of holders ([`Hub::watch_held`]): a message here is a revocation
    /// to check, too.
    held: AtomicUsize,
    /// Subscribed on the current subscriber connection (always true without one).
    confirmed: AtomicBool,
    /// A release wakes one waiter (a lock only one can take next), not all of them: each
    /// message then costs one attempt, not one per waiter. A woken waiter that stops
    /// waiting without taking its turn passes it on (`Notified` forwards a `notify_one`
    /// when dropped), and a message while nobody is asleep is kept for the next one.
    one: bool,
    /// Releases seen (and wake-ups of everyone) so far: a waiter that read it before a
    /// refused attempt, on a live channel, and finds it unchanged after enabling its
    /// wake-up, has missed nothing and can sleep without trying again.
    messages: AtomicU64,
}

/// A request to the subscriber task.
#[derive(Debug)]
pub(crate) struct SubscribeRequest {
    pub channel: Arc<Channel>,
    pub done: oneshot::Sender<()>,
}

/// The channels of one backend.
#[derive(Debug)]
pub(crate) struct Hub {
    channels: Mutex<HashMap<String, Arc<Channel>>>,
    /// `None`: no subscriber connection (memory backend), channels are always live.
    subscriber: Option<mpsc::UnboundedSender<SubscribeRequest>>,
    /// Deliveries and wake-ups are passed on to this hub as well. Each node of a quorum
    /// backend (redlock, multi) has a hub of its own, fed by that node's subscriber and
    /// relaying to the backend's hub, which the waiters watch.
    relay: Option<Weak<Hub>>,
    /// How many times a subscriber connection of this hub (or of a node hub relaying to
    /// it) was made, the command connection refreshed and the waiters woken.
    connections: std::sync::atomic::AtomicU64,
    /// The backend-wide revocation channel, which every subscriber of this hub subscribes
    /// on each connection (`None`: memory; revocations are handed over directly).
    revocation: Option<String>,
    /// Where revocations go (the backend's checker); a relaying hub passes them on.
    on_revoked: std::sync::OnceLock<OnRevoked>,
}

/// What a revocation asks the backend to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Revoked<'a> {
    /// The lock with this Redis key (its hash), or with this release channel, may be gone.
    Key(&'a str),
    /// The server may have lost every lock (it restarted, or another one took over).
    All,
    /// A lease with this Redis key was registered by an acquisition in flight when a
    /// revocation that may concern it was heard: it is to be checked, but this is no
    /// revocation of its own (the one heard is remembered already), so the acquisitions
    /// in flight now are not told of it again.
    Registered(&'a str),
}

/// The callback revocations are handed to.
#[derive(Clone)]
pub(crate) struct OnRevoked(pub(crate) Arc<dyn Fn(Revoked<'_>) + Send + Sync>);

impl std::fmt::Debug for OnRevoked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnRevoked")
    }
}

impl Hub {
    /// A hub whose releases are delivered in-process.
    pub(crate) fn local() -> Arc<Hub> {
        Arc::new(Hub {
            channels: Mutex::new(HashMap::new()),
            subscriber: None,
            relay: None,
            connections: std::sync::atomic::AtomicU64::new(0),
            revocation: None,
            on_revoked: std::sync::OnceLock::new(),
        })
    }

    /// A hub fed by a subscriber task, which receives the other end; its subscribers
    /// listen on `revocation` (the backend-wide revocation channel) too.
    pub(crate) fn subscribed(
        revocation: Option<String>,
    ) -> (Arc<Hub>, mpsc::UnboundedReceiver<SubscribeRequest>) {
        Hub::with_relay(None, revocation)
    }

    /// A hub fed by a subscriber task (as [`Hub::subscribed`]) that passes every delivery
    /// and wake-up on to `target` too: one node's hub of a quorum backend.
    pub(crate) fn relaying_to(
        target: &Arc<Hub>,
    ) -> (Arc<Hub>, mpsc::UnboundedReceiver<SubscribeRequest>) {
        Hub::with_relay(Some(Arc::downgrade(target)), target.revocation.clone())
    }

    fn with_relay(
        relay: Option<Weak<Hub>>,
        revocation: Option<String>,
    ) -> (Arc<Hub>, mpsc::UnboundedReceiver<SubscribeRequest>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let hub = Arc::new(Hub {
            channels: Mutex::new(HashMap::new()),
            subscriber: Some(tx),
            relay,
            connections: std::sync::atomic::AtomicU64::new(0),
            revocation,
            on_revoked: std::sync::OnceLock::new(),
        });
        (hub, rx)
    }

    /// The backend-wide revocation channel its subscribers listen on.
    pub(crate) fn revocation(&self) -> Option<&str> {
        self.revocation.as_deref()
    }

    /// Hand revocations to `f` from now on (once; later calls are ignored).
    pub(crate) fn on_revoked(&self, f: OnRevoked) {
        let _ = self.on_revoked.set(f);
    }

    /// A revocation to check: to the callback, or on to the hub this one relays to.
    pub(crate) fn revoked(&self, what: Revoked<'_>) {
        if let Some(f) = self.on_revoked.get() {
            (f.0)(what);
        } else if let Some(target) = self.relay.as_ref().and_then(Weak::upgrade) {
            target.revoked(what);
        }
    }

    /// A message arrived on `name` with `payload`: a revocation (on the revocation channel,
    /// or on a channel a holder watches), and a release for the waiters.
    pub(crate) fn deliver_message(&self, name: &str, payload: &[u8]) {
        if self.revocation.as_deref() == Some(name) {
            if let Ok(key) = std::str::from_utf8(payload) {
                self.revoked(Revoked::Key(key));
            }
            return;
        }
        let held = self
            .map()
            .get(name)
            .is_some_and(|c| c.held.load(Ordering::Acquire) > 0);
        if held {
            self.revoked(Revoked::Key(name));
        }
        self.deliver(name);
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Channel>>> {
        // A panic while holding this lock cannot leave the map inconsistent (every change
        // is a single insert or remove), so a poisoned lock is still usable.
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start waiting on `name`; a release wakes every waiter.
    pub(crate) fn watch(self: &Arc<Self>, name: &str) -> Watch {
        self.watch_with(name, false)
    }

    /// Start waiting on `name`; with `one`, a release wakes one waiter (reentrant locks:
    /// only one can take it next), else all (readers share; a fair queue's head must hear).
    pub(crate) fn watch_with(self: &Arc<Self>, name: &str, one: bool) -> Watch {
        self.watch_as(name, one, false)
    }

    /// A holder's watch of its lock's channel `name`: while it lives, a message there is
    /// handed to the revocation callback (to check the lock is still held). The
    /// subscription is asked for at once, without waiting for it.
    pub(crate) fn watch_held(self: &Arc<Self>, name: &str) -> Watch {
        let w = self.watch_as(name, false, true);
        w.request();
        w
    }

    fn watch_as(self: &Arc<Self>, name: &str, one: bool, held: bool) -> Watch {
        let mut map = self.map();
        let channel = match map.get(name) {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(Channel {
                    name: name.to_owned(),
                    notify: Notify::new(),
                    users: AtomicUsize::new(0),
                    held: AtomicUsize::new(0),
                    confirmed: AtomicBool::new(self.subscriber.is_none()),
                    one,
                    messages: AtomicU64::new(0),
                });
                map.insert(name.to_owned(), c.clone());
                c
            }
        };
        channel.users.fetch_add(1, Ordering::AcqRel);
        if held {
            channel.held.fetch_add(1, Ordering::AcqRel);
        }
        drop(map);
        Watch {
            hub: self.clone(),
            channel,
            held,
        }
    }

    /// A release was seen on `name`: wake its waiters.
    pub(crate) fn deliver(&self, name: &str) {
        let channel = self.map().get(name).cloned();
        if let Some(c) = channel {
            c.messages.fetch_add(1, Ordering::AcqRel);
            if c.one {
                c.notify.notify_one();
            } else {
                c.notify.notify_waiters();
            }
        }
        if let Some(target) = self.relay.as_ref().and_then(Weak::upgrade) {
            target.deliver(name);
        }
    }

    /// Whether a waiter of this process waits on `name` now (a watch other than a
    /// holder's).
    pub(crate) fn waiting_on(&self, name: &str) -> bool {
        let map = self.map();
        map.get(name)
            .is_some_and(|c| c.users.load(Ordering::Acquire) > c.held.load(Ordering::Acquire))
    }

    /// How many releases (and wake-ups) `name` has seen, when it is watched and live now
    /// (its releases reach this process); `None` otherwise.
    pub(crate) fn messages(&self, name: &str) -> Option<u64> {
        let map = self.map();
        let c = map.get(name)?;
        c.is_confirmed().then(|| c.messages.load(Ordering::Acquire))
    }

    /// A subscriber connection was made (and, after a reconnect, the command connection
    /// refreshed).
    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
        if let Some(target) = self.relay.as_ref().and_then(Weak::upgrade) {
            target.connected();
        }
    }

    /// How many times [`Hub::connected`] was called.
    #[cfg(feature = "test-support")]
    pub(crate) fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Wake every waiter (after a reconnect, releases may have been missed).
    pub(crate) fn wake_all(&self) {
        let all: Vec<_> = self.map().values().cloned().collect();
        for c in all {
            c.messages.fetch_add(1, Ordering::AcqRel);
            c.notify.notify_waiters();
        }
        if let Some(target) = self.relay.as_ref().and_then(Weak::upgrade) {
            target.wake_all();
        }
    }

    /// The channels waited on now, marking them unconfirmed (a new connection is coming).
    pub(crate) fn unconfirm_all(&self) -> Vec<Arc<Channel>> {
        let all: Vec<_> = self.map().values().cloned().collect();
        for c in &all {
            c.confirmed.store(false, Ordering::Release);
        }
        all
    }

    /// Mark one channel unconfirmed (its subscription was dropped): its waiters ask for it
    /// again on their next round.
    pub(crate) fn unconfirm(&self, name: &str) {
        if let Some(c) = self.map().get(name) {
            c.confirmed.store(false, Ordering::Release);
        }
    }

    /// Remove the channels nobody waits on; returns their names (to unsubscribe).
    pub(crate) fn sweep(&self) -> Vec<String> {
        let mut map = self.map();
        let idle: Vec<String> = map
            .iter()
            .filter(|(_, c)| c.users.load(Ordering::Acquire) == 0)
            .map(|(n, _)| n.clone())
            .collect();
        for n in &idle {
            map.remove(n);
        }
        idle
    }

    /// How many channels are tracked (for tests and metrics).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

impl Channel {
    pub(crate) fn confirm(&self) {
        self.confirmed.store(true, Ordering::Release);
    }

    pub(crate) fn is_confirmed(&self) -> bool {
        self.confirmed.load(Ordering::Acquire)
    }
}

/// One waiter's interest in a channel.
#[derive(Debug)]
pub(crate) struct Watch {
    hub: Arc<Hub>,
    channel: Arc<Channel>,
    /// A holder's watch ([`Hub::watch_held`]).
    held: bool,
}

impl Watch {
    /// A future that resolves on the next release. Call `enable()` on it (pinned) before
    /// checking the lock, so a release in between is not missed.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.channel.notify.notified()
    }

    /// [`Hub::messages`] of this watch's channel.
    pub(crate) fn messages(&self) -> Option<u64> {
        self.is_live()
            .then(|| self.channel.messages.load(Ordering::Acquire))
    }

    /// Whether releases on this channel reach us now.
    pub(crate) fn is_live(&self) -> bool {
        self.channel.is_confirmed()
    }

    /// Ask the subscriber to subscribe, without waiting for it.
    pub(crate) fn request(&self) {
        if self.channel.is_confirmed() {
            return;
        }
        if let Some(tx) = &self.hub.subscriber {
            let (done, _) = oneshot::channel();
            let _ = tx.send(SubscribeRequest {
                channel: self.channel.clone(),
                done,
            });
        }
    }

    /// Ask the subscriber to subscribe, and wait for it (at most until `until`).
    /// Returns whether the channel is live.
    pub(crate) async fn subscribe(&self, until: Instant) -> bool {
        if self.channel.is_confirmed() {
            return true;
        }
        let Some(tx) = &self.hub.subscriber else {
            return true;
        };
        let (done, rx) = oneshot::channel();
        if tx
            .send(SubscribeRequest {
                channel: self.channel.clone(),
                done,
            })
            .is_err()
        {
            return false;
        }
        let _ = tokio::time::timeout_at(until, rx).await;
        self.channel.is_confirmed()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.held {
            self.channel.held.fetch_sub(1, Ordering::AcqRel);
        }
        let last = self.channel.users.fetch_sub(1, Ordering::AcqRel) == 1;
        // A local hub has no subscription to keep warm: forget the channel at once. (The
        // subscriber of a Redis hub sweeps idle channels itself, to spare SUBSCRIBE churn.)
        if last && self.hub.subscriber.is_none() {
            let mut map = self.hub.map();
            // Users only go up from 0 under this lock, so 0 here means nobody came back.
            if self.channel.users.load(Ordering::Acquire) == 0 {
                map.remove(&self.channel.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn deliver_wakes_enabled_waiters_and_sweep_drops_idle() {
        let hub = Hub::local();
        let w = hub.watch("a");
        {
            let n = w.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            hub.deliver("a");
            tokio::time::timeout(Duration::from_secs(1), n)
                .await
                .expect("the enabled waiter must be woken");
        }
        assert!(hub.sweep().is_empty(), "a watched channel is kept");
        assert_eq!(hub.messages("a"), Some(1), "one release seen");
        assert_eq!(w.messages(), Some(1));
        hub.wake_all();
        assert_eq!(hub.messages("a"), Some(2), "a wake-up of everyone counts");
        drop(w);
        assert_eq!(
            hub.len(),
            0,
            "a local hub forgets a channel nobody waits on"
        );
    }

    #[tokio::test]
    async fn a_node_hub_relays_deliveries_and_wake_ups() {
        let (backend_hub, _requests) = Hub::subscribed(None);
        let (node_hub, _node_requests) = Hub::relaying_to(&backend_hub);
        let w = backend_hub.watch("a");
        for wake in [&(|h: &Hub| h.deliver("a")) as &dyn Fn(&Hub), &|h: &Hub| {
            h.wake_all()
        }] {
            let n = w.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            // The node's hub has no waiter on "a": the delivery is for the backend's hub.
            wake(&node_hub);
            tokio::time::timeout(Duration::from_secs(1), n)
                .await
                .expect("relayed to the backend's hub");
        }
    }

    #[test]
    fn revocations_reach_the_callback_through_relays_and_held_watches() {
        let (backend_hub, _requests) = Hub::subscribed(Some("lock:__revoked".into()));
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let s = seen.clone();
        backend_hub.on_revoked(OnRevoked(Arc::new(move |r| {
            s.lock().unwrap().push(match r {
                Revoked::Key(k) => k.to_owned(),
                Revoked::Registered(k) => format!("registered {k}"),
                Revoked::All => "*".into(),
            })
        })));
        let (node_hub, _node_requests) = Hub::relaying_to(&backend_hub);
        assert_eq!(node_hub.revocation(), Some("lock:__revoked"));
        node_hub.deliver_message("lock:__revoked", b"lock:{a}");
        node_hub.revoked(Revoked::All);
        // A release on a channel no holder watches is a release only.
        backend_hub.deliver_message("lock:{b}:released", b"");
        let held = backend_hub.watch_held("lock:{c}:released");
        backend_hub.deliver_message("lock:{c}:released", b"0");
        drop(held);
        backend_hub.deliver_message("lock:{c}:released", b"0");
        assert_eq!(
            *seen.lock().unwrap(),
            vec!["lock:{a}", "*", "lock:{c}:released"]
        );
    }

    #[test]
    fn subscribed_hub_keeps_idle_channels_until_swept() {
        let (hub, _requests) = Hub::subscribed(None);
        assert_eq!(hub.messages("a"), None, "not watched");
        let w = hub.watch("a");
        assert_eq!(w.messages(), None, "not subscribed yet");
        drop(w);
        assert_eq!(hub.len(), 1);
        assert_eq!(hub.sweep(), vec!["a".to_string()]);
        assert_eq!(hub.len(), 0);
    }
}
