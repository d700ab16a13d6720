-- Take permits of a semaphore (after sem_prologue.lua, fence_prologue.lua and
-- sem_take.lua). Safe to run twice: an acquisition is one holder id, so a second run finds
-- its entry and answers the same (its own token, kept as t:<holder id>), with its lease
-- raised to a full lease from now (only ever extending).
--
-- KEYS[1] holders zset, KEYS[2] counts hash (see sem_prologue.lua)
-- KEYS[3] fencing counter (shared with the locks of the key; fence_prologue.lua)
-- KEYS[4] (optional) the key's own counter of earlier builds, when KEYS[3] is another (fence_prologue.lua)
-- ARGV[1] holder id (one per acquisition)
-- ARGV[2] permits to take (1..limit)
-- ARGV[3] limit: the semaphore's permits as this caller sees it (1..2147483647); the
--         holders' total after this acquisition must not exceed it
-- ARGV[4] lease in ms (1..86400000, MAX_LEASE)
-- ARGV[5] (optional) holder information `host\tpid\tsite` (see take() in sem_take.lua)
-- Bad arguments are an error reply before any write.
-- Returns: {1, token} acquired; {0, ms} not enough permits free: ms until the earliest
--   holder's lease ends (when a permit comes back at the latest, without a release).
local id = ARGV[1]
local n, limit, lease = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local bad = check(n, limit, lease)
if bad then return bad end
local now = purge()
local done = again(id, n, lease, now, KEYS[3], KEYS[4])
if done then return done end
if in_use(limit) + n > limit then return refused(now) end
return {1, take(id, n, limit, lease, now, KEYS[3], KEYS[4], ARGV[5])}
