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
-- Returns: 1 a lock was deleted; 0 there was none; {1, error} deleted, but the publish
--   failed (NOPERM: waiters wake at their own deadlines).
if redis.call('del', unpack(KEYS)) > 0 then
  if ARGV[4] and ARGV[4] ~= '' then redis.pcall('publish', ARGV[4], KEYS[1]) end
  local published = redis.pcall(ARGV[2], ARGV[1], ARGV[3] or '')
  if type(published) == 'table' and published.err then return {1, published.err} end
  return 1
end
return 0
