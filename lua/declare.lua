-- declare: register job kinds on a queue and, when given one, set the
-- queue's dedup retention, in one atomic step.
--
-- A queue's dedup settings are one string of integers (milliseconds):
-- "<R> <W>", the retention R and the length W of the dedup windows admit.lua
-- writes to, then " <R> <W> <until>" for each earlier setting whose windows
-- may still hold keys an admission must find, until the server time past
-- which none can. Admitters compute their windows from the settings and
-- admit.lua refuses a call computed from other settings than the stored ones
-- (EMQDEDUP), so every admitter follows what is stored. No settings stored
-- means the defaults (ARGV[3], ARGV[4]).
--
-- The last declaration that names a retention wins. The setting it replaces
-- stays as an earlier one until its R plus twice the skew allowance from now,
-- so every key admitted under it is still refused for its R, whichever is
-- longer. Declaring the setting in force changes nothing but dropping earlier
-- ones that ran out. A queue that never had settings but whose kinds exist
-- may hold keys under the defaults, which are kept as an earlier setting; a
-- new queue has none to keep.
--
-- KEYS[1]   emq:{q}:kinds    set     job kinds the queue accepts
-- KEYS[2]   emq:{q}:dedup    string  the dedup settings, as above
--
-- ARGV[1]   the retention to set, ms; '' leaves the settings as they are
-- ARGV[2]   with ARGV[1]: the window length for it, ms
-- ARGV[3]   the default retention, ms (the settings when none are stored)
-- ARGV[4]   the default window length, ms
-- ARGV[5]   the skew allowance, ms (see dedupWindows in emq/dedup.go)
-- ARGV[6..] the kinds to accept
--
-- Reply: {settings after, settings before}, each '' when none are stored.

local before = redis.call('GET', KEYS[2]) or ''
local existed = redis.call('EXISTS', KEYS[1]) == 1
for i = 6, #ARGV do
  redis.call('SADD', KEYS[1], ARGV[i])
end
if ARGV[1] == '' then
  return {before, before}
end

local at = now()
local fields = {}
for field in string.gmatch(before, '%d+') do
  fields[#fields + 1] = field
end
local settings = {ARGV[1], ARGV[2]}

-- keep adds an earlier setting that ends at server time ends, unless it ran
-- out or is the one in force now; one setting kept twice keeps the later end.
local function keep(retention, window, ends)
  if tonumber(ends) <= at or (retention == ARGV[1] and window == ARGV[2]) then
    return
  end
  for i = 3, #settings, 3 do
    if settings[i] == retention and settings[i + 1] == window then
      if tonumber(ends) > tonumber(settings[i + 2]) then
        settings[i + 2] = ends
      end
      return
    end
  end
  settings[#settings + 1] = retention
  settings[#settings + 1] = window
  settings[#settings + 1] = ends
end

for i = 3, #fields - 2, 3 do
  keep(fields[i], fields[i + 1], fields[i + 2])
end
local retention, window = ARGV[3], ARGV[4]
if #fields >= 2 then
  retention, window = fields[1], fields[2]
end
if #fields >= 2 or existed then
  keep(retention, window, string.format('%d', at + tonumber(retention) + 2 * tonumber(ARGV[5])))
end

local after = table.concat(settings, ' ')
if after ~= before then
  redis.call('SET', KEYS[2], after)
end
return {after, before}
