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
//! after a random pause of `retry_delay / 2 ..= retry_delay`, within `wait`. When nothing was
//! granted because other owners hold it on too many nodes, the waiter instead sleeps until a
//! release is published (below), as on one server. Running out of `wait` gives `Timeout`
//! when every node answered and the lock was held by others, and
//! `QuorumNotReached { granted, needed, .. }` when nodes failed or were too slow.
//!
//! # Waking waiters
//!
//! Every node has its own subscriber connection (reconnecting in the background while the
//! node is down) feeding the backend's one wake-up hub (each node's hub relays to it); a
//! release published on *any* node wakes the waiters of that lock, with no polling. A
//! fan-out task passes each subscribe request of the backend's hub on to every node's
//! subscriber. A waiter's channel counts as subscribed once N − Q + 1
//! nodes confirmed it (Q being the quorum): any holder holds it on Q nodes, and those two sets
//! of nodes share at least one, whose release message is therefore received. A subscriber
//! that reconnects wakes every waiter, since it may have missed a release.
//!
//! # Leases and release
//!
//! The watchdog renews every auto lease on all nodes in parallel (one pipeline per node); a
//! lease stays held when at least Q nodes renewed it, and is lost when that can no longer
//! happen, or when no quorum answered before its validity ran out. A release goes to every
//! node in parallel; it is `NotHeld` only when no node still held the lock.
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
//! common case the counters are already equal and no extra round trip is made.
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock, Weak};
use std::time::Duration;

use distlock_config::{QuorumOptions, RedisUrl};
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{ErrorKind, RedisError};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::redis::RedisDriver;
use super::{Attempt, Released};
use crate::hub::{Channel, Hub, SubscribeRequest, Watch};
use crate::keys::LockKeys;
use crate::owner::OwnerId;

/// Idle channels are unsubscribed on every node this often.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// Longest pause between connection attempts to a node that was down at start-up.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A node that just failed or timed out is left out of acquisitions for this long (then one
/// attempt probes it again), so a node that is down does not cost every acquisition its
/// `node_timeout`.
const SKIP_FAILED_FOR: Duration = Duration::from_millis(200);

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn nanos_since_epoch(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(*EPOCH).as_nanos()).unwrap_or(u64::MAX)
}

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
    pub fn quorum(self, nodes: usize) -> usize {
        match self {
            QuorumKind::Redlock => nodes / 2 + 1,
            QuorumKind::Multi => nodes,
        }
    }
}

/// A failure on one node.
#[derive(Debug, Clone)]
pub(crate) struct NodeError {
    /// The node's `host:port`.
    pub address: String,
    /// What went wrong.
    pub source: RedisError,
}

/// One node: a connection once it could be made (a node down at start-up is connected in
/// the background; after that the connection reconnects by itself).
struct Node {
    address: String,
    driver: OnceLock<RedisDriver>,
    /// Left out of acquisitions until then (nanos since `EPOCH`; 0: never failed).
    skip_until: AtomicU64,
}

impl Node {
    fn new(address: String) -> Node {
        Node {
            address,
            driver: OnceLock::new(),
            skip_until: AtomicU64::new(0),
        }
    }

    /// Whether acquisitions should ask this node now: connected, and not failed lately.
    fn available(&self) -> bool {
        self.driver.get().is_some()
            && nanos_since_epoch(Instant::now()) >= self.skip_until.load(Ordering::Relaxed)
    }

    /// It failed or did not answer in time: leave it out for a while.
    fn failed(&self) {
        let until = nanos_since_epoch(Instant::now() + SKIP_FAILED_FOR);
        self.skip_until.store(until, Ordering::Relaxed);
    }

    /// It answered.
    fn answered(&self) {
        if self.skip_until.load(Ordering::Relaxed) != 0 {
            self.skip_until.store(0, Ordering::Relaxed);
        }
    }

