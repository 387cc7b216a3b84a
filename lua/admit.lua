-- admit: put a new job on a queue in one atomic step.
--
-- KEYS[1] emq:{q}:kinds         set    job kinds the queue accepts
-- KEYS[2] emq:{q}:dedup:<key>   string "<job id> <fingerprint>" for the dedup key, with a TTL
-- KEYS[3] emq:{q}:job:<id>      hash   the job row
-- KEYS[4] emq:{q}:pending       zset   pending job ids scored by fair-queueing start tag
-- KEYS[5] emq:{q}:lanes         hash   group -> number of pending jobs in its lane
-- KEYS[6] emq:{q}:tags          hash   group -> finish tag of the group's last admitted job
-- KEYS[7] emq:{q}:clock         string virtual time: start tag of the last claimed job
--
-- ARGV[1] job id
-- ARGV[2] kind
-- ARGV[3] group (the fair lane)
-- ARGV[4] payload
-- ARGV[5] request fingerprint, returned to a later duplicate
-- ARGV[6] dedup retention in milliseconds
--
-- Replies:
--   {"admitted", id, fingerprint}        the job was written and is pending
--   {"duplicate", first id, fingerprint} the dedup key was taken; nothing written
--   error "EMQKIND ..."                  the queue does not accept this kind; nothing written
--   error "EMQEXISTS ..."                a job with this id exists already; nothing written
--
-- Fair lanes are start-time fair queueing over one sorted set (see enqueue in
-- lib.lua): claiming the lowest tag serves backlogged groups in rotation, and
-- no script needs a key named after a group.

local id, kind, group, payload, fingerprint = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

if redis.call('SISMEMBER', KEYS[1], kind) == 0 then
  return redis.error_reply('EMQKIND kind "' .. kind .. '" is not accepted by this queue')
end

local prior = redis.call('GET', KEYS[2])
if prior then
  local space = string.find(prior, ' ', 1, true)
  return {'duplicate', string.sub(prior, 1, space - 1), string.sub(prior, space + 1)}
end

if redis.call('EXISTS', KEYS[3]) == 1 then
  return redis.error_reply('EMQEXISTS job ' .. id .. ' exists already')
end

redis.call('HSET', KEYS[3],
  'state', 'pending',
  'attempts', 0,
  'kind', kind,
  'group', group,
  'payload', payload,
  'created', now())
enqueue(KEYS[4], KEYS[5], KEYS[6], KEYS[7], id, group)

redis.call('SET', KEYS[2], id .. ' ' .. fingerprint, 'PX', ARGV[6])

return {'admitted', id, fingerprint}
