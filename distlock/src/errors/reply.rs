//! What the protocol says of a reply it cannot read: produced by the readers of
//! [`Call`](crate::protocol::Call), carried by the drivers' errors (`errors/backend.rs`).

/// A reply a script cannot give: the server runs other scripts under these names, or
/// something between rewrote the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnexpectedReply {
    /// Which script answered (its name).
    pub(crate) script: &'static str,
    /// The reply, as redis-rs shows it.
    pub(crate) reply: String,
}

impl std::fmt::Display for UnexpectedReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unexpected reply to the {} script: {}",
            self.script, self.reply
        )
    }
}
