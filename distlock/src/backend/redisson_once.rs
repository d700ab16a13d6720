//! Redisson-format acquisitions on a cluster: the connection that never sends a command
//! twice, and their order before their undo.
//!
//! redis-rs's cluster client sends a command again after a dropped connection (and some
//! time-outs); Redisson's acquire scripts cannot tell that run again from a re-entry, so
//! those acquisitions go on a cluster connection of their own with `retries(0)`
//! ([`connect`]). The release or cancel that undoes a cut one (its future dropped: no
//! guard was handed out) goes on the routed connections, and two connections do not keep
//! order: the undo could run first, find nothing, and the acquisition then take the lock
//! for nobody until its lease ends. So each such acquisition runs as a task of the
//! background runtime, to its end even when its caller leaves, counted under its lock and
//! owner ([`InFlight::run`]); an undo of that owner's hold waits for it first, at most the
//! response timeout ([`InFlight::ended`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_config::RedisUrl;
use redis::cluster_async::ClusterConnection;
use tokio::sync::Notify;

use super::conn::Settings;
use super::link::Link;
use crate::errors::backend::{bounded, DriverError};
use crate::protocol::exec::Functions;
use crate::protocol::Publish;
use crate::terms::owner::OwnerId;

/// The cluster connection that never sends a command twice, for Redisson's acquire
/// scripts (a call that did not run is sent again: `protocol/exec.rs`). `functions`: the
/// cluster link's, which loads the library on the masters.
pub(crate) async fn connect(
    settings: &Settings,
    nodes: &[RedisUrl],
    address: &str,
    publish: Publish,
    functions: Arc<Functions>,
) -> Result<Link<ClusterConnection>, DriverError> {
    let client = settings
        .cluster_commands(nodes)
        .retries(0)
        .build()
        .map_err(|e| DriverError::redis(address, e))?;
    let conn = bounded(
        address,
        "connect timed out",
        settings.connect_timeout * 2,
        client.get_async_connection(),
    )
    .await?;
    Ok(Link {
        conn,
        address: address.to_owned(),
        response_timeout: settings.response_timeout,
        publish,
        direct: None,
        functions,
    })
}

/// Acquisitions under way, by lock hash and owner (an entry goes with the last of them).
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    under_way: Mutex<HashMap<(String, OwnerId), usize>>,
    ended: Notify,
}

/// Ends one acquisition's count however its task ends.
struct Counted(Arc<InFlight>, (String, OwnerId));

impl Drop for Counted {
    fn drop(&mut self) {
        let mut map = self.0.under_way.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.1);
            }
        }
        drop(map);
        self.0.ended.notify_waiters();
    }
}

impl InFlight {
    /// Run `attempt`, an acquisition of `hash` by `owner`, as a background task to its end.
    pub(crate) async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        hash: &str,
        owner: OwnerId,
        address: &str,
        attempt: impl Future<Output = Result<T, DriverError>> + Send + 'static,
    ) -> Result<T, DriverError> {
        let key = (hash.to_owned(), owner);
        *self
            .under_way
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_insert(0) += 1;
        let counted = Counted(self.clone(), key);
        let attempt = async move {
            let _counted = counted;
            attempt.await
        };
        match crate::rt::runtime::handle() {
            Ok(rt) => rt.spawn(attempt).await.unwrap_or_else(|e| {
                Err(DriverError::redis(
                    address,
                    redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "an acquisition's task ended abnormally",
                        e.to_string(),
                    )),
                ))
            }),
            Err(_) => attempt.await,
        }
    }

    /// Until no acquisition of `hash` by `owner` is under way, or `bound` has passed.
    pub(crate) async fn ended(&self, hash: &str, owner: OwnerId, bound: Duration) {
        let key = (hash.to_owned(), owner);
        let _ = tokio::time::timeout(bound, async {
            loop {
                let ended = self.ended.notified();
                let under_way = self
                    .under_way
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(&key);
                if !under_way {
                    return;
                }
                ended.await;
            }
        })
        .await;
    }
}
