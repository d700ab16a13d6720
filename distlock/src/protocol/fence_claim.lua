-- Fenced claim: raise the token a fenced value accepts to the claimer's, before it reads
-- the value, so that every holder with an older token is refused from then on (its writes
-- by protocol/fence.lua, its claims by this script). The value is left as it is.
--
-- KEYS[1]: the fenced value hash (see protocol/fence.lua); the claimed token goes in `c`.
-- ARGV[1]: token (decimal, no leading zeros); ARGV[2]: ttl in ms (0: none, else a whole
-- number from 1 to 31536000000; as protocol/fence.lua: the key's expiry is set anew).
-- Returns {1, previous floor} when claimed, {0, floor} when a larger token is stored or
-- claimed (the floor: the larger of `t` and `c`, '0' when neither is stored).
--
-- Safe to run twice: the same claim again is accepted again (equal token) and changes
-- nothing. Every command that can fail (HMGET on a key of the wrong type; PEXPIRE, whose
-- ttl is checked first) fails before any write or cannot.
local key, token, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
if not ttl or ttl ~= math.floor(ttl) or ttl < 0 or ttl > 31536000000 then
  return redis.error_reply('ERR distlock fence: ttl ' .. tostring(ARGV[2]) .. ' out of range (0, or 1 to 31536000000 ms)')
end
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local stored = redis.call('hmget', key, 't', 'c')
local last = stored[1] or stored[2]
if stored[1] and stored[2] and below(stored[1], stored[2]) then
  last = stored[2]
end
if last and below(token, last) then
  return {0, last}
end
redis.call('hset', key, 'c', token)
if ttl > 0 then
  redis.call('pexpire', key, ttl)
else
  redis.call('persist', key)
end
return {1, last or '0'}
