-- cache_fill: write versioned entries into a cache hash, each only if the
-- field holds no version yet or an older one. Fillers read the truth at
-- different moments and finish in any order; this check is what keeps a slow
-- one from putting an older version over a newer one.
--
-- KEYS[1] a cache hash  field -> "<version> <value>"
-- KEYS[2] optional: the table's heal mark (cache_server.lua). Given, the
--         fill is fenced: it writes only if the mark still holds ARGV[1],
--         what the filler read beside the hash. A fill that read the truth
--         before Redis lost writes must not land after a heal began.
--
-- ARGV    with KEYS[2]: first the mark expected ('' for none); then field,
--         version, value, repeated once per entry. A version is a decimal
--         integer without sign or leading zeros, compared exactly (by
--         length, then digit by digit), never as a float.
--
-- Reply: per entry, in order, two values: 1 when the entry was written or 0
--        when the field held the same or a newer version, then what the
--        field holds now, "<version> <value>".
--   error "ECCARG ..."    an argument is malformed; nothing written
--   error "ECCFENCED ..." the heal mark changed; nothing written

local first = 1
if KEYS[2] then
  first = 2
  if (redis.call('GET', KEYS[2]) or '') ~= ARGV[1] then
    return redis.error_reply('ECCFENCED the heal mark changed since the read')
  end
end
local entries = #ARGV - first + 1
if entries <= 0 or entries % 3 ~= 0 then
  return redis.error_reply('ECCARG want field, version, value triples, got ' .. entries .. ' arguments')
end
for i = first + 1, #ARGV, 3 do
  local version = ARGV[i]
  if not string.match(version, '^%d+$') or (#version > 1 and string.sub(version, 1, 1) == '0') then
    return redis.error_reply('ECCARG version "' .. version .. '" is not a canonical non-negative integer')
  end
end

local reply = {}
for i = first, #ARGV, 3 do
  local field, version, value = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local held = redis.call('HGET', KEYS[1], field)
  reply[#reply + 1], reply[#reply + 2] = fill_field(KEYS[1], field, version, value, held)
end
return reply
