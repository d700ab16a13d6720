-- Redisson-format reentrant / fenced lock: release one hold, publishing when the lock is
-- freed. Safe to run twice: the unlock latch remembers the first run's outcome.
--
-- KEYS[1]  the lock hash (the name itself)
-- KEYS[2]  the channel "redisson_lock__channel:{name}"
-- KEYS[3]  the unlock latch "redisson_unlock_latch:{name}:<request id>", the request id
--          being fresh per unlock call and reused by its retries
-- ARGV[1]  the message: 0 (Redisson's UNLOCK_MESSAGE)
-- ARGV[2]  lease in ms, kept for the holds left after a re-entrant release
-- ARGV[3]  owner field "<client uuid>:<n>"
-- ARGV[4]  "publish", or "spublish" on a cluster where Redisson uses sharded pub/sub
-- ARGV[5]  how long the latch lives, ms
--
-- Returns 1 when the lock was freed (and the message published, unless the PUBLISH is
-- refused: the lock stays freed, waiters wake at their deadlines), 0 when holds are left,
-- -1 when this owner holds nothing (lease lost; nothing written). A retry with the same
-- request id returns the first run's 1 or 0 without touching the lock again.
--
-- Differs from Redisson (RedissonLock.unlockInnerAsync): "not held" is -1 instead of nil;
-- the holds left keep their expiry when it is already longer than the lease (Redisson
-- resets it to the lease); the publish command is checked instead of called blindly.
-- After the reply the caller deletes the latch with DEL (as RedissonBaseLock does).
local lock, channel, latch = KEYS[1], KEYS[2], KEYS[3]
local owner, lease, latch_ttl = ARGV[3], tonumber(ARGV[2]), tonumber(ARGV[5])
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR publish command must be publish or spublish')
end
if lease == nil or lease <= 0 or latch_ttl == nil or latch_ttl <= 0 then
  return redis.error_reply('ERR lease and latch ttl must be positive numbers of ms')
end
local done = redis.call('get', latch)
if done then
  return tonumber(done)
end
if redis.call('hexists', lock, owner) == 0 then
  return -1
end
if redis.call('hincrby', lock, owner, -1) > 0 then
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  redis.call('set', latch, 0, 'px', latch_ttl)
  return 0
end
redis.call('del', lock)
redis.pcall(ARGV[4], channel, ARGV[1])
redis.call('set', latch, 1, 'px', latch_ttl)
return 1
