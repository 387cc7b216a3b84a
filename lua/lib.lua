-- lib: helpers shared by the scripts that move jobs. Package lua prepends
-- this file to those scripts, so each still runs as one atomic EVAL; it
-- touches only keys the calling script was given.
--
-- now()                     server time in milliseconds (never the caller's clock)
-- int(n)                    n as a decimal integer string (never 1.7e+12)
-- encode(job) / decode(row) the job row format below, both ways
-- read(jobs, id)            the job table of id in the jobs hash, or nil
-- write(jobs, id, job)      stores the job table as id's row
-- fenced(job, token, move)  the job table if it is active under token, else an EMQSTALE error reply
-- enqueue(lane, rotation, lanes, tags, clock, id, group)
--                           puts id at the back of its group's lane (start-time fair queueing)
-- requeue_front(front, lanes, id, group)
--                           puts id on the front list, claimed before any lane: it already waited its turn
-- finish(jobs, id, job, state, done, finished, retention)
--                           turns the job into a record in the finished hash, indexes it in done by
--                           finish time, deletes its row, and trims both to retention
--
-- A job row is one string, the value of field <id> in emq:{q}:jobs (and, once
-- finished, in emq:{q}:finished). One string per job instead of a hash per
-- job: a job costs one hash entry, not a key and an entry per field.
--
--   1<state>,<attempts>,<forgiven>,<created>,<claimed>,<died>,<finished>,<#kind>,<#group>,<#error>:<kind><group><error><payload>
--
-- "1" is the format's version. state is one letter (see state_codes); the
-- numbers are decimal, times in server milliseconds, and empty when unset;
-- #kind, #group and #error are the byte lengths of the strings that follow
-- the colon, and the payload is the rest, so any bytes survive. emq/row.go
-- reads the same format.

local function now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function int(n)
  return string.format('%d', n)
end

local state_codes = {pending = 'p', active = 'a', delayed = 'w', dead = 'x', done = 'd', canceled = 'c'}
local state_names = {}
for name, code in pairs(state_codes) do state_names[code] = name end

local function blank(value)
  if value == '' then return nil end
  return value
end

local function encode(job)
  local kind, group, err = job.kind, job.group, job.error or ''
  return table.concat({
    '1', state_codes[job.state], ',', job.attempts, ',', job.forgiven or '', ',', job.created, ',',
    job.claimed or '', ',', job.died or '', ',', job.finished or '', ',',
    #kind, ',', #group, ',', #err, ':', kind, group, err, job.payload,
  })
end

local function decode(row)
  local colon = string.find(row, ':', 1, true)
  if string.sub(row, 1, 1) ~= '1' or not colon then
    error(redis.error_reply('EMQROW a job row in an unknown format: ' .. string.sub(row, 1, 16)))
  end
  local v = {}
  for value in string.gmatch(string.sub(row, 2, colon - 1) .. ',', '([^,]*),') do v[#v + 1] = value end
  local job = {
    state = state_names[v[1]], attempts = v[2], forgiven = blank(v[3]), created = v[4],
    claimed = blank(v[5]), died = blank(v[6]), finished = blank(v[7]),
  }
  local kind_at = colon + 1
  local group_at = kind_at + tonumber(v[8])
  local error_at = group_at + tonumber(v[9])
  local payload_at = error_at + tonumber(v[10])
  job.kind = string.sub(row, kind_at, group_at - 1)
  job.group = string.sub(row, group_at, error_at - 1)
  job.error = blank(string.sub(row, error_at, payload_at - 1))
  job.payload = string.sub(row, payload_at)
  return job
end

local function read(jobs, id)
  local row = redis.call('HGET', jobs, id)
  if not row then return nil end
  return decode(row)
end

local function write(jobs, id, job)
  redis.call('HSET', jobs, id, encode(job))
end

-- A token is current only while the job is active and nobody claimed it since:
-- a reaped job keeps its attempts until the next claim, so state is checked too.
-- A job without a row has finished (or never was): no token holds it.
local function fenced(job, token, move)
  if not job then
    return nil, redis.error_reply('EMQSTALE ' .. move .. ' token ' .. token .. ': the job is finished or unknown')
  end
  if job.attempts ~= token or job.state ~= 'active' then
    return nil, redis.error_reply('EMQSTALE ' .. move .. ' token ' .. token ..
      ' is not the current lease (attempts ' .. job.attempts .. ', state ' .. job.state .. ')')
  end
  return job, nil
end

-- Start-time fair queueing: a job's start tag is max(virtual time, the
-- group's finish tag), and the group's finish tag is its start + 1. Only a
-- lane's head carries its tag, as its score in the rotation: while a lane is
-- backlogged its jobs' tags run on one by one, so the next head's tag is the
-- last one's + 1 (see claim.lua) and no job needs its own.
local function enqueue(lane, rotation, lanes, tags, clock, id, group)
  local virtual = tonumber(redis.call('GET', clock) or '0')
  local start = tonumber(redis.call('HGET', tags, group) or '0')
  if start < virtual then start = virtual end
  redis.call('HSET', tags, group, int(start + 1))
  if redis.call('RPUSH', lane, id) == 1 then
    redis.call('ZADD', rotation, start, group)
  end
  redis.call('HINCRBY', lanes, group, 1)
end

local function requeue_front(front, lanes, id, group)
  redis.call('RPUSH', front, id)
  redis.call('HINCRBY', lanes, group, 1)
end

local function finish(jobs, id, job, state, done, finished, retention)
  local at = now()
  job.state = state
  job.finished = int(at)
  redis.call('HSET', finished, id, encode(job))
  redis.call('HDEL', jobs, id)
  redis.call('ZADD', done, at, id)
  local excess = redis.call('ZCARD', done) - retention
  while excess > 0 do
    local batch = excess
    if batch > 1000 then batch = 1000 end
    local old = redis.call('ZRANGE', done, 0, batch - 1)
    redis.call('HDEL', finished, unpack(old))
    redis.call('ZREMRANGEBYRANK', done, 0, batch - 1)
    excess = excess - batch
  end
end
