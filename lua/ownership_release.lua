-- ownership_release: give a queue's ownership lease up, so another may take
-- it at once. Only the holder under its token releases; a lease lost already
-- (expired, taken by another, released) is left as it is. The token counter
-- stays: the next holder's token is higher.
--
-- KEYS[1] emq:{q}:owner  hash  holder, token, deadline (server ms), since (server ms)
--
-- ARGV[1] holder
-- ARGV[2] token, as the acquisition answered it
--
-- Reply: 1 released; 0 the caller did not hold it under that token, nothing changed

local owner = redis.call('HMGET', KEYS[1], 'holder', 'token')
if owner[1] ~= ARGV[1] or tonumber(owner[2] or '0') ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('HDEL', KEYS[1], 'holder', 'deadline', 'since')
return 1
