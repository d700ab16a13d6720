-- One level of a reentrant (or fair) lock let go (prepended to release.lua and
-- handoff.lua, which decide what happens when it frees the lock): release_level(lock,
-- owner, level, may_keep) lets go of the level whose mark (`l:<level id>`, set by the
-- acquisition) is there, and removes the mark with it, so a second run finds it gone and
-- changes nothing, and a release never removes a level it did not take. A level that
-- frees the lock leaves its mark to the caller, which deletes or replaces the whole hash
-- (one write to replicate, not two). `may_keep`: look for `hold:until` (acquire.lua's
-- hold_at_least, server ms); a lock freed before that time is kept, without a holder (the
-- owner's count and holder information `i:<owner id>` go), until then.
-- Returns the script's answer when the lock stays: -1 the owner does not hold it (nothing
-- changed); n > 0 still held re-entrantly (also when this level was released already); 0
-- kept until `hold:until`. nil: the last level went and the lock is to be freed (the
-- caller deletes or hands it). `gone` (optional): asked first when the level's mark is not
-- there (a run again); its answer, if any, is the script's. `only_level`: the client says this
-- level is the owner's only one (no nested hold of it is live, and none can run before
-- this release: see `Hold::only_level`), so a level that goes frees the lock without counting
-- down.
-- `waiting` (set by release_level): the lock's field `w` (false when not there): the
-- acquisitions refused it while it was held (acquire.lua), which wait for its release.
local waiting = false
local function release_level(lock, owner, level, may_keep, gone, only_level)
  local mark = 'l:' .. level
  local found = redis.call('hmget', lock, mark, 'w')
  waiting = found[2]
  if not found[1] then
    local answer = gone and gone()
    if answer then return answer end
    local count = tonumber(redis.call('hget', lock, owner) or 0)
    if count > 0 then return count end
    return -1
  end
  if not only_level then
    local count = tonumber(redis.call('hget', lock, owner) or 0)
    if count > 1 then
      redis.call('hdel', lock, mark)
      return redis.call('hincrby', lock, owner, -1)
    end
  end
  local hold_until = may_keep and tonumber(redis.call('hget', lock, 'hold:until'))
  if hold_until then
    local t = redis.call('time')
    local until_left = hold_until - (t[1] * 1000 + math.floor(t[2] / 1000))
    if until_left > 0 then
      redis.call('hdel', lock, mark, owner, 'i:' .. owner)
      redis.call('pexpire', lock, until_left)
      return 0
    end
  end
  return nil
end
