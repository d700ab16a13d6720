-- Release one level of a read or write lock. Publishes when a writer leaves and
-- when the last reader leaves.
--
-- KEYS[1] rw hash
-- KEYS[2] readers zset
-- KEYS[3] waiting writers zset
-- ARGV[1] owner id
-- ARGV[2] 'read' or 'write'
-- ARGV[3] channel
-- ARGV[4] the publish verb: 'spublish' or 'publish'
-- ARGV[5] level id of the acquisition released: its mark goes first, so a second run
--   finds it gone and changes nothing (it answers the count left, or -1)
-- The owner's holder information (`i:<owner>`) goes when it lets go of both modes.
-- Returns: as release.lua (the publish failing: {0, error}, the release stands).
--
-- Runs after rw_prologue.lua (prepended when loaded), which defines rw, readers,
-- writers, now, writer, wexp, last_reader() and touch().
local owner, mode, level = ARGV[1], ARGV[2], ARGV[5]
local function announce()
  local published = redis.pcall(ARGV[4], ARGV[3], owner)
  if type(published) == 'table' and published.err then return {0, published.err} end
  return 0
end
if mode == 'write' then
  if writer ~= owner then return -1 end
  if not unmark('mw:' .. owner, level) then
    return tonumber(redis.call('hget', rw, 'wcount') or 0)
  end
  local n = redis.call('hincrby', rw, 'wcount', -1)
  if n > 0 then return n end
  redis.call('hdel', rw, 'writer', 'wcount', 'wexp', 'wt', 'mw:' .. owner)
  writer = false
  touch()
  if redis.call('hexists', rw, 'r:' .. owner) == 0 then
    redis.call('hdel', rw, 'i:' .. owner)
  end
  return announce()
end
local rc = 'r:' .. owner
if redis.call('hexists', rw, rc) == 0 then return -1 end
if not unmark('mr:' .. owner, level) then
  return tonumber(redis.call('hget', rw, rc) or 0)
end
local n = redis.call('hincrby', rw, rc, -1)
if n > 0 then return n end
redis.call('hdel', rw, rc, 'mr:' .. owner, 'rt:' .. owner)
redis.call('zrem', readers, owner)
touch()
if writer ~= owner then
  redis.call('hdel', rw, 'i:' .. owner)
end
if not writer and redis.call('zcard', readers) == 0 then return announce() end
return 0
