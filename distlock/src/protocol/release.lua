-- Release one level of a reentrant (or fair) lock. Safe to run twice: see
-- release_prologue.lua (prepended), which lets the level go. Freeing the lock costs two
-- calls, GET and DEL, and a PUBLISH when a waiter is there to hear it: every refused
-- acquisition that may wait for a release leaves its backend's tag in the record
-- (acquire.lua's `waiting`, kept through hand-offs by handoff.lua), so a lock nobody
-- asked for while it was held is freed without one. A fair lock's waiters queue instead
-- of leaving a tag: its release says to publish always (ARGV[5]).
--
-- KEYS[1] the lock's record (record.lua)
-- ARGV[1] owner id
-- ARGV[2] channel
-- ARGV[3] level id of the acquisition released
-- The rest are optional, as acquire.lua's: those after the last one given are left out.
-- ARGV[4] '1' when this level is the owner's only live one (the client holds off its
--   nested acquisitions until this has run: `Hold::only_level`): it frees the lock, with
--   any nested level whose release is still on its way
-- ARGV[5] '1': publish a release that frees the lock even when no waiter left its tag (a
--   fair lock's; or while waiters of the releasing backend are asleep: a release wakes
--   one of them, and its acquisition leaves no tag for the others, `Hold::others_wait`)
-- ARGV[6] the publish verb: 'spublish' (Redis Cluster: sharded pub/sub); 'publish' when not
--   given or ''
-- ARGV[7] '1' when the lock may carry `until` (this hold was taken with hold_at_least, or
--   is a nested level of a hold that may be): the common release does not look at it;
--   'undo' when this release undoes an outermost acquisition whose outcome its caller
--   never learned (the reply lost, the future dropped: no guard was handed out, the job
--   did not run): the lock goes with the `until` that acquisition set, so the slot is
--   free for the job to run elsewhere
-- The owner's holder information goes with the lock.
-- A lock taken with hold_at_least (acquire.lua: the record's `until`, server ms) and freed
-- before that time is kept, without a holder, until then: nothing is published, and
-- acquirers find it held (run-once jobs).
-- Returns: -1 the owner does not hold it (nothing changed); n > 0 still held re-entrantly
--   (also when this level was released already); 0 freed (then the release is published
--   on the channel when a waiter is there; or kept until `until`); {0, error} freed, but
--   the publish failed (an ACL user without the channel right: NOPERM): the release
--   stands, waiters wake at the lease's end.
local lock, owner = KEYS[1], ARGV[1]
local stays, waiting = release_level(lock, owner, ARGV[3], ARGV[7] == '1', nil, ARGV[4] == '1')
if stays then return stays end
redis.call('del', lock)
-- `waiting`: the record's tags (release_prologue.lua), false when none.
if not waiting and ARGV[5] ~= '1' then return 0 end
local verb = ARGV[6]
if not verb or verb == '' then verb = 'publish' end
local published = redis.pcall(verb, ARGV[2], owner)
if type(published) == 'table' and published.err then return {0, published.err} end
return 0
