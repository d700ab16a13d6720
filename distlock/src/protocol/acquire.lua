-- Acquire or re-enter a reentrant lock.
--
-- KEYS[1] lock hash (owner id -> reentrancy count; its expiry is the lease)
-- KEYS[2] fencing counter
-- ARGV[1] owner id
-- ARGV[2] lease in ms
-- KEYS[3], ARGV[3] (optional, holder information on) the info hash, and this holder's
--   `host\tpid\tsite`: a new holder's entry (with the server TIME in ms and the token
--   appended); the hash always has the lock's expiry (renew.lua, release.lua and
--   force_release.lua keep it so), so it never outlives the lock.
-- Returns: {1, token} newly acquired; {2, 0} re-entered by the same owner (the expiry is only
--   ever extended); {0, pttl} held by another owner.
local lock, fence, owner, lease = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
if redis.call('exists', lock) == 0 then
  local token = redis.call('incr', fence)
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  if KEYS[3] then
    local t = redis.call('time')
    redis.call('hset', KEYS[3], owner, ARGV[3] .. '\t' .. (t[1] * 1000 + math.floor(t[2] / 1000)) .. '\t' .. token)
    redis.call('pexpire', KEYS[3], lease)
  end
  return {1, token}
end
if redis.call('hexists', lock, owner) == 1 then
  redis.call('hincrby', lock, owner, 1)
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  if KEYS[3] then redis.call('pexpire', KEYS[3], redis.call('pttl', lock)) end
  return {2, 0}
end
return {0, redis.call('pttl', lock)}
