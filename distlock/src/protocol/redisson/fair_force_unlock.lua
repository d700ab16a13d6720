-- Redisson-format fair lock: delete it whoever holds it (administration), waking the owner
-- at the head of the queue on its own channel.
--
-- KEYS[1]  the lock hash (the name itself)
-- KEYS[2]  the queue "redisson_lock_queue:{name}"
-- KEYS[3]  the deadlines "redisson_lock_timeout:{name}"
-- KEYS[4]  the channel stem "redisson_lock__channel:{name}"
-- ARGV[1]  the message: 0 (UNLOCK_MESSAGE)
-- ARGV[2]  "publish" or "spublish"
-- ARGV[3]  (optional) distlock's backend-wide revocation channel: the lock's name is
--          PUBLISHed there, so that a distlock holder's process hears at once that its
--          lease is gone (a refused publish is ignored)
--
-- Returns 1 when a lock was deleted, 0 when there was none. Running it twice deletes
-- nothing the second time. The queue stays (its waiters keep their places).
--
-- As Redisson's RedissonFairLock.forceUnlockAsync: queue heads whose deadline passed are
-- dropped first, then the head is woken. Differs: "now" is the server's TIME, and the
-- message goes out with redis.pcall (a refused PUBLISH leaves the deletion done).
local lock, queue, deadlines, stem = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR publish command must be publish or spublish')
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
if redis.call('del', lock) == 0 then
  return 0
end
if ARGV[3] and ARGV[3] ~= '' then redis.pcall('publish', ARGV[3], lock) end
local head = redis.call('lindex', queue, 0)
if head then
  redis.pcall(ARGV[2], stem .. ':' .. head, ARGV[1])
end
return 1
