//! Undoing an acquisition whose outcome the client never learned (its reply lost or late,
//! its future dropped): the undo can run *before* the acquisition it undoes. A request the
//! client gave up on may still sit unread on the connection that carried it — a paused
//! server reads it when it resumes, a slow path delivers it late, a direct connection
//! closed after its drain timed out still has it in the server's buffer — while the undo
//! goes out on another connection and is answered first. The acquisition then runs, and
//! takes the lock for nobody, for a whole lease.
//!
//! The same holds for an acquisition that did get the lock, by a retry with the same level
//! after an attempt that got no answer (`Hold::late`): that attempt may run after the hold
//! is released.
//!
//! So an undo is sent once more at each of [`AGAIN_AFTER`] after its first answer, and so
//! is the release of a late hold (with its queue place, for a kind that queues): a
//! late acquisition that runs within 2 s of the undo is freed within the
//! pause before the next send (at most 1.5 s; documented: within 3 s). A queue place left
//! while an attempt of it was unanswered is left again in the same way
//! ([`Backend::cancel_again_later`]): the late attempt, refused, queues the place again, and
//! every later waiter of a fair or write lock would wait behind it until its deadline. Each send is the
//! same undo (a level released twice is released once), or for Redisson's format the
//! same field under a new unlock request id
//! ([`crate::protocol::keys::Format::undo_sent_again`]): the field is that acquisition's
//! alone, and a nested acquisition is never undone there. An acquisition that runs later
//! still holds until its lease ends (documented limit).

use std::sync::Arc;
use std::time::Duration;

use super::Backend;
use crate::protocol::keys::LockKeys;
use crate::terms::owner::{Hold, OwnerId};

/// The pauses before each send again of an undo, from its first answer.
pub(crate) const AGAIN_AFTER: [Duration; 3] = [
    Duration::from_millis(100),
    Duration::from_millis(400),
    Duration::from_millis(1500),
];

impl Backend {
    /// `hold` was just released: if that release is an undo, or the release of a hold an
    /// attempt of which got no answer (`Hold::late`), send it again at each of
    /// [`AGAIN_AFTER`], on the background runtime (not awaited by a graceful shutdown: the
    /// lease bounds what it would catch); for a late hold of a kind that queues, leave its
    /// queue place too (the late attempt, refused, takes one). Errors are logged only.
    pub(crate) fn release_again_later(self: &Arc<Self>, keys: &Arc<LockKeys>, hold: Hold) {
        if !hold.undo && !hold.late {
            return;
        }
        let place = hold.late && keys.shape.queues();
        let (backend, keys) = (self.clone(), keys.clone());
        drop(self.runtime.spawn(async move {
            for pause in AGAIN_AFTER {
                tokio::time::sleep(pause).await;
                let again = Hold {
                    late: false,
                    ..keys.format.undo_sent_again(hold)
                };
                if let Err(e) = backend.release(&keys, again).await {
                    tracing::debug!(backend = %backend.name, key = %keys.user, error = %e,
                        "distlock: a release sent again, in case its acquisition ran late, failed");
                }
                if place {
                    if let Err(e) = backend.send_cancel(&keys, hold.owner).await {
                        tracing::debug!(backend = %backend.name, key = %keys.user, error = %e,
                            "distlock: leaving a queue again, in case an attempt ran late, failed");
                    }
                }
            }
        }));
    }

    /// `owner`'s queue place on `keys` was just left while an attempt of it had no answer:
    /// leave it once more at each of [`AGAIN_AFTER`], on the background runtime, as
    /// [`Backend::release_again_later`] does (a place left twice is left once). Errors are
    /// logged only.
    pub(crate) fn cancel_again_later(self: &Arc<Self>, keys: &LockKeys, owner: OwnerId) {
        if self.driver.local().is_some() {
            return;
        }
        let (backend, keys) = (self.clone(), keys.clone());
        drop(self.runtime.spawn(async move {
            for pause in AGAIN_AFTER {
                tokio::time::sleep(pause).await;
                if let Err(e) = backend.send_cancel(&keys, owner).await {
                    tracing::debug!(backend = %backend.name, key = %keys.user, error = %e,
                        "distlock: leaving a queue again, in case an attempt ran late, failed");
                }
            }
        }));
    }
}
