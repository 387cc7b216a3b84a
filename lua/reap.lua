-- reap: take back jobs whose lease ran out (their worker died or stalled).
-- Each goes to the front of the rotation as pending, or to dead when its
-- attempts are spent. Safe to run from every worker at once: a job is reaped
-- only while it is still active past its deadline by server time, and its
-- attempts stay as they were, so the lost worker's token can never complete it.
--
-- The caller passes the ids with the earliest deadlines (ZRANGE active 0 M).
--
-- KEYS[1]   emq:{q}:active    zset  active ids by lease deadline (ms)
-- KEYS[2]   emq:{q}:pending   zset
-- KEYS[3]   emq:{q}:lanes     hash
-- KEYS[4]   emq:{q}:clock     string
-- KEYS[5]   emq:{q}:dead      zset
-- KEYS[6..] emq:{q}:job:<id>  hash, one per candidate in ARGV order
--
-- ARGV[1]    attempt limit
-- ARGV[2..]  candidate ids
--
-- Reply: {requeued, dead}

local at = now()
local limit = tonumber(ARGV[1])
local requeued, buried = 0, 0
for i = 2, #ARGV do
  local id, key = ARGV[i], KEYS[i + 4]
  local deadline = redis.call('ZSCORE', KEYS[1], id)
  if deadline and tonumber(deadline) <= at then
    redis.call('ZREM', KEYS[1], id)
    local job = redis.call('HMGET', key, 'attempts', 'forgiven', 'group')
    -- a lease without a job row is dropped: nobody could run it
    if job[1] then
      local spent = tonumber(job[1]) - tonumber(job[2] or '0')
      if spent >= limit then
        redis.call('HSET', key, 'state', 'dead', 'died', at,
          'error', 'lease expired on attempt ' .. job[1] .. ', the last allowed')
        redis.call('ZADD', KEYS[5], at, id)
        buried = buried + 1
      else
        redis.call('HSET', key, 'state', 'pending', 'error', 'lease expired on attempt ' .. job[1])
        requeue_front(KEYS[2], KEYS[3], KEYS[4], id, job[3])
        requeued = requeued + 1
      end
    end
  end
end
return {requeued, buried}
