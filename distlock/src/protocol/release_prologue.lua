-- One level of a reentrant (or fair) lock let go (prepended, after record.lua, to
-- release.lua and handoff.lua, which decide what happens when it frees the lock):
-- release_level(lock, owner, level, may_keep, gone, only_level) lets go of the level `level` when the
-- owner's record holds it, and removes it from the record, so a second run finds it gone
-- and changes nothing, and a release never removes a level it did not take. A level that
-- frees the lock leaves the record to the caller, which deletes or replaces it (one write
-- to replicate, not two). `may_keep`: look at the record's `until` (acquire.lua's
-- hold_at_least, server ms); a lock freed before that time is kept, without a holder (its
-- owner, token, levels and holder information go), until then.
-- Returns the script's answer when the lock stays: -1 the owner does not hold it (nothing
-- changed); n > 0 still held re-entrantly (also when this level was released already); 0
-- kept until `until`. nil: the last level went and the lock is to be freed (the caller
-- deletes or hands it). `gone(owner, token, levels)` (optional): asked first, with the
-- record's fields, when the owner's record does not hold the level (a run again); its
-- answer, if any, is the script's. `only_level`: the client says this level is the
-- owner's only live one (see `Hold::only_level`: no nested hold of it is live, and none
-- can run before this release; a nested level still in the record is one whose release is
-- still on its way), so the level frees the lock whatever other levels the record lists.
-- With nil it also returns the record's `waiting` (false when empty): the acquisitions
-- refused the lock while it was held (acquire.lua), which wait for its release. It keeps
-- no state between calls (a function library defines it once for every call).
local function release_level(lock, owner, level, may_keep, gone, only_level)
  local r, token, levels, until_ms, w, holder = read_record(lock)
  if not (r == owner and (levels == level or string.find(',' .. levels .. ',', ',' .. level .. ',', 1, true))) then
    local answer = gone and gone(r, token, levels)
    if answer then return answer end
    if r == owner and levels ~= '' then
      local _, commas = string.gsub(levels, ',', '')
      return commas + 1
    end
    return -1
  end
  if levels ~= level and not only_level then
    -- Other levels stay: this one goes from the list (ids hold no comma).
    local list = ',' .. levels .. ','
    local at = string.find(list, ',' .. level .. ',', 1, true)
    list = string.sub(string.sub(list, 1, at) .. string.sub(list, at + #level + 2), 2, -2)
    redis.call('set', lock, string.format(RECORD, r, token, list, until_ms, w, holder), 'keepttl')
    local _, commas = string.gsub(list, ',', '')
    return commas + 1
  end
  if may_keep and until_ms ~= '' then
    local t = redis.call('time')
    local until_left = tonumber(until_ms) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    if until_left > 0 then
      redis.call('set', lock, string.format(RECORD, '', '', '', until_ms, w, ''), 'px', until_left)
      return 0
    end
  end
  return nil, r and w ~= '' and w or false
end
