-- seat_renew: put holders' seats to expire ttl from now (the server's),
-- seating a holder again where its set lost its seat (the seat expired
-- while its holder was late, or a failover lost the write): what is still
-- held is counted again. Expired seats of others are left to seat_take.
--
-- KEYS[1..n]  the seat sets, sorted sets (holder -> expiry, server ms), all
--             under one hash tag; a set may be named more than once, one
--             holder each time
--
-- ARGV[1]     ttl_ms   how long the seats last unless renewed again, an
--                      integer from 1 to 86400000
-- ARGV[1+i]   holder   the holder whose seat in KEYS[i] is renewed, a
--                      non-empty string
--
-- Reply: the number of seats renewed, n
--   error "ERSEAT ..."  an argument is malformed; nothing written

local ttl = tonumber(ARGV[1])
if not ttl or ttl ~= math.floor(ttl) or ttl < 1 or ttl > 86400000 then
  return redis.error_reply('ERSEAT ttl_ms "' .. tostring(ARGV[1]) .. '" is not an integer from 1 to 86400000')
end
if #ARGV ~= #KEYS + 1 then
  return redis.error_reply('ERSEAT want one holder per set')
end
for i = 1, #KEYS do
  if ARGV[1 + i] == '' then
    return redis.error_reply('ERSEAT holder is empty')
  end
end
local expires = now() + ttl
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], expires, ARGV[1 + i])
  if redis.call('PTTL', KEYS[i]) < ttl then
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
return #KEYS
