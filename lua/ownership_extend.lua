-- ownership_extend: renew a queue's ownership lease (the owner's heartbeat).
-- Fenced: only the current holder under its current token, before the
-- deadline by the server's clock. A lease whose deadline passed is lost even
-- when nobody took it since: its holder must have stopped by then.
--
-- KEYS[1] emq:{q}:owner  hash  holder, token, deadline (server ms), since (server ms)
--
-- ARGV[1] holder
-- ARGV[2] token, as the acquisition answered it
-- ARGV[3] lease in milliseconds, from now
--
-- Reply: the new deadline in server milliseconds
--   error "EMQSTALE ..."  the lease was lost: released, expired, or taken by
--                         another holder or under a newer token

local at = now()
local owner = redis.call('HMGET', KEYS[1], 'holder', 'token', 'deadline')
local holder, token, deadline = owner[1], tonumber(owner[2] or '0'), tonumber(owner[3] or '0')
if holder ~= ARGV[1] or token ~= tonumber(ARGV[2]) then
  return redis.error_reply('EMQSTALE ownership token ' .. ARGV[2] .. ' of ' .. ARGV[1] ..
    ' is not the current lease (holder ' .. (holder or 'none') .. ', token ' .. token .. ')')
end
if deadline <= at then
  return redis.error_reply('EMQSTALE ownership token ' .. ARGV[2] .. ' of ' .. ARGV[1] ..
    ' expired ' .. (at - deadline) .. ' ms ago')
end
deadline = at + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'deadline', deadline)
return deadline
