-- permit_bucket: the rate-limit bucket shared by the scripts that take permits
-- (ratelimit.lua, and admit.lua when the caller asks it to). Package lua
-- prepends this file (after clock.lua) to them, so a take stays part of one
-- atomic EVAL; it touches only the key its caller passes.
--
-- take_permit(bucket, capacity, per_second, at_ms)
--   takes one permit from the bucket, or refuses. at_ms is the server's time
--   in milliseconds, when the caller has read it already; now() (clock.lua,
--   prepended before this file) otherwise.
--   Returns a table of four integers {allowed, remaining, retry_ms,
--   reset_ms}, or nil and an "ERLARG ..." error reply (nothing written) when
--   capacity or per_second is not an integer from 1 to 1000000 written in
--   decimal.
--
-- A bucket holds up to capacity permits and gains per_second permits every
-- second, by the server's clock (TIME), never the caller's. All arithmetic is
-- in integers: permits are counted in thousandths (milli-permits) and time in
-- milliseconds, so a bucket gains exactly per_second milli-permits per
-- millisecond. The bucket is a string, "<permits> <at>": the milli-permits
-- held at the last take and the server milliseconds of that take, written
-- with its expiry in one SET (a hash would take three commands). It expires
-- once it would be full again: an absent bucket is a full one.
--
--   allowed    1 when a permit was taken, 0 when the bucket was empty
--   remaining  whole permits left after this call
--   retry_ms   milliseconds until the next permit is available; 0 when one is
--              available now
--   reset_ms   milliseconds until the bucket is full again

local function bucket_size(text, name)
  if not string.match(text or '', '^[1-9]%d*$') or #text > 7 then
    return nil, redis.error_reply('ERLARG ' .. name .. ' "' .. tostring(text) .. '" is not an integer from 1 to 1000000')
  end
  local value = tonumber(text)
  if value > 1000000 then
    return nil, redis.error_reply('ERLARG ' .. name .. ' "' .. text .. '" is not an integer from 1 to 1000000')
  end
  return value, nil
end

local function take_permit(bucket, capacity_text, rate_text, at_ms)
  local capacity, err = bucket_size(capacity_text, 'capacity')
  if err then return nil, err end
  local rate
  rate, err = bucket_size(rate_text, 'per_second')
  if err then return nil, err end

  at_ms = at_ms or now()
  local full = capacity * 1000

  local level = full
  local held, at
  local state = redis.call('GET', bucket)
  if state then
    local space = string.find(state, ' ', 1, true)
    if space then
      held, at = tonumber(string.sub(state, 1, space - 1)), tonumber(string.sub(state, space + 1))
    end
  end
  if held and at then
    local elapsed = at_ms - at
    if elapsed < 0 then elapsed = 0 end
    -- Clip before multiplying: past the time to fill, more makes no difference.
    local to_fill = math.ceil((full - held) / rate)
    if elapsed >= to_fill then
      level = full
    else
      level = held + elapsed * rate
    end
    if level > full then level = full end
  end

  local allowed = 0
  if level >= 1000 then
    allowed = 1
    level = level - 1000
  end

  local retry_ms = 0
  if level < 1000 then retry_ms = math.ceil((1000 - level) / rate) end
  local reset_ms = math.ceil((full - level) / rate)

  if reset_ms > 0 then
    -- %d keeps every digit: tostring would write 1.7e+12.
    redis.call('SET', bucket, string.format('%d %d', level, at_ms), 'PX', reset_ms + 1000)
  else
    redis.call('DEL', bucket)
  end
  return {allowed, math.floor(level / 1000), retry_ms, reset_ms}, nil
end
