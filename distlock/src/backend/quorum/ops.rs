//! The lock operations of a quorum backend: acquire (with the quorum decision, the fencing
//! token's agreement and the undo of a failed attempt), release, renew and forced release,
//! each one call of the generic "act on every node" (`QuorumDriver::on_nodes`).

use std::time::Duration;

use std::sync::Arc;

use tokio::time::Instant;

use super::node::Node;
use super::{finish_in_background, QuorumDriver, Replies, Settle};
use crate::errors::backend::DriverError;
use crate::protocol::keys::LockKeys;
use crate::protocol::{Attempt, Released};
use crate::terms::owner::{Hold, OwnerId};

impl QuorumDriver {
    /// One attempt: the acquire script on every node at once, then the quorum decision.
    /// Everything granted by an attempt that fails is released again before this returns
    /// (or, for a node that does not answer in `node_timeout`, in the background).
    ///
    /// A split (every node answered, some granted it and others hold it) is tried again at
    /// once, a single time: it is most often a release still in flight on some nodes when a
    /// waiter was woken (by that release on another node, or by an earlier one).
    pub(crate) async fn acquire(&self, keys: &LockKeys, hold: Hold, lease: Duration) -> Attempt {
        match self.attempt(keys, hold, lease).await {
            Attempt::NoQuorum {
                busy: true,
                granted,
                ..
            } if granted > 0 => self.attempt(keys, hold, lease).await,
            other => other,
        }
    }

    async fn attempt(&self, keys: &LockKeys, hold: Hold, lease: Duration) -> Attempt {
        let start = Instant::now();
        let node_timeout = self.options.node_timeout;
        let granted_by = |r: &Option<Result<Attempt, DriverError>>| {
            matches!(r, Some(Ok(Attempt::Acquired { .. } | Attempt::Reentered)))
        };
        // Nodes that failed a moment ago are left out, unless the others cannot make a
        // quorum without them (always so for multi).
        let available = self.nodes.iter().filter(|n| n.available()).count();
        let ask_all = available < self.quorum;
        let asked: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| {
                let n = &self.nodes[i];
                n.is_connected() && (ask_all || n.available())
            })
            .collect();
        let shared = Arc::new(LockKeys {
            seed_floor: std::num::NonZeroU64::new(seed_floor()),
            ..keys.clone()
        });
        let quorum = self.quorum;
        let (replies, rest) = self
            .on_nodes(
                asked.iter().copied(),
                move |node| {
                    let keys = shared.clone();
                    async move {
                        let server = node.server()?;
                        node.ask(
                            node_timeout,
                            server.acquire(&keys, hold, lease, Duration::ZERO),
                        )
                        .await
                    }
                },
                |replies| {
                    if replies.iter().filter(|r| granted_by(r)).count() >= quorum {
                        Settle::Now
                    } else {
                        Settle::Wait
                    }
                },
            )
            .await;
        finish_in_background(rest);
        for (i, r) in replies.iter().enumerate() {
            if let Some(Err(e)) = r {
                tracing::debug!(node = %self.nodes[i].address, key = %keys.user, error = %e, "distlock: node failed to acquire");
            }
        }
        let granted = replies.iter().filter(|r| granted_by(r)).count();

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

        // Failed: undo what was granted, or may have been (a request that failed, timed
        // out or is still under way may run on its node).
        let undo: Vec<usize> = asked
            .iter()
            .copied()
            .filter(|&i| granted_by(&replies[i]) || !matches!(replies[i], Some(Ok(_))))
            .collect();
        self.undo(keys, hold, &undo).await;

