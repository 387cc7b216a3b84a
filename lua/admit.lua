-- admit: put a new job on a queue in one atomic step.
--
-- Dedup entries live in one hash per window of the dedup retention R: window
-- w holds the keys first admitted during [w*R, (w+1)*R) by the caller's clock,
-- field = a digest of the dedup key, and expires at the end of window w+1 plus
-- a clock-skew allowance, so an entry lives at least R. The caller names the
-- windows w-1, w and w+1 of its own clock: w-1 and w hold every entry of the
-- last R, and w+1 those of callers whose clocks run ahead. This assumes the
-- callers' clocks differ by less than the allowance (see emq/queue.go).
--
-- KEYS[1]  emq:{q}:kinds                 set    job kinds the queue accepts
-- KEYS[2]  emq:{q}:dedup:<R>:<w-1>       hash   digest -> "<job id> <fingerprint>"
-- KEYS[3]  emq:{q}:dedup:<R>:<w>         hash   the window this admission writes to
-- KEYS[4]  emq:{q}:dedup:<R>:<w+1>       hash
-- KEYS[5]  emq:{q}:jobs                  hash   id -> job row (see lib.lua)
-- KEYS[6]  emq:{q}:lane:<group>          list   the group's pending ids, oldest first
-- KEYS[7]  emq:{q}:rotation              zset   group -> start tag of its lane's head
-- KEYS[8]  emq:{q}:lanes                 hash   group -> number of pending jobs in its lane
-- KEYS[9]  emq:{q}:tags                  hash   group -> finish tag of the group's last admitted job
-- KEYS[10] emq:{q}:clock                 string virtual time: start tag of the last claimed job
--
-- ARGV[1] job id
-- ARGV[2] kind
-- ARGV[3] group (the fair lane)
-- ARGV[4] payload
-- ARGV[5] request fingerprint, returned to a later duplicate
-- ARGV[6] digest of the dedup key (raw bytes)
-- ARGV[7] when window w expires, in unix milliseconds
--
-- Replies:
--   {"admitted", id, fingerprint}        the job was written and is pending
--   {"duplicate", first id, fingerprint} the dedup key was taken; nothing written
--   error "EMQKIND ..."                  the queue does not accept this kind; nothing written
--   error "EMQEXISTS ..."                a job with this id exists already; nothing written

local id, kind, group, payload, fingerprint, digest = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

if redis.call('SISMEMBER', KEYS[1], kind) == 0 then
  return redis.error_reply('EMQKIND kind "' .. kind .. '" is not accepted by this queue')
end

for i = 2, 4 do
  local prior = redis.call('HGET', KEYS[i], digest)
  if prior then
    local space = string.find(prior, ' ', 1, true)
    return {'duplicate', string.sub(prior, 1, space - 1), string.sub(prior, space + 1)}
  end
end

if redis.call('HEXISTS', KEYS[5], id) == 1 then
  return redis.error_reply('EMQEXISTS job ' .. id .. ' exists already')
end

write(KEYS[5], id, {state = 'pending', attempts = '0', created = int(now()), kind = kind, group = group, payload = payload})
enqueue(KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], id, group)

redis.call('HSET', KEYS[3], digest, id .. ' ' .. fingerprint)
redis.call('PEXPIREAT', KEYS[3], ARGV[7])

return {'admitted', id, fingerprint}
