-- requeue: give a dead job a new life at the back of its group's lane, with a
-- fresh attempt budget (attempts itself never goes down: it is the fence).
--
-- The lane is named after the job's group, which only its row tells: the
-- caller names the lane of the group it expects in KEYS[7] (any group, or
-- none, at first); when the job is another group's the reply names that group
-- and nothing changed, for the caller to call again.
--
-- KEYS[1] emq:{q}:jobs          hash   id -> job row
-- KEYS[2] emq:{q}:dead          zset
-- KEYS[3] emq:{q}:rotation      zset   group -> start tag of its lane's head
-- KEYS[4] emq:{q}:lanes         hash   group -> pending count
-- KEYS[5] emq:{q}:tags          hash   group -> finish tag of its last job
-- KEYS[6] emq:{q}:clock         string virtual time
-- KEYS[7] emq:{q}:lane:<group>  list   the lane of ARGV[2]
--
-- ARGV[1] id
-- ARGV[2] the group whose lane KEYS[7] is
--
-- Reply: 1, or {"lane", group} when the job is that group's, not the one
--        named: nothing changed
--   error "EMQSTATE <state> ..."  the job is not dead; nothing changed
--   error "EMQNOJOB ..."          no such job

local id = ARGV[1]
local job = read(KEYS[1], id)
if not job then return redis.error_reply('EMQNOJOB requeue: no job ' .. id) end
if job.state ~= 'dead' then
  return redis.error_reply('EMQSTATE ' .. job.state .. ' requeue: job ' .. id .. ' is ' .. job.state .. ', not dead')
end
if job.group ~= ARGV[2] then return {'lane', job.group} end
redis.call('ZREM', KEYS[2], id)
job.state, job.forgiven, job.died = 'pending', job.attempts, 0
write(KEYS[1], id, job)
enqueue(KEYS[7], KEYS[3], KEYS[4], KEYS[5], KEYS[6], id, job.group)
return 1
