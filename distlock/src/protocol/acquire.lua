-- Acquire or re-enter a reentrant lock. Safe to run twice (a client or proxy that retries
-- after a lost reply): every acquisition marks its level in the lock's record, so a second
-- run finds its first run and answers the same without counting again. A fresh
-- acquisition of a free lock costs three calls: EXISTS, INCR (the token), SET ... PX.
--
-- KEYS[1] the lock's record (record.lua; its expiry is the lease)
-- KEYS[2] fencing counter (fence_prologue.lua)
-- KEYS[3] (optional) the key's own counter of earlier builds, when KEYS[2] is another (fence_prologue.lua)
-- ARGV[1] owner id
-- ARGV[2] lease in ms, digits only (1..86400000, MAX_LEASE; else an error reply before any write)
-- ARGV[3] level id (one per acquisition)
-- The rest are optional, in the order of how often they are given: the client leaves out
-- those after the last one it gives (every argument costs the server a little on every
-- call), and '' stands for one not given before one that is.
-- ARGV[4] (holder information on) this holder's `host\tpid\tsite\tsince` (since: this
--   process's clock in ms): a new holder writes it in its record, in the same SET: it
--   lives and goes with the lock, and costs no key, no write and no expiry of its own.
-- ARGV[5] (a fresh acquisition on a backend that hands off) the tag of the acquirer's
--   process (its backend's hand-off waiters, hex digits): an attempt refused because
--   another owner holds the lock adds it to the record's `waiting` with the server time in
--   ms (`,<tag>:<ms>` per waiting process, each once, from its first refusal; it goes with
--   the lock), so that a hand-off among the holder process's own waiters lets the lock go
--   free for it after a turn (handoff.lua).
-- ARGV[6] '1' when the owner holds the lock already (a nested acquisition); else a fresh one
-- ARGV[7] hold_at_least in ms (none when not given or '0'; at most the lease, checked by
--   the client): a new holder records `until` = server TIME + this, and release.lua keeps
--   the lock, without a holder, until then (run-once jobs)
-- ARGV[8] (a fresh acquisition on redlock or multi, whose counter is the key's own) where
--   a counter that does not exist starts: the client's clock in µs + 100 ms, taken when
--   it is ahead of the server's clock by at most 200 ms (fence_prologue.lua).
-- Returns: {1, token} newly acquired (run again: the same, with the token the first run
--   drew, kept in the record: never the counter's current value, which a holder of
--   another kind of this key may have drawn since; and the expiry raised to a full lease
--   from the run again); {2, 0} re-entered
--   by the same owner (the expiry is only ever extended);
--   {0, pttl} held by another owner; {3, 0} a nested acquisition found the owner's hold
--   gone (expired, deleted, lost in a failover): nothing is created.
local lock, fence, owner, level = KEYS[1], KEYS[2], ARGV[1], ARGV[3]
local lease, nested = tonumber(ARGV[2]), ARGV[6] == '1'
local at_least = (ARGV[7] == nil or ARGV[7] == '') and 0 or tonumber(ARGV[7])
local holder = ARGV[4] or ''
-- Checked before the first write, so a bad argument leaves nothing behind.
if not lease or lease < 1 or lease > 86400000 or not string.find(ARGV[2], '^%d+$') then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[2]))
end
if not at_least or at_least < 0 or at_least > 86400000 then
  return redis.error_reply('ERR distlock: hold_at_least out of range (0..86400000 ms): ' .. tostring(ARGV[7]))
end
-- A run again of this acquisition (its first reply was lost or late) answers the same, and
-- makes the expiry a full lease from now (only ever extending): the client counts its
-- lease from when it sent this run, so the server must not end it earlier.
if nested then
  local r, token, levels, until_ms, waiting, holder_info = read_record(lock)
  if r and string.find(',' .. levels .. ',', ',' .. level .. ',', 1, true) then
    if redis.call('pttl', lock) < lease then redis.call('pexpire', lock, lease) end
    return {2, 0}
  end
  if r ~= owner then return {3, 0} end
  local text = string.format(RECORD, r, token, levels .. ',' .. level, until_ms, waiting, holder_info)
  redis.call('set', lock, text, 'px', math.max(redis.call('pttl', lock), lease))
  return {2, 0}
end
-- A lock that does not exist cannot carry this level's mark: the common case costs one
-- EXISTS, which also asks for the key's own counter of earlier builds (KEYS[3], when there
-- is one): when neither exists, the token is drawn without reading it. Only an existing
-- lock is looked at for a first run of this acquisition.
local legacy = KEYS[3]
local found = legacy and redis.call('exists', lock, legacy) or redis.call('exists', lock)
if found > 0 then
  local r, token, levels, until_ms, waiting, holder_info = read_record(lock)
  if r ~= nil then
    -- Held (r false: a key of another type, held by another owner for this script).
    local pttl = redis.call('pttl', lock)
    if r and string.find(',' .. levels .. ',', ',' .. level .. ',', 1, true) then
      if pttl < lease then redis.call('pexpire', lock, lease) end
      return {1, tonumber(token)}
    end
    local tag = ARGV[5]
    if r and tag and tag ~= '' and not string.find(waiting, ',' .. tag .. ':', 1, true) then
      local t = redis.call('time')
      waiting = waiting .. ',' .. tag .. ':' .. t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
      redis.call('set', lock, string.format(RECORD, r, token, levels, until_ms, waiting, holder_info), 'keepttl')
    end
    return {0, pttl}
  end
else
  legacy = nil
end
local token = next_token(fence, legacy, ARGV[8])
local until_ms = ''
if at_least > 0 then
  local t = redis.call('time')
  until_ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + at_least)
end
local high = math.floor(token / 1e9)
local text = high > 0 and string.format(TOKEN, high, token - high * 1e9) or string.format('%d', token)
redis.call('set', lock, string.format(RECORD, owner, text, level, until_ms, '', holder), 'px', ARGV[2])
return {1, token}
