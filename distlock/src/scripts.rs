//! The lock protocol, as Lua scripts (public so it can be read, audited and benchmarked). Each runs atomically; all keys of one lock share a
//! hash tag, so each script touches one cluster slot.
//!
//! A lock is a hash `owner id -> reentrancy count` whose expiry is the lease. A companion
//! counter gives fencing tokens. A release that frees the lock publishes on the lock's channel.

/// Acquire or re-enter.
///
/// KEYS: lock hash, fence counter. ARGV: owner id, lease in ms.
/// Returns `{1, token}` when newly acquired, `{2, 0}` when re-entered by the same owner
/// (the expiry is only ever extended), `{0, pttl}` when another owner holds it.
pub const ACQUIRE: &str = r#"
local lock, fence, owner, lease = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
if redis.call('exists', lock) == 0 then
  local token = redis.call('incr', fence)
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  return {1, token}
end
if redis.call('hexists', lock, owner) == 1 then
  redis.call('hincrby', lock, owner, 1)
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  return {2, 0}
end
return {0, redis.call('pttl', lock)}
"#;

/// Release one level.
///
/// KEYS: lock hash. ARGV: owner id, channel, and optionally `spublish`.
/// Returns -1 when the owner does not hold the lock (changes nothing), the remaining count
/// when still held re-entrantly, 0 when the lock was freed (then it publishes on the channel:
/// with SPUBLISH when ARGV[3] is `spublish`, as on a Redis Cluster, where a sharded message
/// reaches the subscribers on the slot's own nodes without a hop over the cluster bus).
pub const RELEASE: &str = r#"
local lock, owner = KEYS[1], ARGV[1]
if redis.call('hexists', lock, owner) == 0 then
  return -1
end
local left = redis.call('hincrby', lock, owner, -1)
if left > 0 then
  return left
end
redis.call('del', lock)
if ARGV[3] == 'spublish' then
  redis.call('spublish', ARGV[2], owner)
else
  redis.call('publish', ARGV[2], owner)
end
return 0
"#;

/// Renew a lease, only while the owner still holds the lock: never re-creates it.
///
/// KEYS: lock hash. ARGV: owner id, lease in ms. Returns 1 when renewed, 0 when gone.
pub const RENEW: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"#;

/// Delete a lock whoever holds it (administration), publishing the release.
///
/// KEYS: lock hash. ARGV: channel, and optionally `spublish` (as for [`RELEASE`]).
/// Returns 1 when a lock was deleted.
pub const FORCE_RELEASE: &str = r#"
if redis.call('del', KEYS[1]) == 1 then
  if ARGV[2] == 'spublish' then
    redis.call('spublish', ARGV[1], '')
  else
    redis.call('publish', ARGV[1], '')
  end
  return 1
end
return 0
"#;

/// A script with its SHA1, for EVALSHA.
#[derive(Debug)]
pub(crate) struct LuaScript {
    pub source: &'static str,
    pub sha: String,
}

impl LuaScript {
    pub fn new(source: &'static str) -> LuaScript {
        LuaScript {
            source,
            sha: redis::Script::new(source).get_hash().to_string(),
        }
    }
}

/// The scripts of the protocol, hashed once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub acquire: LuaScript,
    pub release: LuaScript,
    pub renew: LuaScript,
    pub force_release: LuaScript,
}

impl Scripts {
    pub fn get() -> &'static Scripts {
        static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
            acquire: LuaScript::new(ACQUIRE),
            release: LuaScript::new(RELEASE),
            renew: LuaScript::new(RENEW),
            force_release: LuaScript::new(FORCE_RELEASE),
        });
        &SCRIPTS
    }
}
