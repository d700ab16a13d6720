-- Redisson-format fair lock: a queued owner gives up waiting (Redisson's acquireFailed).
--
-- KEYS[1]  the queue "redisson_lock_queue:{name}"
-- KEYS[2]  the deadlines "redisson_lock_timeout:{name}"
-- KEYS[3]  the lock hash (the name itself)
-- KEYS[4]  the channel stem "redisson_lock__channel:{name}"
-- ARGV[1]  owner field "<client uuid>:<n>"
-- ARGV[2]  the per-waiter allowance in ms the owner queued with (fair_lock.lua's ARGV[3])
-- ARGV[3]  the message: 0 (UNLOCK_MESSAGE)
-- ARGV[4]  "publish" or "spublish"
--
-- Returns 1 when the owner was queued (it no longer is), 0 when it was not. Running it
-- twice changes nothing the second time.
--
-- As in Redisson (RedissonFairLock.acquireFailedAsync), everyone queued behind the owner
-- has its deadline moved ARGV[2] earlier. Differs: when the lock is free, the new head is
-- woken on its channel (Redisson leaves it to find out at its next timed retry).
--
-- The message goes out with redis.pcall: a refused PUBLISH (an ACL user without the
-- channel) leaves the release done and answered; waiters then wake at their timed retry.
local queue, deadlines, lock, stem = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, allowance = ARGV[1], tonumber(ARGV[2])
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR publish command must be publish or spublish')
end
if allowance == nil or allowance <= 0 then
  return redis.error_reply('ERR wait allowance must be a positive number of ms')
end
local items = redis.call('lrange', queue, 0, -1)
local found = false
for _, item in ipairs(items) do
  if found then
    redis.call('zincrby', deadlines, -allowance, item)
  elseif item == owner then
    found = true
  end
end
redis.call('zrem', deadlines, owner)
redis.call('lrem', queue, 0, owner)
if found and redis.call('exists', lock) == 0 then
  local head = redis.call('lindex', queue, 0)
  if head then
    redis.pcall(ARGV[4], stem .. ':' .. head, ARGV[3])
  end
end
if found then return 1 end
return 0
