-- ownership_acquire: take a queue's ownership lease, under a new token, when
-- nobody holds it (never taken, released, or its deadline passed by the
-- server's clock) or the caller holds it already.
--
-- The token is a counter kept beside the lease: it rises by one (at least to
-- the floor + 1) on every acquisition and nothing lowers it, so a later
-- holder's token is always higher than an earlier one's. A release clears
-- the holder and keeps the counter. The caller taking the lease it holds
-- gets a new token, which fences its own earlier one: a second run of the
-- same call (after a lost reply) only ends a lease whose token nobody
-- learned, and two processes that share a holder name fence each other
-- instead of holding one token together.
--
-- KEYS[1] emq:{q}:owner  hash  holder, token, deadline (server ms), since (server ms)
--
-- ARGV[1] holder: who takes it, unique per process life
-- ARGV[2] lease in milliseconds, from now
-- ARGV[3] floor: the new token is above it (0 for none); a durable store
--         that saw higher tokens than Redis holds (after a failover lost
--         writes) names the highest it saw
--
-- Reply: {1, token, deadline}             taken: the new token, the lease's end in server ms
--        {0, holder, token, deadline}     held by another until deadline; nothing changed

local at = now()
local owner = redis.call('HMGET', KEYS[1], 'holder', 'token', 'deadline')
local holder, token, deadline = owner[1], tonumber(owner[2] or '0'), tonumber(owner[3] or '0')
if holder and holder ~= ARGV[1] and deadline > at then
  return {0, holder, token, deadline}
end
local floor = tonumber(ARGV[3])
if token < floor then token = floor end
token = token + 1
deadline = at + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', token, 'deadline', deadline, 'since', at)
return {1, token, deadline}
