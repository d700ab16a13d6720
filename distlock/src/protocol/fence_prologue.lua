-- The fencing counter of a lock (prepended to the acquire scripts): next_token(fence,
-- legacy) gives the next token of the counter `fence`. Tokens only need to grow from holder
-- to holder of one key, so one counter may serve many keys (protocol/keys.rs, FenceScope):
-- the server's (single, sentinel), the cluster slot's (cluster), or the key's own (redlock
-- and multi). A counter lives 24 h from when it was started (its expiry is set then, and
-- INCR keeps it), so no counter lives forever, and a token costs one INCR.
--
-- A counter that does not exist (never used, or started more than 24 h ago, or deleted,
-- evicted, lost in a failover) starts from the server's clock in microseconds (+ 1), so its
-- tokens are above every token the lost counter gave, as long as (a) the server's clock did
-- not go back by more than the time since the lost counter was started, and (b) the
-- counter gave fewer than one token per microsecond on average over its life (a Redis
-- server runs far fewer than a million scripts a second). (Started in milliseconds × 1000,
-- a counter lost and started again within the same millisecond gave the same token twice.)
-- A counter started so stays below 2^53 (exact in Lua) until the year 2255.
--
-- `floor` (nil, or the client's clock in µs + 100 ms as text: redlock and multi): a counter
-- that does not exist starts there instead, when that is ahead of the server's clock by at
-- most 200 ms, so that the nodes of a quorum, whose clocks agree to well within 100 ms,
-- start a new key's counters equal (no second round trip to raise the ones that lag).
-- Still never below the server's clock. Such a counter may run up to 200 ms ahead of the
-- server's clock, so for it (a) above reads "back by more than the time since the lost
-- counter was started, less 200 ms": one lost within 200 ms of its start may start again
-- below its tokens. Quorum modes promise growing tokens only as long as the nodes keep
-- their counters (backend/quorum/mod.rs); their raise of a lagging node (INCRBY) puts it
-- ahead of its own clock by the nodes' clock difference in the same way.
--
-- `legacy` (nil when `fence` is the key's own counter): the key's own counter, which
-- earlier builds of distlock drew every token of the key from. While it lives, the token
-- is drawn above it and it is raised to the token, so that both builds on one key (a
-- rolling upgrade) give growing tokens. It is read before anything is written: a key of
-- the wrong type there fails the script with nothing written.
local function next_token(fence, legacy, floor)
  local old = legacy and redis.call('get', legacy)
  local token = redis.call('incr', fence)
  if token == 1 then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local from = tonumber(floor or '')
    if not from or from ~= math.floor(from) or from <= now or from > now + 200000 then
      from = now
    end
    token = from + 1
    redis.call('set', fence, string.format('%.0f', token), 'px', 86400000)
  end
  old = old and tonumber(old)
  if old then
    if old >= token then
      token = old + 1
      redis.call('set', fence, string.format('%.0f', token), 'keepttl')
    end
    redis.call('set', legacy, string.format('%.0f', token), 'keepttl')
  end
  return token
end
