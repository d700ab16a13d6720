-- Renew one reader's or the writer's own lease, only while it still holds it; a lease is
-- only ever extended, never shortened (a nested auto lease inside a longer fixed one).
--
-- KEYS[1] rw hash
-- KEYS[2] readers zset
-- KEYS[3] waiting writers zset
-- ARGV[1] owner id
-- ARGV[2] lease in ms (1..86400000, MAX_LEASE; else an error reply before any write)
-- ARGV[3] 'read' or 'write'
-- Returns: 1 renewed; 0 gone.
--
-- Runs after rw_prologue.lua (prepended when loaded), which defines rw, readers,
-- writers, now, writer, wexp, last_reader() and touch().
local owner, lease = ARGV[1], tonumber(ARGV[2])
if not lease or lease < 1 or lease > 86400000 then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[2]))
end
if ARGV[3] == 'write' then
  if writer ~= owner then return 0 end
  if wexp < now + lease then
    wexp = now + lease
    redis.call('hset', rw, 'wexp', wexp)
  end
else
  local e = redis.call('zscore', readers, owner)
  if not e or redis.call('hexists', rw, 'r:' .. owner) == 0 then return 0 end
  if tonumber(e) < now + lease then redis.call('zadd', readers, now + lease, owner) end
end
touch()
return 1
