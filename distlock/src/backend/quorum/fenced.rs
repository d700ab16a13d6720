//! Fenced writes on a quorum backend (`crate::ops::fence` on redlock and multi).
//!
//! A write goes to every node (`fence_quorum_head.lua`: `fence.lua`, keeping what it
//! replaced). It is **stored** when a quorum of nodes took it and no node that answered
//! holds a newer token; it is **stale** (`false`) when any node that answered holds a newer
//! token, whatever the others did: the lower token must not win a majority of nodes that
//! have not heard of the newer write. Otherwise (too few answers) it failed. A write that
//! is not stored — stale or failed — is **undone** (`fence_undo.lua`) on every node that
//! took it or did not answer in time, so that it never becomes what a read returns later
//! (a read takes the largest token among a quorum of nodes' answers): a node puts back
//! what the write replaced if it still holds exactly that write. The undo of a node that
//! did not answer goes on the same connection after the write, and finishes in the
//! background. What no undo can reach: a node that applies the write after its undo (a
//! request that outlived its connection, sent again by nobody), as a write whose reply is
//! lost can be applied on a single server.

use std::sync::Arc;

use redis::Value;

use super::{finish_in_background, QuorumDriver, Settle};
use crate::backend::topology::FencedSet;
use crate::errors::backend::DriverError;
use crate::protocol::{Call, Script};

/// What one node did with a fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeSet {
    /// Stored.
    Stored,
    /// Refused: the node holds a newer token.
    Stale,
}

impl QuorumDriver {
    /// Store `value` with `token` under the fenced hash `name` on every node (see the
    /// module documentation): `ttl_ms` 0 for none.
    pub(crate) async fn fenced_set(
        &self,
        name: &str,
        value: &[u8],
        token: u64,
        ttl_ms: u64,
    ) -> FencedSet {
        let node_timeout = self.options.node_timeout;
        let set = Arc::new(Call::raw(
            Script::FenceQuorum,
            vec![name.to_owned()],
            vec![
                value.to_vec(),
                token.to_string().into_bytes(),
                ttl_ms.to_string().into_bytes(),
            ],
        ));
        let (replies, rest) = self
            .on_nodes(
                0..self.nodes.len(),
                |node| {
                    let set = set.clone();
                    async move {
                        let server = node.server()?;
                        let reply = node
                            .ask(node_timeout, server.run(&set, "script timed out"))
                            .await?;
                        parse(&node.address, &reply)
                    }
                },
                |_| Settle::Wait,
            )
            .await;
        finish_in_background(rest);
        let stored = replies
            .iter()
            .filter(|r| matches!(r, Some(Ok(NodeSet::Stored))))
            .count();
        let stale = replies
            .iter()
            .any(|r| matches!(r, Some(Ok(NodeSet::Stale))));
        if !stale && stored >= self.quorum {
            return FencedSet::Stored;
        }
        // Not stored: undone wherever it was, or may have been, taken.
        let undo = Arc::new(Call::raw(
            Script::FenceUndo,
            vec![name.to_owned()],
            vec![value.to_vec(), token.to_string().into_bytes()],
        ));
        let which: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| !matches!(replies[i], Some(Ok(NodeSet::Stale))))
            .collect();
        let (_, rest) = self
            .on_nodes(
                which.iter().copied(),
                |node| {
                    let undo = undo.clone();
                    async move {
                        let server = node.server()?;
                        let r = node
                            .ask(node_timeout, server.run(&undo, "script timed out"))
                            .await;
                        if let Err(e) = &r {
                            tracing::debug!(node = %node.address, error = %e,
                                "distlock: undoing a fenced write that failed did not finish in time");
                        }
                        r
                    }
                },
                |_| Settle::Wait,
            )
            .await;
        finish_in_background(rest);
        if stale {
            return FencedSet::Stale;
        }
        FencedSet::Failed {
            stored,
            needed: self.quorum,
            nodes: self.nodes.len(),
            error: replies.into_iter().flatten().find_map(Result::err),
        }
    }
}

/// A node's reply to `fence_quorum_head.lua`: `{1, ..}` stored, `{0, ..}` stale.
fn parse(address: &str, v: &Value) -> Result<NodeSet, DriverError> {
    match v {
        Value::Array(items) if items.len() == 2 => match items[0] {
            Value::Int(1) => return Ok(NodeSet::Stored),
            Value::Int(0) => return Ok(NodeSet::Stale),
            _ => {}
        },
        _ => {}
    }
    Err(DriverError::Unexpected {
        address: address.to_owned(),
        reply: crate::errors::reply::UnexpectedReply {
            script: Script::FenceQuorum.name(),
            reply: format!("{v:?}"),
        },
    })
}
