end)()
if type(fenced_reply) == 'table' and fenced_reply[1] == 1 then
  if fenced_prev[1] and fenced_prev[2] then
    redis.call('hset', KEYS[1], 'u:v', fenced_prev[1], 'u:t', fenced_prev[2], 'u:p', fenced_pttl)
  else
    redis.call('hdel', KEYS[1], 'u:v', 'u:t')
    redis.call('hset', KEYS[1], 'u:p', -1)
  end
end
return fenced_reply
