-- claim: lease up to N pending jobs to the caller, next in fair-lane order.
--
-- The caller reads candidate ids first (ZRANGE pending 0 M), so that every job
-- key the script touches is passed in KEYS; the script takes each candidate
-- only if it is still pending, so racing claimers never share a job.
--
-- KEYS[1]    emq:{q}:pending   zset  pending ids by fair-queueing tag
-- KEYS[2]    emq:{q}:active    zset  active ids by lease deadline (ms)
-- KEYS[3]    emq:{q}:lanes     hash  group -> pending count
-- KEYS[4]    emq:{q}:clock     string virtual time: the highest tag claimed
-- KEYS[5..]  emq:{q}:job:<id>  hash  one per candidate, in ARGV order
--
-- ARGV[1]    lease in milliseconds
-- ARGV[2]    N, the most jobs to claim
-- ARGV[3..]  candidate ids
--
-- Reply: {deadline, id, token, kind, group, payload, id, token, ...}
--   deadline is the lease's end in server milliseconds; token is the job's new
--   attempts, the fencing token every later move of this lease must present.

local lease, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local deadline = now() + lease
local virtual = tonumber(redis.call('GET', KEYS[4]) or '0')
local reply = {deadline}
local claimed = 0
for i = 3, #ARGV do
  if claimed >= limit then break end
  local id, key = ARGV[i], KEYS[i + 2]
  local tag = redis.call('ZSCORE', KEYS[1], id)
  if tag then
    tag = tonumber(tag)
    if tag > virtual then virtual = tag end
    redis.call('ZREM', KEYS[1], id)
    local token = redis.call('HINCRBY', key, 'attempts', 1)
    redis.call('HSET', key, 'state', 'active', 'claimed', deadline - lease)
    redis.call('ZADD', KEYS[2], deadline, id)
    local job = redis.call('HMGET', key, 'kind', 'group', 'payload')
    if redis.call('HINCRBY', KEYS[3], job[2], -1) <= 0 then
      redis.call('HDEL', KEYS[3], job[2])
    end
    reply[#reply + 1] = id
    reply[#reply + 1] = token
    reply[#reply + 1] = job[1]
    reply[#reply + 1] = job[2]
    reply[#reply + 1] = job[3]
    claimed = claimed + 1
  end
end
redis.call('SET', KEYS[4], virtual)
return reply
