-- Give back the permits of one acquisition of a semaphore (after sem_prologue.lua). Safe
-- to run twice: the holder's entry is removed, so a second run finds nothing and changes
-- nothing.
--
-- KEYS[1] holders zset, KEYS[2] counts hash (see sem_prologue.lua)
-- ARGV[1] holder id
-- ARGV[2] channel
-- ARGV[3] the publish verb: 'spublish' (Redis Cluster) or 'publish'
-- Returns: 0 released (and published on the channel); {0, error} released, but the
--   publish failed (NOPERM): waiters wake at the earliest lease end instead; -1 the holder
--   held nothing (its lease had ended, or released already): nothing changed.
local id = ARGV[1]
local now = purge()
if redis.call('zrem', holders, id) == 0 then
  keep(now)
  return -1
end
redis.call('hdel', counts, id, 't:' .. id, 'i:' .. id)
keep(now)
local published = redis.pcall(ARGV[3], ARGV[2], id)
if type(published) == 'table' and published.err then return {0, published.err} end
return 0
