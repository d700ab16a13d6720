//! The lock protocol, as Lua scripts (public so it can be read, audited and benchmarked). Each runs atomically; all keys of one lock share a
//! hash tag, so each script touches one cluster slot.
//!
//! A lock is a hash `owner id -> reentrancy count` whose expiry is the lease. A companion
//! counter gives fencing tokens. A release that frees the lock publishes on the lock's channel.
//! Fair and read-write locks have keys of their own (see [`FAIR_ACQUIRE`], [`RW_ACQUIRE`]).

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
/// with SPUBLISH when `ARGV[3]` is `spublish`, as on a Redis Cluster, where a sharded message
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
/// KEYS: lock hash (for fair and read-write locks, their other keys too). ARGV: channel,
/// and optionally `spublish` (as for [`RELEASE`]). Returns 1 when a lock was deleted.
pub const FORCE_RELEASE: &str = r#"
if redis.call('del', unpack(KEYS)) > 0 then
  if ARGV[2] == 'spublish' then
    redis.call('spublish', ARGV[1], '')
  else
    redis.call('publish', ARGV[1], '')
  end
  return 1
end
return 0
"#;

/// The start of every read-write script: the current time from Redis (`TIME`, in ms), then
/// the expired state purged: readers past their own lease end, waiting writers past their
/// deadline, a writer past its lease. `touch()` sets each key's expiry to the latest live
/// deadline in it (deleting what holds nothing live).
///
/// Layout (all in the lock's hash tag): `PREFIX{KEY}:rw` a hash: `writer` (owner id),
/// `wcount` (its reentrancy count), `wexp` (its lease end, ms), and `r:<owner>` (a reader's
/// reentrancy count) per reader; `PREFIX{KEY}:rw:readers` a zset `owner -> lease end (ms)`;
/// `PREFIX{KEY}:rw:writers` a zset `waiting writer -> deadline (ms)`.
macro_rules! rw_prologue {
    () => {
        r#"
local rw, readers, writers = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('zrangebyscore', readers, '-inf', now)
for _, o in ipairs(dead) do redis.call('hdel', rw, 'r:' .. o) end
if #dead > 0 then redis.call('zremrangebyscore', readers, '-inf', now) end
redis.call('zremrangebyscore', writers, '-inf', now)
local writer = redis.call('hget', rw, 'writer')
local wexp = tonumber(redis.call('hget', rw, 'wexp') or 0)
if writer and wexp <= now then
  redis.call('hdel', rw, 'writer', 'wcount', 'wexp')
  writer = false
end
local function last_reader()
  local r = redis.call('zrange', readers, -1, -1, 'withscores')
  if r[2] then return tonumber(r[2]) end
  return nil
end
local function touch()
  local last = now
  if writer then last = math.max(last, wexp) end
  local r = last_reader()
  if r then last = math.max(last, r) end
  if last > now then
    redis.call('pexpire', rw, last - now)
    redis.call('pexpire', readers, last - now)
  else
    redis.call('del', rw, readers)
  end
  local w = redis.call('zrange', writers, -1, -1, 'withscores')
  if w[2] then redis.call('pexpire', writers, math.max(tonumber(w[2]) - now, 1)) end
end
"#
    };
}

