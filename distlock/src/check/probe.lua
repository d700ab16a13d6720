-- The init self-check of one server (`check/probe.rs`): the server's version, and which
-- of the commands distlock sends the connection's ACL user may not run. Read-only: it only
-- asks redis.acl_check_cmd (Redis 7.0) and touches no key.
--
-- KEYS: none (no KEYS[1]): sent with numkeys 0, so that it runs for a user whose key
--   pattern is wrong too (EVAL refuses keys the user may not access) and on any cluster
--   node. The sample key and channel names are arguments; they are never accessed.
-- ARGV: the checks, one after another, each as: n (how many words), o (what the command
--   names besides itself: 0 nothing; k > 0 a key, its k-th word; -1 a channel, its 2nd
--   word), then the n words of the command as distlock sends it (sample key or channel
--   included).
-- Returns: {version, i1, how1, i2, how2, ...}: version is redis.REDIS_VERSION, or false on a
--   server older than 7.0 (which lacks it and redis.acl_check_cmd: nothing else is
--   checked then); then each refused check by its 1-based index i and how: 0 the command
--   (or subcommand) itself is refused; 1 the command is permitted but not on that key or
--   channel; 2 the server does not know the command.
--
-- Whether a key is refused is told by EVAL itself (which runs, so is permitted) with that
-- key; whether a channel is, by the command without its channel (pub/sub commands take
-- their channels from the words there are). A keyed command is never checked without its
-- key: the server would look for the key past the words given.
if not redis.acl_check_cmd or not redis.REDIS_VERSION then
  return {false}
end
local out = {redis.REDIS_VERSION}
local keys = {}
local function key_ok(k)
  if keys[k] == nil then keys[k] = redis.acl_check_cmd('eval', 'return 1', '1', k) end
  return keys[k]
end
local i, at = 1, 1
while at <= #ARGV do
  local n, o = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local words = {}
  for j = 1, n do words[j] = ARGV[at + 1 + j] end
  local known, allowed = pcall(redis.acl_check_cmd, unpack(words))
  if not known then
    table.insert(out, i)
    table.insert(out, 2)
  elseif not allowed then
    local how = 0
    if o > 0 and not key_ok(words[o]) then how = 1 end
    if o < 0 and redis.acl_check_cmd(words[1]) then how = 1 end
    table.insert(out, i)
    table.insert(out, how)
  end
  i = i + 1
  at = at + 2 + n
end
return out
