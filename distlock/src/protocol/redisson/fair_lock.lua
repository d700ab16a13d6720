-- Redisson-format fair lock (RedissonFairLock): acquire, re-enter, or take a place in the
-- queue. The lock hash is the reentrant lock's (released with fair_unlock.lua, renewed
-- with renew.lua).
--
-- KEYS[1]  the lock hash (the name itself)
-- KEYS[2]  the queue "redisson_lock_queue:{name}", a list of owner fields, oldest first
-- KEYS[3]  the deadlines "redisson_lock_timeout:{name}", a zset owner -> ms since the epoch
--          after which a queued owner counts as gone
-- ARGV[1]  lease in ms
-- ARGV[2]  owner field "<client uuid>:<n>"
-- ARGV[3]  the per-waiter allowance in ms: the caller's wait, or Redisson's
--          fairLockWaitTimeout (300000) when it has none
-- KEYS[4]  (optional) the token counter "redisson_lock_token:{name}": a new acquisition
--          INCRs it (distlock's fencing token; Redisson's fair lock has none; a lost
--          counter starts again above its tokens: token_prologue.lua)
-- ARGV[4]  "wait" to queue when refused, "try" not to (Redisson's tryLock() without wait)
-- ARGV[5]  (optional) "1": only re-enter a hold this owner has (distlock's nested
--          acquisition); nothing is created or queued when the owner's field is gone
--
-- Returns {1, token} when newly acquired (token 0 without KEYS[4]), {2, 0} when
-- re-entered, {3, 0} when ARGV[5] is "1" and the owner holds nothing, {0, ms} when
-- refused: the time worth waiting before asking again unless a message comes first
-- (never below 1).
--
-- How the queue works (as in Redisson's tryLockInnerAsync): expired owners are dropped
-- from the head first. A free lock goes to the queue's head, or to anyone when nobody
-- queues; whoever takes it leaves the queue, and every remaining deadline moves ARGV[3]
-- earlier. A refused owner not yet queued is appended with the deadline of the one ahead
-- of it (or the lock's pttl) plus ARGV[3].
--
-- Differs from Redisson: "now" is the server's TIME, not the caller's clock (so distlock
-- processes agree; Redisson clients write their own clocks into the same zset, so hosts
-- need synchronized clocks either way); re-entry only extends the expiry; a refused
-- waiter gets a positive hint where Redisson's answer can be 0 or negative (the lock free
-- but another owner at the head), which would make the caller spin; the queue and the
-- deadlines expire with the latest deadline in them (tidy(); Redisson keeps them without
-- an expiry, so a waiter that died stays until a later acquisition drops it: with nobody
-- acquiring again, for good). A Java waiter queued later with a deadline beyond that
-- expiry may find its place gone; it then queues again (fairness, never exclusion).
local lock, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, allowance = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if lease == nil or lease <= 0 or allowance == nil or allowance <= 0 then
  return redis.error_reply('ERR lease and wait allowance must be positive numbers of ms')
end
if ARGV[4] ~= 'wait' and ARGV[4] ~= 'try' then
  return redis.error_reply('ERR mode must be wait or try')
end
if ARGV[5] == '1' and redis.call('hexists', lock, owner) == 0 then
  return {3, 0}
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The queue and the deadlines end with the latest deadline in them (nobody waits after
-- it), or go when nobody waits.
local function tidy()
  local last = redis.call('zrange', deadlines, -1, -1, 'withscores')
  if last[2] then
    local ttl = math.max(math.floor(tonumber(last[2]) - now), 1)
    redis.call('pexpire', deadlines, ttl)
    redis.call('pexpire', queue, ttl)
  else
    redis.call('del', queue, deadlines)
  end
end

-- drop owners at the head whose deadline passed
while true do
  local head = redis.call('lindex', queue, 0)
  if not head then break end
  local deadline = redis.call('zscore', deadlines, head)
  if deadline and tonumber(deadline) <= now then
    redis.call('zrem', deadlines, head)
    redis.call('lpop', queue)
  else
    break
  end
end

if redis.call('exists', lock) == 0 then
  local head = redis.call('lindex', queue, 0)
  if (not head) or head == owner then
    if head then
      redis.call('lpop', queue)
    end
    redis.call('zrem', deadlines, owner)
    for _, other in ipairs(redis.call('zrange', deadlines, 0, -1)) do
      redis.call('zincrby', deadlines, -allowance, other)
    end
    redis.call('hset', lock, owner, 1)
    redis.call('pexpire', lock, lease)
    local token = 0
    if KEYS[4] ~= nil then
      token = next_token(KEYS[4])
    end
    tidy()
    return {1, token}
  end
end

if redis.call('hexists', lock, owner) == 1 then
  redis.call('hincrby', lock, owner, 1)
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  tidy()
  return {2, 0}
end

-- refused: how long until it is worth asking again. PTTL answers 0 for a lock with under
-- a millisecond left (this script still sees it): ask again at once, or, from the head of
-- the queue, it would wait until its own deadline (the whole wait).
local function hint()
  local pttl = redis.call('pttl', lock)
  if pttl > 0 then return pttl end
  local head = redis.call('lindex', queue, 0)
  if pttl == 0 and (not head or head == owner) then return 1 end
  local deadline = head and redis.call('zscore', deadlines, head)
  if deadline and tonumber(deadline) - now > 1 then
    return tonumber(deadline) - now
  end
  return 1
end

if ARGV[4] == 'try' or redis.call('zscore', deadlines, owner) then
  tidy()
  return {0, hint()}
end

local last = redis.call('lindex', queue, -1)
local ahead
if last and last ~= owner and redis.call('zscore', deadlines, last) then
  ahead = tonumber(redis.call('zscore', deadlines, last)) - now
else
  ahead = redis.call('pttl', lock)
end
if redis.call('zadd', deadlines, ahead + allowance + now, owner) == 1 then
  redis.call('rpush', queue, owner)
end
tidy()
return {0, hint()}
