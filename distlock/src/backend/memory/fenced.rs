//! `crate::ops::fence` on the memory backend: the fenced-write protocol of
//! `protocol/fence.lua` and `protocol/fence_claim.lua`, on a mutex-guarded map of its own
//! (fenced values share nothing with the locks).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The fenced values of one memory backend.
#[derive(Debug, Default)]
pub(super) struct FencedValues {
    map: Mutex<HashMap<String, FencedEntry>>,
}

/// A fenced value in memory: the value and the token it was written with (none yet when
/// only claimed), the largest token claimed, the expiry.
#[derive(Debug)]
struct FencedEntry {
    value: Option<Vec<u8>>,
    token: u64,
    claimed: u64,
    expires: Option<Instant>,
}

impl FencedEntry {
    /// The smallest token accepted from now on.
    fn floor(&self) -> u64 {
        self.token.max(self.claimed)
    }
}

impl FencedValues {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, FencedEntry>> {
        // Every change below is completed before any code that could panic runs.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live entry of `key` (an expired one is removed first).
    fn entry<'a>(
        map: &'a mut HashMap<String, FencedEntry>,
        key: &str,
        now: Instant,
    ) -> Option<&'a mut FencedEntry> {
        if map
            .get(key)
            .is_some_and(|e| e.expires.is_some_and(|at| at <= now))
        {
            map.remove(key);
        }
        map.get_mut(key)
    }

    /// Store `value` under `key` unless `token` is below the last token stored or claimed
    /// there. Returns whether it was stored.
    pub(super) fn set(&self, key: &str, value: &[u8], token: u64, ttl: Option<Duration>) -> bool {
        let now = Instant::now();
        let mut map = self.map();
        let claimed = match Self::entry(&mut map, key, now) {
            Some(e) if token < e.floor() => return false,
            Some(e) => e.claimed,
            None => 0,
        };
        map.insert(
            key.to_owned(),
            FencedEntry {
                value: Some(value.to_vec()),
                token,
                claimed,
                // The ttl was checked (at most 365 days); a later Instant that cannot be
                // represented is "never".
                expires: ttl.and_then(|t| now.checked_add(t)),
            },
        );
        true
    }

    /// Raise the token stored under `key` to `token` (the value stays) unless a larger one
    /// is stored or claimed there. Returns whether it was claimed.
    pub(super) fn claim(&self, key: &str, token: u64, ttl: Option<Duration>) -> bool {
        let now = Instant::now();
        let mut map = self.map();
        let expires = ttl.and_then(|t| now.checked_add(t));
        match Self::entry(&mut map, key, now) {
            Some(e) if token < e.floor() => false,
            Some(e) => {
                e.claimed = token;
                e.expires = expires;
                true
            }
            None => {
                map.insert(
                    key.to_owned(),
                    FencedEntry {
                        value: None,
                        token: 0,
                        claimed: token,
                        expires,
                    },
                );
                true
            }
        }
    }

    /// The value and token stored under `key`, if any (and not expired).
    pub(super) fn get(&self, key: &str) -> Option<(Vec<u8>, u64)> {
        let now = Instant::now();
        self.map()
            .get(key)
            .filter(|e| e.expires.is_none_or(|at| at > now))
            .and_then(|e| Some((e.value.clone()?, e.token)))
    }
}
