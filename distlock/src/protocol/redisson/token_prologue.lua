-- The token counter of Redisson's format (prepended to its acquire scripts): next_token(key)
-- INCRs `redisson_lock_token:{name}` as Redisson's RFencedLock does, and gives the new value.
--
-- A counter that does not exist (never used, or deleted, evicted, lost in a failover to a
-- replica that never got it) starts from the server's clock in microseconds (+ 1), as
-- distlock's own counter does (fence_prologue.lua, with the same conditions), so its tokens
-- stay above every token the lost counter gave. The counter is kept without an expiry, as
-- Redisson keeps it (a Java client INCRs the same key and never sets one): its documented
-- retention is one integer per lock name, until the name is retired (DEL it then).
local function next_token(counter)
  local token = redis.call('incr', counter)
  if token == 1 then
    local t = redis.call('time')
    token = tonumber(t[1]) * 1000000 + tonumber(t[2]) + 1
    redis.call('set', counter, string.format('%.0f', token))
  end
  return token
end