    /// The acquire script on this node, bounded by `node_timeout`.
    async fn acquire(
        &self,
        keys: &LockKeys,
        owner: OwnerId,
        lease: Duration,
        node_timeout: Duration,
    ) -> Reply {
        let Ok(driver) = self.driver() else {
            return Reply::Skipped;
        };
        match tokio::time::timeout(
            node_timeout,
            driver.acquire(keys, owner, lease, Duration::ZERO),
        )
        .await
        {
            Ok(Ok(a)) => {
                self.answered();
                Reply::Answered(a)
            }
            Ok(Err(e)) => {
                tracing::debug!(node = %self.address, key = %keys.user, error = %e, "distlock: node failed to acquire");
                self.failed();
                Reply::Failed
            }
            Err(_) => {
                tracing::debug!(node = %self.address, key = %keys.user, ?node_timeout, "distlock: node did not answer in time");
                self.failed();
                Reply::Failed
            }
        }
    }

    fn driver(&self) -> Result<&RedisDriver, NodeError> {
        self.driver.get().ok_or_else(|| NodeError {
            address: self.address.clone(),
            source: RedisError::from((
                ErrorKind::Io,
                "not connected",
                "the node could not be reached yet; connecting in the background".to_string(),
            )),
        })
    }

    fn error(&self, source: RedisError) -> NodeError {
        NodeError {
            address: self.address.clone(),
            source,
        }
    }
}

/// The driver of a quorum backend: the lock protocol of `mode = "single"` on each node,
/// combined as described in the module documentation.
pub(crate) struct QuorumDriver {
    kind: QuorumKind,
    nodes: Vec<Arc<Node>>,
    quorum: usize,
    options: QuorumOptions,
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
                    .map(|n| (n.address.as_str(), n.driver.get().is_some()))
                    .collect::<Vec<_>>(),
            )
            .field("quorum", &self.quorum)
            .field("options", &self.options)
            .finish()
    }
}

/// What came of one node's acquire request.
#[derive(Debug, Clone, Copy)]
enum Reply {
    /// It answered.
    Answered(Attempt),
    /// It failed or did not answer in time: the request may still run there.
    Failed,
    /// Not asked: not connected, or failed a moment ago.
    Skipped,
}

impl Reply {
    fn granted(&self) -> bool {
        matches!(
            self,
            Reply::Answered(Attempt::Acquired { .. } | Attempt::Reentered)
        )
    }
}

