-- Delete a lock whoever holds it (administration), publishing the release.
--
-- KEYS[1] lock hash
-- KEYS[2], KEYS[3] for fair and read-write locks, their other keys
-- ARGV[1] channel
-- ARGV[2] the publish verb: 'spublish' or 'publish'
-- ARGV[3] (optional) the message; '' when absent (protocol = "redisson": '0', Redisson's
--         UNLOCK_MESSAGE, as its forceUnlock publishes)
-- ARGV[4] (optional) the backend-wide revocation channel: the lock's name (KEYS[1]) is
--         PUBLISHed there (plain PUBLISH: on a cluster the bus carries it to every node),
--         so that the holder's process hears at once that its lease is gone. A refused
--         publish is ignored (the holder then hears it at its next renewal).
-- ARGV[5] (optional) a semaphore's holder id (KEYS[1] the holders' zset, KEYS[2] the
--         counts hash, see sem_prologue.lua): free that holder's permits only (its entries
--         removed; both keys deleted when no live holder is left), publishing as above
--         when it held them (its lease not ended).
-- Returns: 1 a lock (or the holder) was deleted; 0 there was none; {1, error} deleted, but
--   the publish failed (NOPERM: waiters wake at their own deadlines).
local function freed()
  local id = ARGV[5]
  if not id or id == '' then return redis.call('del', unpack(KEYS)) > 0 end
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ends = tonumber(redis.call('zscore', KEYS[1], id))
  if not ends then return false end
  redis.call('zrem', KEYS[1], id)
  redis.call('hdel', KEYS[2], id, 't:' .. id, 'i:' .. id)
  if #redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'limit', 0, 1) == 0 then
    redis.call('del', KEYS[1], KEYS[2])
  end
  return ends > now
end
if freed() then
  if ARGV[4] and ARGV[4] ~= '' then redis.pcall('publish', ARGV[4], KEYS[1]) end
  local published = redis.pcall(ARGV[2], ARGV[1], ARGV[3] or '')
  if type(published) == 'table' and published.err then return {1, published.err} end
  return 1
end
return 0