/// Acquire or re-enter a read or write lock. Writer-preferring: a writer that has to wait
/// (and may wait: `ARGV[4] > 0`) records itself in the writers zset until its deadline, and
/// while a live writer waits, new readers are refused (readers already holding re-enter,
/// and the writer itself may take a read lock: a downgrade). A write lock is not granted to
/// an owner holding only a read lock (no upgrade): it waits like any writer.
///
/// KEYS: rw hash, readers zset, writers zset, fence counter. ARGV: owner id, lease in ms,
/// `read` or `write`, the wait left in ms (0: do not queue). Returns as [`ACQUIRE`].
pub const RW_ACQUIRE: &str = concat!(
    rw_prologue!(),
    r#"
local owner, lease, mode, wait = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local function left(t) return math.max(t - now, 1) end
if mode == 'read' then
  local rc = 'r:' .. owner
  if redis.call('hexists', rw, rc) == 1 then
    redis.call('hincrby', rw, rc, 1)
    local e = tonumber(redis.call('zscore', readers, owner) or 0)
    if e < now + lease then redis.call('zadd', readers, now + lease, owner) end
    touch()
    return {2, 0}
  end
  if writer and writer ~= owner then return {0, left(wexp)} end
  if not writer then
    local w = redis.call('zrange', writers, 0, 0, 'withscores')
    if w[2] then return {0, left(tonumber(w[2]))} end
  end
  local token = redis.call('incr', KEYS[4])
  redis.call('hset', rw, rc, 1)
  redis.call('zadd', readers, now + lease, owner)
  touch()
  return {1, token}
end
if writer == owner then
  redis.call('hincrby', rw, 'wcount', 1)
  if wexp < now + lease then
    wexp = now + lease
    redis.call('hset', rw, 'wexp', wexp)
  end
  touch()
  return {2, 0}
end
local busy = nil
if writer then busy = wexp else busy = last_reader() end
if busy then
  if wait > 0 then
    redis.call('zadd', writers, now + wait, owner)
    touch()
  end
  return {0, left(busy)}
end
local token = redis.call('incr', KEYS[4])
writer, wexp = owner, now + lease
redis.call('hset', rw, 'writer', owner, 'wcount', 1, 'wexp', wexp)
redis.call('zrem', writers, owner)
touch()
return {1, token}
"#
);

/// Release one level of a read or write lock.
///
/// KEYS: rw hash, readers zset, writers zset. ARGV: owner id, `read` or `write`, channel,
/// optionally `spublish`. Returns as [`RELEASE`]. Publishes when a writer leaves (waiting
/// readers and writers may go) and when the last reader leaves (a waiting writer may go).
pub const RW_RELEASE: &str = concat!(
    rw_prologue!(),
    r#"
local owner, mode = ARGV[1], ARGV[2]
local function announce()
  if ARGV[4] == 'spublish' then
    redis.call('spublish', ARGV[3], owner)
  else
    redis.call('publish', ARGV[3], owner)
  end
end
if mode == 'write' then
  if writer ~= owner then return -1 end
  local n = redis.call('hincrby', rw, 'wcount', -1)
  if n > 0 then return n end
  redis.call('hdel', rw, 'writer', 'wcount', 'wexp')
  writer = false
  touch()
  announce()
  return 0
end
local rc = 'r:' .. owner
if redis.call('hexists', rw, rc) == 0 then return -1 end
local n = redis.call('hincrby', rw, rc, -1)
if n > 0 then return n end
redis.call('hdel', rw, rc)
redis.call('zrem', readers, owner)
touch()
if not writer and redis.call('zcard', readers) == 0 then announce() end
return 0
"#
);

/// Renew one reader's or the writer's own lease, only while it still holds it.
///
/// KEYS: rw hash, readers zset, writers zset. ARGV: owner id, lease in ms, `read` or
/// `write`. Returns 1 when renewed, 0 when gone.
pub const RW_RENEW: &str = concat!(
    rw_prologue!(),
    r#"
local owner, lease = ARGV[1], tonumber(ARGV[2])
if ARGV[3] == 'write' then
  if writer ~= owner then return 0 end
  wexp = now + lease
  redis.call('hset', rw, 'wexp', wexp)
else
  if not redis.call('zscore', readers, owner) then return 0 end
  redis.call('zadd', readers, now + lease, owner)
end
touch()
return 1
"#
);

/// A writer gives up waiting: it leaves the writers zset, and waiting readers are woken.
///
/// KEYS: rw hash, readers zset, writers zset. ARGV: owner id, channel, optionally
/// `spublish`. Returns 1 when it was waiting.
pub const RW_CANCEL: &str = concat!(
    rw_prologue!(),
    r#"
if redis.call('zrem', writers, ARGV[1]) == 0 then return 0 end
touch()
if ARGV[3] == 'spublish' then
  redis.call('spublish', ARGV[2], ARGV[1])
else
  redis.call('publish', ARGV[2], ARGV[1])
end
return 1
"#
);

