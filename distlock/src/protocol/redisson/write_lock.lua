-- Redisson-format write lock (RedissonWriteLock): acquire or re-enter the exclusive hold.
--
-- KEYS[1]  the read-write lock hash (the name itself)
-- KEYS[2]  (optional) the token counter "redisson_lock_token:{name}": a new acquisition
--          INCRs it (distlock's fencing token; Redisson's rwlock has none; a lost
--          counter starts again above its tokens: token_prologue.lua)
-- ARGV[1]  lease in ms
-- ARGV[2]  writer's owner field "<client uuid>:<n>:write"
--
-- Returns {1, token} when newly acquired (token 0 without KEYS[2]), {2, 0} when re-entered, {0, pttl} when refused (any
-- reader, this owner's own read holds included: no upgrade, or another writer).
--
-- Differs from Redisson (RedissonWriteLock.tryLockInnerAsync): a re-entry sets the expiry
-- to at least the lease; Redisson adds the lease to the time left, so each re-entry makes
-- the lock outlive its lease further.
local lock, lease, owner = KEYS[1], tonumber(ARGV[1]), ARGV[2]
if lease == nil or lease <= 0 then
  return redis.error_reply('ERR lease must be a positive number of ms')
end
local mode = redis.call('hget', lock, 'mode')
if not mode then
  redis.call('hset', lock, 'mode', 'write', owner, 1)
  redis.call('pexpire', lock, lease)
  if KEYS[2] ~= nil then
    return {1, next_token(KEYS[2])}
  end
  return {1, 0}
end
if mode == 'write' and redis.call('hexists', lock, owner) == 1 then
  redis.call('hincrby', lock, owner, 1)
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  return {2, 0}
end
return {0, redis.call('pttl', lock)}
