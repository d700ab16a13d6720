//! `mode = "redlock"` and `mode = "multi"`: one lock over N independent Redis masters.
//!
//! - **redlock** holds the lock on a majority of the nodes (⌊N/2⌋ + 1), so it keeps working
//!   with a minority of them down, and two holders can never both have a majority.
//! - **multi** holds it on every node (like Redisson's `MultiLock`): all or nothing.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = distlock::Registry::from_str(r#"
//!     [backends.quorum]
//!     mode = "redlock"              # or "multi"
//!     nodes = ["redis://10.0.2.1", "redis://10.0.2.2", "redis://10.0.2.3",
//!              "redis://10.0.2.4", "redis://10.0.2.5"]
//!     node_timeout = "50ms"         # each node's reply to one request
//!     drift_factor = 0.01           # clock drift allowed, as a fraction of the lease
//!     retry_delay = "50ms"          # longest random pause before trying again
//! "#).await?;                       // fine with 2 of the 5 down; fails with 3 down
//! let guard = registry.lock("invoice:7").acquire().await?;
//! // Err(LockError::QuorumNotReached { granted, needed, .. }) when too few nodes answer
//! let token = guard.fencing_token(); // see "Fencing tokens" below
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Acquiring
//!
//! The acquire script (the one `mode = "single"` runs, with the same owner id on every node)
//! goes to every node at once, each reply awaited at most `node_timeout`. The lock is
//! granted as soon as a quorum of nodes granted it (re-entries count) while it is still
//! valid, measured on this process's monotonic clock:
//!
//! ```text
//! validity = lease − elapsed − (lease × drift_factor + 2 ms)
//! ```
//!
//! Requests to slower nodes keep running in the background (the lock is taken there too; a
//! release queues behind them on the same connection). A node that failed or timed out is
//! left out of acquisitions for 200 ms (unless the others cannot make a quorum without it),
//! then probed again, so a node that is down does not cost every acquisition its
//! `node_timeout`.
//!
//! Without a quorum the lock is released again on every node that granted it, failed or
//! timed out (a request that timed out may still run later). A split, where every node
//! answered, some granted and others hold it, is retried at once, a single time: it is most
//! often a release still in flight when the waiter woke. Otherwise the attempt is repeated
//! after a random pause of `retry_delay / 2 ..= retry_delay`, within `wait` (after a split,
//! the pause counts as waiting: `Registry::waiting` and `distlock_waiters`). When nothing was
//! granted because other owners hold it on too many nodes, the waiter instead sleeps until a
//! release is published (below), as on one server. Running out of `wait` gives `Timeout`
//! when every node answered and the lock was held by others, and
//! `QuorumNotReached { granted, needed, .. }` when nodes failed or were too slow.
//!
//! # Waking waiters
//!
//! Every node has its own subscriber; a release published on *any* node wakes the waiters
//! of that lock, with no polling (see `fanout.rs`).
//!
//! # Layout
//!
//! `node.rs` keeps each node's connection and health, `fanout.rs` the wake-up, and this
//! file makes the decisions (over 600 lines: about 130 are this documentation, the safety
//! argument of the quorum and the fencing tokens, and the rest is one concern); every request to the nodes goes through one helper,
//! [`QuorumDriver::on_nodes`], used by acquire, release, renewal and fencing alike.
//!
//! # Leases and release
//!
//! The watchdog renews every auto lease on all nodes in parallel (one pipeline per node); a
//! lease stays held when at least Q nodes renewed it, and is lost when that can no longer
//! happen, or when no quorum answered before its validity ran out. A release goes to every
//! node in parallel; it is `NotHeld` only when no node still held the lock.
//!
//! Every request to a node — acquire, the undo of a failed attempt, release, renewal,
//! forced release, fenced values — goes through `Node::ask` (`node.rs`), which waits at most
//! `node_timeout` for that node's reply (never the connection's `response_timeout`), so
//! nodes that hang cannot hold up a decision for longer.
//!
//! # Fencing tokens
//!
//! Each node has its own fencing counter (the `INCR` of the acquire script). The token of an
//! acquisition is the **largest** counter value among the Q nodes whose grants made the
//! quorum; before the acquisition returns, those of them whose counter lags behind are raised
//! to that value (`INCRBY`), and all Q must end up there (otherwise the attempt counts as
//! failed). So when a lock is handed out, Q nodes have counters ≥ its token. The next holder
//! is granted by Q nodes too; any two sets of Q nodes share a node (a majority for redlock,
//! every node for multi), whose counter then goes past the previous token. Hence: **tokens
//! grow strictly from holder to holder as long as the nodes keep their counters.** In the
//! common case the counters are already equal and no extra round trip is made. `multi`
//! raises nothing: its next quorum is every node again, the one at the token included.
//! (Each node's counter of a key is the key's own, not shared with other keys, so they
//! move together. A new key's counters start at the acquiring client's clock + 100 ms on
//! every node whose clock is less than 200 ms behind that, so they start equal too; a node
//! whose clock is further off starts from its own, and redlock then pays one parallel
//! `INCRBY` round. A counter so started may run up to 200 ms ahead of its node's clock, as
//! a raised one runs ahead by the nodes' clock difference: a node that loses it within
//! that time may start it again below the tokens it gave, one more reason the promise
//! above holds only while nodes keep their counters.)
//!
//! What this does *not* protect against, as for Redlock in general:
//!
//! - **A node that restarts without persistence** (or loses its last writes: `appendfsync`
//!   other than `always`) forgets both the locks it granted and its fencing counter. A second
//!   owner may then win a majority that includes it while the first still holds its lock,
//!   and receive a smaller token. Run the nodes with AOF `appendfsync always`, or follow
//!   the Redis documentation's *delayed restart*: keep a restarted node out of service (do
//!   not let it accept connections) for longer than the longest lease (`watchdog_timeout`,
//!   or your longest fixed lease).
//! - **Clock jumps.** Validity is measured on this process's monotonic clock, but the nodes
//!   expire keys on theirs: a node whose clock jumps forward (an administrator, or NTP
//!   stepping the clock) expires a lock early. `drift_factor` covers slow drift only.
//! - **Process pauses.** A holder paused (GC, swap, a stopped VM) past its validity no longer
//!   holds the lock, whatever it believes. That is what fencing tokens are for: the resource
//!   must check them, rejecting a token smaller than one it has seen.
//!
//! Unique ids (`distlock::ids`) on these backends take the counter of one node (the first
//! in the configured order that answers, nodes that failed lately last) times N plus that
//! node's index: unique across processes configured with the same node list, again as long
//! as nodes keep their counters.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_config::{QuorumOptions, RedisUrl};
use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::node::Node;
use super::capabilities::{validity_under_drift, Announce, Facts};
use super::conn::Settings;
use super::resend::Resends;
use super::topology::{ready, FencedSet, ScriptReplies, Topology};
use crate::check::probe::Probe;
use crate::check::report::ServerReport;
use crate::errors::backend::DriverError;
use crate::protocol::keys::{FenceScope, LockKeys};
use crate::protocol::{Attempt, Call, HandedOff, Released};
use crate::rt::hub::{Hub, SubscribeRequest};
use crate::terms::owner::{Hold, OwnerId};

