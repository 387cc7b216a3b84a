-- clock: the server's time, for every script that reads it. Package lua
-- prepends this file to lib.lua's users and to permit_bucket.lua's, so the
-- conversion is written once.
--
-- now()   server time in milliseconds (TIME), never the caller's clock

local function now()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
