//! One node of a quorum backend: its connection (made in the background while the node is
//! down at start-up) and its health (a node that just failed is left out for a while).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::super::conn::Settings;
use super::super::server::Server;
use crate::errors::backend::DriverError;
use crate::rt::backoff::Backoff;
use crate::rt::clock::to_nanos;

/// A node that just failed or timed out is left out of acquisitions for this long (then one
/// attempt probes it again), so a node that is down does not cost every acquisition its
/// `node_timeout`.
const SKIP_FAILED_FOR: Duration = Duration::from_millis(200);

/// One node: a connection once it could be made (after that the connection reconnects by
/// itself).
pub(super) struct Node {
    pub(super) address: String,
    server: OnceLock<Server>,
    /// The run id of the node's server, recorded when it was first connected and compared
    /// on every connection of its subscriber.
    seen: super::super::subscriber::RunId,
    /// Left out of acquisitions until then (nanos on `clock`; 0: never failed).
    skip_until: AtomicU64,
}

impl Node {
    pub(super) fn new(address: String) -> Node {
        Node {
            address,
            server: OnceLock::new(),
            seen: super::super::subscriber::RunId::default(),
            skip_until: AtomicU64::new(0),
        }
    }

    /// Connected once, to a server whose run id was then `run_id` (recorded before the
    /// server is used, so nothing can be held there before the record).
    pub(super) fn connected(&self, server: Server, run_id: Option<String>) {
        self.seen.changed(run_id);
        let _ = self.server.set(server);
    }

    pub(super) fn is_connected(&self) -> bool {
        self.server.get().is_some()
    }

    /// Whether acquisitions should ask this node now: connected, and not failed lately.
    pub(super) fn available(&self) -> bool {
        self.is_connected() && to_nanos(Instant::now()) >= self.skip_until.load(Ordering::Relaxed)
    }

    /// The node's server, or `NotConnected`.
    pub(super) fn server(&self) -> Result<&Server, DriverError> {
        self.server.get().ok_or_else(|| DriverError::NotConnected {
            address: self.address.clone(),
        })
    }

    /// Record how a request went: a node that failed (or did not answer in time) is left
    /// out for a while; one that answered is in again.
    pub(super) fn answered<T>(&self, r: &Result<T, DriverError>) {
        match r {
            Ok(_) => {
                if self.skip_until.load(Ordering::Relaxed) != 0 {
                    self.skip_until.store(0, Ordering::Relaxed);
                }
            }
            Err(_) => self.skip_until.store(
                to_nanos(Instant::now() + SKIP_FAILED_FOR),
                Ordering::Relaxed,
            ),
        }
    }

    /// `fut` (a request to this node) bounded by `node_timeout`, its outcome recorded.
    pub(super) async fn ask<T>(
        &self,
        node_timeout: Duration,
        fut: impl std::future::Future<Output = Result<T, DriverError>>,
    ) -> Result<T, DriverError> {
        let r = match tokio::time::timeout(node_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(DriverError::TimedOut {
                address: self.address.clone(),
                what: "node_timeout",
                after: node_timeout,
            }),
        };
        self.answered(&r);
        r
    }
}

/// The node subscriber's reconnect hook: the node is back, so refresh its command
/// connection (if it has one yet) and take it into acquisitions again.
/// Answers whether the node's server may have changed (a new run id: see
/// `subscriber::RunId`); then the backend checks every lease at once (the quorum renewal
/// finds which of them still hold on enough nodes).
pub(super) fn refresher(node: Weak<Node>) -> super::super::subscriber::Reconnected {
    Arc::new(move || {
        let node = node.clone();
        Box::pin(async move {
            let Some(server) = node.upgrade().and_then(|n| n.server().ok().cloned()) else {
                return false;
            };
            let r = super::super::subscriber::refresh_now(&server).await;
            let now = server.run_id().await.ok().flatten();
            let Some(n) = node.upgrade() else {
                return false;
            };
            n.answered(&r);
            n.seen.changed(now)
        })
    })
}

/// Connect to the node at `address` and learn its server's run id (for [`Node::connected`]).
pub(super) async fn connect(
    settings: &Settings,
    address: &str,
    client: redis::Client,
) -> Result<(Server, Option<String>), DriverError> {
    let server = Server::connect(settings, address, client, false).await?;
    let run_id = server.run_id().await.ok().flatten();
    Ok((server, run_id))
}

/// Connect to a node that was down at start-up, retrying with backoff until it answers (or
/// the backend is gone). After that its connection reconnects by itself.
pub(super) fn spawn_connect(
    backend: Arc<str>,
    node: Weak<Node>,
    client: redis::Client,
    settings: Settings,
) {
    tokio::spawn(async move {
        let mut backoff = Backoff::reconnect();
        loop {
            tokio::time::sleep(backoff.pause()).await;
            let Some(address) = node.upgrade().map(|n| n.address.clone()) else {
                return;
            };
            match connect(&settings, &address, client.clone()).await {
                Ok((server, run_id)) => {
                    if let Some(node) = node.upgrade() {
                        tracing::info!(backend = %backend, node = %node.address, "distlock: node connected");
                        node.connected(server, run_id);
                    }
                    return;
                }
                Err(e) => {
                    tracing::debug!(backend = %backend, node = %address, error = %e, "distlock: node still unreachable");
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipping_a_failed_node_for_a_while() {
        let node = Node::new("127.0.0.1:1".into());
        assert!(!node.available(), "not connected");
        assert!(node.server().is_err());
        node.answered::<()>(&Err(DriverError::NotConnected {
            address: node.address.clone(),
        }));
        assert!(node.skip_until.load(Ordering::Relaxed) > 0);
        node.answered(&Ok(()));
        assert_eq!(node.skip_until.load(Ordering::Relaxed), 0);
    }
}