mod fanout;
mod fenced;
mod node;
mod ops;

/// How many nodes must grant a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuorumKind {
    /// A majority.
    Redlock,
    /// All of them.
    Multi,
}

impl QuorumKind {
    /// The quorum among `nodes`.
    pub(crate) fn quorum(self, nodes: usize) -> usize {
        match self {
            QuorumKind::Redlock => nodes / 2 + 1,
            QuorumKind::Multi => nodes,
        }
    }

    /// As in the configuration.
    pub(crate) fn name(self) -> &'static str {
        match self {
            QuorumKind::Redlock => "redlock",
            QuorumKind::Multi => "multi",
        }
    }
}

/// After a reply from a node: go on waiting for the others, stop now, or wait for them
/// until then at the latest.
enum Settle {
    Wait,
    Now,
    By(Instant),
}

/// The replies of the nodes, by index (`None`: not asked, or no answer yet).
pub(super) type Replies<T> = Vec<Option<Result<T, DriverError>>>;

/// Requests still under way when a decision was made.
type Stragglers<'f, T> = FuturesUnordered<BoxFuture<'f, (usize, Result<T, DriverError>)>>;

/// Let requests still under way finish in the background (dropping them could cancel
/// them before they are written: a lock taken there must be released after them).
pub(super) fn finish_in_background<T: Send + 'static>(rest: Stragglers<'static, T>) {
    if !rest.is_empty() {
        tokio::spawn(async move {
            let mut rest = rest;
            while rest.next().await.is_some() {}
        });
    }
}

