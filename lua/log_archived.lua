-- log_archived: mark how far a group's log is archived, and trim the log
-- to its hot tail.
--
-- A log's archiver copies its entries elsewhere (for accounts' events, to
-- PostgreSQL) and then raises the group's archived position, only ever
-- upward: every entry at or below it is held by the archive. The log then
-- drops entries, from its oldest, that are archived AND either older than
-- hot_ms or not among its newest hot_count entries. An entry not archived
-- is never dropped, whatever its age or the log's length, so the log is as
-- long as the hot tail plus what the archiver has not copied yet.
--
-- emq:{q}:logdue holds each group whose log still holds archived entries,
-- scored by when the oldest of them leaves the hot tail (server ms), so an
-- archiver trims a log that no longer grows; a log left empty is deleted
-- (its sequence lives on in emq:{q}:logseq).
--
-- KEYS[1] emq:{q}:log:<group>   stream the group's log (log_lib.lua)
-- KEYS[2] emq:{q}:logarchived   hash   group -> last sequence archived
-- KEYS[3] emq:{q}:logdue        zset   group -> server ms its log is due a trim
--
-- ARGV[1] group
-- ARGV[2] the last sequence the archive holds; 0 (or any at or below the
--         position held) raises nothing and only trims
-- ARGV[3] hot_count: the newest entries kept even when archived and old
-- ARGV[4] hot_ms: archived entries younger than this are kept
-- ARGV[5] the most entries one call drops; a log with more to drop is due
--         again at once
--
-- Reply: {the archived position after the call, the first sequence the
--        log holds (0: none), entries dropped}
--   error "EMQARG ..."  an argument is malformed; nothing written

local group = ARGV[1]
local position, hot_count, hot_ms, most = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if not position or not hot_count or hot_count < 0 or not hot_ms or hot_ms < 0 or not most or most < 1 then
  return redis.error_reply('EMQARG want group, position, hot_count, hot_ms and a positive most')
end

local archived = tonumber(redis.call('HGET', KEYS[2], group) or '0')
if position > archived then
  redis.call('HSET', KEYS[2], group, position)
  archived = position
end

local function sequence_of(id)
  return tonumber(string.match(id, '^(%d+)'))
end

-- entry_from is the first entry at or after sequence s: {sequence, at}.
local function entry_from(s)
  local entries = redis.call('XRANGE', KEYS[1], s .. '-0', '+', 'COUNT', 1)
  if #entries == 0 then return nil end
  return {sequence_of(entries[1][1]), log_entry_at(entries[1][2]) or 0}
end

local head = entry_from(0)
if not head then
  redis.call('ZREM', KEYS[3], group)
  return {archived, 0, 0}
end
local now_ms = now()
local horizon = now_ms - hot_ms
local first = head[1]
-- Nothing above limit may go: not archived, or past this call's share.
local limit = math.min(archived, first + most - 1)
local cut = first - 1
if limit >= first then
  -- The count: the entries beyond the newest hot_count (a log with holes,
  -- which only a lost write leaves, holds fewer: it drops fewer).
  cut = math.max(cut, math.min(limit, first + redis.call('XLEN', KEYS[1]) - hot_count - 1))
  -- The age: the newest entry at or below limit older than the horizon,
  -- found by halving, the entries' times rising with their sequences.
  if head[2] < horizon then
    local old, young = first, limit + 1
    while young - old > 1 do
      local middle = math.floor((old + young) / 2)
      local entry = entry_from(middle)
      if entry and entry[1] <= limit and entry[2] < horizon then
        old = entry[1]
      else
        young = middle
      end
    end
    cut = math.max(cut, old)
  end
end

local dropped = 0
if cut >= first then
  dropped = redis.call('XTRIM', KEYS[1], 'MINID', (cut + 1) .. '-0')
end
head = entry_from(cut + 1)
if not head then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[3], group)
  return {archived, 0, dropped}
end
if head[1] > archived then
  -- Nothing archived is left: the next mark schedules the log again.
  redis.call('ZREM', KEYS[3], group)
elseif cut == first + most - 1 and cut < archived then
  redis.call('ZADD', KEYS[3], now_ms, group)
else
  redis.call('ZADD', KEYS[3], head[2] + hot_ms, group)
end
return {archived, head[1], dropped}
