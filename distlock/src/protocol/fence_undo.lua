-- Undo a fenced write of a redlock or multi backend that failed as a whole (see
-- fence_quorum_head.lua): where the node still holds exactly that write (value and token),
-- put back what it replaced (`u:v`, `u:t`, with the expiry `u:p` it had then), or remove
-- it when nothing was there. A node that holds anything else (a newer write, or the write
-- never arrived) is left alone. Safe to run twice: the second run finds the old value.
--
-- KEYS[1]: the fenced value hash. ARGV[1]: the value written; ARGV[2]: its token.
-- Returns 1 when it undid the write, 0 when there was nothing of it to undo.
local key = KEYS[1]
local now = redis.call('hmget', key, 'v', 't', 'u:v', 'u:t', 'u:p')
if now[1] ~= ARGV[1] or now[2] ~= ARGV[2] then
  return 0
end
if now[3] and now[4] then
  redis.call('hset', key, 'v', now[3], 't', now[4])
  redis.call('hdel', key, 'u:v', 'u:t', 'u:p')
  local pttl = tonumber(now[5])
  if pttl and pttl > 0 then
    redis.call('pexpire', key, pttl)
  else
    redis.call('persist', key)
  end
else
  redis.call('hdel', key, 'v', 't', 'u:v', 'u:t', 'u:p')
end
return 1
