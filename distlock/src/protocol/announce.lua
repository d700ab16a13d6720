-- Announce a change of leader to its observers (`crate::leader`): publish on the leader's
-- channel. Safe to run twice: one message more only makes observers read the state again.
--
-- KEYS[1] the leader lock's hash (neither read nor written: it routes the call to the
--         lock's server and cluster slot, which the channel shares by its hash tag)
-- ARGV[1] the publish verb: 'spublish' (Redis Cluster) or 'publish'
-- ARGV[2] the channel
-- ARGV[3] the message
-- Returns: how many subscribers received it.
return redis.call(ARGV[1], ARGV[2], ARGV[3])
