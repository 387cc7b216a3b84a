-- lib: helpers shared by the scripts that move jobs. Package lua prepends
-- this file to those scripts, so each still runs as one atomic EVAL; it
-- touches only keys the calling script was given.
--
-- now() comes from clock.lua, prepended before this file.
-- encode(job) / decode(row) the job row format below, both ways
-- lease_of(row)             the state name and attempts a row opens with, without decoding the rest
-- relabel(row, state, attempts)
--                           the row with another state and attempts, the rest left as it is
-- read(jobs, id)            the job table of id in the jobs hash, or nil
-- write(jobs, id, job)      stores the job table as id's row
-- fenced(row, token, move)  the row if its job is active under token, else an EMQSTALE error reply
-- enqueue(lane, rotation, lanes, tags, clock, id, group)
--                           puts id at the back of its group's lane (start-time fair queueing)
-- requeue_front(front, lanes, id, group)
--                           puts id on the front list, claimed before any lane: it already waited its turn
-- finish(jobs, id, job, state, done, finished, retention)
--                           turns the job into a record in the finished hash, indexes it in done by
--                           finish time, deletes its row, and trims both to retention
-- record_finished(jobs, id, job, state, done, finished, at)
--                           finish without the trim, at a given time: for a script finishing
--                           several jobs, which trims once (trim_finished) at its end; returns
--                           the finished row
-- trim_finished(done, finished, retention)
--                           drops the oldest finished records past retention
-- wake_ttl_ms               how long a wake token (emq:{q}:wake: admit.lua pushes it, a claimer
--                           blocked on an empty queue pops it) outlives a queue nobody claims from
--
-- A job row is one string, the value of field <id> in emq:{q}:jobs (and, once
-- finished, in emq:{q}:finished): a job costs one hash entry, not a key with
-- an entry per field. The row is a sequence of MessagePack values, packed and
-- unpacked in C by the server's cmsgpack library (in Redis and Valkey alike):
--
--   1, state, attempts, forgiven, created, died, finished, kind, group, error, payload
--
-- 1 is the format's version; state is one letter (see state_codes); the
-- numbers are integers, times in server milliseconds, 0 when unset; kind,
-- group, error (empty when none) and payload are strings of any bytes. The
-- first three always take the same eight bytes, attempts as a 32-bit
-- unsigned integer, so that claim and the fenced moves read and rewrite them
-- in place, without unpacking the payload. emq/row.go reads the same format.

local wake_ttl_ms = 60000

local state_codes = {pending = 'p', active = 'a', delayed = 'w', dead = 'x', done = 'd', canceled = 'c'}
local state_names = {p = 'pending', a = 'active', w = 'delayed', x = 'dead', d = 'done', c = 'canceled'}

-- The eight bytes every row opens with: the version, the state and attempts.
local function opening(state, attempts)
  return '\1\161' .. state_codes[state] .. '\206' .. string.char(math.floor(attempts / 16777216) % 256,
    math.floor(attempts / 65536) % 256, math.floor(attempts / 256) % 256, attempts % 256)
end

local function relabel(row, state, attempts)
  return opening(state, attempts) .. string.sub(row, 9)
end

local function unknown_format(row)
  return redis.error_reply('EMQROW a job row in an unknown format: ' .. string.format('%q', string.sub(row, 1, 8)))
end

local function lease_of(row)
  local version, fixstr, _, uint32, a, b, c, d = string.byte(row, 1, 8)
  local state = state_names[string.sub(row, 3, 3)]
  if version ~= 1 or fixstr ~= 161 or uint32 ~= 206 or not state or not d then error(unknown_format(row)) end
  return state, ((a * 256 + b) * 256 + c) * 256 + d
end

local function encode(job)
  return opening(job.state, job.attempts) ..
    cmsgpack.pack(job.forgiven, job.created, job.died, job.finished, job.kind, job.group, job.error, job.payload)
end

local function decode(row)
  local version, state, attempts, forgiven, created, died, finished, kind, group, err, payload = cmsgpack.unpack(row)
  if version ~= 1 or not state_names[state] then error(unknown_format(row)) end
  return {
    state = state_names[state], attempts = attempts, forgiven = forgiven, created = created, died = died,
    finished = finished, kind = kind, group = group, error = err, payload = payload,
  }
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
local function fenced(row, token, move)
  if not row then
    return nil, redis.error_reply('EMQSTALE ' .. move .. ' token ' .. token .. ': the job is finished or unknown')
  end
  local state, attempts = lease_of(row)
  if attempts ~= tonumber(token) or state ~= 'active' then
    return nil, redis.error_reply('EMQSTALE ' .. move .. ' token ' .. token ..
      ' is not the current lease (attempts ' .. attempts .. ', state ' .. state .. ')')
  end
  return row, nil
end

-- Start-time fair queueing: a job's start tag is max(virtual time, the
-- group's finish tag), and the group's finish tag is its start + 1. Only a
-- lane's head carries its tag, as its score in the rotation: while a lane is
-- backlogged its jobs' tags run on one by one, so a job joining a lane that
-- is not empty needs no tag, and the next head's tag is the last one's + 1.
-- The group's finish tag is kept in tags once its lane runs empty (see
-- claim.lua), for the next job that starts the lane again.
local function enqueue(lane, rotation, lanes, tags, clock, id, group)
  if redis.call('RPUSH', lane, id) == 1 then
    local start = tonumber(redis.call('HGET', tags, group) or '0')
    local virtual = tonumber(redis.call('GET', clock) or '0')
    if start < virtual then start = virtual end
    redis.call('ZADD', rotation, start, group)
  end
  redis.call('HINCRBY', lanes, group, 1)
end

local function requeue_front(front, lanes, id, group)
  redis.call('RPUSH', front, id)
  redis.call('HINCRBY', lanes, group, 1)
end

local function record_finished(jobs, id, job, state, done, finished, at)
  job.state = state
  job.finished = at
  local row = encode(job)
  redis.call('HSET', finished, id, row)
  redis.call('HDEL', jobs, id)
  redis.call('ZADD', done, at, id)
  return row
end

local function trim_finished(done, finished, retention)
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

local function finish(jobs, id, job, state, done, finished, retention)
  record_finished(jobs, id, job, state, done, finished, now())
  trim_finished(done, finished, retention)
end
