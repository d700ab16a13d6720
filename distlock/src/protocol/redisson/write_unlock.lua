-- Redisson-format write lock: release one write hold. Safe to run twice (the unlock latch).
--
-- KEYS[1]  the read-write lock hash (the name itself)
-- KEYS[2]  the channel "redisson_rwlock:{name}"
-- KEYS[3]  the unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1]  the message: 1 (READ_UNLOCK_MESSAGE: every waiter in a Redisson client wakes)
-- ARGV[2]  lease in ms, for the holds left after a re-entrant release
-- ARGV[3]  writer's owner field "<client uuid>:<n>:write"
-- ARGV[4]  "publish" or "spublish"
-- ARGV[5]  how long the latch lives, ms
--
-- Returns 1 when the write hold is gone (the lock freed, or left in read mode to this
-- owner's own read holds), 0 when write holds are left, -1 when this owner held no write
-- hold. A retry with the same request id returns the first run's 1 or 0.
--
-- Differs from Redisson (RedissonWriteLock.unlockInnerAsync): on a downgrade to read mode
-- this publishes as well (readers waiting may now join; Redisson leaves them to their
-- timed retry); when the hash is gone it publishes but writes no latch and answers -1
-- (Redisson: latch 1, answer nil); holds left keep a longer expiry.
--
-- The message goes out with redis.pcall: a refused PUBLISH (an ACL user without the
-- channel) leaves the release done and answered; waiters then wake at their timed retry.
local lock, channel, latch = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, latch_ttl = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[5])
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
local mode = redis.call('hget', lock, 'mode')
if not mode then
  redis.pcall(ARGV[4], channel, ARGV[1])
  return -1
end
if mode ~= 'write' or redis.call('hexists', lock, owner) == 0 then
  return -1
end
if redis.call('hincrby', lock, owner, -1) > 0 then
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  redis.call('set', latch, 0, 'px', latch_ttl)
  return 0
end
redis.call('hdel', lock, owner)
if redis.call('hlen', lock) == 1 then
  redis.call('del', lock)
else
  redis.call('hset', lock, 'mode', 'read')
end
redis.pcall(ARGV[4], channel, ARGV[1])
redis.call('set', latch, 1, 'px', latch_ttl)
return 1
