-- Redisson-format read lock renewal (the watchdog for readers).
--
-- KEYS[1]  the read-write lock hash (the name itself)
-- KEYS[2]  the key prefix "{name}" (or the bare name when it already holds a "{")
-- ARGV[1]  lease in ms
-- ARGV[2]  reader's owner field "<client uuid>:<n>"
--
-- Returns 1 while the owner holds read holds (each hold's timeout key and the hash now
-- expire no sooner than the lease), 0 when it holds none (nothing is re-created).
--
-- Differs from Redisson (renewal.ReadLockTask): one owner of one lock per call instead of
-- a batch, and expiries are only ever extended.
local lock, stem, lease, owner = KEYS[1], KEYS[2], tonumber(ARGV[1]), ARGV[2]
if lease == nil or lease <= 0 then
  return redis.error_reply('ERR lease must be a positive number of ms')
end
local count = tonumber(redis.call('hget', lock, owner))
if not count then
  return 0
end
for i = count, 1, -1 do
  local key = stem .. ':' .. owner .. ':rwlock_timeout:' .. i
  local pttl = redis.call('pttl', key)
  if pttl ~= -2 and pttl < lease then
    redis.call('pexpire', key, lease)
  end
end
if redis.call('pttl', lock) < lease then
  redis.call('pexpire', lock, lease)
end
return 1
