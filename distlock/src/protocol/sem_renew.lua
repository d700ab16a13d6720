-- Renew one semaphore holder's lease (after sem_prologue.lua): only while it still holds
-- (never re-creates it), and only ever extending (ZADD XX GT).
--
-- KEYS[1] holders zset, KEYS[2] counts hash (see sem_prologue.lua)
-- ARGV[1] holder id
-- ARGV[2] lease in ms (1..86400000, MAX_LEASE; else an error reply before any write)
-- Returns: 1 renewed (or already running at least that long); 0 gone.
local lease = tonumber(ARGV[2])
if not lease or lease < 1 or lease > 86400000 then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[2]))
end
local now = purge()
if not redis.call('zscore', holders, ARGV[1]) then
  keep(now)
  return 0
end
redis.call('zadd', holders, 'xx', 'gt', now + lease, ARGV[1])
keep(now)
return 1
