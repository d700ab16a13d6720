-- Redisson-format read lock (RedissonReadLock): acquire or re-enter a shared hold.
--
-- KEYS[1]  the read-write lock hash (the name itself): field "mode" = "read" | "write",
--          and per holder "<client uuid>:<n>" (reader) or "<client uuid>:<n>:write"
--          (writer) -> hold count
-- KEYS[2]  this reader's timeout prefix "{name}:<client uuid>:<n>:rwlock_timeout" (when
--          the name already holds a "{", no braces are added: "name:<uuid>:<n>:rwlock_timeout");
--          hold i of the reader has the string key "<prefix>:<i>" expiring with that hold
-- KEYS[3]  (optional) the token counter "redisson_lock_token:{name}": an owner's first
--          read hold INCRs it (distlock's fencing token; Redisson's rwlock has none; a
--          lost counter starts again above its tokens: token_prologue.lua)
-- ARGV[1]  lease in ms
-- ARGV[2]  reader's owner field "<client uuid>:<n>"
-- ARGV[3]  the same owner's writer field "<client uuid>:<n>:write"
-- ARGV[4]  (optional) distlock's nested acquisition, which creates nothing without the
--          owner's enclosing hold: "1" only re-enter this owner's read hold, "w" the
--          owner must hold the write lock (a read nested in it)
--
-- Returns {1, token} for the owner's first read hold (token 0 without KEYS[3]), {2, 0} for a further one, {0, pttl}
-- when refused (a writer other than this owner holds the lock), {3, 0} when ARGV[4] names
-- an enclosing hold that is gone (its lease was lost).
--
-- Granted when nobody holds the lock, when it is in read mode (other readers, whatever
-- writers wait: Redisson's read-write lock is not fair), or when this owner holds the
-- write lock (a downgrade). The hash lives as long as its longest hold.
--
-- Differs from Redisson (RedissonReadLock.tryLockInnerAsync): the reply format, and the
-- nested flag (Redisson has no nested acquisition that must not create).
local lock, prefix = KEYS[1], KEYS[2]
local lease, owner, writer = tonumber(ARGV[1]), ARGV[2], ARGV[3]
if lease == nil or lease <= 0 then
  return redis.error_reply('ERR lease must be a positive number of ms')
end
local mode = redis.call('hget', lock, 'mode')
if ARGV[4] == '1' and redis.call('hexists', lock, owner) == 0 then
  return {3, 0}
end
if ARGV[4] == 'w' and (mode ~= 'write' or redis.call('hexists', lock, writer) == 0) then
  return {3, 0}
end
if not mode then
  redis.call('hset', lock, 'mode', 'read', owner, 1)
  redis.call('set', prefix .. ':1', 1, 'px', lease)
  redis.call('pexpire', lock, lease)
  if KEYS[3] ~= nil then
    return {1, next_token(KEYS[3])}
  end
  return {1, 0}
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', lock, writer) == 1) then
  local n = redis.call('hincrby', lock, owner, 1)
  redis.call('set', prefix .. ':' .. n, 1, 'px', lease)
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  if n == 1 then
    if KEYS[3] ~= nil then
      return {1, next_token(KEYS[3])}
    end
    return {1, 0}
  end
  return {2, 0}
end
return {0, redis.call('pttl', lock)}
