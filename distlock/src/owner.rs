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

/// One acquisition as the protocol sees it: the owner (shared by the nested acquisitions
/// of one hold), a level id of its own (so a script run twice, or rolled back, counts it
/// once), and whether the owner holds the lock already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) owner: OwnerId,
    pub(crate) level: u64,
    pub(crate) nested: bool,
}

impl Hold {
    /// A new hold by a new owner.
    pub(crate) fn fresh() -> Hold {
        Hold {
            owner: OwnerId::random(),
            level: rand::random(),
            nested: false,
        }
    }

    /// A nested acquisition by `owner`, which holds the lock already.
    pub(crate) fn nested(owner: OwnerId) -> Hold {
        Hold {
            owner,
            level: rand::random(),
            nested: true,
        }
    }

    /// The level id as the scripts take it.
    pub(crate) fn level_hex(&self) -> String {
        format!("{:016x}", self.level)
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
}
