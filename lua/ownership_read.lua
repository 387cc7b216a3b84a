-- ownership_read: who holds a queue's ownership lease, by the server's clock
-- (for inspection, metrics, and the workers that look for free leases).
--
-- KEYS[1] emq:{q}:owner  hash  holder, token, deadline (server ms), since (server ms)
--
-- ARGV    none
--
-- Reply: {now, holder, token, deadline, since}
--   now is the server's time in ms; holder is '' when nobody took the lease
--   since it was last released (or ever); token is the last one handed out
--   (0 if none); deadline and since are 0 without a holder. The lease is held
--   when holder is not '' and deadline > now; a holder whose deadline passed
--   is lost, whoever takes it next.

local at = now()
local owner = redis.call('HMGET', KEYS[1], 'holder', 'token', 'deadline', 'since')
return {at, owner[1] or '', tonumber(owner[2] or '0'), tonumber(owner[3] or '0'), tonumber(owner[4] or '0')}