impl QuorumDriver {
    /// Connect to every node (in parallel) and start one subscriber per node, feeding `hub`
    /// through a fan-out task that takes `requests`.
    ///
    /// Succeeds when at least a quorum of nodes could be reached, warning about the others,
    /// which keep being connected in the background. Fails otherwise with the unreachable
    /// addresses (comma-separated) and an error saying how many were needed.
    #[allow(clippy::too_many_arguments)]
    pub async fn connect(
        backend: &Arc<str>,
        kind: QuorumKind,
        urls: &[RedisUrl],
        options: QuorumOptions,
        connect_timeout: Duration,
        response_timeout: Duration,
        hub: &Arc<Hub>,
        requests: mpsc::UnboundedReceiver<SubscribeRequest>,
    ) -> Result<QuorumDriver, (String, RedisError)> {
        let clients = urls
            .iter()
            .map(|u| redis::Client::open(u.url.as_str()).map_err(|e| (u.address.clone(), e)))
            .collect::<Result<Vec<_>, _>>()?;
        let connected = futures_util::future::join_all(
            clients
                .iter()
                .map(|c| RedisDriver::connect(c.clone(), connect_timeout, response_timeout)),
        )
        .await;
        let n = urls.len();
        let quorum = kind.quorum(n);
        let mut nodes = Vec::with_capacity(n);
        let mut down = Vec::new();
        for ((url, client), result) in urls.iter().zip(&clients).zip(connected) {
            let node = Arc::new(Node::new(url.address.clone()));
            match result {
                Ok(d) => {
                    let _ = node.driver.set(d);
                }
                Err(e) => down.push((node.clone(), client.clone(), e)),
            }
            nodes.push(node);
        }
        let reachable = n - down.len();
        if reachable < quorum {
            let addresses = down
                .iter()
                .map(|(node, _, _)| node.address.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let first = down
                .iter()
                .map(|(node, _, e)| format!("{}: {e}", node.address))
                .next()
                .unwrap_or_default();
            return Err((
                addresses,
                RedisError::from((
                    ErrorKind::Io,
                    "too few nodes reachable",
                    format!(
                        "{} of {n} nodes unreachable, {quorum} of {n} needed for mode \"{}\" (first failure: {first})",
                        down.len(),
                        match kind {
                            QuorumKind::Redlock => "redlock",
                            QuorumKind::Multi => "multi",
                        }
                    ),
                )),
            ));
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
            spawn_connect(
                backend.clone(),
                Arc::downgrade(&node),
                client,
                connect_timeout,
                response_timeout,
            );
        }

        // One subscriber per node, each with a hub relaying to the backend's hub.
        let mut node_hubs = Vec::with_capacity(n);
        for (node, client) in nodes.iter().zip(clients) {
            let (node_hub, node_requests) = Hub::relaying_to(hub);
            let connector: crate::subscriber::Connector = Arc::new(move || {
                let client = client.clone();
                Box::pin(async move { client.get_async_pubsub().await })
            });
            crate::subscriber::spawn(
                Arc::from(format!("{backend} (node {})", node.address)),
                &node_hub,
                node_requests,
                connector,
                connect_timeout,
            );
            node_hubs.push(node_hub);
        }
        tokio::spawn(fan_out(
            Arc::downgrade(hub),
            node_hubs,
            requests,
            n - quorum + 1,
            connect_timeout,
        ));

        Ok(QuorumDriver {
            kind,
            nodes,
            quorum,
            options,
        })
    }

    /// The nodes' addresses, comma-separated.
    /// `redlock` or `multi`, as in the configuration.
    pub fn mode_name(&self) -> &'static str {
        match self.kind {
            QuorumKind::Redlock => "redlock",
            QuorumKind::Multi => "multi",
        }
    }

