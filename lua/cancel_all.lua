-- cancel_all: withdraw every job of a group that no worker holds (pending in
-- its lane or on the front list, or delayed for a retry), or only those whose
-- payload is a JSON object with a given string member, and finish each as
-- canceled, exactly as cancel does one job.
--
-- The work of one call is bounded: it looks at no more than ARGV[3] entries
-- of the delayed set, the front list and the group's lane, in that order, and
-- answers a cursor to call again with until it answers the empty cursor.
-- Delayed comes first because a job only ever moves from delayed to a lane
-- (promote), never back, unless a worker took it in between: so a job that
-- stays pending or delayed from the first call to the last is met by one of
-- them, wherever it moves meanwhile, and a job met is withdrawn at once, so it
-- is answered once. A job a worker holds is left alone (it is no longer
-- pending), as are jobs of other groups and jobs the filter does not match.
--
-- A cursor names the last entry looked at and left where it was, not an
-- index, so jobs claimed, admitted, promoted or canceled between calls shift
-- nothing: "d <score> <id>" in the delayed set ("d" alone: from its first
-- entry), "f <index> <id>" on the front list, "l <index> <id>" in the lane,
-- where <index> is the entry after <id> as this call left the list. When the
-- entry named has left, the scan of the delayed set goes on from the first
-- entry of its score, and that of a list from its head: entries looked at
-- again are left again, so they cost time, never a second withdrawal.
--
-- The lane's bookkeeping follows cancel's, job by job: each job withdrawn from
-- the head of the lane moves the group's start tag in the rotation one on, as
-- if it had been claimed; a lane run empty leaves the rotation and keeps its
-- finish tag in tags; the group's count in lanes drops by each job withdrawn
-- from its lane or the front list.
--
-- KEYS[1] emq:{q}:jobs          hash  id -> job row
-- KEYS[2] emq:{q}:front         list  requeued ids, claimed before any lane
-- KEYS[3] emq:{q}:rotation      zset  group -> start tag of its lane's head
-- KEYS[4] emq:{q}:lanes         hash  group -> pending count
-- KEYS[5] emq:{q}:delayed       zset  delayed ids by due time (ms)
-- KEYS[6] emq:{q}:done          zset  finished ids by finish time (ms)
-- KEYS[7] emq:{q}:finished      hash  id -> row of a finished job
-- KEYS[8] emq:{q}:tags          hash  group -> finish tag, kept while its lane is empty
-- KEYS[9] emq:{q}:lane:<group>  list  the lane of ARGV[1]
-- KEYS[10] emq:{q}:canceled     hash  id -> canceled row, until the canceller
--                                    confirms it handled the cancel (cancel.lua)
--
-- ARGV[1] the group
-- ARGV[2] retention: how many finished jobs are kept
-- ARGV[3] the most entries to look at in this call (at least 1)
-- ARGV[4] a member name: only jobs whose payload is a JSON object whose member
--         of that name is the string ARGV[5]; empty: every job of the group
-- ARGV[5] the member's value
-- ARGV[6] the cursor: empty for the first call, then the previous reply's
--
-- Reply: {cursor, id, row, id, row, ...}: the cursor to call again with, empty
--        when every entry was looked at, then each job withdrawn, its id and
--        its canceled row (see lib.lua)
--   error "EMQCURSOR ..."  ARGV[6] is no cursor this script answered; nothing changed

local group, retention, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local member, value = ARGV[4], ARGV[5]
local phase, mark, last = string.match(ARGV[6], '^([dfl]?) ?(%S*) ?(%S*)$')
if not phase then return redis.error_reply('EMQCURSOR cancel_all: no cursor of this script: ' .. ARGV[6]) end
if phase == '' then phase = 'd' end

local at = now()
local reply = {''}
local front_withdrawn, lane_withdrawn = 0, 0
-- Entries a list loses are overwritten with this first, then removed in one
-- LREM: a job id holds no space, so it is never one.
local withdrawn_mark = 'emq cancel_all: withdrawn'

local function matches(job)
  if job.group ~= group then return false end
  if member == '' then return true end
  local ok, doc = pcall(cjson.decode, job.payload)
  return ok and type(doc) == 'table' and doc[member] == value
end