/// Acquire or re-enter a fair lock: granted in the order waiters asked.
///
/// The lock itself is a hash like the reentrant lock's (`PREFIX{KEY}:fair`, released and
/// renewed with [`RELEASE`] and [`RENEW`]). Waiters queue in a list (`...:fair:queue`) with
/// a deadline each in a zset (`...:fair:waiters`): the waiter's own wait end. A waiter past
/// its deadline (it died, or gave up without [`FAIR_CANCEL`]) is dropped from the zset, and
/// from the list when it reaches the head. A free lock goes to the head of the queue only;
/// a newcomer takes it only when nobody queues.
///
/// KEYS: lock hash, queue list, waiters zset, fence counter. ARGV: owner id, lease in ms,
/// the wait left in ms (0: do not queue). Returns as [`ACQUIRE`]; a refused waiter gets the
/// time until the lock's lease ends, or until the head's deadline when the lock is free.
pub const FAIR_ACQUIRE: &str = r#"
local lock, queue, waiters = KEYS[1], KEYS[2], KEYS[3]
local owner, lease, wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', waiters, '-inf', now)
local head = redis.call('lindex', queue, 0)
while head and not redis.call('zscore', waiters, head) do
  redis.call('lpop', queue)
  head = redis.call('lindex', queue, 0)
end
local function tidy()
  local w = redis.call('zrange', waiters, -1, -1, 'withscores')
  if w[2] then
    local ttl = math.max(tonumber(w[2]) - now, 1)
    redis.call('pexpire', waiters, ttl)
    redis.call('pexpire', queue, ttl)
  else
    redis.call('del', queue, waiters)
  end
end
local function enqueue()
  if wait <= 0 then return end
  if not redis.call('zscore', waiters, owner) then
    redis.call('rpush', queue, owner)
  end
  redis.call('zadd', waiters, now + wait, owner)
  tidy()
end
if redis.call('exists', lock) == 1 then
  if redis.call('hexists', lock, owner) == 1 then
    redis.call('hincrby', lock, owner, 1)
    if redis.call('pttl', lock) < lease then
      redis.call('pexpire', lock, lease)
    end
    return {2, 0}
  end
  enqueue()
  return {0, redis.call('pttl', lock)}
end
if head and head ~= owner then
  enqueue()
  local deadline = tonumber(redis.call('zscore', waiters, head))
  return {0, math.max(deadline - now, 1)}
end
if head then
  redis.call('lpop', queue)
  redis.call('zrem', waiters, owner)
  tidy()
end
local token = redis.call('incr', KEYS[4])
redis.call('hset', lock, owner, 1)
redis.call('pexpire', lock, lease)
return {1, token}
"#;

/// A fair waiter gives up: it leaves the queue, and when the lock is free the waiters are
/// woken (the next head takes it).
///
/// KEYS: lock hash, queue list, waiters zset. ARGV: owner id, channel, optionally
/// `spublish`. Returns 1 when it was queued.
pub const FAIR_CANCEL: &str = r#"
if redis.call('zrem', KEYS[3], ARGV[1]) == 0 then return 0 end
redis.call('lrem', KEYS[2], 0, ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
  if ARGV[3] == 'spublish' then
    redis.call('spublish', ARGV[2], ARGV[1])
  else
    redis.call('publish', ARGV[2], ARGV[1])
  end
end
return 1
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
    pub rw_acquire: LuaScript,
    pub rw_release: LuaScript,
    pub rw_renew: LuaScript,
    pub rw_cancel: LuaScript,
    pub fair_acquire: LuaScript,
    pub fair_cancel: LuaScript,
}

impl Scripts {
    pub fn get() -> &'static Scripts {
        static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
            acquire: LuaScript::new(ACQUIRE),
            release: LuaScript::new(RELEASE),
            renew: LuaScript::new(RENEW),
            force_release: LuaScript::new(FORCE_RELEASE),
            rw_acquire: LuaScript::new(RW_ACQUIRE),
            rw_release: LuaScript::new(RW_RELEASE),
            rw_renew: LuaScript::new(RW_RENEW),
            rw_cancel: LuaScript::new(RW_CANCEL),
            fair_acquire: LuaScript::new(FAIR_ACQUIRE),
            fair_cancel: LuaScript::new(FAIR_CANCEL),
        });
        &SCRIPTS
    }
}
