-- Take permits of a fair semaphore: granted in the order waiters asked (after
-- sem_prologue.lua, fence_prologue.lua and sem_take.lua). Waiters queue in a list with a
-- deadline each in a zset, as the fair lock's (fair_acquire.lua); only the head of the
-- queue is admitted, when its permits fit, so a waiter asking for many permits is never
-- overtaken by later ones asking for fewer. Safe to run twice, as sem_acquire.lua.
--
-- KEYS[1] holders zset, KEYS[2] counts hash (see sem_prologue.lua)
-- KEYS[3] queue list, KEYS[4] waiters' deadlines zset (server ms)
-- KEYS[5] fencing counter (fence_prologue.lua)
-- KEYS[6] (optional) the key's own counter of earlier builds, when KEYS[5] is another
-- ARGV[1] holder id (one per acquisition; a waiter's place in the queue)
-- ARGV[2] permits to take (1..limit)
-- ARGV[3] limit (1..2147483647), as sem_acquire.lua
-- ARGV[4] lease in ms (1..86400000, MAX_LEASE)
-- ARGV[5] wait left in ms (0: do not queue; at most 31536000000, MAX_WAIT)
-- ARGV[6] channel, ARGV[7] the publish verb ('spublish' or 'publish'): an admitted head
--         that leaves permits free and waiters behind it publishes, so the next one tries
-- ARGV[8] (optional) holder information `host\tpid\tsite` (see take() in sem_take.lua)
-- Bad arguments are an error reply before any write.
-- Returns: {1, token} acquired; {0, ms} refused: ms until the head's deadline or the
--   earliest holder's lease end, whichever is first.
local queue, waiters = KEYS[3], KEYS[4]
local id = ARGV[1]
local n, limit, lease, wait = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local bad = check(n, limit, lease)
if bad then return bad end
if not wait or wait < 0 or wait > 31536000000 then
  return redis.error_reply('ERR distlock: wait out of range (0..31536000000 ms, MAX_WAIT): ' .. tostring(ARGV[5]))
end
local now = purge()
local done = again(id, n, lease, now, KEYS[5], KEYS[6])
if done then return done end
redis.call('zremrangebyscore', waiters, '-inf', now)
local head = redis.call('lindex', queue, 0)
while head and not redis.call('zscore', waiters, head) do
  redis.call('lpop', queue)
  head = redis.call('lindex', queue, 0)
end
-- The queue's keys expire with the last waiter's deadline.
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
  if not redis.call('zscore', waiters, id) then redis.call('rpush', queue, id) end
  redis.call('zadd', waiters, now + wait, id)
  tidy()
end
local used = in_use(limit)
if used + n > limit then
  enqueue()
  return refused(now)
end
if head and head ~= id then
  enqueue()
  keep(now)
  return {0, math.max(tonumber(redis.call('zscore', waiters, head)) - now, 1)}
end
if head then
  redis.call('lpop', queue)
  redis.call('zrem', waiters, id)
  tidy()
end
local token = take(id, n, limit, lease, now, KEYS[5], KEYS[6], ARGV[8])
if used + n < limit and redis.call('lindex', queue, 0) then
  redis.pcall(ARGV[7], ARGV[6], id)
end
return {1, token}