/// The driver of a quorum backend: the lock protocol of `mode = "single"` on each node,
/// combined as described in the module documentation.
pub(crate) struct QuorumDriver {
    kind: QuorumKind,
    nodes: Vec<Arc<Node>>,
    quorum: usize,
    options: QuorumOptions,
    /// Releases re-sent to single nodes that failed while the quorum's release was
    /// decided (`ops.rs`, `super::resend`).
    resends: Arc<Resends>,
    /// The backend's name, for the re-sends' logs.
    backend: Arc<str>,
}

impl std::fmt::Debug for QuorumDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuorumDriver")
            .field("kind", &self.kind)
            .field(
                "nodes",
                &self
                    .nodes
                    .iter()
                    .map(|n| (n.address.as_str(), n.is_connected()))
                    .collect::<Vec<_>>(),
            )
            .field("quorum", &self.quorum)
            .field("options", &self.options)
            .finish()
    }
}

/// Connect to every node (in parallel) and start one subscriber per node feeding the
/// backend's hub.
///
/// Succeeds when at least a quorum of nodes could be reached, warning about the others,
/// which keep being connected in the background. Fails otherwise with every unreachable
/// node's failure.
pub(crate) async fn connect(
    backend: &Arc<str>,
    kind: QuorumKind,
    urls: &[RedisUrl],
    options: QuorumOptions,
    settings: &Settings,
) -> Result<(QuorumDriver, Arc<Hub>), DriverError> {
    let clients = urls
        .iter()
        .map(|u| Ok((u.address.clone(), settings.client_for(u)?)))
        .collect::<Result<Vec<_>, DriverError>>()?;
    let connected = futures_util::future::join_all(
        clients
            .iter()
            .map(|(address, c)| node::connect(settings, address, c.clone())),
    )
    .await;
    let n = urls.len();
    let quorum = kind.quorum(n);
    let mut nodes = Vec::with_capacity(n);
    let mut down = Vec::new();
    for ((address, client), result) in clients.iter().zip(connected) {
        let node = Arc::new(Node::new(address.clone()));
        match result {
            Ok((server, run_id)) => node.connected(server, run_id),
            Err(e) => down.push((node.clone(), client.clone(), e)),
        }
        nodes.push(node);
    }
    let reachable = n - down.len();
    if reachable < quorum {
        return Err(DriverError::TooFewNodes {
            what: if kind == QuorumKind::Multi {
                "too few nodes reachable for mode \"multi\" (it needs every node)"
            } else {
                "too few nodes reachable for mode \"redlock\" (it needs a majority)"
            },
            needed: quorum,
            nodes: n,
            failures: down.into_iter().map(|(_, _, e)| e).collect(),
        });
    }
    if !down.is_empty() {
        let which = down
            .iter()
            .map(|(node, _, e)| format!("{} ({e})", node.address))
            .collect::<Vec<_>>()
            .join(", ");
        tracing::warn!(backend = %backend, unreachable = %which, reachable, quorum,
            "distlock: some nodes are unreachable; the quorum is reachable, so starting anyway and connecting to them in the background");
    }
    for (node, client, _) in down {
        node::spawn_connect(
            backend.clone(),
            Arc::downgrade(&node),
            client,
            settings.clone(),
        );
    }
    let (hub, requests): (Arc<Hub>, mpsc::UnboundedReceiver<SubscribeRequest>) =
        Hub::subscribed(settings.revocation.clone());
    fanout::spawn(
        backend,
        &hub,
        requests,
        nodes
            .iter()
            .cloned()
            .zip(clients.into_iter().map(|(_, c)| c))
            .collect(),
        n - quorum + 1,
        settings.connect_timeout,
    );
    Ok((
        QuorumDriver {
            kind,
            nodes,
            quorum,
            options,
            resends: Arc::default(),
            backend: backend.clone(),
        },
        hub,
    ))
}

