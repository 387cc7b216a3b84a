-- requeue: give a dead job a new life at the back of its fair lane, with a
-- fresh attempt budget (attempts itself never goes down: it is the fence).
--
-- KEYS[1] emq:{q}:job:<id>  hash
-- KEYS[2] emq:{q}:dead      zset
-- KEYS[3] emq:{q}:pending   zset
-- KEYS[4] emq:{q}:lanes     hash
-- KEYS[5] emq:{q}:tags      hash
-- KEYS[6] emq:{q}:clock     string
--
-- ARGV[1] id
--
-- Reply: 1
--   error "EMQSTATE <state> ..."  the job is not dead; nothing changed
--   error "EMQNOJOB ..."          no such job

local id = ARGV[1]
local job = read(KEYS[1])
if not job then return redis.error_reply('EMQNOJOB requeue: no job ' .. id) end
if job.state ~= 'dead' then
  return redis.error_reply('EMQSTATE ' .. job.state .. ' requeue: job ' .. id .. ' is ' .. job.state .. ', not dead')
end
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[1], 'state', 'pending', 'forgiven', job.attempts)
enqueue(KEYS[3], KEYS[4], KEYS[5], KEYS[6], id, job.group)
return 1
