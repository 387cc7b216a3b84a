-- cache_server: the identity of the server holding a table's cache, and the
-- heal of the cache on it. A server that is not the one the cache was last
-- healed on may hold an older copy than the one readers saw: a replica
-- promoted before it received the newest fills, a restart from a snapshot or
-- an AOF that lost its tail. The identity is the run id, new with every
-- server process, and the replication id, new with every promotion (so a
-- primary that went back to following, took a stale copy, and was promoted
-- again is a new identity too). The mark and the lease sit beside the cache,
-- replicated and persisted with it.
--
-- KEYS[1] the table's heal mark: the identity the cache was last healed on,
--         or "healing:<identity>" while a heal of it runs (readers then
--         neither trust nor fill whole hashes)
-- KEYS[2] the table's heal lease: the holder (an id) of the healer at work, expiring
--
-- ARGV[1] the move:
--           "read"  nothing else
--           "begin" take or renew the lease and mark the heal begun, if
--                   this server is still the identity ARGV[2] and no other
--                   holder holds the lease
--           "end"   mark the cache healed on ARGV[2], if this server is
--                   still that identity and the mark still says its heal
--                   runs; the lease is given up either way
-- ARGV[2] begin, end: the identity the caller heals (from a read)
-- ARGV[3] begin, end: the caller's holder id
-- ARGV[4] begin: the lease in milliseconds
--
-- Reply: {this server's identity, the mark after the call (false: none),
--        1 when the move was done or was "read", else 0}

local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
local identity = run_id .. ':' .. (replid or '')
local move = ARGV[1]
local done = 1

if move == 'begin' then
  local holder = redis.call('GET', KEYS[2])
  if ARGV[2] ~= identity or (holder and holder ~= ARGV[3]) then
    done = 0
  else
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
    redis.call('SET', KEYS[1], 'healing:' .. identity)
  end
elseif move == 'end' then
  if redis.call('GET', KEYS[2]) == ARGV[3] then
    redis.call('DEL', KEYS[2])
  end
  if ARGV[2] == identity and redis.call('GET', KEYS[1]) == 'healing:' .. identity then
    redis.call('SET', KEYS[1], identity)
  else
    done = 0
  end
elseif move ~= 'read' then
  return redis.error_reply('ECCARG unknown move "' .. tostring(move) .. '"')
end
return {identity, redis.call('GET', KEYS[1]), done}