    pub fn addresses(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.address.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The part of a lease that clock drift may eat: `lease × drift_factor + 2 ms`.
    fn drift(&self, lease: Duration) -> Duration {
        lease.mul_f64(self.options.drift_factor) + Duration::from_millis(2)
    }

    /// How long a lease granted (or renewed) now is valid, as far as this process can tell.
    pub fn validity(&self, lease: Duration) -> Duration {
        lease.saturating_sub(self.drift(lease))
    }

    /// The random pause before the next attempt: `retry_delay / 2 ..= retry_delay`.
    fn retry_delay(&self) -> Duration {
        let max = u64::try_from(self.options.retry_delay.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(rand::random_range(max / 2..=max))
    }

    /// One attempt: the acquire script on every node at once, then the quorum decision.
    /// Everything granted by an attempt that fails is released again before this returns
    /// (or, for a node that does not answer in `node_timeout`, in the background).
    ///
    /// A split (every node answered, some granted it and others hold it) is tried again at
    /// once, a single time: it is most often a release still in flight on some nodes when a
    /// waiter was woken (by that release on another node, or by an earlier one).
    pub async fn acquire(&self, keys: &LockKeys, owner: OwnerId, lease: Duration) -> Attempt {
        match self.attempt(keys, owner, lease).await {
            Attempt::NoQuorum {
                busy: true,
                granted,
                ..
            } if granted > 0 => self.attempt(keys, owner, lease).await,
            other => other,
        }
    }

    async fn attempt(&self, keys: &LockKeys, owner: OwnerId, lease: Duration) -> Attempt {
        let start = Instant::now();
        let node_timeout = self.options.node_timeout;
        // Sent to every available node at once; replies are taken as they come, until a
        // quorum granted it or every node answered or timed out. Requests still under way
        // then finish in the background (the lock is taken there too, and a release queues
        // behind them); dropping them could cancel them before they are written.
        let shared = Arc::new(keys.clone());
        let mut replies = vec![Reply::Skipped; self.nodes.len()];
        // Nodes that failed a moment ago are left out, unless the others cannot make a
        // quorum without them (always so for multi).
        let available = self.nodes.iter().filter(|n| n.available()).count();
        let ask_all = available < self.quorum;
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| node.driver.get().is_some() && (ask_all || node.available()))
            .map(|(i, node)| {
                replies[i] = Reply::Failed;
                let (node, keys) = (node.clone(), shared.clone());
                async move { (i, node.acquire(&keys, owner, lease, node_timeout).await) }
            })
            .collect();
        let mut granted = 0;
        while let Some((i, reply)) = pending.next().await {
            replies[i] = reply;
            if reply.granted() {
                granted += 1;
                if granted >= self.quorum {
                    break;
                }
            }
        }
        if !pending.is_empty() {
            tokio::spawn(async move { while pending.next().await.is_some() {} });
        }

        let mut counted = granted;
        if granted >= self.quorum {
            match self.fence(keys, &replies).await {
                Some(attempt) => {
                    if !self
                        .validity(lease)
                        .saturating_sub(start.elapsed())
                        .is_zero()
                    {
                        return attempt;
                    }
                    tracing::debug!(key = %keys.user, elapsed = ?start.elapsed(), ?lease,
                        "distlock: quorum reached too late: the lease's validity had run out");
                    counted = 0;
                }
                None => counted = self.quorum - 1,
            }
        }

        // Failed: undo what was granted, or may have been (a request that failed or timed
        // out may still run on its node).
        let undo: Vec<usize> = replies
            .iter()
            .enumerate()
            .filter(|(_, r)| r.granted() || matches!(r, Reply::Failed))
            .map(|(i, _)| i)
            .collect();
        self.undo(keys, owner, &undo).await;

        let n = self.nodes.len();
        let mut held: Vec<Option<Duration>> = replies
            .iter()
            .filter_map(|r| match r {
                Reply::Answered(Attempt::Held { ttl }) => Some(*ttl),
                _ => None,
            })
            .collect();
        let failed = replies
            .iter()
            .filter(|r| !matches!(r, Reply::Answered(_)))
            .count();
        if granted == 0 && held.len() > n - self.quorum {
            // Others hold it on too many nodes: wait for a release (published) or for enough
            // of their leases to run out.
            return Attempt::Held {
                ttl: free_in(&mut held, n, self.quorum),
            };
        }
        Attempt::NoQuorum {
            granted: counted.min(granted),
            needed: self.quorum,
            nodes: n,
            busy: failed == 0 && !held.is_empty(),
            retry_in: self.retry_delay(),
        }
    }

    /// A quorum granted: work out the fencing token, raising the granting nodes whose counter
    /// lags behind it. `None` when fewer than a quorum of nodes end up at the token.
    async fn fence(&self, keys: &LockKeys, replies: &[Reply]) -> Option<Attempt> {
        if replies
            .iter()
            .any(|r| matches!(r, Reply::Answered(Attempt::Reentered)))
        {
            // Held by this owner already: the outer acquisition's token stands.
            return Some(Attempt::Reentered);
        }
        let tokens: Vec<(usize, u64)> = replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Reply::Answered(Attempt::Acquired { token }) => Some((i, *token)),
                _ => None,
            })
            .collect();
        let token = tokens.iter().map(|(_, t)| *t).max().unwrap_or(0);
        let at_token = tokens.iter().filter(|(_, t)| *t == token).count();
        if at_token == tokens.len() {
            return Some(Attempt::Acquired { token });
        }
        let node_timeout = self.options.node_timeout;
        let raised = futures_util::future::join_all(
            tokens
                .iter()
                .filter(|(_, t)| *t < token)
                .map(|&(i, t)| async move {
                    let node = &self.nodes[i];
                    let driver = node.driver().ok()?;
                    match tokio::time::timeout(node_timeout, driver.incr_by(&keys.fence, token - t))
                        .await
                    {
                        Ok(Ok(v)) if v >= token => Some(()),
                        Ok(Ok(_)) => None,
                        Ok(Err(e)) => {
                            tracing::debug!(node = %node.address, key = %keys.user, error = %e, "distlock: raising the fencing counter failed");
                            None
                        }
                        Err(_) => None,
                    }
                }),
        )
        .await
        .into_iter()
        .flatten()
        .count();
        (at_token + raised >= self.quorum).then_some(Attempt::Acquired { token })
    }

    /// Release on the nodes `which` after a failed attempt. Waits at most `node_timeout`;
    /// releases still under way then finish in the background.
    async fn undo(&self, keys: &LockKeys, owner: OwnerId, which: &[usize]) {
        if which.is_empty() {
            return;
        }
        let nodes: Vec<Arc<Node>> = which.iter().map(|&i| self.nodes[i].clone()).collect();
        let keys = keys.clone();
        let task = tokio::spawn(async move {
            let releases = nodes.iter().map(|node| {
                let keys = &keys;
                async move {
                    if let Ok(d) = node.driver() {
                        if let Err(e) = d.release(keys, owner).await {
                            tracing::debug!(node = %node.address, key = %keys.user, error = %e,
                                "distlock: undoing a partial grant failed; it expires with its lease");
                        }
                    }
                }
            });
            futures_util::future::join_all(releases).await;
        });
        let _ = tokio::time::timeout(self.options.node_timeout, task).await;
    }

    /// Release on every node in parallel. `Freed`/`StillHeld` when some node held it;
    /// `NotHeld` when the nodes that answered did not, and enough answered to be sure it was
    /// not held on a quorum; otherwise the first node's error.
    ///
    /// Once a node has released it and a quorum of nodes answered (or `node_timeout` passed),
    /// slower nodes are left to finish in the background; so are, from the start, nodes that
    /// failed a moment ago.
    pub async fn release(&self, keys: &LockKeys, owner: OwnerId) -> Result<Released, NodeError> {
        let deadline = Instant::now() + self.options.node_timeout;
        let one = |node: Arc<Node>, keys: LockKeys| async move {
            let result = match node.driver() {
                Ok(d) => d.release(&keys, owner).await.map_err(|e| node.error(e)),
                Err(e) => Err(e),
            };
            match &result {
                Ok(_) => node.answered(),
                Err(e) => {
                    node.failed();
                    tracing::debug!(node = %e.address, key = %keys.user, error = %e.source, "distlock: release failed on a node");
                }
            }
            result
        };
        let (now, later): (Vec<&Arc<Node>>, Vec<&Arc<Node>>) =
            self.nodes.iter().partition(|n| n.available());
        let mut unknown = later.len();
        let later: Vec<_> = later
            .into_iter()
            .filter(|n| n.driver.get().is_some())
            .map(|n| one(n.clone(), keys.clone()))
            .collect();
        if !later.is_empty() {
            tokio::spawn(futures_util::future::join_all(later));
        }
        let mut pending: FuturesUnordered<_> = now
            .into_iter()
            .map(|n| one(n.clone(), keys.clone()))
            .collect();
        let (mut freed, mut still, mut not_held) = (0usize, 0usize, 0usize);
        let mut errors = Vec::new();
        loop {
            if freed + still > 0 && freed + still + not_held >= self.quorum && !pending.is_empty() {
                // Decided, and a quorum answered: the others finish in the background.
                unknown += pending.len();
                tokio::spawn(async move { while pending.next().await.is_some() {} });
                break;
            }
            let next = if freed + still > 0 {
                match tokio::time::timeout_at(deadline, pending.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        // Decided: let the stragglers finish without us.
                        unknown += pending.len();
                        tokio::spawn(async move { while pending.next().await.is_some() {} });
                        break;
                    }
                }
            } else {
                pending.next().await
            };
            match next {
                None => break,
                Some(Ok(Released::Freed)) => freed += 1,
                Some(Ok(Released::StillHeld)) => still += 1,
                Some(Ok(Released::NotHeld)) => not_held += 1,
                Some(Err(e)) => {
                    unknown += 1;
                    errors.push(e);
                }
            }
        }
        if still > 0 {
            Ok(Released::StillHeld)
        } else if freed > 0 {
            Ok(Released::Freed)
        } else if unknown == 0 || not_held > self.nodes.len() - self.quorum {
            Ok(Released::NotHeld)
        } else {
            Err(errors.into_iter().next().unwrap_or_else(|| NodeError {
                address: self.addresses(),
                source: RedisError::from((
                    ErrorKind::Io,
                    "release not confirmed",
                    "too few nodes answered".to_string(),
                )),
            }))
        }
    }

    /// Renew leases on every node in parallel (one pipeline per node): `Ok(true)` renewed on
    /// a quorum, `Ok(false)` a quorum can no longer have it, `Err` not known (too many nodes
    /// failed). Once every lease is renewed on a quorum and `node_timeout` has passed, slower
    /// nodes are not waited for.
    pub async fn renew_each(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Vec<Result<bool, NodeError>> {
        let deadline = Instant::now() + self.options.node_timeout;
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|node| async move {
                let result = match node.driver() {
                    Ok(d) => d.renew(items, lease).await.map_err(|e| node.error(e)),
                    Err(e) => Err(e),
                };
                match &result {
                    Ok(_) => node.answered(),
                    Err(_) => node.failed(),
                }
                result
            })
            .collect();
        let mut renewed = vec![0usize; items.len()];
        let mut errors: Vec<NodeError> = Vec::new();
        let mut answered = 0;
        loop {
            let all_renewed = renewed.iter().all(|&c| c >= self.quorum);
            let next = if all_renewed {
                match tokio::time::timeout_at(deadline, pending.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                }
            } else {
                pending.next().await
            };
            match next {
                None => break,
                Some(Ok(v)) => {
                    answered += 1;
                    for (count, ok) in renewed.iter_mut().zip(v) {
                        *count += usize::from(ok);
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(node = %e.address, error = %e.source, "distlock: renewal failed on a node");
                    errors.push(e);
                }
            }
        }
        let unknown = self.nodes.len() - answered;
        renewed
            .into_iter()
            .map(|count| {
                if count >= self.quorum {
                    Ok(true)
                } else if count + unknown < self.quorum {
                    Ok(false)
                } else {
                    Err(errors.first().cloned().unwrap_or_else(|| NodeError {
                        address: self.addresses(),
                        source: RedisError::from((ErrorKind::Io, "renewal not answered")),
                    }))
                }
            })
            .collect()
    }

    /// Delete the lock on every node, whoever holds it. `Ok(true)` when some node had it.
    pub async fn force_release(&self, keys: &LockKeys) -> Result<bool, NodeError> {
        let results = futures_util::future::join_all(self.nodes.iter().map(|node| async move {
            match node.driver() {
                Ok(d) => d.force_release(keys).await.map_err(|e| node.error(e)),
                Err(e) => Err(e),
            }
        }))
        .await;
        let mut first_error = None;
        let mut any = false;
        let mut answered = false;
        for r in results {
            match r {
                Ok(deleted) => {
                    answered = true;
                    any |= deleted;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if !answered => Err(e),
            _ => Ok(any),
        }
    }

    /// A unique sequence number: `INCR` on the first node that answers (in the configured
    /// order) × N + that node's index. Unique across processes with the same node list.
    pub async fn next_sequence(&self, key: &str, ttl: Duration) -> Result<u64, NodeError> {
        let n = self.nodes.len() as u64;
        let mut first_error = None;
        // Nodes that failed a moment ago last.
        let mut order: Vec<(usize, &Arc<Node>)> = self.nodes.iter().enumerate().collect();
        order.sort_by_key(|(_, node)| !node.available());
        for (i, node) in order {
            let result = match node.driver() {
                Ok(d) => {
                    match tokio::time::timeout(self.options.node_timeout, d.next_sequence(key, ttl))
                        .await
                    {
                        Ok(r) => r.map_err(|e| node.error(e)),
                        Err(_) => Err(node.error(RedisError::from((
                            ErrorKind::Io,
                            "INCR timed out",
                            format!("no reply within {:?}", self.options.node_timeout),
                        )))),
                    }
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(seq) => {
                    node.answered();
                    return Ok(seq.saturating_mul(n).saturating_add(i as u64));
                }
                Err(e) => {
                    node.failed();
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.unwrap_or_else(|| NodeError {
            address: self.addresses(),
            source: RedisError::from((ErrorKind::Io, "no node")),
        }))
    }
}

/// When a quorum of `nodes` can be free again, given the remaining leases of the other
/// owners that hold it on `held.len() > nodes - quorum` of them (`None`: never, by expiry):
/// once all but `nodes - quorum` of those have run out, the k-th shortest.
fn free_in(held: &mut [Option<Duration>], nodes: usize, quorum: usize) -> Option<Duration> {
    held.sort_by_key(|t| t.unwrap_or(Duration::MAX));
    let k = held.len().saturating_sub(nodes - quorum).max(1);
    held.get(k - 1).copied().flatten()
}

/// Connect to a node that was down at start-up, retrying with backoff until it answers (or
/// the backend is gone). After that its connection reconnects by itself.
fn spawn_connect(
    backend: Arc<str>,
    node: Weak<Node>,
    client: redis::Client,
    connect_timeout: Duration,
    response_timeout: Duration,
) {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(20);
        loop {
            tokio::time::sleep(backoff).await;
            if node.strong_count() == 0 {
                return;
            }
            match RedisDriver::connect(client.clone(), connect_timeout, response_timeout).await {
                Ok(driver) => {
                    if let Some(node) = node.upgrade() {
                        tracing::info!(backend = %backend, node = %node.address, "distlock: node connected");
                        let _ = node.driver.set(driver);
                    }
                    return;
                }
                Err(e) => {
                    if let Some(node) = node.upgrade() {
                        tracing::debug!(backend = %backend, node = %node.address, error = %e, "distlock: node still unreachable");
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    });
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
    // Too few nodes within `patience`: the waiter falls back to the lease's end, and asks
    // again on its next round. The nodes' subscribers keep trying meanwhile.
    tracing::debug!(channel = %channel.name, live, needed, "distlock: too few nodes confirmed a subscription");
}

// Hook for `crate::fence` (added by the fault-testing branch; port it along with the
// backend restructuring): a fenced write goes to every node and needs a quorum of them.
impl QuorumDriver {
    /// Every node's address and driver (`None`: not connected yet), the quorum, and the
    /// time each node may take to answer.
    pub fn fence_nodes(&self) -> (Vec<(&str, Option<&RedisDriver>)>, usize, Duration) {
        let nodes = self
            .nodes
            .iter()
            .map(|n| (n.address.as_str(), n.driver.get()))
            .collect();
        (nodes, self.quorum, self.options.node_timeout)
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn skipping_a_failed_node_for_a_while() {
        let node = Node::new("127.0.0.1:1".into());
        assert!(!node.available(), "not connected");
        assert!(node.driver().is_err());
        node.failed();
        assert!(node.skip_until.load(Ordering::Relaxed) > 0);
        node.answered();
        assert_eq!(node.skip_until.load(Ordering::Relaxed), 0);
    }
}
