-- Renew a lease, only while the owner still holds the lock: never re-creates it, and only
-- ever extends it (a nested auto lease must not cut short an outer, longer fixed one).
--
-- KEYS[1] lock hash
-- ARGV[1] owner id
-- ARGV[2] lease in ms
-- Returns: 1 renewed (or already running at least that long); 0 gone.
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  return 1
end
return 0
