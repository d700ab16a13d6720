-- Redisson-format lock renewal (the watchdog): reentrant, fenced, fair and write locks.
--
-- KEYS[1]  the lock hash (the name itself)
-- ARGV[1]  lease in ms (Redisson: the watchdog timeout, 30000 by default)
-- ARGV[2]  owner field: "<client uuid>:<n>", for a write lock "<client uuid>:<n>:write"
--
-- Returns 1 while the owner holds the lock (its expiry now at least the lease), 0 when
-- it holds nothing (the lease was lost; nothing is re-created).
--
-- Differs from Redisson (renewal.LockTask, run every watchdog timeout / 3): one lock per
-- call instead of a batch, and the expiry is only ever extended (Redisson's PEXPIRE can
-- shorten a write lock whose re-entries added up to more than the lease).
local lease = tonumber(ARGV[1])
if lease == nil or lease <= 0 then
  return redis.error_reply('ERR lease must be a positive number of ms')
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return 0
end
if redis.call('pttl', KEYS[1]) < lease then
  redis.call('pexpire', KEYS[1], lease)
end
return 1
