-- Fenced write: store a value only if its fencing token is not below the last one stored
-- or claimed (protocol/fence_claim.lua).
--
-- KEYS[1]: the fenced value, a hash {v = value, t = token of that value (decimal),
-- c = the largest token claimed (decimal; absent until a claim)}.
-- ARGV[1]: value; ARGV[2]: token (decimal, no leading zeros); ARGV[3]: ttl in ms (0: none,
-- else a whole number from 1 to 31536000000, 365 days: checked before anything is written,
-- so that a value is never stored without the expiry it was sent with).
-- Returns {1, previous floor} when stored, {0, floor} when the token is stale, where the
-- floor is the larger of `t` and `c` ('0' when neither is stored).
--
-- Tokens are compared as decimal strings (length, then bytes), not as Lua numbers, so a
-- 64-bit token compares exactly. Safe to run twice: the same write again is accepted again
-- (equal token) and changes nothing. Every command that can fail (HMGET on a key of the
-- wrong type; PEXPIRE, whose ttl is checked first) fails before any write or cannot.
local key, value, token, ttl = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
if not ttl or ttl ~= math.floor(ttl) or ttl < 0 or ttl > 31536000000 then
  return redis.error_reply('ERR distlock fence: ttl ' .. tostring(ARGV[3]) .. ' out of range (0, or 1 to 31536000000 ms)')
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
redis.call('hset', key, 'v', value, 't', token)
if ttl > 0 then
  redis.call('pexpire', key, ttl)
else
  redis.call('persist', key)
end
return {1, last or '0'}
