-- Shared by the semaphore's acquire scripts (after sem_prologue.lua and fence_prologue.lua).
--
-- check(n, limit, lease): an error reply for a bad argument (before any write), else nil.
-- again(id, lease, now, fence, own): the answer to a run again of an acquisition that holds
--   already ({1, its own token}, its lease raised to a full one from now), else nil. A run
--   again whose entry in the counts hash is gone (deleted or evicted apart from the zset)
--   gets its count back and a new token of its own, never the counter's current value.
-- in_use(limit): the permits the holders hold; a holder whose count is missing counts as
--   holding every permit until its lease ends: never admit more than the limit.
-- refused(now): {0, ms until the earliest holder's lease ends} (when a permit comes back
--   at the latest, without a release).
-- take(id, n, limit, lease, now, fence, own, info): admit the holder; returns its token.
--   It records the semaphore's permits as this acquisition carried them (`limit`, for
--   inspection) and, when `info` (`host\tpid\tsite`) is given, the holder's information
--   i:<holder id> -> `host\tpid\tsite\tsince_ms\ttoken` (`distlock list`/`show`).
local function check(n, limit, lease)
  if not lease or lease < 1 or lease > 86400000 or lease ~= math.floor(lease) then
    return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[4]))
  end
  if not limit or limit < 1 or limit > 2147483647 or limit ~= math.floor(limit) then
    return redis.error_reply('ERR distlock: semaphore permits out of range (1..2147483647): ' .. tostring(ARGV[3]))
  end
  if not n or n < 1 or n > limit or n ~= math.floor(n) then
    return redis.error_reply('ERR distlock: permits to take out of range (1..' .. ARGV[3] .. '): ' .. tostring(ARGV[2]))
  end
  return nil
end
local function again(id, n, lease, now, fence, own)
  if not redis.call('zscore', holders, id) then return nil end
  redis.call('zadd', holders, 'xx', 'gt', now + lease, id)
  if not redis.call('hget', counts, id) then redis.call('hset', counts, id, n) end
  local token = tonumber(redis.call('hget', counts, 't:' .. id))
  if not token then
    token = next_token(fence, own)
    redis.call('hset', counts, 't:' .. id, string.format('%.0f', token))
  end
  keep(now)
  return {1, token}
end
local function in_use(limit)
  local used = 0
  for _, h in ipairs(redis.call('zrange', holders, 0, -1)) do
    used = used + (tonumber(redis.call('hget', counts, h)) or limit)
  end
  return used
end
local function refused(now)
  local first = redis.call('zrange', holders, 0, 0, 'withscores')
  local ms = 1
  if first[2] then ms = math.max(1, tonumber(first[2]) - now) end
  keep(now)
  return {0, ms}
end
local function take(id, n, limit, lease, now, fence, own, info)
  local token = next_token(fence, own)
  local mark = string.format('%.0f', token)
  redis.call('zadd', holders, now + lease, id)
  if info and info ~= '' then
    redis.call('hset', counts, id, n, 't:' .. id, mark, 'limit', limit, 'i:' .. id, info .. '\t' .. now .. '\t' .. mark)
  else
    redis.call('hset', counts, id, n, 't:' .. id, mark, 'limit', limit)
  end
  keep(now)
  return token
end
