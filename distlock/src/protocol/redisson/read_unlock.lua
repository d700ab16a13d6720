-- Redisson-format read lock: release one read hold. Safe to run twice (the unlock latch).
--
-- KEYS[1]  the read-write lock hash (the name itself)
-- KEYS[2]  the channel "redisson_rwlock:{name}"
-- KEYS[3]  this reader's timeout prefix "{name}:<client uuid>:<n>:rwlock_timeout"
-- KEYS[4]  the key prefix all holders' timeout keys start with: "{name}" (or the bare name
--          when it already holds a "{"); holder f's hold i is "<KEYS[4]>:<f>:rwlock_timeout:<i>"
-- KEYS[5]  the unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1]  the message: 0 (UNLOCK_MESSAGE)
-- ARGV[2]  reader's owner field "<client uuid>:<n>"
-- ARGV[3]  "publish" or "spublish"
-- ARGV[4]  how long the latch lives, ms
--
-- Returns 1 when the lock was freed (message published), 0 when released but the lock is
-- still held (other holds, or this owner's write lock), -1 when this owner held no read
-- hold. A retry with the same request id returns the first run's 1 or 0.
--
-- After the release the hash's expiry becomes the longest remaining reader hold's (the
-- holders' timeout keys are read by name: they share the hash's slot).
--
-- Differs from Redisson (RedissonReadLock.unlockInnerAsync): when the hash is gone
-- Redisson publishes, writes latch 1 and answers nil; this publishes too (a harmless wake)
-- but writes no latch and answers -1, so a retry answers the same.
--
-- The message goes out with redis.pcall: a refused PUBLISH (an ACL user without the
-- channel) leaves the release done and answered; waiters then wake at their timed retry.
local lock, channel, mine, stem, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, latch_ttl = ARGV[2], tonumber(ARGV[4])
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR publish command must be publish or spublish')
end
if latch_ttl == nil or latch_ttl <= 0 then
  return redis.error_reply('ERR latch ttl must be a positive number of ms')
end
local done = redis.call('get', latch)
if done then
  return tonumber(done)
end
local mode = redis.call('hget', lock, 'mode')
if not mode then
  redis.pcall(ARGV[3], channel, ARGV[1])
  return -1
end
if redis.call('hexists', lock, owner) == 0 then
  return -1
end
local left = redis.call('hincrby', lock, owner, -1)
if left == 0 then
  redis.call('hdel', lock, owner)
end
redis.call('del', mine .. ':' .. (left + 1))

if redis.call('hlen', lock) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call('hkeys', lock)) do
    local count = tonumber(redis.call('hget', lock, field))
    if count then
      for i = count, 1, -1 do
        local pttl = redis.call('pttl', stem .. ':' .. field .. ':rwlock_timeout:' .. i)
        if pttl > longest then longest = pttl end
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', lock, longest)
    redis.call('set', latch, 0, 'px', latch_ttl)
    return 0
  end
  if mode == 'write' then
    redis.call('set', latch, 0, 'px', latch_ttl)
    return 0
  end
end
redis.call('del', lock)
redis.pcall(ARGV[3], channel, ARGV[1])
redis.call('set', latch, 1, 'px', latch_ttl)
return 1
