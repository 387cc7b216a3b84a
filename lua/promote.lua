-- promote: move delayed jobs that are due into their fair lanes.
--
-- The caller passes the ids with the earliest due times (ZRANGE delayed 0 M);
-- the script moves only those due by server time and still delayed.
--
-- KEYS[1]   emq:{q}:delayed   zset  delayed ids by due time (ms)
-- KEYS[2]   emq:{q}:pending   zset
-- KEYS[3]   emq:{q}:lanes     hash
-- KEYS[4]   emq:{q}:tags      hash
-- KEYS[5]   emq:{q}:clock     string
-- KEYS[6..] emq:{q}:job:<id>  hash, one per candidate in ARGV order
--
-- ARGV[1..] candidate ids
--
-- Reply: the number of jobs promoted

local at = now()
local promoted = 0
for i = 1, #ARGV do
  local id, key = ARGV[i], KEYS[i + 5]
  local due = redis.call('ZSCORE', KEYS[1], id)
  if due and tonumber(due) <= at then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HSET', key, 'state', 'pending')
    enqueue(KEYS[2], KEYS[3], KEYS[4], KEYS[5], id, redis.call('HGET', key, 'group'))
    promoted = promoted + 1
  end
end
return promoted
