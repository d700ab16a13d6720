-- A fair waiter gives up: it leaves the queue; when the lock is free the waiters are
-- woken (the next head takes it).
--
-- KEYS[1] lock hash
-- KEYS[2] queue list
-- KEYS[3] waiters' deadlines zset
-- ARGV[1] owner id
-- ARGV[2] channel
-- ARGV[3] the publish verb: 'spublish' or 'publish'
-- Returns: 1 it was queued; 0 it was not; {1, error} it was, but the publish failed
--   (NOPERM: the other waiters wake at their own deadlines).
if redis.call('zrem', KEYS[3], ARGV[1]) == 0 then return 0 end
redis.call('lrem', KEYS[2], 0, ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
  local published = redis.pcall(ARGV[3], ARGV[2], ARGV[1])
  if type(published) == 'table' and published.err then return {1, published.err} end
end
return 1
