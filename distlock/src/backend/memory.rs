//! The in-process backend: the same protocol as the Redis scripts, on a mutex-guarded map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Attempt, Released};
use crate::hub::Hub;
use crate::keys::LockKeys;
use crate::owner::OwnerId;

#[derive(Debug)]
struct Held {
    owners: HashMap<OwnerId, u32>,
    expires_at: Instant,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<String, Held>,
    fences: HashMap<String, u64>,
    ops: u64,
}

/// Locks held in this process only.
#[derive(Debug)]
pub(crate) struct MemoryDriver {
    state: Mutex<State>,
    hub: Arc<Hub>,
}

impl MemoryDriver {
    pub fn new(hub: Arc<Hub>) -> MemoryDriver {
        MemoryDriver {
            state: Mutex::new(State::default()),
            hub,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change below is completed before any code that could panic runs.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock's entry, if it exists and has not expired (an expired one is removed).
    fn live<'a>(state: &'a mut State, hash: &str, now: Instant) -> Option<&'a mut Held> {
        if state.locks.get(hash).is_some_and(|h| h.expires_at <= now) {
            state.locks.remove(hash);
        }
        state.locks.get_mut(hash)
    }

    pub fn acquire(&self, keys: &LockKeys, owner: OwnerId, lease: Duration) -> Attempt {
        let now = Instant::now();
        let mut st = self.state();
        st.ops += 1;
        if st.ops.is_multiple_of(4096) {
            st.locks.retain(|_, h| h.expires_at > now);
        }
        match Self::live(&mut st, &keys.hash, now) {
            None => {
                let fence = st.fences.entry(keys.fence.clone()).or_insert(0);
                *fence += 1;
                let token = *fence;
                st.locks.insert(
                    keys.hash.clone(),
                    Held {
                        owners: HashMap::from([(owner, 1)]),
                        expires_at: now + lease,
                    },
                );
                Attempt::Acquired { token }
            }
            Some(held) => match held.owners.get_mut(&owner) {
                Some(count) => {
                    *count += 1;
                    held.expires_at = held.expires_at.max(now + lease);
                    Attempt::Reentered
                }
                None => Attempt::Held {
                    ttl: Some(held.expires_at - now),
                },
            },
        }
    }

    pub fn release(&self, keys: &LockKeys, owner: OwnerId) -> Released {
        let now = Instant::now();
        let mut st = self.state();
        let Some(held) = Self::live(&mut st, &keys.hash, now) else {
            return Released::NotHeld;
        };
        let Some(count) = held.owners.get_mut(&owner) else {
            return Released::NotHeld;
        };
        *count -= 1;
        if *count > 0 {
            return Released::StillHeld;
        }
        st.locks.remove(&keys.hash);
        drop(st);
        self.hub.deliver(&keys.channel);
        Released::Freed
    }

    pub fn renew(&self, items: &[(&LockKeys, OwnerId)], lease: Duration) -> Vec<bool> {
        let now = Instant::now();
        let mut st = self.state();
        items
            .iter()
            .map(|(keys, owner)| match Self::live(&mut st, &keys.hash, now) {
                Some(h) if h.owners.contains_key(owner) => {
                    h.expires_at = now + lease;
                    true
                }
                _ => false,
            })
            .collect()
    }

    /// A counter outside the lock layout (ids); memory counters never expire.
    pub fn next_sequence(&self, key: &str) -> u64 {
        let mut st = self.state();
        let n = st.fences.entry(key.to_owned()).or_insert(0);
        *n += 1;
        *n
    }

    pub fn force_release(&self, keys: &LockKeys) -> bool {
        let now = Instant::now();
        let mut st = self.state();
        let existed = Self::live(&mut st, &keys.hash, now).is_some();
        st.locks.remove(&keys.hash);
        drop(st);
        if existed {
            self.hub.deliver(&keys.channel);
        }
        existed
    }
}
