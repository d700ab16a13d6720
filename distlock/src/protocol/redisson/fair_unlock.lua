-- Redisson-format fair lock: release one hold; when the lock is freed, wake the owner at
-- the head of the queue on its own channel. Safe to run twice (the unlock latch).
--
-- KEYS[1]  the lock hash (the name itself)
-- KEYS[2]  the queue "redisson_lock_queue:{name}"
-- KEYS[3]  the deadlines "redisson_lock_timeout:{name}"
-- KEYS[4]  the channel stem "redisson_lock__channel:{name}"; the head's channel is
--          "<stem>:<head owner field>", e.g. "redisson_lock__channel:{name}:<uuid>:<n>"
-- KEYS[5]  the unlock latch "redisson_unlock_latch:{name}:<request id>"
-- ARGV[1]  the message: 0 (UNLOCK_MESSAGE)
-- ARGV[2]  lease in ms, for the holds left after a re-entrant release
-- ARGV[3]  owner field "<client uuid>:<n>"
-- ARGV[4]  "publish" or "spublish"
-- ARGV[5]  how long the latch lives, ms
--
-- Returns 1 when the lock was freed, 0 when holds are left, -1 when this owner held
-- nothing (then, when the lock is free, the head is woken all the same). A retry with the
-- same request id returns the first run's 1 or 0.
--
-- Differs from Redisson (RedissonFairLock.unlockInnerAsync): when the lock no longer
-- exists Redisson answers 1 (and writes the latch), hiding a lost lease; this answers -1
-- and writes no latch. The holds left keep a longer expiry; "now" is the server's TIME.
--
-- The message goes out with redis.pcall: a refused PUBLISH (an ACL user without the
-- channel) leaves the release done and answered; waiters then wake at their timed retry.
local lock, queue, deadlines, stem, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, lease, latch_ttl = ARGV[3], tonumber(ARGV[2]), tonumber(ARGV[5])
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR publish command must be publish or spublish')
end
if lease == nil or lease <= 0 or latch_ttl == nil or latch_ttl <= 0 then
  return redis.error_reply('ERR lease and latch ttl must be positive numbers of ms')
end
local done = redis.call('get', latch)
if done then
  return tonumber(done)
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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

local function wake_head()
  local head = redis.call('lindex', queue, 0)
  if head then
    redis.pcall(ARGV[4], stem .. ':' .. head, ARGV[1])
  end
end

if redis.call('exists', lock) == 0 then
  wake_head()
  return -1
end
if redis.call('hexists', lock, owner) == 0 then
  return -1
end
if redis.call('hincrby', lock, owner, -1) > 0 then
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  redis.call('set', latch, 0, 'px', latch_ttl)
  return 0
end
redis.call('del', lock)
redis.call('set', latch, 1, 'px', latch_ttl)
wake_head()
return 1
