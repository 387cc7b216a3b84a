-- extend: renew a lease (the worker's heartbeat). Fenced.
--
-- KEYS[1] emq:{q}:jobs    hash  id -> job row
-- KEYS[2] emq:{q}:active  zset  active ids by lease deadline (ms)
--
-- ARGV[1] id
-- ARGV[2] token (the attempts the claim returned)
-- ARGV[3] lease in milliseconds, from now
--
-- Reply: the new deadline in server milliseconds
--   error "EMQSTALE ..."  the lease was lost (reaped, claimed by another worker, or finished)

local row, refused = fenced(redis.call('HGET', KEYS[1], ARGV[1]), ARGV[2], 'extend')
if not row then return refused end
local deadline = now() + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], deadline, ARGV[1])
return deadline