impl QuorumDriver {
    /// The nodes' addresses, comma-separated.
    pub(crate) fn addresses(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.address.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The nodes' addresses, in configuration order (the order of `run_on_all`'s replies).
    pub(crate) fn node_addresses(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.address.clone()).collect()
    }

    /// Each node's self-check (all at once), or why it could not be asked.
    pub(crate) async fn probe(
        &self,
        probe: &crate::check::probe::Probe,
    ) -> Vec<Result<crate::check::report::ServerReport, DriverError>> {
        futures_util::future::join_all(self.nodes.iter().map(|node| async move {
            match node.server() {
                Ok(server) => server.probe(probe).await,
                Err(e) => Err(e),
            }
        }))
        .await
    }

    /// The keys matching `pattern` on any node (SCAN on each connected node; fails only
    /// when no node answered), at most `limit`.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<String>, DriverError> {
        let mut found = std::collections::BTreeSet::new();
        let mut failure = None;
        let mut answered = false;
        for node in &self.nodes {
            let r = match node.server() {
                Ok(server) => server.scan(pattern, limit).await,
                Err(e) => Err(e),
            };
            match r {
                Ok(keys) => {
                    answered = true;
                    found.extend(keys);
                }
                Err(e) => failure = Some(e),
            }
        }
        match failure {
            Some(e) if !answered => Err(e),
            _ => Ok(found.into_iter().take(limit).collect()),
        }
    }

    /// How long a lease granted (or renewed) now is valid, as far as this process can tell.
    fn validity(&self, lease: Duration) -> Duration {
        validity_under_drift(lease, self.options.drift_factor)
    }

    /// The random pause before the next attempt: `retry_delay / 2 ..= retry_delay`.
    fn retry_delay(&self) -> Duration {
        let max = u64::try_from(self.options.retry_delay.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(rand::random_range(max / 2..=max))
    }

    /// The one way requests reach the nodes: `op` goes to the nodes `targets` at once; the
    /// replies are taken as they come until `settle` (shown the replies so far) says
    /// enough. Returns the replies and the requests still under way.
    async fn on_nodes<'f, T, F, Fut>(
        &self,
        targets: impl IntoIterator<Item = usize>,
        op: F,
        settle: impl Fn(&Replies<T>) -> Settle,
    ) -> (Replies<T>, Stragglers<'f, T>)
    where
        T: Send + 'f,
        F: Fn(Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T, DriverError>> + Send + 'f,
    {
        let mut replies: Replies<T> = self.nodes.iter().map(|_| None).collect();
        let mut pending: Stragglers<'f, T> = targets
            .into_iter()
            .map(|i| {
                let fut = op(self.nodes[i].clone());
                async move { (i, fut.await) }.boxed()
            })
            .collect();
        let mut until = None;
        loop {
            let next = match until {
                Some(t) => match tokio::time::timeout_at(t, pending.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
                None => pending.next().await,
            };
            let Some((i, reply)) = next else { break };
            replies[i] = Some(reply);
            match settle(&replies) {
                Settle::Wait => {}
                Settle::Now => break,
                Settle::By(t) => until = Some(t),
            }
        }
        (replies, pending)
    }

    /// Run `call` on every node (each bounded by `node_timeout`): every node's reply, and
    /// how many must agree (the quorum).
    pub(crate) async fn run_on_all(
        &self,
        call: &crate::protocol::Call,
    ) -> (Vec<Result<redis::Value, DriverError>>, usize) {
        let node_timeout = self.options.node_timeout;
        let (replies, _) = self
            .on_nodes(
                0..self.nodes.len(),
                |node| async move {
                    let server = node.server()?;
                    node.ask(node_timeout, server.run(call, "script timed out"))
                        .await
                },
                |_| Settle::Wait,
            )
            .await;
        let replies = replies
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| {
                    Err(DriverError::NotConnected {
                        address: self.nodes[i].address.clone(),
                    })
                })
            })
            .collect();
        (replies, self.quorum)
    }

    /// A unique sequence number: `INCR` on the first node that answers (in the configured
    /// order, nodes that failed lately last) × N + that node's index. Unique across
    /// processes with the same node list.
    pub(crate) async fn next_sequence(&self, key: &str, ttl: Duration) -> Result<u64, DriverError> {
        let n = self.nodes.len() as u64;
        let mut failures = Vec::new();
        let mut order: Vec<(usize, &Arc<Node>)> = self.nodes.iter().enumerate().collect();
        order.sort_by_key(|(_, node)| !node.available());
        for (i, node) in order {
            let result = match node.server() {
                Ok(server) => {
                    node.ask(self.options.node_timeout, server.next_sequence(key, ttl))
                        .await
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(seq) => return Ok(seq.saturating_mul(n).saturating_add(i as u64)),
                Err(e) => failures.push(e),
            }
        }
        Err(DriverError::TooFewNodes {
            what: "no node gave a sequence number",
            needed: 1,
            nodes: self.nodes.len(),
            failures,
        })
    }
}

