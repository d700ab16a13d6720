-- Prepended to every semaphore script: purge() reads the time from Redis (TIME, in ms) and
-- removes the holders whose lease has ended, so their permits come back; each script calls
-- it after checking its arguments (a bad argument leaves nothing changed).
--
-- Layout (all under the key's hash tag): PREFIX{KEY}:sem a zset holder id -> the end of its
-- lease (server ms); PREFIX{KEY}:sem:n a hash holder id -> permits it holds,
-- t:<holder id> -> its fencing token, i:<holder id> -> its holder information
-- (`host\tpid\tsite\tsince_ms\ttoken`, when recorded) and `limit` -> the semaphore's
-- permits as the last acquisition carried them (for inspection). Both keys expire with the
-- last holder's lease (keep()), so nothing outlives the holders.
local holders, counts = KEYS[1], KEYS[2]
local function purge()
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local dead = redis.call('zrangebyscore', holders, '-inf', now)
  for _, h in ipairs(dead) do redis.call('hdel', counts, h, 't:' .. h, 'i:' .. h) end
  if #dead > 0 then redis.call('zremrangebyscore', holders, '-inf', now) end
  return now
end
-- Give both keys the expiry of the latest lease among the holders (only ever extending),
-- or delete the counts when no holder is left.
local function keep(now)
  local last = redis.call('zrange', holders, -1, -1, 'withscores')
  if not last[2] then
    redis.call('del', counts)
    return
  end
  local ttl = tonumber(last[2]) - now
  if ttl < 1 then ttl = 1 end
  if redis.call('pttl', holders) < ttl then redis.call('pexpire', holders, ttl) end
  if redis.call('pttl', counts) < ttl then redis.call('pexpire', counts, ttl) end
end
