-- Read everything about one lock key, of every kind, without changing anything
-- (`distlock list`/`show`, `Registry::inspect`).
--
-- KEYS[1] reentrant lock record    KEYS[2] fair lock record  KEYS[3] fair queue list
-- KEYS[4] fair waiters zset        KEYS[5] rw hash           KEYS[6] rw readers zset
-- KEYS[7] rw waiting writers zset  KEYS[8] fencing counter
-- KEYS[9] semaphore holders zset   KEYS[10] semaphore counts hash (see sem_prologue.lua)
-- KEYS[11] fair semaphore queue list KEYS[12] fair semaphore waiters zset
-- ARGV[1], ARGV[2], ARGV[3], ARGV[4] the release channels of the reentrant, fair and
--   read-write locks and of the semaphore
-- ARGV[5] '1': this server is a cluster node; its own address is asked (CLUSTER NODES,
--   the `myself` line), so that the node holding the key is reported, not the seed list
-- Returns: {now_ms, fence or false,
--   {pttl, hgetall lock},
--   {pttl, hgetall fair}, lrange queue, zrange waiters withscores,
--   {pttl, hgetall rw}, zrange readers withscores, zrange writers withscores,
--   {waiting processes on each channel of ARGV[1..4]},
--   zrange semaphore holders withscores, hgetall semaphore counts,
--   this node's address (`host:port`) or false,
--   lrange semaphore queue, zrange semaphore waiters withscores}
-- A lock's record (record.lua) is answered as the fields of a hash: owner id -> level
-- count, `l:<level id>` -> the token (the outermost level) or 1 (a nested one),
-- `i:<owner id>` -> `host\tpid\tsite\tsince\ttoken` (holder information), `hold:until`,
-- `w` (the record's `until` and `waiting`, when not empty). A read-write lock's hash is
-- answered as it is.
-- A waiting process is a subscriber connection to the lock's release channel (PUBSUB NUMSUB
-- plus SHARDNUMSUB on this server): every process with a task waiting for the lock has
-- one. -1 when the user may not run PUBSUB (the rest of the reply does not need it).
-- Expired read-write and fair entries are not purged here: the caller compares their
-- deadlines with now_ms.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function hash(k)
  local owner, token, levels, until_ms, waiting, holder = read_record(k)
  if not owner then return {redis.call('pttl', k), redis.call('hgetall', k)} end
  local out = {}
  local function put(f, v) out[#out + 1] = f; out[#out + 1] = v end
  if owner ~= '' then
    local n = 0
    for lv in string.gmatch(levels, '[^,]+') do
      put('l:' .. lv, n == 0 and token or '1')
      n = n + 1
    end
    put(owner, tostring(n))
    if holder ~= '' then put('i:' .. owner, holder .. '\t' .. token) end
  end
  if until_ms ~= '' then put('hold:until', until_ms) end
  if waiting ~= '' then put('w', waiting) end
  return {redis.call('pttl', k), out}
end
local function waiting(channel)
  if not channel then return -1 end
  local n = 0
  for _, verb in ipairs({'numsub', 'shardnumsub'}) do
    local r = redis.pcall('pubsub', verb, channel)
    if type(r) ~= 'table' or r.err then return -1 end
    n = n + tonumber(r[2])
  end
  return n
end
-- This cluster node's `host:port`, false when not asked, not a cluster node, or CLUSTER
-- is refused (ACL).
local function myself()
  if ARGV[5] ~= '1' then return false end
  local nodes = redis.pcall('cluster', 'nodes')
  if type(nodes) ~= 'string' then return false end
  for line in string.gmatch(nodes, '[^\n]+') do
    local addr, flags = string.match(line, '^%S+ (%S+) (%S+)')
    if flags and string.find(',' .. flags .. ',', ',myself,', 1, true) then
      local hostport = string.match(addr, '^([^@,]+)')
      if hostport and string.sub(hostport, 1, 1) ~= ':' then return hostport end
      return false
    end
  end
  return false
end
return {
  now, redis.call('get', KEYS[8]),
  hash(KEYS[1]),
  hash(KEYS[2]), redis.call('lrange', KEYS[3], 0, -1),
  redis.call('zrange', KEYS[4], 0, -1, 'withscores'),
  hash(KEYS[5]), redis.call('zrange', KEYS[6], 0, -1, 'withscores'),
  redis.call('zrange', KEYS[7], 0, -1, 'withscores'),
  {waiting(ARGV[1]), waiting(ARGV[2]), waiting(ARGV[3]), waiting(ARGV[4])},
  redis.call('zrange', KEYS[9], 0, -1, 'withscores'), redis.call('hgetall', KEYS[10]),
  myself(),
  redis.call('lrange', KEYS[11], 0, -1), redis.call('zrange', KEYS[12], 0, -1, 'withscores'),
}
