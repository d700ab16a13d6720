-- A waiting writer gives up: it leaves the writers zset, and waiting readers are woken.
--
-- KEYS[1] rw hash
-- KEYS[2] readers zset
-- KEYS[3] waiting writers zset
-- ARGV[1] owner id
-- ARGV[2] channel
-- ARGV[3] the publish verb: 'spublish' or 'publish'
-- Returns: 1 it was waiting; 0 it was not; {1, error} it was, but the publish failed
--   (NOPERM: the other waiters wake at their own deadlines).
--
-- Runs after rw_prologue.lua (prepended when loaded), which defines rw, readers,
-- writers, now, writer, wexp, last_reader() and touch().
if redis.call('zrem', writers, ARGV[1]) == 0 then return 0 end
touch()
local published = redis.pcall(ARGV[3], ARGV[2], ARGV[1])
if type(published) == 'table' and published.err then return {1, published.err} end
return 1
