-- Redisson-format reentrant lock (RLock) and fenced lock (RFencedLock): acquire or re-enter.
--
-- KEYS[1]  the lock hash: the lock's name itself, fields "<client uuid>:<n>" -> hold count
-- KEYS[2]  (fenced lock only) the token counter "redisson_lock_token:{name}"; leave out
--          for the plain lock
-- ARGV[1]  lease in ms (Redisson's default is the watchdog timeout, 30000)
-- ARGV[2]  owner field "<client uuid>:<n>"
-- ARGV[3]  (optional) "1": only re-enter a hold this owner has (distlock's nested
--          acquisition); nothing is created when the owner's field is gone
--
-- Returns {1, token} when newly acquired, {2, token} when re-entered by the same owner,
-- {3, 0} when ARGV[3] is "1" and the owner holds nothing (its lease was lost),
-- {0, pttl} when another owner holds it (pttl as Redis reports it, -1 when the hash has no
-- expiry). token is the counter's new value for the fenced lock, 0 for the plain lock.
--
-- Differs from Redisson (RedissonLock.tryLockInnerAsync, RedissonFencedLock.tryLockInnerAsync):
-- * a re-entry only ever extends the expiry (Redisson sets it to the lease, which can
--   shorten an expiry a longer lease left); the keys and fields written are the same;
-- * the replies are distlock's triple instead of nil/pttl, and the fenced lock's token
--   comes back from the same call (Redisson's lockAndGetToken path returns it likewise).
-- Like Redisson, the fenced lock's counter grows on a re-entry too and never expires (a
-- lost counter starts again above the tokens it gave: token_prologue.lua).
--
-- Not safe to run twice: a run again is counted as a re-entry (the layout has no mark per
-- acquisition, and an extra field in the hash would change what Java clients see), and it
-- answers {2, token}; distlock takes no token from a re-entry (its guard carries the outer
-- hold's), and sends these calls once.
local lock, owner, lease = KEYS[1], ARGV[2], tonumber(ARGV[1])
if lease == nil or lease <= 0 then
  return redis.error_reply('ERR lease must be a positive number of ms')
end
local state
if redis.call('exists', lock) == 0 then
  state = 1
elseif redis.call('hexists', lock, owner) == 1 then
  state = 2
elseif ARGV[3] ~= '1' then
  return {0, redis.call('pttl', lock)}
end
if ARGV[3] == '1' and state ~= 2 then
  return {3, 0}
end
local token = 0
if KEYS[2] ~= nil then
  token = next_token(KEYS[2])
end
redis.call('hincrby', lock, owner, 1)
if state == 1 or redis.call('pttl', lock) < lease then
  redis.call('pexpire', lock, lease)
end
return {state, token}