        let n = self.nodes.len();
        let mut held: Vec<Option<Duration>> = replies
            .iter()
            .filter_map(|r| match r {
                Some(Ok(Attempt::Held { ttl })) => Some(*ttl),
                _ => None,
            })
            .collect();
        let failed = replies.iter().filter(|r| !matches!(r, Some(Ok(_)))).count();
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
    async fn fence(&self, keys: &LockKeys, replies: &Replies<Attempt>) -> Option<Attempt> {
        if replies
            .iter()
            .any(|r| matches!(r, Some(Ok(Attempt::Reentered))))
        {
            // Held by this owner already: the outer acquisition's token stands.
            return Some(Attempt::Reentered);
        }
        let tokens: Vec<(usize, u64)> = replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(Ok(Attempt::Acquired { token })) => Some((i, *token)),
                _ => None,
            })
            .collect();
        let token = tokens.iter().map(|(_, t)| *t).max().unwrap_or(0);
        let at_token = tokens.iter().filter(|(_, t)| *t == token).count();
        if at_token == tokens.len() {
            return Some(Attempt::Acquired { token });
        }
        if self.quorum == self.nodes.len() {
            // `multi`: every later quorum is every node, so it includes a node at `token`,
            // whose counter then goes past it; raising the others buys nothing. (Counters
            // of a new key may start apart, from nodes' clocks: raising them would cost a
            // round trip.)
            return Some(Attempt::Acquired { token });
        }
        let node_timeout = self.options.node_timeout;
        let lagging: Vec<(usize, u64)> = tokens.into_iter().filter(|(_, t)| *t < token).collect();
        let fence = &keys.fence();
        let (raised, _) = self
            .on_nodes(
                lagging.iter().map(|(i, _)| *i),
                |node| {
                    let by = lagging
                        .iter()
                        .find(|(i, _)| Arc::ptr_eq(&self.nodes[*i], &node))
                        .map_or(0, |(_, t)| token - t);
                    async move {
                        let server = node.server()?;
                        node.ask(node_timeout, server.incr_by(fence, by)).await
                    }
                },
                |_| Settle::Wait,
            )
            .await;
        let raised = raised
            .iter()
            .filter(|r| matches!(r, Some(Ok(v)) if *v >= token))
            .count();
        (at_token + raised >= self.quorum).then_some(Attempt::Acquired { token })
    }

    /// Release on the nodes `which` after a failed attempt. Waits at most `node_timeout`;
    /// releases still under way then finish in the background. An undo that fails for a
    /// transient reason is sent again to its node alone until it answers (its part of
    /// the lock would otherwise stay until its lease: on `multi` enough to refuse every
    /// acquirer).
    async fn undo(&self, keys: &LockKeys, hold: Hold, which: &[usize]) {
        if which.is_empty() {
            return;
        }
        let keys = Arc::new(keys.clone());
        let undoing = hold.undoing();
        let again = Arc::new(self.resender(keys.clone(), undoing));
        let node_timeout = self.options.node_timeout;
        let deadline = Instant::now() + node_timeout;
        let (_, rest) = self
            .on_nodes(
                which.iter().copied(),
                move |node| {
                    let (keys, again) = (keys.clone(), again.clone());
                    async move {
                        let r = match node.server() {
                            Ok(server) => node.ask(node_timeout, server.release(&keys, undoing)).await,
                            Err(e) => Err(e),
                        };
                        if let Err(e) = &r {
                            tracing::debug!(node = %node.address, key = %keys.user, error = %e,
                                "distlock: undoing a partial grant failed; sending it again when the node answers");
                            if e.is_transient() {
                                again(node.clone());
                            }
                        }
                        r
                    }
                },
                |_| Settle::By(deadline),
            )
            .await;
        finish_in_background(rest);
    }

    /// Release on every node in parallel. `Freed`/`StillHeld` when some node held it;
    /// `NotHeld` when the nodes that answered did not, and enough answered to be sure it was
    /// not held on a quorum; otherwise the nodes' errors.
    ///
    /// Once a node has released it and a quorum of nodes answered (or `node_timeout` passed),
    /// slower nodes are left to finish in the background; so are, from the start, nodes that
    /// failed a moment ago.
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        hold: Hold,
    ) -> Result<Released, DriverError> {
        let node_timeout = self.options.node_timeout;
        let deadline = Instant::now() + node_timeout;
        let keys = Arc::new(keys.clone());
        // Nodes whose release failed in a blip: once the release is decided, each is sent
        // it again alone until it answers (its part of the lock would stay until its
        // lease: enough on `multi` to refuse every acquirer). A failed decision is re-sent
        // whole by the caller instead.
        let failed = Arc::new(FailedNodes {
            state: std::sync::Mutex::new((None, Vec::new())),
            driver: self.resender(keys.clone(), hold),
        });
        let failed_in = failed.clone();
        let one = move |node: Arc<Node>| {
            let (keys, failed) = (keys.clone(), failed_in.clone());
            async move {
                let r = match node.server() {
                    Ok(server) => node.ask(node_timeout, server.release(&keys, hold)).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = &r {
                    tracing::debug!(node = %node.address, key = %keys.user, error = %e, "distlock: release failed on a node");
                    if e.is_transient() {
                        failed.failed(node.clone());
                    }
                }
                r
            }
        };
        let (now, later): (Vec<usize>, Vec<usize>) =
            (0..self.nodes.len()).partition(|&i| self.nodes[i].available());
        // Nodes that failed a moment ago (but are connected) are released in the
        // background; they count as unknown.
        let (_, rest) = self
            .on_nodes(
                later
                    .iter()
                    .copied()
                    .filter(|&i| self.nodes[i].is_connected()),
                &one,
                |_| Settle::Now,
            )
            .await;
        finish_in_background(rest);
        let count = |replies: &Replies<Released>| {
            let mut c = (0usize, 0usize, 0usize);
            for r in replies.iter().flatten() {
                match r {
                    Ok(Released::Freed) => c.0 += 1,
                    Ok(Released::StillHeld) => c.1 += 1,
                    Ok(Released::NotHeld) => c.2 += 1,
                    Err(_) => {}
                }
            }
            c
        };
        let quorum = self.quorum;
        let (replies, rest) = self
            .on_nodes(now.iter().copied(), &one, |replies| {
                let (freed, still, not_held) = count(replies);
                if freed + still > 0 && freed + still + not_held >= quorum {
                    Settle::Now
                } else if freed + still > 0 {
                    Settle::By(deadline)
                } else {
                    Settle::Wait
                }
            })
            .await;
        finish_in_background(rest);
        let (freed, still, not_held) = count(&replies);
        let answered = freed + still + not_held;
        let unknown = self.nodes.len() - answered;
        failed.decided(
            freed + still > 0 || unknown == 0 || not_held > self.nodes.len() - self.quorum,
        );
        if still > 0 {
            Ok(Released::StillHeld)
        } else if freed > 0 {
            Ok(Released::Freed)
        } else if unknown == 0 || not_held > self.nodes.len() - self.quorum {
            Ok(Released::NotHeld)
        } else {
            Err(self.too_few("release not confirmed", replies))
        }
    }

    /// What sends the release of `hold` again to one node, in the background, until it
    /// answers (`super::super::resend`).
    fn resender(&self, keys: Arc<LockKeys>, hold: Hold) -> impl Fn(Arc<Node>) + Send + Sync {
        let (resends, backend) = (self.resends.clone(), self.backend.clone());
        move |node: Arc<Node>| {
            let (keys2, backend2) = (keys.clone(), backend.clone());
            resends.spawn(
                &tokio::runtime::Handle::current(),
                super::super::resend::Label {
                    what: "a release on one node",
                    backend: backend.clone(),
                    key: keys.user.clone(),
                },
                super::super::resend::Resends::retry_for(false),
                move || {
                    let (node, keys, backend) = (node.clone(), keys2.clone(), backend2.clone());
                    async move {
                        let r = match node.server() {
                            Ok(server) => server.release(&keys, hold).await,
                            Err(e) => Err(e),
                        };
                        node.answered(&r);
                        r.map(drop)
                            .map_err(|e| e.into_lock_error(&backend, Some(&keys.user)))
                    }
                },
                || {},
            );
        }
    }

    /// The error when too few nodes answered: every node's failure.
    fn too_few<T>(&self, what: &'static str, replies: Replies<T>) -> DriverError {
        let failures = replies
            .into_iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(Err(e)) => Some(e),
                None => Some(DriverError::TimedOut {
                    address: self.nodes[i].address.clone(),
                    what: "no answer in time",
                    after: self.options.node_timeout,
                }),
                Some(Ok(_)) => None,
            })
            .collect();
        DriverError::TooFewNodes {
            what,
            needed: self.quorum,
            nodes: self.nodes.len(),
            failures,
        }
    }

    /// Renew leases on every node in parallel (one pipeline per node): `Ok(true)` renewed on
    /// a quorum, `Ok(false)` a quorum can no longer have it, `Err` not known (too many nodes
    /// failed). Once every lease is renewed on a quorum and `node_timeout` has passed, slower
    /// nodes are not waited for.
    pub(crate) async fn renew_each(
        &self,
        items: &[(&LockKeys, OwnerId)],
        lease: Duration,
    ) -> Vec<Result<bool, DriverError>> {
        let node_timeout = self.options.node_timeout;
        let deadline = Instant::now() + node_timeout;
        let quorum = self.quorum;
        let renewed = |replies: &Replies<Vec<Result<bool, DriverError>>>| -> Vec<usize> {
            let mut counts = vec![0usize; items.len()];
            for per_node in replies.iter().flatten().flatten() {
                for (c, r) in counts.iter_mut().zip(per_node) {
                    *c += usize::from(matches!(r, Ok(true)));
                }
            }
            counts
        };
        let (replies, _rest) = self
            .on_nodes(
                0..self.nodes.len(),
                |node| async move {
                    match node.server() {
                        Ok(server) => {
                            node.ask(node_timeout, async {
                                Ok(server.renew_each(items, lease).await)
                            })
                            .await
                        }
                        Err(e) => {
                            node.answered::<()>(&Err(e.clone()));
                            Err(e)
                        }
                    }
                },
                |replies| {
                    if renewed(replies).iter().all(|&c| c >= quorum) {
                        Settle::By(deadline)
                    } else {
                        Settle::Wait
                    }
                },
            )
            .await;
        let counts = renewed(&replies);
        (0..items.len())
            .map(|i| {
                // Nodes with no answer for this lease: failed, or not heard from.
                let mut unknown = 0;
                let mut first_error = None;
                for (n, r) in replies.iter().enumerate() {
                    match r {
                        Some(Ok(per_node)) => match &per_node[i] {
                            Ok(_) => {}
                            Err(e) => {
                                unknown += 1;
                                first_error.get_or_insert_with(|| e.clone());
                            }
                        },
                        Some(Err(e)) => {
                            unknown += 1;
                            first_error.get_or_insert_with(|| e.clone());
                        }
                        None => {
                            unknown += 1;
                            first_error.get_or_insert_with(|| DriverError::TimedOut {
                                address: self.nodes[n].address.clone(),
                                what: "renewal not answered",
                                after: self.options.node_timeout,
                            });
                        }
                    }
                }
                if counts[i] >= quorum {
                    Ok(true)
                } else if counts[i] + unknown < quorum {
                    Ok(false)
                } else {
                    Err(first_error.unwrap_or_else(|| DriverError::NotConnected {
                        address: self.addresses(),
                    }))
                }
            })
            .collect()
    }

    /// Delete the lock on every node, whoever holds it (each node tells the holders on
    /// `revocation`). `Ok(true)` when some node had it.
    pub(crate) async fn force_release(
        &self,
        keys: &LockKeys,
        revocation: &str,
    ) -> Result<bool, DriverError> {
        let node_timeout = self.options.node_timeout;
        let (replies, _) = self
            .on_nodes(
                0..self.nodes.len(),
                |node| async move {
                    let server = node.server()?;
                    node.ask(node_timeout, server.force_release(keys, revocation))
                        .await
                },
                |_| Settle::Wait,
            )
            .await;
        if replies.iter().any(|r| matches!(r, Some(Ok(_)))) {
            Ok(replies.iter().any(|r| matches!(r, Some(Ok(true)))))
        } else {
            Err(self.too_few("force release not confirmed", replies))
        }
    }
}

