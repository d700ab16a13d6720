-- Renew one reader's or the writer's own lease, only while it still holds it.
--
-- KEYS[1] rw hash
-- KEYS[2] readers zset
-- KEYS[3] waiting writers zset
-- ARGV[1] owner id
-- ARGV[2] lease in ms
-- ARGV[3] 'read' or 'write'
-- KEYS[4] (optional) the holder information hash, given the rw hash's expiry
-- Returns: 1 renewed; 0 gone.
--
-- Runs after rw_prologue.lua (prepended when loaded), which defines rw, readers,
-- writers, now, writer, wexp, last_reader() and touch().
local owner, lease = ARGV[1], tonumber(ARGV[2])
if ARGV[3] == 'write' then
  if writer ~= owner then return 0 end
  wexp = now + lease
  redis.call('hset', rw, 'wexp', wexp)
else
  if not redis.call('zscore', readers, owner) then return 0 end
  redis.call('zadd', readers, now + lease, owner)
end
touch()
if KEYS[4] then
  local p = redis.call('pttl', rw)
  if p > 0 then redis.call('pexpire', KEYS[4], p) end
end
return 1
