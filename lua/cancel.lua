-- cancel: withdraw a job that no worker holds (pending, or delayed for a retry).
--
-- A pending job sits on the front list or in its group's lane, which only its
-- row names. The caller names the lane of the group it expects in KEYS[9]
-- (any group, or none, at first); when the job is in another group's lane the
-- reply names that group and nothing changed, for the caller to call again.
--
-- KEYS[1] emq:{q}:jobs          hash  id -> job row
-- KEYS[2] emq:{q}:front         list  requeued ids, claimed before any lane
-- KEYS[3] emq:{q}:rotation      zset  group -> start tag of its lane's head
-- KEYS[4] emq:{q}:lanes         hash  group -> pending count
-- KEYS[5] emq:{q}:delayed       zset
-- KEYS[6] emq:{q}:done          zset
-- KEYS[7] emq:{q}:finished      hash  id -> row of a finished job
-- KEYS[8] emq:{q}:tags          hash  group -> finish tag, kept while its lane is empty
-- KEYS[9] emq:{q}:lane:<group>  list  the lane of ARGV[3]
-- KEYS[10] emq:{q}:canceled     hash  id -> canceled row, until the canceller
--                                    confirms it handled the cancel
--
-- ARGV[1] id
-- ARGV[2] retention: how many finished jobs are kept
-- ARGV[3] the group whose lane KEYS[9] is
--
-- Reply: 1, or {"lane", group} when the job waits in that group's lane, not
--        in the one named: nothing changed
--   error "EMQSTATE <state> ..."  the job is active, dead or finished; nothing changed
--   error "EMQNOJOB ..."          no such job

local id = ARGV[1]
local job = read(KEYS[1], id)
if not job then
  if redis.call('HEXISTS', KEYS[7], id) == 1 then
    return redis.error_reply('EMQSTATE finished cancel: job ' .. id .. ' is finished')
  end
  return redis.error_reply('EMQNOJOB cancel: no job ' .. id)
end
if job.state == 'pending' then
  if redis.call('LREM', KEYS[2], 1, id) == 0 then
    if job.group ~= ARGV[3] then return {'lane', job.group} end
    -- A canceled head leaves the lane as if it had been claimed: the next
    -- job's tag is its + 1, and so is the finish tag of a lane it empties.
    local head = redis.call('LINDEX', KEYS[9], 0)
    redis.call('LREM', KEYS[9], 1, id)
    if head == id then
      local tag = tonumber(redis.call('ZSCORE', KEYS[3], job.group) or '0')
      if redis.call('LLEN', KEYS[9]) == 0 then
        redis.call('ZREM', KEYS[3], job.group)
        redis.call('HSET', KEYS[8], job.group, tag + 1)
      else
        redis.call('ZADD', KEYS[3], tag + 1, job.group)
      end
    end
  end
  if redis.call('HINCRBY', KEYS[4], job.group, -1) <= 0 then
    redis.call('HDEL', KEYS[4], job.group)
  end
elseif job.state == 'delayed' then
  redis.call('ZREM', KEYS[5], id)
else
  return redis.error_reply('EMQSTATE ' .. job.state .. ' cancel: job ' .. id .. ' is ' .. job.state)
end
-- Kept apart from the finished records, which the retention trims: the
-- canceller's record of the cancel may fail after this run, and the row is
-- then what is left to make it from (Queue.Unconfirmed).
redis.call('HSET', KEYS[10], id, record_finished(KEYS[1], id, job, 'canceled', KEYS[6], KEYS[7], now()))
trim_finished(KEYS[6], KEYS[7], tonumber(ARGV[2]))
return 1