/// When a quorum of `nodes` can be free again, given the remaining leases of the other
/// owners that hold it on `held.len() > nodes - quorum` of them (`None`: never, by expiry):
/// once all but `nodes - quorum` of those have run out, the k-th shortest.
pub(super) fn free_in(
    held: &mut [Option<Duration>],
    nodes: usize,
    quorum: usize,
) -> Option<Duration> {
    held.sort_by_key(|t| t.unwrap_or(Duration::MAX));
    let k = held.len().saturating_sub(nodes - quorum).max(1);
    held.get(k - 1).copied().flatten()
}

/// Where a new key's counters start on the nodes of one attempt: this process's clock in µs
/// plus 100 ms, the same for every node. A node starts the key's counter there instead of
/// at its own clock when that is at most 200 ms ahead of it (`fence_prologue.lua`), so
/// nodes whose clocks are within 100 ms of this one's start it equal, and the acquisition
/// needs no second round trip to raise the ones that lag (`QuorumDriver::fence`).
fn seed_floor() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from((now + Duration::from_millis(100)).as_micros()).unwrap_or(u64::MAX)
}

/// The nodes whose release failed in a blip, until the release is decided: then, when it
/// was decided (not re-sent whole by the caller), each is sent it again alone, and so is
/// every node that fails later (a request left to finish in the background).
struct FailedNodes<R> {
    /// Decided (`Some(true)`: re-send to failed nodes), and the nodes failed before.
    state: std::sync::Mutex<(Option<bool>, Vec<Arc<Node>>)>,
    driver: R,
}

impl<R: Fn(Arc<Node>)> FailedNodes<R> {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<bool>, Vec<Arc<Node>>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn failed(&self, node: Arc<Node>) {
        let mut state = self.lock();
        match state.0 {
            None => state.1.push(node),
            Some(true) => {
                drop(state);
                (self.driver)(node);
            }
            Some(false) => {}
        }
    }

    fn decided(&self, resend: bool) {
        let nodes = {
            let mut state = self.lock();
            state.0 = Some(resend);
            std::mem::take(&mut state.1)
        };
        if resend {
            for node in nodes {
                (self.driver)(node);
            }
        }
    }
}
