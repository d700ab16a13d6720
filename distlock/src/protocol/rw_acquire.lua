-- Acquire or re-enter a read or write lock (writer-preferring: while a live writer
-- waits, new readers are refused; a writer may take a read lock, a downgrade; no upgrade).
--
-- KEYS[1] rw hash
-- KEYS[2] readers zset
-- KEYS[3] waiting writers zset
-- KEYS[4] fencing counter (fence_prologue.lua)
-- KEYS[5] (optional) the key's own counter of earlier builds, when KEYS[4] is another (fence_prologue.lua)
-- ARGV[1] owner id
-- ARGV[2] lease in ms (1..86400000, MAX_LEASE; else an error reply before any write)
-- ARGV[3] 'read' or 'write'
-- ARGV[4] wait left in ms (0: do not queue; at most 31536000000, MAX_WAIT)
-- ARGV[5] level id (one per acquisition; see acquire.lua)
-- ARGV[6] '0' a fresh acquisition; else a nested one, which requires the owner's enclosing
--   hold and answers {3, 0} (creating nothing) when it is gone: '1' a hold of the same mode,
--   'w' (a read) the owner's write hold, 'r' (a write) the owner's read hold or its write
--   hold (without the write hold it waits like any writer: no upgrade)
-- ARGV[7] (optional) holder information: the rw hash gets one entry per holder,
--   `i:<owner>` -> `host\tpid\tsite\tsince_ms\ttoken` (a writer that also reads: the newest)
-- Returns: as acquire.lua; run again (the level's mark found), the same answer (the token
--   the first run drew, kept as rt:<owner> or wt; should it be gone, a new one is drawn and
--   kept: never the counter's current value), with the owner's lease end raised to a full
--   lease from now.
--
-- Runs after rw_prologue.lua (prepended when loaded), which defines rw, readers,
-- writers, now, writer, wexp, last_reader() and touch().
local owner, lease, mode, wait = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local level, within = ARGV[5], ARGV[6]
-- Run again, a nested acquisition in a hold of the same mode answers {2, 0} (as its first
-- run did); a read nested in the write hold may have been the owner's first read.
local nested = within == '1' or within == 'r'
-- Checked before this script's first write (the prologue only purged expired state).
if not lease or lease < 1 or lease > 86400000 then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[2]))
end
if not wait or wait < 0 or wait > 31536000000 then
  return redis.error_reply('ERR distlock: wait out of range (0..31536000000 ms, MAX_WAIT): ' .. tostring(ARGV[4]))
end
if not level or level == '' or string.find(level, ',', 1, true) then
  return redis.error_reply('ERR distlock: bad level id: ' .. tostring(level))
end
if within ~= '0' and within ~= '1' and within ~= 'w' and within ~= 'r' then
  return redis.error_reply('ERR distlock: bad nested flag: ' .. tostring(within))
end
local function again(field)
  if nested then return {2, 0} end
  local token = tonumber(redis.call('hget', rw, field))
  if not token then
    token = next_token(KEYS[4], KEYS[5])
    redis.call('hset', rw, field, string.format('%.0f', token))
  end
  return {1, token}
end
local function left(t) return math.max(t - now, 1) end
local function note(token)
  if ARGV[7] then
    -- `host\tpid\tsite\tsince_ms\ttoken` (the milliseconds joined as text).
    local since = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
    redis.call('hset', rw, 'i:' .. owner, ARGV[7] .. '\t' .. since .. '\t' .. string.format('%.0f', token))
  end
end
if mode == 'read' then
  local rc, mr = 'r:' .. owner, 'mr:' .. owner
  if marked(mr, level) then
    local e = tonumber(redis.call('zscore', readers, owner) or 0)
    if e < now + lease then redis.call('zadd', readers, now + lease, owner) end
    touch()
    return again('rt:' .. owner)
  end
  if within == '1' and redis.call('hexists', rw, rc) == 0 then return {3, 0} end
  if within == 'w' and writer ~= owner then return {3, 0} end
  if redis.call('hexists', rw, rc) == 1 then
    redis.call('hincrby', rw, rc, 1)
    mark(mr, level)
    local e = tonumber(redis.call('zscore', readers, owner) or 0)
    if e < now + lease then redis.call('zadd', readers, now + lease, owner) end
    touch()
    return {2, 0}
  end
  if writer and writer ~= owner then return {0, left(wexp)} end
  if not writer then
    local w = redis.call('zrange', writers, 0, 0, 'withscores')
    if w[2] then return {0, left(tonumber(w[2]))} end
  end
  local token = next_token(KEYS[4], KEYS[5])
  redis.call('hset', rw, rc, 1, 'rt:' .. owner, string.format('%.0f', token))
  mark(mr, level)
  redis.call('zadd', readers, now + lease, owner)
  touch()
  note(token)
  return {1, token}
end
local mw = 'mw:' .. owner
if writer == owner and marked(mw, level) then
  if wexp < now + lease then
    wexp = now + lease
    redis.call('hset', rw, 'wexp', wexp)
  end
  touch()
  return again('wt')
end
if within == '1' and writer ~= owner then return {3, 0} end
if within == 'r' and writer ~= owner and redis.call('hexists', rw, 'r:' .. owner) == 0 then
  return {3, 0}
end
if writer == owner then
  redis.call('hincrby', rw, 'wcount', 1)
  mark(mw, level)
  if wexp < now + lease then
    wexp = now + lease
    redis.call('hset', rw, 'wexp', wexp)
  end
  touch()
  return {2, 0}
end
local busy = nil
if writer then busy = wexp else busy = last_reader() end
if busy then
  if wait > 0 then
    redis.call('zadd', writers, now + wait, owner)
    touch()
  end
  return {0, left(busy)}
end
local token = next_token(KEYS[4], KEYS[5])
writer, wexp = owner, now + lease
redis.call('hset', rw, 'writer', owner, 'wcount', 1, 'wexp', wexp, 'wt', string.format('%.0f', token), mw, ',' .. level .. ',')
redis.call('zrem', writers, owner)
touch()
note(token)
return {1, token}
