-- Renew a lease, only while the owner still holds the lock: never re-creates it.
--
-- KEYS[1] lock hash
-- ARGV[1] owner id
-- ARGV[2] lease in ms
-- KEYS[2] (optional) the holder information hash, given the same expiry
-- Returns: 1 renewed; 0 gone.
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  if KEYS[2] then redis.call('pexpire', KEYS[2], ARGV[2]) end
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
