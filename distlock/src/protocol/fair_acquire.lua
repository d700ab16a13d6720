-- Acquire or re-enter a fair lock: granted in the order waiters asked. The lock is a
-- record like the reentrant lock's (record.lua; released and renewed by release.lua and
-- renew.lua); waiters queue in a list with a deadline each in a zset; a free lock goes to
-- the head.
--
-- KEYS[1] the lock's record (record.lua)
-- KEYS[2] queue list
-- KEYS[3] waiters' deadlines zset
-- KEYS[4] fencing counter (fence_prologue.lua)
-- KEYS[5] (optional) the key's own counter of earlier builds, when KEYS[4] is another (fence_prologue.lua)
-- ARGV[1] owner id
-- ARGV[2] lease in ms (1..86400000, MAX_LEASE; else an error reply before any write)
-- ARGV[3] wait left in ms (0: do not queue; at most 31536000000, MAX_WAIT)
-- ARGV[4] level id (one per acquisition; see acquire.lua)
-- ARGV[5] '1' when the owner holds the lock already (a nested acquisition), else '0'
-- ARGV[6] (optional) holder information, as in acquire.lua
-- Returns: as acquire.lua (and as safe to run twice: the new holder's record keeps its
--   token, which a run again answers); a refused waiter gets the time until the lock's lease ends, or until
--   the head's deadline when the lock is free.
local lock, queue, waiters = KEYS[1], KEYS[2], KEYS[3]
local owner, lease, wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local level, nested = ARGV[4], ARGV[5] == '1'
-- Checked before the first write, so a bad argument leaves nothing behind.
if not lease or lease < 1 or lease > 86400000 then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[2]))
end
if not wait or wait < 0 or wait > 31536000000 then
  return redis.error_reply('ERR distlock: wait out of range (0..31536000000 ms, MAX_WAIT): ' .. tostring(ARGV[3]))
end
local r, held_token, levels, until_ms, waiting, holder = read_record(lock)
if r == owner and string.find(',' .. levels .. ',', ',' .. level .. ',', 1, true) then
  -- Run again (a lost or late reply): the same answer, and a full lease from now, as the
  -- client counts its lease from this run (see acquire.lua).
  if redis.call('pttl', lock) < lease then redis.call('pexpire', lock, lease) end
  if nested then return {2, 0} end
  return {1, tonumber(held_token)}
end
if nested then
  if r ~= owner then return {3, 0} end
  local text = string.format(RECORD, r, held_token, levels .. ',' .. level, until_ms, waiting, holder)
  redis.call('set', lock, text, 'px', math.max(redis.call('pttl', lock), lease))
  return {2, 0}
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', waiters, '-inf', now)
local head = redis.call('lindex', queue, 0)
while head and not redis.call('zscore', waiters, head) do
  redis.call('lpop', queue)
  head = redis.call('lindex', queue, 0)
end
local function tidy()
  local w = redis.call('zrange', waiters, -1, -1, 'withscores')
  if w[2] then
    local ttl = math.max(tonumber(w[2]) - now, 1)
    redis.call('pexpire', waiters, ttl)
    redis.call('pexpire', queue, ttl)
  else
    redis.call('del', queue, waiters)
  end
end
local function enqueue()
  if wait <= 0 then return end
  if not redis.call('zscore', waiters, owner) then
    redis.call('rpush', queue, owner)
  end
  redis.call('zadd', waiters, now + wait, owner)
  tidy()
end
if r ~= nil then
  enqueue()
  return {0, redis.call('pttl', lock)}
end
if head and head ~= owner then
  enqueue()
  local deadline = tonumber(redis.call('zscore', waiters, head))
  return {0, math.max(deadline - now, 1)}
end
if head then
  redis.call('lpop', queue)
  redis.call('zrem', waiters, owner)
  tidy()
end
local token = next_token(KEYS[4], KEYS[5])
redis.call('set', lock, string.format(RECORD, owner, string.format('%.0f', token), level, '', '', ARGV[6] or ''), 'px', lease)
return {1, token}
