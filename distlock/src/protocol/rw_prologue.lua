-- The start of every read-write script: the time from Redis (TIME, in ms), then the expired
-- state purged: readers past their own lease end, waiting writers past their deadline, a
-- writer past its lease. touch() sets each key's expiry to the latest live deadline in it
-- (deleting what holds nothing live).
--
-- Layout (all under the lock's hash tag): PREFIX{KEY}:rw a hash: writer (owner id), wcount
-- (its reentrancy count), wexp (its lease end, ms), wt (its fencing token), r:<owner> (a
-- reader's reentrancy count), rt:<owner> (its fencing token) and mr:<owner> / mw:<owner>
-- (the level ids it holds, see marked()), i:<owner> (its holder information, see
-- rw_acquire.lua); PREFIX{KEY}:rw:readers a zset owner -> lease end (ms);
-- PREFIX{KEY}:rw:writers a zset waiting writer -> deadline (ms).
--
-- The owners whose hold ended here (purged: their lease ran out, no release) lose their
-- holder information too (when they hold nothing else), so a holder that died leaves
-- nothing behind while others hold on.
local rw, readers, writers = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('zrangebyscore', readers, '-inf', now)
local ended = {}
for _, o in ipairs(dead) do
  redis.call('hdel', rw, 'r:' .. o, 'mr:' .. o, 'rt:' .. o)
  ended[#ended + 1] = o
end
if #dead > 0 then redis.call('zremrangebyscore', readers, '-inf', now) end
redis.call('zremrangebyscore', writers, '-inf', now)
local writer = redis.call('hget', rw, 'writer')
local wexp = tonumber(redis.call('hget', rw, 'wexp') or 0)
if writer and wexp <= now then
  redis.call('hdel', rw, 'writer', 'wcount', 'wexp', 'wt', 'mw:' .. writer)
  ended[#ended + 1] = writer
  writer = false
end
for _, o in ipairs(ended) do
  if o ~= writer and redis.call('hexists', rw, 'r:' .. o) == 0 then
    redis.call('hdel', rw, 'i:' .. o)
  end
end
-- The levels an owner holds in a mode, `,<level>,<level>,` under `mr:<owner>` (read) or
-- `mw:<owner>` (write): a script run again (a client or proxy retrying) finds its level
-- and does not count it twice; they go with the owner's hold.
local function marked(f, level)
  local m = redis.call('hget', rw, f)
  return m and string.find(m, ',' .. level .. ',', 1, true) ~= nil
end
local function mark(f, level)
  redis.call('hset', rw, f, (redis.call('hget', rw, f) or ',') .. level .. ',')
end
local function unmark(f, level)
  local m = redis.call('hget', rw, f)
  if not m then return false end
  local i, j = string.find(m, ',' .. level .. ',', 1, true)
  if not i then return false end
  local rest = string.sub(m, 1, i) .. string.sub(m, j + 1)
  if rest == ',' then redis.call('hdel', rw, f) else redis.call('hset', rw, f, rest) end
  return true
end
-- The latest lease end of a reader that holds: a place in the readers' set without its
-- count in the hash (the two keys deleted one at a time around a read, or the hash alone)
-- holds nothing and goes, so it keeps no writer out.
local function last_reader()
  while true do
    local r = redis.call('zrange', readers, -1, -1, 'withscores')
    if not r[2] then return nil end
    if redis.call('hexists', rw, 'r:' .. r[1]) == 1 then return tonumber(r[2]) end
    redis.call('zrem', readers, r[1])
  end
end
local function touch()
  local last = now
  if writer then last = math.max(last, wexp) end
  local r = last_reader()
  if r then last = math.max(last, r) end
  if last > now then
    redis.call('pexpire', rw, last - now)
    redis.call('pexpire', readers, last - now)
  else
    redis.call('del', rw, readers)
  end
  local w = redis.call('zrange', writers, -1, -1, 'withscores')
  if w[2] then redis.call('pexpire', writers, math.max(tonumber(w[2]) - now, 1)) end
end
