-- seat_take: take a seat for a holder in every seat set given, or in none.
-- A seat set is a sorted set of holders scored by when their seat expires
-- (server milliseconds): seats past their expiry are dropped first, and a
-- set whose seats are all held by others refuses the take. A holder that
-- has a seat already has it renewed, so a second run of one call answers
-- as the first did.
--
-- KEYS[1..n]  the seat sets, sorted sets (holder -> expiry, server ms), all
--             under one hash tag; each set expires with its newest seat
--
-- ARGV[1]     holder    the seat's holder, a non-empty string
-- ARGV[2]     ttl_ms    how long the seat lasts unless renewed, an integer
--                       from 1 to 86400000
-- ARGV[2+i]   seats     how many seats KEYS[i] has, an integer from 1 to
--                       1000000
--
-- Reply: an array of three integers {taken, set, held}
--   taken   1 when the holder now has a seat in every set (it is renewed
--           where it had one), 0 when it took none
--   set     0 when taken; else i, the first set KEYS[i] whose seats are
--           all held by others
--   held    0 when taken; else the seats held in that set
--   error "ERSEAT ..."  an argument is malformed; nothing written

local holder = ARGV[1]
local ttl = tonumber(ARGV[2])
if holder == nil or holder == '' then
  return redis.error_reply('ERSEAT holder is empty')
end
if not ttl or ttl ~= math.floor(ttl) or ttl < 1 or ttl > 86400000 then
  return redis.error_reply('ERSEAT ttl_ms "' .. tostring(ARGV[2]) .. '" is not an integer from 1 to 86400000')
end
if #ARGV ~= #KEYS + 2 then
  return redis.error_reply('ERSEAT want one seat count per set')
end
local at = now()
for i = 1, #KEYS do
  local seats = tonumber(ARGV[2 + i])
  if not seats or seats ~= math.floor(seats) or seats < 1 or seats > 1000000 then
    return redis.error_reply('ERSEAT seats "' .. tostring(ARGV[2 + i]) .. '" is not an integer from 1 to 1000000')
  end
end
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', at)
  if not redis.call('ZSCORE', KEYS[i], holder) then
    local held = redis.call('ZCARD', KEYS[i])
    if held >= tonumber(ARGV[2 + i]) then
      return {0, i, held}
    end
  end
end
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], at + ttl, holder)
  if redis.call('PTTL', KEYS[i]) < ttl then
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
return {1, 0, 0}
