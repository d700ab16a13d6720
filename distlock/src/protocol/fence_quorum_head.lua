-- Fenced write on one node of a redlock or multi backend: fence.lua (which follows this
-- head, inside a function, and the tail after it), keeping in the same hash what it
-- replaced, so that fence_undo.lua can put it back if the write as a whole fails (fewer
-- than a quorum of nodes took it, or a node answered with a newer token):
-- `u:v`, `u:t` (the value and token before this write; absent when there were none) and
-- `u:p` (the hash's remaining expiry then, in ms; -1 none). A fenced read (fence_get.lua)
-- reads `v` and `t` only.
--
-- KEYS and ARGV: as fence.lua. Returns fence.lua's reply: {1, previous token} when stored,
-- {0, last token} when the token is stale.
local fenced_prev = redis.call('hmget', KEYS[1], 'v', 't')
local fenced_pttl = redis.call('pttl', KEYS[1])
local fenced_reply = (function()
