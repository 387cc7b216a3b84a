-- claim: lease up to N pending jobs to the caller: first the jobs requeued to
-- the front (they already waited their turn), then the lanes in fair-queueing
-- order, the lane whose head has the lowest start tag first.
--
-- The caller reads the groups at the head of the rotation first (ZRANGE
-- rotation 0 M) and names their lanes in KEYS, so every key the script
-- touches is in KEYS. N claims in rotation order take from at most the first
-- N lanes; when the next lane in the rotation is one the caller did not name
-- (the rotation changed since the read), the script stops there and the
-- caller reads again. Racing claimers pop different jobs off the same lists,
-- so they never share a job.
--
-- KEYS[1]   emq:{q}:jobs          hash   id -> job row (see lib.lua)
-- KEYS[2]   emq:{q}:front         list   requeued ids, claimed before any lane
-- KEYS[3]   emq:{q}:rotation      zset   group -> start tag of its lane's head
-- KEYS[4]   emq:{q}:lanes         hash   group -> pending count
-- KEYS[5]   emq:{q}:clock         string virtual time: the highest tag claimed
-- KEYS[6]   emq:{q}:active        zset   active ids by lease deadline (ms)
-- KEYS[7]   emq:{q}:tags          hash   group -> finish tag, kept while its lane is empty
-- KEYS[8..] emq:{q}:lane:<group>  list   one per group in ARGV order
--
-- ARGV[1]    lease in milliseconds
-- ARGV[2]    N, the most jobs to claim
-- ARGV[3..]  the groups whose lanes KEYS[8..] name
--
-- Reply: {deadline, id, token, kind, group, payload, id, token, ...}
--   deadline is the lease's end in server milliseconds; token is the job's new
--   attempts, the fencing token every later move of this lease must present.

local lease, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local claimed_at = now()
local deadline = claimed_at + lease
local reply = {deadline}
local claimed = 0

local function take(id)
  local job = read(KEYS[1], id)
  if not job then return end -- a listed id without a row: nobody could run it
  job.attempts = job.attempts + 1
  job.state = 'active'
  job.claimed = claimed_at
  write(KEYS[1], id, job)
  redis.call('ZADD', KEYS[6], deadline, id)
  if redis.call('HINCRBY', KEYS[4], job.group, -1) <= 0 then
    redis.call('HDEL', KEYS[4], job.group)
  end
  reply[#reply + 1] = id
  reply[#reply + 1] = job.attempts
  reply[#reply + 1] = job.kind
  reply[#reply + 1] = job.group
  reply[#reply + 1] = job.payload
  claimed = claimed + 1
end

while claimed < limit do
  local id = redis.call('LPOP', KEYS[2])
  if not id then break end
  take(id)
end

local named = {}
for i = 3, #ARGV do named[ARGV[i]] = KEYS[i + 5] end
local virtual = -1
while claimed < limit do
  local head = redis.call('ZPOPMIN', KEYS[3])
  if #head == 0 then break end
  local group, tag = head[1], tonumber(head[2])
  local lane = named[group]
  if not lane then
    redis.call('ZADD', KEYS[3], tag, group)
    break
  end
  local id = redis.call('LPOP', lane)
  if redis.call('LLEN', lane) > 0 then
    redis.call('ZADD', KEYS[3], tag + 1, group)
  else
    -- the lane ran empty: its group's finish tag waits for the next job
    redis.call('HSET', KEYS[7], group, tag + 1)
  end
  if id then
    if tag > virtual then virtual = tag end
    take(id)
  end
end
if virtual >= 0 and virtual > tonumber(redis.call('GET', KEYS[5]) or '0') then
  redis.call('SET', KEYS[5], virtual)
end
return reply
