-- Acquire or re-enter a reentrant lock. Safe to run twice (a client or proxy that retries
-- after a lost reply): every acquisition marks its level in the hash (`l:<level id>`), so
-- a second run finds its first run and answers the same without counting again.
--
-- KEYS[1] lock hash (owner id -> reentrancy count; l:<level id> for each level held:
--         the new holder's level -> its fencing token, a nested level -> 1; i:<owner id>
--         the holder information; its expiry is the lease)
-- KEYS[2] fencing counter (fence_prologue.lua)
-- KEYS[3] (optional) the key's own counter of earlier builds, when KEYS[2] is another (fence_prologue.lua)
-- ARGV[1] owner id
-- ARGV[2] lease in ms (1..86400000, MAX_LEASE; else an error reply before any write)
-- ARGV[3] level id (one per acquisition)
-- ARGV[4] '1' when the owner holds the lock already (a nested acquisition), else '0'
-- ARGV[5] hold_at_least in ms ('0' or absent: none; at most the lease, checked by the client): a new
--   holder records `hold:until` = server TIME + this, and release.lua keeps the lock,
--   without a holder, until then (run-once jobs)
-- ARGV[6] (optional, holder information on) this holder's `host\tpid\tsite`: a new holder
--   writes it, with the server TIME in ms and the token appended, as the field
--   `i:<owner id>` of the lock hash, in the same HSET as its count: it lives and goes with
--   the lock, and costs no key, no write and no expiry of its own. '' (or absent): none.
-- ARGV[7] (optional; a fresh acquisition on a backend that hands off) the tag of the
--   acquirer's process (its backend's hand-off waiters, hex digits): an attempt refused
--   because another owner holds the lock adds it to the lock's field `w` with the server
--   time in ms (`,<tag>:<ms>` per waiting process, each once, from its first refusal; it
--   goes with the lock), so that a hand-off among the holder process's own waiters lets the
--   lock go free for it after a turn (handoff.lua). '' (or absent): none.
-- ARGV[8] (optional; a fresh acquisition on redlock or multi, whose counter is the key's
--   own) where a counter that does not exist starts: the client's clock in µs + 100 ms,
--   taken when it is ahead of the server's clock by at most 200 ms (fence_prologue.lua).
-- Returns: {1, token} newly acquired (run again: the same, with the token the first run
--   drew, kept as its level's mark: never the counter's current value, which a holder of
--   another kind of this key may have drawn since; and the expiry raised to a full lease
--   from the run again); {2, 0} re-entered
--   by the same owner (the expiry is only ever extended);
--   {0, pttl} held by another owner; {3, 0} a nested acquisition found the owner's hold
--   gone (expired, deleted, lost in a failover): nothing is created.
local lock, fence, owner, level = KEYS[1], KEYS[2], ARGV[1], 'l:' .. ARGV[3]
local lease, nested = tonumber(ARGV[2]), ARGV[4] == '1'
local at_least = ARGV[5] == nil and 0 or tonumber(ARGV[5])
local holder = ARGV[6] ~= '' and ARGV[6] or nil
-- Checked before the first write, so a bad argument leaves nothing behind.
if not lease or lease < 1 or lease > 86400000 then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[2]))
end
if not at_least or at_least < 0 or at_least > 86400000 then
  return redis.error_reply('ERR distlock: hold_at_least out of range (0..86400000 ms): ' .. tostring(ARGV[5]))
end
-- A run again of this acquisition (its first reply was lost or late): answer the same,
-- and make the expiry a full lease from now (only ever extending; `pttl` the lock's
-- current one): the client counts its lease from when it sent this run, so the server
-- must not end it earlier.
local function again(answer, pttl)
  if (pttl or redis.call('pttl', lock)) < lease then redis.call('pexpire', lock, lease) end
  return answer
end
if nested then
  if redis.call('hexists', lock, level) == 1 then return again({2, 0}) end
  if redis.call('hexists', lock, owner) == 0 then return {3, 0} end
  redis.call('hincrby', lock, owner, 1)
  redis.call('hset', lock, level, 1)
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  return {2, 0}
end
-- A lock that does not exist cannot carry this level's mark: the common case costs one
-- EXISTS, which also asks for the key's own counter of earlier builds (KEYS[3], when there
-- is one): when neither exists, the token is drawn without reading it. Only an existing
-- lock is looked at for a first run of this acquisition.
local legacy = KEYS[3]
local found = legacy and redis.call('exists', lock, legacy) or redis.call('exists', lock)
local pttl = found > 0 and redis.call('pttl', lock) or -2
if pttl ~= -2 then
  if redis.call('hexists', lock, level) == 1 then
    return again({1, tonumber(redis.call('hget', lock, level))}, pttl)
  end
  if ARGV[7] and ARGV[7] ~= '' then
    local w = redis.call('hget', lock, 'w') or ''
    if not string.find(w, ',' .. ARGV[7] .. ':', 1, true) then
      local t = redis.call('time')
      redis.call('hset', lock, 'w', w .. ',' .. ARGV[7] .. ':' .. t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000)))
    end
  end
  return {0, pttl}
end
if found == 0 then legacy = nil end
local token = next_token(fence, legacy, ARGV[8])
local mark = string.format('%.0f', token)
if holder or at_least > 0 then
  local t = redis.call('time')
  if at_least > 0 then
    redis.call('hset', lock, 'hold:until', string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000) + at_least))
  end
  if holder then
    redis.call('hset', lock, owner, 1, level, mark, 'i:' .. owner, holder_entry(holder, t, mark))
  else
    redis.call('hset', lock, owner, 1, level, mark)
  end
else
  redis.call('hset', lock, owner, 1, level, mark)
end
redis.call('pexpire', lock, lease)
return {1, token}