-- The job's row, or nil when it has none or one in a format this script
-- cannot read: such a job is left where it is (claim reports it), rather
-- than the run failing after it withdrew others, which it could not answer.
local function job_of(id)
  local ok, job = pcall(read, KEYS[1], id)
  if ok then return job end
  return nil
end

local function withdraw(id, job)
  reply[#reply + 1] = id
  local row = record_finished(KEYS[1], id, job, 'canceled', KEYS[6], KEYS[7], at)
  redis.call('HSET', KEYS[10], id, row)
  reply[#reply + 1] = row
end

-- The delayed set, in (score, id) order from the entry after the cursor's.
local function scan_delayed()
  local start = 0
  if mark ~= '' then
    local score = redis.call('ZSCORE', KEYS[5], last)
    if score and tonumber(score) == tonumber(mark) then
      start = redis.call('ZRANK', KEYS[5], last) + 1
    else
      start = redis.call('ZCOUNT', KEYS[5], '-inf', '(' .. mark)
    end
  end
  local entries = redis.call('ZRANGE', KEYS[5], start, start + budget - 1, 'WITHSCORES')
  local looked = #entries / 2
  budget = budget - looked
  for i = 1, #entries, 2 do
    local id = entries[i]
    local job = job_of(id)
    if job and job.state == 'delayed' and matches(job) then
      redis.call('ZREM', KEYS[5], id)
      withdraw(id, job)
    else
      mark, last = entries[i + 1], id
    end
  end
  return budget > 0 -- the set ran out before the budget did
end

-- A list from the entry after the cursor's; each entry withdrawn is marked,
-- and the marks go in one LREM. Returns whether the list ran out, and how
-- many jobs it gave up from its head.
local function scan_list(list, lane)
  local start = 0
  if mark ~= '' and tonumber(mark) > 0 then
    start = tonumber(mark)
    if redis.call('LINDEX', list, start - 1) ~= last then
      local found = redis.call('LPOS', list, last)
      start = found and found + 1 or 0
    end
  end
  local entries = redis.call('LRANGE', list, start, start + budget - 1)
  budget = budget - #entries
  local kept, gone, head = 0, 0, start == 0
  local from_head = 0
  for i, id in ipairs(entries) do
    local job = job_of(id)
    if job and job.state == 'pending' and matches(job) then
      redis.call('LSET', list, start + i - 1, withdrawn_mark)
      withdraw(id, job)
      gone = gone + 1
      if head then from_head = from_head + 1 end
    else
      kept, head, last = kept + 1, false, id
    end
  end
  if gone > 0 then redis.call('LREM', list, gone, withdrawn_mark) end
  mark = tostring(start + kept)
  if kept == 0 and start == 0 then mark, last = '', '' end
  return budget > 0, gone, from_head
end

while budget > 0 and phase ~= '' do
  if phase == 'd' then
    if scan_delayed() then phase, mark, last = 'f', '', '' end
  elseif phase == 'f' then
    local ran_out, gone = scan_list(KEYS[2])
    front_withdrawn = front_withdrawn + gone
    if ran_out then phase, mark, last = 'l', '', '' end
  else
    local ran_out, gone, from_head = scan_list(KEYS[9])
    lane_withdrawn = lane_withdrawn + gone
    if from_head > 0 then
      -- As cancel does for each head it withdraws, here all at once.
      local tag = tonumber(redis.call('ZSCORE', KEYS[3], group) or '0') + from_head
      if redis.call('LLEN', KEYS[9]) == 0 then
        redis.call('ZREM', KEYS[3], group)
        redis.call('HSET', KEYS[8], group, tag)
      else
        redis.call('ZADD', KEYS[3], tag, group)
      end
    end
    if ran_out then phase = '' end
  end
end

if front_withdrawn + lane_withdrawn > 0 then
  if redis.call('HINCRBY', KEYS[4], group, -(front_withdrawn + lane_withdrawn)) <= 0 then
    redis.call('HDEL', KEYS[4], group)
  end
end
if #reply > 1 then trim_finished(KEYS[6], KEYS[7], retention) end
if phase ~= '' then
  reply[1] = phase
  if mark ~= '' then reply[1] = phase .. ' ' .. mark .. ' ' .. last end
end
return reply
