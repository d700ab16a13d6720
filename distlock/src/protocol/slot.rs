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

/// A hash tag that falls in `slot`: the smallest number whose decimal digits hash there.
/// The table of all 16384 is worked out once per process, on first use (about 180 000
/// CRCs of at most six digits; a fraction of a millisecond in a release build).
pub(crate) fn tag_of(slot: u16) -> u32 {
    static TAGS: OnceLock<Vec<u32>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; usize::from(SLOTS)];
        let mut left = usize::from(SLOTS);
        let mut n: u32 = 0;
        while left > 0 {
            let s = usize::from(crc16(n.to_string().as_bytes()) % SLOTS);
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
    use super::{crc16, slot, tag_of, SLOTS};

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
    fn every_slot_has_a_tag_of_its_own() {
        for s in 0..SLOTS {
            let tag = tag_of(s);
            assert_eq!(slot(format!("x{{{tag}}}").as_bytes()), s, "slot {s}");
        }
        assert!(tag_of(SLOTS - 1) < 1_000_000);
    }
}
