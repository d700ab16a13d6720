//! Owner ids: 128 random bits per acquisition, never a thread id.

use std::fmt;

/// Who holds a lock: a random 128-bit id made for each acquisition (reentrant acquisitions
/// in the same task reuse their outer acquisition's id).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct OwnerId(u128);

impl OwnerId {
    /// A fresh random id.
    pub(crate) fn random() -> OwnerId {
        OwnerId(rand::random())
    }

    /// The 32 lowercase hex digits stored in Redis.
    pub(crate) fn hex(&self) -> [u8; 32] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 32];
        for (i, byte) in self.0.to_be_bytes().iter().enumerate() {
            out[2 * i] = DIGITS[(byte >> 4) as usize];
            out[2 * i + 1] = DIGITS[(byte & 0xf) as usize];
        }
        out
    }
}

impl OwnerId {
    /// Redisson's owner field for this acquisition (`protocol = "redisson"`):
    /// `"<client uuid>:<n>"`, the UUID being this process's [`redisson_client_id`] and `n`
    /// 63 bits of this id, in decimal (where Redisson writes a thread id). Nested
    /// acquisitions in the same task share their outer acquisition's id, hence its field.
    pub(crate) fn redisson_field(&self) -> String {
        format!("{}:{}", redisson_client_id(), (self.0 as u64) >> 1)
    }
}

/// This process's Redisson client id: one random UUID (version 4, lowercase, with dashes),
/// as `ServiceManager.getId()` makes one per Redisson client.
pub(crate) fn redisson_client_id() -> &'static str {
    static ID: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let mut b: [u8; 16] = rand::random();
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    });
    &ID
}

/// One acquisition as the protocol sees it: the owner (shared by the nested acquisitions
/// of one hold), a level id of its own (so a script run twice, or rolled back, counts it
/// once), and whether the owner holds the lock already (and in which mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) owner: OwnerId,
    pub(crate) level: u64,
    pub(crate) nested: bool,
    /// Set on the release that undoes this acquisition, whose outcome its caller never
    /// learned (the reply lost, the future dropped, a failed quorum): no guard was handed
    /// out, so nothing ran under it, and what it set for after its holder (a run-once
    /// job's `hold:until`) goes with it. See [`Hold::undoing`].
    pub(crate) undo: bool,
    /// Set on the release of an outermost hold that holds its nested permit (see
    /// `LeaseState::nested`) until the release has run: no nested hold of it is live, and
    /// none can run on the server before this release, so this level is the owner's only
    /// one and the script frees the lock without counting down (one call fewer).
    pub(crate) only_level: bool,
    /// An attempt of this acquisition got no answer (an error; a retry with the same level
    /// took the lock): it may still run on the server after this hold is released, and take
    /// the lock, or a queue place, again for nobody. Its release (and its queue place) is
    /// sent again a while later (`backend/undo.rs`).
    pub(crate) late: bool,
    /// Set on a release while waiters of its backend wait for the lock (`Hub::waiting_on`):
    /// a release that frees it publishes even when no waiter's tag is in the lock
    /// (`release.lua`). A release wakes one waiter of a process, and that one's
    /// acquisition leaves no tag for the others asleep.
    pub(crate) others_wait: bool,
    /// For a nested acquisition, the enclosing hold it must find: of the same kind, or
    /// (a read-write lock) of the other mode.
    pub(crate) enclosing: Enclosing,
}

/// The enclosing hold a nested acquisition requires (the scripts answer "outer lost"
/// without it, and create nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enclosing {
    /// A hold of the same kind (and mode) by the owner.
    Same,
    /// The owner's write hold (a read nested in a write lock).
    Write,
    /// The owner's read hold (a write nested in a read lock, sent only when the task holds
    /// the write lock further out, so that the script finds the owner writing; without
    /// that the acquisition is refused before anything is sent: there is no upgrade).
    Read,
}

impl Hold {
    /// A new hold by a new owner.
    pub(crate) fn fresh() -> Hold {
        Hold {
            owner: OwnerId::random(),
            level: rand::random(),
            nested: false,
            enclosing: Enclosing::Same,
            undo: false,
            only_level: false,
            late: false,
            others_wait: false,
        }
    }

    /// A nested acquisition by `owner`, which holds the lock already (tests).
    #[cfg(test)]
    pub(crate) fn nested(owner: OwnerId) -> Hold {
        Hold::nested_in(owner, Enclosing::Same)
    }

    /// A nested acquisition by `owner`, which holds the lock already as `enclosing` says.
    pub(crate) fn nested_in(owner: OwnerId, enclosing: Enclosing) -> Hold {
        Hold {
            owner,
            level: rand::random(),
            nested: true,
            undo: false,
            only_level: false,
            late: false,
            others_wait: false,
            enclosing,
        }
    }

    /// The nested flag as the scripts take it: `0` a fresh acquisition, `1` nested in a
    /// hold of the same kind, `w` in the owner's write hold, `r` in its read hold.
    pub(crate) fn nested_arg(&self) -> &'static str {
        match (self.nested, self.enclosing) {
            (false, _) => "0",
            (true, Enclosing::Same) => "1",
            (true, Enclosing::Write) => "w",
            (true, Enclosing::Read) => "r",
        }
    }

    /// This acquisition, as the release that undoes it sees it (`undo` set).
    pub(crate) fn undoing(self) -> Hold {
        Hold {
            undo: true,
            only_level: false,
            ..self
        }
    }

    /// The same hold under a new level id (Redisson's format: a new unlock request id,
    /// `Hold::redisson_request`; its owner field stays).
    pub(crate) fn renumbered(self) -> Hold {
        Hold {
            level: rand::random(),
            ..self
        }
    }

    /// The level id as the scripts take it.
    pub(crate) fn level_hex(&self) -> String {
        format!("{:016x}", self.level)
    }

    /// The request id of this hold's unlock in Redisson's format (32 hex digits, as
    /// `ServiceManager.generateId`): the same for every retry of that unlock, so the
    /// unlock latch answers a retry with the first run's result.
    pub(crate) fn redisson_request(&self) -> String {
        format!("{:016x}{:016x}", (self.owner.0 >> 64) as u64, self.level)
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_matches_format() {
        let o = OwnerId::random();
        assert_eq!(std::str::from_utf8(&o.hex()).unwrap(), format!("{o:?}"));
        assert_ne!(OwnerId::random(), OwnerId::random());
    }

    #[test]
    fn redisson_fields() {
        let id = redisson_client_id();
        assert_eq!(id.len(), 36);
        assert_eq!(id.matches('-').count(), 4);
        assert_eq!(&id[14..15], "4");
        let o = OwnerId::random();
        let field = o.redisson_field();
        let (uuid, n) = field.rsplit_once(':').unwrap();
        assert_eq!(uuid, id);
        assert!(n.parse::<i64>().unwrap() >= 0, "a positive Java long");
        assert_eq!(Hold::nested(o).owner.redisson_field(), field);
        let h = Hold::fresh();
        assert_eq!(h.redisson_request().len(), 32);
        assert_ne!(
            h.redisson_request(),
            Hold::nested(h.owner).redisson_request()
        );
    }
}
