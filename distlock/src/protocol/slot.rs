//! Cluster slots, as Redis computes them: the routing of a command on a cluster
//! (`backend/cluster_slots.rs`) and the name of a slot's fencing counter (`keys.rs`).

use std::sync::OnceLock;

/// The number of slots of a Redis cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the first
/// `{` and the next `}`, when not empty), else of the whole key, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// What the hash tag of a slot's fencing counter starts with (`keys.rs`): the counter of
/// slot S is `PREFIX{{fence:N}`, whose tag `{fence:N` hashes to S. No lock key's name has
/// a tag that starts with `{` (a key holding a brace gets the tag `{#HASH}`), so no lock
/// key is ever named so.
pub(crate) const COUNTER_TAG: &str = "{fence:";

/// The number `N` of the counter tag ([`COUNTER_TAG`]`N`) that falls in `slot`: the
/// smallest one. The table of all 16384 is worked out once per process, on first use
/// (about 180 000 CRCs of a dozen bytes; about a millisecond in a release build).
pub(crate) fn counter_tag(slot: u16) -> u32 {
    static TAGS: OnceLock<Vec<u32>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; usize::from(SLOTS)];
        let mut left = usize::from(SLOTS);
        let mut n: u32 = 0;
        while left > 0 {
            let s = usize::from(crc16(format!("{COUNTER_TAG}{n}").as_bytes()) % SLOTS);
            if tags[s] == u32::MAX {
                tags[s] = n;
                left -= 1;
            }
            n += 1;
        }
        tags
    });
    tags[usize::from(slot % SLOTS)]
}

#[cfg(test)]
mod tests {
    use super::{counter_tag, crc16, slot, COUNTER_TAG, SLOTS};

    #[test]
    fn slots_as_redis_computes_them() {
        // `CLUSTER KEYSLOT` of these, on Redis 7.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(
            slot(b"foo{}{bar}"),
            crc16(b"foo{}{bar}") % 16384,
            "an empty tag: the whole key"
        );
        assert_eq!(
            slot(b"foo{{bar}}zap"),
            slot(b"{bar"),
            "the first {{ to the next }}"
        );
        assert_eq!(slot(b"123456789"), 0x31C3, "CRC16/XMODEM check value");
    }

    #[test]
    fn every_slot_has_a_counter_tag() {
        for s in 0..SLOTS {
            let n = counter_tag(s);
            assert_eq!(
                slot(format!("x{{{COUNTER_TAG}{n}}}").as_bytes()),
                s,
                "slot {s}"
            );
        }
        assert!(counter_tag(SLOTS - 1) < 1_000_000);
    }
}
