-- promote: move delayed jobs that are due by server time to the back of their
-- groups' lanes.
--
-- A job's lane is named after its group, which only its row tells. So the
-- caller names the lanes it knows of in KEYS (none at first); a due job whose
-- lane is not named stays delayed, and its group is in the reply, for the
-- caller to name in its next call. Nothing due costs one call.
--
-- KEYS[1]   emq:{q}:delayed       zset   delayed ids by due time (ms)
-- KEYS[2]   emq:{q}:jobs          hash   id -> job row
-- KEYS[3]   emq:{q}:rotation      zset   group -> start tag of its lane's head
-- KEYS[4]   emq:{q}:lanes         hash   group -> pending count
-- KEYS[5]   emq:{q}:tags          hash   group -> finish tag of its last job
-- KEYS[6]   emq:{q}:clock         string virtual time
-- KEYS[7..] emq:{q}:lane:<group>  list   one per group in ARGV order
--
-- ARGV[1]   the most due jobs to look at, earliest first
-- ARGV[2..] the groups whose lanes KEYS[7..] name
--
-- Reply: {promoted, group, ...}: the number of jobs promoted, then the groups
--        of due jobs left delayed because their lanes were not named

local named = {}
for i = 2, #ARGV do named[ARGV[i]] = KEYS[i + 5] end
local promoted, missing, seen = 0, {}, {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now(), 'LIMIT', 0, tonumber(ARGV[1]))) do
  local job = read(KEYS[2], id)
  if not job or job.state ~= 'delayed' then
    redis.call('ZREM', KEYS[1], id) -- nothing left to run
  elseif named[job.group] then
    redis.call('ZREM', KEYS[1], id)
    job.state = 'pending'
    write(KEYS[2], id, job)
    enqueue(named[job.group], KEYS[3], KEYS[4], KEYS[5], KEYS[6], id, job.group)
    promoted = promoted + 1
  elseif not seen[job.group] then
    seen[job.group] = true
    missing[#missing + 1] = job.group
  end
end
local reply = {promoted}
for _, group in ipairs(missing) do reply[#reply + 1] = group end
return reply
