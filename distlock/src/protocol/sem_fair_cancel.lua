-- A fair semaphore's waiter gives up: it leaves the queue, and the waiters are woken (the
-- next head may fit in the permits free). Safe to run twice: a second run finds no place.
--
-- KEYS[1] queue list, KEYS[2] waiters' deadlines zset (see sem_fair_acquire.lua)
-- ARGV[1] holder id
-- ARGV[2] channel
-- ARGV[3] the publish verb: 'spublish' or 'publish'
-- Returns: 1 it was queued; 0 it was not; {1, error} it was, but the publish failed
--   (NOPERM: the other waiters wake at their own deadlines).
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('lrem', KEYS[1], 0, ARGV[1])
local published = redis.pcall(ARGV[3], ARGV[2], ARGV[1])
if type(published) == 'table' and published.err then return {1, published.err} end
return 1
