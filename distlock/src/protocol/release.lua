-- Release one level of a reentrant (or fair) lock.
--
-- KEYS[1] lock hash
-- ARGV[1] owner id
-- ARGV[2] channel
-- ARGV[3] the publish verb: 'spublish' (Redis Cluster: sharded pub/sub) or 'publish'
-- KEYS[2] (optional) the holder information hash, deleted with the lock
-- Returns: -1 the owner does not hold it (nothing changed); n > 0 still held re-entrantly;
--   0 freed (then the release is published on the channel).
local lock, owner = KEYS[1], ARGV[1]
if redis.call('hexists', lock, owner) == 0 then
  return -1
end
local left = redis.call('hincrby', lock, owner, -1)
if left > 0 then
  return left
end
redis.call('del', lock)
if KEYS[2] then redis.call('del', KEYS[2]) end
redis.call(ARGV[3], ARGV[2], owner)
return 0
