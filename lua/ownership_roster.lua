-- ownership_roster: the live workers among which a set of queues' ownerships
-- is spread. A worker joins (or stays) with a membership that ends ttl from
-- now and says how many ownerships it holds; members whose membership ended
-- are dropped; the reply lists who is live and what each holds.
--
-- KEYS[1] {emq}:roster:<name>       zset  worker -> end of its membership (server ms)
-- KEYS[2] {emq}:roster:<name>:held  hash  worker -> ownerships it holds, as it last said
--
-- ARGV[1] worker
-- ARGV[2] ttl in milliseconds: the membership lasts this long from now; 0
--         leaves the roster
-- ARGV[3] how many ownerships the worker holds
--
-- Reply: {now, worker, held, worker, held, ...}
--   now is the server's time in ms, then every live worker (the caller too,
--   unless it left) with the ownerships it said it holds. Both keys expire
--   with the last membership, so a roster nobody beats goes.

local at = now()
local ttl = tonumber(ARGV[2])
local ended = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', at)
for i = 1, #ended, 1000 do
  local batch = {unpack(ended, i, math.min(i + 999, #ended))}
  redis.call('ZREM', KEYS[1], unpack(batch))
  redis.call('HDEL', KEYS[2], unpack(batch))
end
if ttl > 0 then
  redis.call('ZADD', KEYS[1], at + ttl, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
local reply = {at}
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local last = 0
for i = 1, #members, 2 do
  reply[#reply + 1] = members[i]
  reply[#reply + 1] = tonumber(redis.call('HGET', KEYS[2], members[i]) or '0')
  last = math.max(last, tonumber(members[i + 1]))
end
if last > 0 then
  redis.call('PEXPIREAT', KEYS[1], last)
  redis.call('PEXPIREAT', KEYS[2], last)
end
return reply
