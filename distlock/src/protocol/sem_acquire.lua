-- Take permits of a semaphore (after sem_prologue.lua and fence_prologue.lua). Safe to run
-- twice: an acquisition is one holder id, so a second run finds its entry and answers the
-- same (its own token, kept as t:<holder id>), with its lease raised to a full lease from
-- now (only ever extending). A run again whose entry in the counts hash is gone (deleted or
-- evicted apart from the zset) gets its count back and a new token of its own, never the
-- counter's current value (another holder's token).
--
-- KEYS[1] holders zset, KEYS[2] counts hash (see sem_prologue.lua)
-- KEYS[3] fencing counter (shared with the locks of the key; fence_prologue.lua)
-- KEYS[4] (optional) the key's own counter of earlier builds, when KEYS[3] is another (fence_prologue.lua)
-- ARGV[1] holder id (one per acquisition)
-- ARGV[2] permits to take (1..limit)
-- ARGV[3] limit: the semaphore's permits as this caller sees it (1..2147483647); the
--         holders' total after this acquisition must not exceed it
-- ARGV[4] lease in ms (1..86400000, MAX_LEASE)
-- ARGV[5] (optional) holder information `host\tpid\tsite`: recorded for a new holder as
--         i:<holder id> -> `host\tpid\tsite\tsince_ms\ttoken` (`distlock list`/`show`)
-- Bad arguments are an error reply before any write.
-- Returns: {1, token} acquired; {0, ms} not enough permits free: ms until the earliest
--   holder's lease ends (when a permit comes back at the latest, without a release).
local fence, id = KEYS[3], ARGV[1]
local n, limit, lease = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if not lease or lease < 1 or lease > 86400000 or lease ~= math.floor(lease) then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[4]))
end
if not limit or limit < 1 or limit > 2147483647 or limit ~= math.floor(limit) then
  return redis.error_reply('ERR distlock: semaphore permits out of range (1..2147483647): ' .. tostring(ARGV[3]))
end
if not n or n < 1 or n > limit or n ~= math.floor(n) then
  return redis.error_reply('ERR distlock: permits to take out of range (1..' .. ARGV[3] .. '): ' .. tostring(ARGV[2]))
end
local now = purge()
if redis.call('zscore', holders, id) then
  redis.call('zadd', holders, 'xx', 'gt', now + lease, id)
  if not redis.call('hget', counts, id) then redis.call('hset', counts, id, n) end
  local token = tonumber(redis.call('hget', counts, 't:' .. id))
  if not token then
    token = next_token(fence, KEYS[4])
    redis.call('hset', counts, 't:' .. id, string.format('%.0f', token))
  end
  keep(now)
  return {1, token}
end
-- A holder whose count is missing (its hash deleted or evicted apart from the zset) counts
-- as holding every permit until its lease ends: never admit more than the limit.
local used = 0
for _, h in ipairs(redis.call('zrange', holders, 0, -1)) do
  used = used + (tonumber(redis.call('hget', counts, h)) or limit)
end
if used + n > limit then
  local first = redis.call('zrange', holders, 0, 0, 'withscores')
  local ms = 1
  if first[2] then ms = math.max(1, tonumber(first[2]) - now) end
  keep(now)
  return {0, ms}
end
local token = next_token(fence, KEYS[4])
redis.call('zadd', holders, now + lease, id)
redis.call('hset', counts, id, n, 't:' .. id, string.format('%.0f', token), 'limit', limit)
if ARGV[5] and ARGV[5] ~= '' then
  redis.call('hset', counts, 'i:' .. id, ARGV[5] .. '\t' .. now .. '\t' .. string.format('%.0f', token))
end
keep(now)
return {1, token}
