-- cancel: withdraw a job that no worker holds (pending, or delayed for a retry).
--
-- KEYS[1] emq:{q}:job:<id>  hash
-- KEYS[2] emq:{q}:pending   zset
-- KEYS[3] emq:{q}:delayed   zset
-- KEYS[4] emq:{q}:lanes     hash
-- KEYS[5] emq:{q}:done      zset
-- KEYS[6] emq:{q}:finished  hash
--
-- ARGV[1] id
-- ARGV[2] retention: how many finished jobs are kept
--
-- Reply: 1
--   error "EMQSTATE <state> ..."  the job is active, dead or finished; nothing changed
--   error "EMQNOJOB ..."          no such job

local id = ARGV[1]
local job = read(KEYS[1])
if not job then
  if redis.call('HEXISTS', KEYS[6], id) == 1 then
    return redis.error_reply('EMQSTATE finished cancel: job ' .. id .. ' is finished')
  end
  return redis.error_reply('EMQNOJOB cancel: no job ' .. id)
end
if job.state == 'pending' then
  redis.call('ZREM', KEYS[2], id)
  if redis.call('HINCRBY', KEYS[4], job.group, -1) <= 0 then
    redis.call('HDEL', KEYS[4], job.group)
  end
elseif job.state == 'delayed' then
  redis.call('ZREM', KEYS[3], id)
else
  return redis.error_reply('EMQSTATE ' .. job.state .. ' cancel: job ' .. id .. ' is ' .. job.state)
end
finish(KEYS[1], id, job, 'canceled', KEYS[5], KEYS[6], tonumber(ARGV[2]))
return 1
