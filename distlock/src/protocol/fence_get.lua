-- Read a fenced value. KEYS[1]: the fenced value hash. Returns {value, token} or {false, false}.
return redis.call('hmget', KEYS[1], 'v', 't')
