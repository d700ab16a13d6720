-- Redisson-format write lock (RedissonWriteLock): acquire or re-enter the exclusive hold.
--
-- KEYS[1]  the read-write lock hash (the name itself)
-- KEYS[2]  (optional) the token counter "redisson_lock_token:{name}": a new acquisition
--          INCRs it (distlock's fencing token; Redisson's rwlock has none; a lost
--          counter starts again above its tokens: token_prologue.lua)
-- ARGV[1]  lease in ms
-- ARGV[2]  writer's owner field "<client uuid>:<n>:write"
-- ARGV[3]  (optional) distlock's nested acquisition, which creates nothing without the
--          owner's enclosing hold: "1" only re-enter this owner's write hold; "r" (a write
--          nested in the owner's read hold) the owner must hold the write lock or its
--          read hold, ARGV[4]
-- ARGV[4]  (with "r") the same owner's reader field "<client uuid>:<n>"
--
-- Returns {1, token} when newly acquired (token 0 without KEYS[2]), {2, 0} when re-entered, {0, pttl} when refused (any
-- reader, this owner's own read holds included: no upgrade, or another writer), {3, 0}
-- when ARGV[3] names an enclosing hold that is gone (its lease was lost).
--
-- Differs from Redisson (RedissonWriteLock.tryLockInnerAsync): the nested flag (Redisson
-- has no nested acquisition that must not create); a re-entry sets the expiry
-- to at least the lease; Redisson adds the lease to the time left, so each re-entry makes
-- the lock outlive its lease further.
local lock, lease, owner = KEYS[1], tonumber(ARGV[1]), ARGV[2]
if lease == nil or lease <= 0 then
  return redis.error_reply('ERR lease must be a positive number of ms')
end
local mode = redis.call('hget', lock, 'mode')
local writes = mode == 'write' and redis.call('hexists', lock, owner) == 1
if ARGV[3] == '1' and not writes then
  return {3, 0}
end
if ARGV[3] == 'r' and not writes and redis.call('hexists', lock, ARGV[4]) == 0 then
  return {3, 0}
end
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
