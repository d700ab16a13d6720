//! The words every layer above speaks: the lock kinds ([`LockKind`](kind::LockKind)) and who
//! holds a lock ([`OwnerId`](owner::OwnerId), [`Hold`](owner::Hold), [`Enclosing`](owner::Enclosing)).
//! Plain data: it imports nothing of the crate.

pub(crate) mod kind;
pub(crate) mod owner;