impl Topology for QuorumDriver {
    fn facts(&self) -> Facts {
        Facts {
            fence_scope: FenceScope::Key,
            hand_off: false,
            quorum: Some((self.kind.name(), self.options.drift_factor)),
            announce: Announce::NotOffered,
            cluster: false,
            reply_addresses: Some(self.node_addresses()),
        }
    }

    fn acquire<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
        lease: Duration,
        _wait: Duration,
    ) -> BoxFuture<'a, Result<Attempt, DriverError>> {
        Box::pin(async move { Ok(QuorumDriver::acquire(self, keys, hold, lease).await) })
    }

    fn release<'a>(
        &'a self,
        keys: &'a LockKeys,
        hold: Hold,
    ) -> BoxFuture<'a, Result<Released, DriverError>> {
        Box::pin(QuorumDriver::release(self, keys, hold))
    }

    /// Not offered: a hand-off is one script on one server.
    fn hand_off<'a>(
        &'a self,
        _keys: &'a LockKeys,
        _hold: Hold,
        _to: Hold,
        _lease: Duration,
        _holder: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<HandedOff>, DriverError>> {
        ready(Ok(None))
    }

    /// No queues: fair and write locks are not offered here.
    fn cancel<'a>(
        &'a self,
        _keys: &'a LockKeys,
        _owner: OwnerId,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        ready(Ok(false))
    }

    fn renew_each<'a>(
        &'a self,
        items: &'a [(&'a LockKeys, OwnerId)],
        lease: Duration,
    ) -> BoxFuture<'a, Vec<Result<bool, DriverError>>> {
        Box::pin(QuorumDriver::renew_each(self, items, lease))
    }

    fn force_release<'a>(
        &'a self,
        keys: &'a LockKeys,
        revocation: &'a str,
    ) -> BoxFuture<'a, Result<bool, DriverError>> {
        Box::pin(QuorumDriver::force_release(self, keys, revocation))
    }

    fn next_sequence<'a>(
        &'a self,
        key: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<u64, DriverError>> {
        Box::pin(QuorumDriver::next_sequence(self, key, ttl))
    }

    fn scan<'a>(
        &'a self,
        pattern: &'a str,
        limit: usize,
    ) -> Option<BoxFuture<'a, Result<Vec<String>, DriverError>>> {
        Some(Box::pin(QuorumDriver::scan(self, pattern, limit)))
    }

    fn probe<'a>(
        &'a self,
        probe: &'a Probe,
    ) -> Option<BoxFuture<'a, Vec<Result<ServerReport, DriverError>>>> {
        Some(Box::pin(QuorumDriver::probe(self, probe)))
    }

    fn run_script<'a>(&'a self, call: &'a Call) -> Option<BoxFuture<'a, ScriptReplies>> {
        Some(Box::pin(self.run_on_all(call)))
    }

    fn fenced_set<'a>(
        &'a self,
        name: &'a str,
        value: &'a [u8],
        token: u64,
        ttl_ms: u64,
    ) -> Option<BoxFuture<'a, FencedSet>> {
        Some(Box::pin(QuorumDriver::fenced_set(
            self, name, value, token, ttl_ms,
        )))
    }

    fn resends(&self) -> Option<&Arc<Resends>> {
        Some(&self.resends)
    }
}

#[cfg(test)]
mod tests {
    use super::ops::free_in;
    use super::*;

    #[test]
    fn quorum_sizes() {
        let redlock: Vec<usize> = (1..=7).map(|n| QuorumKind::Redlock.quorum(n)).collect();
        assert_eq!(redlock, [1, 2, 2, 3, 3, 4, 4]);
        assert_eq!(QuorumKind::Multi.quorum(3), 3);
    }

    #[test]
    fn free_once_enough_leases_ran_out() {
        let ms = |v: u64| Some(Duration::from_millis(v));
        // 5 nodes, quorum 3: held on all 5, so 3 must run out: the 3rd shortest.
        assert_eq!(
            free_in(&mut [ms(50), ms(10), ms(40), ms(30), ms(20)], 5, 3),
            ms(30)
        );
        // Held on 3 of 5 (2 free): one must run out, the shortest.
        assert_eq!(free_in(&mut [ms(50), None, ms(40)], 5, 3), ms(40));
        // Without expiry on the one that matters: never.
        assert_eq!(free_in(&mut [ms(10), None, None, None, ms(5)], 5, 3), None);
        // multi: every node counts, so all must run out.
        assert_eq!(free_in(&mut [ms(5), ms(9)], 3, 3), ms(9));
    }
}
