-- Acquire or re-enter a reentrant lock.
--
-- KEYS[1] lock hash (owner id -> reentrancy count; its expiry is the lease)
-- KEYS[2] fencing counter
-- ARGV[1] owner id
-- ARGV[2] lease in ms (1..86400000, MAX_LEASE; else an error reply before any write)
-- Returns: {1, token} newly acquired; {2, 0} re-entered by the same owner (the expiry is only
--   ever extended); {0, pttl} held by another owner.
local lock, fence, owner, lease = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
-- Checked before the first write, so a bad argument leaves nothing behind.
if not lease or lease < 1 or lease > 86400000 then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[2]))
end
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
