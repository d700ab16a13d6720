-- Renew a lease, only while the owner still holds the lock: never re-creates it, and only
-- ever extends it (a nested auto lease must not cut short an outer, longer fixed one).
--
-- KEYS[1] the lock's record (record.lua)
-- ARGV[1] owner id
-- ARGV[2] lease in ms (1..86400000, MAX_LEASE; else an error reply before any write)
-- Returns: 1 renewed (or already running at least that long); 0 gone.
local lease = tonumber(ARGV[2])
if not lease or lease < 1 or lease > 86400000 then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[2]))
end
if read_record(KEYS[1]) == ARGV[1] then
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  return 1
end
return 0
