-- lib: helpers shared by the scripts that move jobs into a lane or out of the
-- queue. Package lua prepends this file to those scripts, so each still runs
-- as one atomic EVAL; it touches only keys the calling script was given.
--
-- now()                     server time in milliseconds (never the caller's clock)
-- read(key)                 the job hash at key as a table, or nil
-- fenced(job, token, move)  the job table if it is active under token, else an EMQSTALE error reply
-- enqueue(pending, lanes, tags, clock, id, group)
--                           puts id at the back of its group's fair lane (start-time fair queueing)
-- requeue_front(pending, lanes, clock, id, group)
--                           puts id at the front of the rotation: it already waited its turn once
-- finish(key, id, job, state, done, finished, retention)
--                           turns the job hash into a record in the finished hash, indexes it in
--                           done by finish time, deletes the hash, and trims both to retention

local function now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function read(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then return nil end
  local job = {}
  for i = 1, #flat, 2 do job[flat[i]] = flat[i + 1] end
  return job
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

local function enqueue(pending, lanes, tags, clock, id, group)
  local virtual = tonumber(redis.call('GET', clock) or '0')
  local start = tonumber(redis.call('HGET', tags, group) or '0')
  if start < virtual then start = virtual end
  redis.call('HSET', tags, group, start + 1)
  redis.call('ZADD', pending, start, id)
  redis.call('HINCRBY', lanes, group, 1)
end

local function requeue_front(pending, lanes, clock, id, group)
  redis.call('ZADD', pending, tonumber(redis.call('GET', clock) or '0'), id)
  redis.call('HINCRBY', lanes, group, 1)
end

-- The record is netstring-like, "<name length>:<name><value length>:<value>"
-- repeated, so payloads of any bytes survive it.
local function finish(key, id, job, state, done, finished, retention)
  local at = now()
  job.state = state
  job.finished = tostring(at)
  local parts = {}
  for name, value in pairs(job) do
    parts[#parts + 1] = #name .. ':' .. name .. #value .. ':' .. value
  end
  redis.call('HSET', finished, id, table.concat(parts))
  redis.call('DEL', key)
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
