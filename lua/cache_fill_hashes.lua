-- cache_fill_hashes: cache_fill.lua's conditional fill (without a heal
-- mark) over several cache hashes in one call, for a filler whose hashes
-- share a slot (one hash tag: every balance hash is in {balances}). Each
-- hash is answered on its own: one whose entries are malformed, or whose
-- key holds no hash, gets its error and nothing written to it, and the
-- others are filled all the same.
--
-- KEYS    the cache hashes, field -> "<version> <value>"
-- ARGV[1] "fill": a field that holds nothing (or no version) is written;
--         "refresh": it is left as it is, and only a field holding an
--         older version is written (a filler whose value may be older than
--         what the cache lost, and who reads the truth for what is absent)
-- ARGV    then per key, in KEYS order: how many entries it has, n >= 1,
--         then n times field, version, value (a version is a decimal
--         integer without sign or leading zeros, compared exactly, never as
--         a float)
--
-- Reply: per key, in order, what cache_fill.lua answers for it (per entry
--        1 when written or 0 when the field held the same or a newer
--        version, then what the field holds now, "<version> <value>", or
--        false for a field a refresh left holding nothing), or an error
--        reply: "ECCARG ..." or the server's (WRONGTYPE).
--   error "ECCARG ..." the mode is neither, or the counts do not add up to
--         ARGV; nothing written

local mode = ARGV[1]
if mode ~= 'fill' and mode ~= 'refresh' then
  return redis.error_reply('ECCARG want "fill" or "refresh" first')
end
local starts, at = {}, 2
for k = 1, #KEYS do
  local n = tonumber(ARGV[at])
  if not n or n < 1 or n ~= math.floor(n) or at + 3 * n > #ARGV then
    return redis.error_reply('ECCARG want per key a count and as many field, version, value triples')
  end
  starts[k] = at + 1
  at = at + 1 + 3 * n
end
if at ~= #ARGV + 1 then
  return redis.error_reply('ECCARG ' .. (#ARGV - at + 1) .. ' arguments past the last key')
end

local function fill(key, first, last)
  for i = first + 1, last, 3 do
    local version = ARGV[i]
    if not string.match(version, '^%d+$') or (#version > 1 and string.sub(version, 1, 1) == '0') then
      return redis.error_reply('ECCARG version "' .. version .. '" is not a canonical non-negative integer')
    end
  end
  local reply = {}
  for i = first, last, 3 do
    local field, version, value = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    -- pcall: a key holding no hash answers its own error, not the call's.
    local held = redis.pcall('HGET', key, field)
    if type(held) == 'table' and held.err then return held end
    if mode == 'refresh' and stored_version(held) == nil then
      reply[#reply + 1], reply[#reply + 2] = 0, false
    else
      reply[#reply + 1], reply[#reply + 2] = fill_field(key, field, version, value, held)
    end
  end
  return reply
end

local replies = {}
for k = 1, #KEYS do
  local last = (starts[k + 1] or (#ARGV + 2)) - 2
  replies[k] = fill(KEYS[k], starts[k], last)
end
return replies
