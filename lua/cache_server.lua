-- cache_server: which server holds a table's cache, and whether the cache
-- was healed on that server. A server that is not the one the cache was last
-- healed on may hold an older copy than the one readers saw: a replica
-- promoted before it received the newest fills, or a restart from a snapshot
-- or an AOF that lost its tail. Redis gives every server process a new run id
-- (a promoted replica keeps its own), and the mark, written here beside the
-- cache, is replicated and persisted with it, so a mark that names another
-- run id says the data came from elsewhere.
--
-- KEYS[1] the table's heal mark: the run id of the server the cache was last
--         healed on
--
-- ARGV[1] empty to read only; a run id to record it as healed, which is done
--         only if it is still this server's run id (the server may have
--         changed again while the caller healed)
--
-- Reply: {this server's run id, the mark as it stands after the call (false
--        when there is none)}

local info = redis.call('INFO', 'server')
local run_id = string.match(info, 'run_id:(%x+)')
if ARGV[1] ~= '' and ARGV[1] == run_id then
  redis.call('SET', KEYS[1], run_id)
end
return {run_id, redis.call('GET', KEYS[1])}
