-- The fencing counter of a lock (prepended to the acquire scripts): next_token(key) gives
-- the next token of the key's counter, whose life slides with its use (24 h after its last
-- token, so no counter lives forever).
--
-- A counter that does not exist (never used, or unused for 24 h, or evicted) starts from
-- the server's clock in milliseconds × 1000, so its tokens are above every token the
-- expired counter gave, as long as (a) the server's clock did not go back by more than the
-- counter's idle time, and (b) the key was locked fewer than 1000 times per millisecond on
-- average over the old counter's life. A counter seeded so stays below 2^53 (exact in Lua)
-- until the year 2255.
local function next_token(fence)
  local token = redis.call('incr', fence)
  if token == 1 then
    local t = redis.call('time')
    token = (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) * 1000 + 1
    redis.call('set', fence, token, 'px', 86400000)
    return token
  end
  redis.call('pexpire', fence, 86400000)
  return token
end
