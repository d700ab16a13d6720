-- The record of a reentrant or fair lock (prepended to the scripts that read or write one).
-- A lock is one string key, so that a new holder is written, with its expiry, by one
-- `SET ... PX`, read by one GET and freed by one DEL. Its fields, joined by tabs:
--   owner    the holder's owner id ('' while a run-once lock is kept without a holder)
--   token    the fencing token the holder's outermost acquisition drew ('' with no holder)
--   levels   the level ids of the acquisitions held, joined by commas, the outermost
--            first: each acquisition's mark, by which a run again of it is known and a
--            release lets go only of a level it took (ids are hex digits)
--   until    a run-once job's `hold_at_least` end, server ms ('' none; acquire.lua)
--   waiting  the processes refused the lock while it was held, `,<tag>:<ms>` each ('' none;
--            acquire.lua, handoff.lua)
--   holder   holder information, `host\tpid\tsite\tsince` ('' none; `since`: the
--            acquiring process's clock in ms): last, as it has tabs of its own
-- A key of another type there (a hash written by an earlier build of distlock) is held by
-- another owner for every script: they refuse it and write nothing to it.
--
-- The fields go in and out as separate values and are written with one string.format of
-- RECORD (`redis.call('set', lock, string.format(RECORD, ...), 'px', ms)`), and a level is
-- looked for with one plain find (`string.find(',' .. levels .. ',', ',' .. level .. ',',
-- 1, true)`): a script runs its prologues' definitions on every call, each function a
-- closure made anew, and a lock and release pair is a few microseconds of server time in
-- all (docs/performance.md), so this prologue defines one function.
local RECORD = '%s\t%s\t%s\t%s\t%s\t%s'
-- A fencing token (an integer below 2^53) goes in as text by `TOKEN` with its billions and
-- the rest (`local high = math.floor(token / 1e9)`; `string.format(TOKEN, high, token -
-- high * 1e9)`), or by '%d' below a billion: exact on every build of Redis's Lua, whose '%d'
-- takes a C long (32 bits on some), and cheaper than '%.0f', whose float printing was a
-- measurable share of a lock and release pair's server time (docs/performance.md). For the
-- same reason a lease goes to `SET ... PX` as the text it came in, not as a number.
local TOKEN = '%d%09d'
-- read_record(lock): the record's six fields; nil when there is no lock; false when the
-- key is not a record (another type, or not this layout).
local function read_record(lock)
  local text = redis.pcall('get', lock)
  if not text then return nil end
  if type(text) ~= 'string' then return false end
  local owner, token, levels, until_ms, waiting, holder =
    string.match(text, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$')
  if not owner then return false end
  return owner, token, levels, until_ms, waiting, holder
end
