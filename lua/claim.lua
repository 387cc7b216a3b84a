-- claim: lease up to N pending jobs to the caller: first the jobs requeued to
-- the front (they already waited their turn), then the lanes in fair-queueing
-- order, the lane whose head has the lowest start tag first.
--
-- Every key the script touches is in KEYS, so the caller names the lanes it
-- expects at the head of the rotation: those the previous claim's reply
-- listed. N claims in rotation order take from at most the first N lanes;
-- a lane the caller did not name (one admitted since, or the rotation moved
-- on) is passed over, up to 64, and the named lanes of its tag after it are
-- taken; the first lane of a later tag, or a 65th lane not named, ends the
-- run, and the reply lists the lanes now at the head (those passed over
-- first) for the caller to claim the rest with. Racing claimers pop
-- different jobs off the same lists, so they never share a job.
--
-- KEYS[1]   emq:{q}:jobs          hash   id -> job row (see lib.lua)
-- KEYS[2]   emq:{q}:front         list   requeued ids, claimed before any lane
-- KEYS[3]   emq:{q}:rotation      zset   group -> start tag of its lane's head
-- KEYS[4]   emq:{q}:lanes         hash   group -> pending count
-- KEYS[5]   emq:{q}:clock         string virtual time: the highest tag claimed
-- KEYS[6]   emq:{q}:active        zset   active ids by lease deadline (ms)
-- KEYS[7]   emq:{q}:tags          hash   group -> finish tag, kept while its lane is empty
-- KEYS[8]   emq:{q}:wake          list   admit.lua's token for a claimer blocked on an empty
--                                        queue; a claim that finds nothing pending drops it,
--                                        so the caller's BLPOP waits for the next admission;
--                                        the token is the admitted job's group, whose lane
--                                        the woken caller names in its next claim
-- KEYS[9]   emq:{q}:delayed       zset   delayed ids by due time (ms), only looked at
-- KEYS[10..] emq:{q}:lane:<group> list   one per group in ARGV order
--
-- ARGV[1]    lease in milliseconds
-- ARGV[2]    N, the most jobs to claim
-- ARGV[3]    M, how many groups at the head of the rotation to list in the reply
-- ARGV[4..]  the groups whose lanes KEYS[10..] name
--
-- Reply: {deadline, claimed, due, promote_in, reap_in, id, row, id, row, ...,
--         group, group, ...}
--   deadline is the lease's end in server milliseconds; due says what the
--   maintenance moves have to do now, by server time: 1 when a delayed job
--   is due (promote), 2 when a lease other than these ran out (reap), 3
--   both, 0 neither, so a worker whose claims keep answering 0 need not run
--   them (emq/maintenance.go); promote_in and reap_in are the milliseconds
--   until the first delayed job is due and the first lease other than
--   these runs out (0 when due now), -1 when there is none, so an idle
--   worker's claims can say when the moves will have work; claimed is how many jobs follow, each as its id and its row (see lib.lua), whose attempts
--   are the fencing token every later move of this lease must present. Then
--   the first M groups of the rotation once the claims are made, none when
--   no lane holds a job.

local lease, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local at = now()
local deadline = at + lease
-- Read before this claim's leases are added, which run out after at anyway.
local due, promote_in, reap_in = 0, -1, -1
local first = redis.call('ZRANGE', KEYS[9], 0, 0, 'WITHSCORES')
if #first > 0 then
  promote_in = math.max(tonumber(first[2]) - at, 0)
  if promote_in == 0 then due = due + 1 end
end
first = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
if #first > 0 then
  reap_in = math.max(tonumber(first[2]) - at, 0)
  if reap_in == 0 then due = due + 2 end
end
local reply = {deadline, 0, due, promote_in, reap_in}
local claimed = 0
local taken = {} -- group -> how many of its pending jobs were claimed

-- The job's row goes to the caller as it is now, active under its new
-- attempts; only the eight bytes it opens with change.
local function take(id, group)
  local row = redis.call('HGET', KEYS[1], id)
  if not row then return end -- a listed id without a row: nobody could run it
  local state, attempts = lease_of(row)
  if state ~= 'pending' then return end -- listed twice, and taken already
  group = group or decode(row).group
  row = relabel(row, 'active', attempts + 1)
  redis.call('HSET', KEYS[1], id, row)
  redis.call('ZADD', KEYS[6], deadline, id)
  taken[group] = (taken[group] or 0) + 1
  reply[#reply + 1] = id
  reply[#reply + 1] = row
  claimed = claimed + 1
end

while claimed < limit do
  local id = redis.call('LPOP', KEYS[2])
  if not id then break end
  take(id)
end

-- The lane whose head has the lowest tag gives one job and goes back into
-- the rotation one tag later, or, run empty, leaves its finish tag in tags.
--
-- A lane not named (one admitted since the caller's heads were listed)
-- is passed over, up to pass_most of them, and the named lanes of its tag
-- after it are taken: lanes of one tag are equally due, their order (by
-- name) is no turn, so this keeps the rotation's order of tags. The first
-- lane of a later tag ends the run: the lanes passed over go first. Without
-- the pass, under a backlog every run stopped at the first lane admitted
-- during the round trip before it and took a few jobs.
local pass_most = 64
local named, naming = {}, 0
for i = 4, #ARGV do named[ARGV[i]] = KEYS[i + 6]; naming = naming + 1 end
local virtual = -1
local passed, passed_tag = {}, nil -- tag, group, tag, group, ...: two entries a lane
while claimed < limit do
  local head = redis.call('ZPOPMIN', KEYS[3])
  if #head == 0 then
    -- Nothing is pending (the front list ran empty before the lanes): a
    -- token still here was pushed for a job someone claimed already.
    if #passed == 0 then redis.call('DEL', KEYS[8]) end
    break
  end
  local group, tag = head[1], tonumber(head[2])
  local lane = named[group]
  if passed_tag and tag > passed_tag then -- the lanes passed over go first
    redis.call('ZADD', KEYS[3], tag, group)
    break
  end
  if not lane then
    if naming == 0 or #passed >= 2 * pass_most then -- the caller claims the rest with the reply's heads
      redis.call('ZADD', KEYS[3], tag, group)
      break
    end
    passed_tag = tag
    passed[#passed + 1] = tag
    passed[#passed + 1] = group
  else
    local id = redis.call('LPOP', lane)
    if redis.call('LLEN', lane) > 0 then
      redis.call('ZADD', KEYS[3], tag + 1, group)
    else
      redis.call('HSET', KEYS[7], group, tag + 1)
    end
    if id then
      if tag > virtual then virtual = tag end
      take(id, group)
    end
  end
end
if #passed > 0 then redis.call('ZADD', KEYS[3], unpack(passed)) end
for group, n in pairs(taken) do
  if redis.call('HINCRBY', KEYS[4], group, -n) <= 0 then
    redis.call('HDEL', KEYS[4], group)
  end
end
if virtual >= 0 and virtual > tonumber(redis.call('GET', KEYS[5]) or '0') then
  redis.call('SET', KEYS[5], virtual)
end
reply[2] = claimed
local wanted = tonumber(ARGV[3])
if wanted > 0 then
  for _, group in ipairs(redis.call('ZRANGE', KEYS[3], 0, wanted - 1)) do reply[#reply + 1] = group end
end
return reply
