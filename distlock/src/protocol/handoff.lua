-- Release one level of a reentrant lock and, when that frees it, hand it straight to a
-- waiter of the same process (direct hand-off): the lock never becomes free, so nothing
-- is published; the waiter is told in-process. When the release does not free it (a
-- re-entrant level, not held) this answers as release.lua. When a waiter of another
-- process was refused the lock `turn` ms ago or more (acquire.lua added its process's tag
-- to the record's `waiting`), it does not hand it on: it frees the lock and publishes, as
-- release.lua does, so that waiter can take it (the client then holds its own acquirers
-- off for a moment): a hot key handed on among one process's waiters does not starve the
-- others, and changes process at most once a turn.
-- Only for holds taken without hold_at_least (the client's choice), so it never keeps a
-- lock until `until`.
-- Safe to run twice: a run again after a transfer finds the new holder's record with the
-- waiter's level and answers the same token (the expiry raised to a full lease from the
-- run again, as acquire.lua does); every argument is checked before the first write.
-- Costs 3 calls when it hands the lock on (INCR, GET, SET ... PX; TIME more with waiters
-- of other processes in the record).
--
-- KEYS[1] the lock's record (record.lua)
-- KEYS[2] fencing counter (fence_prologue.lua)
-- KEYS[3] (optional) the key's own counter of earlier builds, when KEYS[2] is another (fence_prologue.lua)
-- ARGV[1] owner id of the releasing hold
-- ARGV[2], ARGV[3] the channel and publish verb, as release.lua's (used when it frees the
--   lock for a waiter of another process)
-- ARGV[4] level id of the acquisition released
-- ARGV[5] the waiter's owner id (not the releasing owner)
-- ARGV[6] the waiter's lease in ms, digits only (1..86400000, MAX_LEASE; else an error reply before any write)
-- ARGV[7] the waiter's level id (its fresh acquisition's)
-- ARGV[8] '1' when the released level is the owner's only live one (as release.lua's
--   ARGV[6]), else '0' or absent
-- ARGV[9] the waiter's `host\tpid\tsite\tsince` when it records holder information, else ''
--   (or absent): written as acquire.lua writes a new holder's; the old holder's goes with
--   the old hold
-- ARGV[10] (optional) the tag of this process (acquire.lua's ARGV[7]): a tag in `waiting`
--   other than this one is a waiter of another process
-- ARGV[11] (optional, default 0) the turn in ms: how long a waiter of another process lets
--   this process hand the lock on among its own waiters before it gets it
-- Returns: {4, token} handed to the waiter, which holds it with this fencing token (a
--   new one from the counter); else as release.lua: -1 the owner does not hold it
--   (nothing changed); n > 0 still held re-entrantly; 0 (or {0, error}, the publish
--   refused) freed for a waiter of another process, and published.
local lock, fence, owner, new_owner = KEYS[1], KEYS[2], ARGV[1], ARGV[5]
local lease, new_level = tonumber(ARGV[6]), ARGV[7]
local holder = ARGV[9] or ''
local turn = tonumber(ARGV[11]) or 0
-- Checked before the first write, so a bad argument leaves nothing behind.
if not lease or lease < 1 or lease > 86400000 or not string.find(ARGV[6], '^%d+$') then
  return redis.error_reply('ERR distlock: lease out of range (1..86400000 ms, MAX_LEASE): ' .. tostring(ARGV[6]))
end
if not new_owner or new_owner == '' or new_owner == owner or not ARGV[7] then
  return redis.error_reply('ERR distlock: hand-off to a missing or the same owner')
end
-- The waiter's token is drawn first: the counter's INCR is the one command here that can
-- fail on what it finds (a counter that is not a number), and it fails before anything is
-- written. A run that does not transfer (a run again, a level still held, not held) leaves
-- its token unused: tokens only ever have to grow.
local token = next_token(fence, KEYS[3])
-- The level goes as release.lua lets it go (release_level, release_prologue.lua). A run
-- again of a transfer that was made finds the level gone and the waiter's level there: the
-- same answer, with the token the transfer drew. The client hands off only holds taken
-- without hold_at_least (and only their outermost level), so no `until` is looked for.
local stays, waiting = release_level(lock, owner, ARGV[4], false, function(r, granted, levels)
  if not (r == new_owner and string.find(',' .. levels .. ',', ',' .. new_level .. ',', 1, true)) then return nil end
  if redis.call('pttl', lock) < lease then redis.call('pexpire', lock, lease) end
  return {4, tonumber(granted)}
end, ARGV[8] == '1')
if stays then return stays end
-- Freed. The waiters of other processes refused it (acquire.lua's entries in `waiting`,
-- `,<tag>:<server ms>`): one that has waited `turn` ms or more gets the lock free, and a
-- younger one is kept for a later release. This process's own entries are kept too: a
-- waiter of its own whose place came too late for a hand-off hears the publish of a
-- later release (release.lua publishes only when an entry is there).
local kept = ''
if waiting then
  local now = nil
  for tag, at in string.gmatch(waiting, ',(%x+):(%d+)') do
    if tag ~= ARGV[10] then
      if not now then
        local t = redis.call('time')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      if now - tonumber(at) >= turn then
        redis.call('del', lock)
        local published = redis.pcall(ARGV[3], ARGV[2], owner)
        if type(published) == 'table' and published.err then return {0, published.err} end
        return 0
      end
    end
    kept = kept .. ',' .. tag .. ':' .. at
  end
end
-- Else the waiter takes it as a fresh acquisition (acquire.lua's), in the same run, with
-- the entries kept: its record replaces the old one, with its expiry, in one SET.
local high = math.floor(token / 1e9)
local text = high > 0 and string.format(TOKEN, high, token - high * 1e9) or string.format('%d', token)
redis.call('set', lock, string.format(RECORD, new_owner, text, new_level, '', kept, holder), 'px', ARGV[6])
return {4, token}
