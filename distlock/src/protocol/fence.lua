-- Fenced write: store a value only if its fencing token is not below the last one stored.
--
-- KEYS[1]: the fenced value, a hash {v = value, t = token (decimal)}.
-- ARGV[1]: value; ARGV[2]: token (decimal, no leading zeros); ARGV[3]: ttl in ms (0: none,
-- else a whole number from 1 to 31536000000, 365 days: checked before anything is written,
-- so that a value is never stored without the expiry it was sent with).
-- Returns {1, previous token} when stored, {0, last token} when the token is stale.
--
-- Tokens are compared as decimal strings (length, then bytes), not as Lua numbers, so a
-- 64-bit token compares exactly. Safe to run twice: the same write again is accepted again
-- (equal token) and changes nothing. Every command that can fail (HGET on a key of the
-- wrong type; PEXPIRE, whose ttl is checked first) fails before any write or cannot.
local key, value, token, ttl = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
if not ttl or ttl ~= math.floor(ttl) or ttl < 0 or ttl > 31536000000 then
  return redis.error_reply('ERR distlock fence: ttl ' .. tostring(ARGV[3]) .. ' out of range (0, or 1 to 31536000000 ms)')
end
local last = redis.call('hget', key, 't')
if last then
  if #token < #last or (#token == #last and token < last) then
    return {0, last}
  end
end
redis.call('hset', key, 'v', value, 't', token)
if ttl > 0 then
  redis.call('pexpire', key, ttl)
else
  redis.call('persist', key)
end
return {1, last or '0'}
