-- reap: take back jobs whose lease ran out (their worker died or stalled).
-- Each goes to the front list as pending, or to dead when its attempts are
-- spent. Safe to run from every worker at once: a job is reaped only while it
-- is still active past its deadline by server time, and its attempts stay as
-- they were, so the lost worker's token can never complete it.
--
-- KEYS[1] emq:{q}:active  zset  active ids by lease deadline (ms)
-- KEYS[2] emq:{q}:jobs    hash  id -> job row
-- KEYS[3] emq:{q}:front   list  requeued ids, claimed before any lane
-- KEYS[4] emq:{q}:lanes   hash  group -> pending count
-- KEYS[5] emq:{q}:dead    zset
--
-- ARGV[1] attempt limit
-- ARGV[2] the most jobs to reap in this call
--
-- Reply: {requeued, dead}

local at = now()
local limit = tonumber(ARGV[1])
local requeued, buried = 0, 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', at, 'LIMIT', 0, tonumber(ARGV[2]))) do
  redis.call('ZREM', KEYS[1], id)
  local job = read(KEYS[2], id)
  -- a lease without an active job is dropped: nobody could run it
  if job and job.state == 'active' then
    local spent = job.attempts - job.forgiven
    if spent >= limit then
      job.state, job.died = 'dead', at
      job.error = 'lease expired on attempt ' .. job.attempts .. ', the last allowed'
      write(KEYS[2], id, job)
      redis.call('ZADD', KEYS[5], at, id)
      buried = buried + 1
    else
      job.state = 'pending'
      job.error = 'lease expired on attempt ' .. job.attempts
      write(KEYS[2], id, job)
      requeue_front(KEYS[3], KEYS[4], id, job.group)
      requeued = requeued + 1
    end
  end
end
return {requeued, buried}
