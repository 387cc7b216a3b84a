-- admit: put a new job on a queue in one atomic step.
--
-- Dedup entries live in windowed hashes: window w of length W holds the keys
-- first admitted during it by the caller's clock, each as a field named by a
-- digest of the key. W follows the queue's dedup retention R (its dedup
-- settings, set by declare.lua), so a retention of minutes keeps its keys for
-- minutes. The caller names window w, the windows before it that an entry
-- admitted within R may be in, the windows after it its clock is within the
-- skew allowance of (for callers whose clocks run ahead), the windows of
-- earlier settings that may still hold live keys, and when window w may
-- expire for this entry to live at least R; an expiry set by another
-- admission for a later time is kept. The caller computes all of it from the
-- queue's dedup settings as it read them, and passes them: settings that
-- differ from the stored ones are refused with EMQDEDUP before anything is
-- written, and the caller reads them off the refusal and calls again. This
-- assumes the clocks of the callers differ by less than the allowance (see
-- dedupWindows in emq/dedup.go).
--
-- KEYS[1]    emq:{q}:kinds               set    job kinds the queue accepts
-- KEYS[2]    emq:{q}:jobs                hash   id -> job row (see lib.lua)
-- KEYS[3]    emq:{q}:lane:<group>        list   the group's pending ids, oldest first
-- KEYS[4]    emq:{q}:rotation            zset   group -> start tag of its lane's head
-- KEYS[5]    emq:{q}:lanes               hash   group -> number of pending jobs in its lane
-- KEYS[6]    emq:{q}:tags                hash   group -> finish tag, kept while its lane is empty
-- KEYS[7]    emq:{q}:clock               string virtual time: the highest tag claimed
-- KEYS[8]    emq:{q}:dedup               string the queue's dedup settings (see declare.lua)
-- KEYS[9]    emq:{q}:wake                list   a token for a claimer that found the queue empty
--                                               (see claim.lua): pushed when the list is empty
--                                               and holding the admitted job's group
-- KEYS[10]   emq:{q}:dedup:<W>:<w>       hash   digest -> "<job id> <fingerprint>"; this admission's window
-- KEYS[11..] emq:{q}:dedup:<W>:<...>     hash   the other windows to look in
-- KEYS[n]    emq:{q}:bucket:<name>       string with ARGV[9]: the rate-limit bucket to take
--                                               from first (see permit_bucket.lua); the last key,
--                                               or the last but three with a log entry
-- KEYS[n+1]  emq:{q}:log:<group>         stream with ARGV[11]: the group's log (see log_lib.lua)
-- KEYS[n+2]  emq:{q}:logseq              hash   with ARGV[11]: group -> last sequence
-- KEYS[n+3]  emq:{q}:logchanges          stream with ARGV[11]: every log append, announced
--
-- ARGV[1] job id
-- ARGV[2] kind
-- ARGV[3] group (the fair lane)
-- ARGV[4] payload
-- ARGV[5] request fingerprint, returned to a later duplicate
-- ARGV[6] digest of the dedup key (raw bytes)
-- ARGV[7] when window w may expire, in unix milliseconds (at the earliest)
-- ARGV[8] the dedup settings the windows were computed from ('' for none stored)
-- ARGV[9] optional ('' for none): the bucket's capacity; admission first
--         takes a permit from the bucket, and an empty bucket refuses the job
-- ARGV[10] with ARGV[9]: the bucket's refill per second
-- ARGV[11] optional ('' for none): the id of an entry the admission appends
--         to its group's log, written only if the job is
-- ARGV[12], ARGV[13] with ARGV[11]: the entry's type and data
--
-- Replies:
--   {"admitted", id, fingerprint}        the job was written and is pending (and its
--                                        log entry appended, whose sequence follows the
--                                        three strings, before any permit take)
--   {"duplicate", first id, fingerprint} the dedup key was taken; nothing written
--   {"limited", "", ""}                  the bucket was empty; nothing written
--   error "EMQKIND ..."                  the queue does not accept this kind; nothing written
--   error "EMQDEDUP <settings>"          the windows came from other dedup settings than the
--                                        stored ones, which follow; nothing written
--   error "ERLARG ..."                   the bucket's size is malformed; nothing written
--   error "EMQEXISTS ..."                a job with this id exists already; nothing
--                                        written but the permit taken
-- With a bucket, the take's four integers follow the three strings:
-- allowed, remaining, retry_ms, reset_ms (see permit_bucket.lua). The permit is
-- spent by a duplicate too: a retry is a request like any other.

local id, kind, group, payload, fingerprint, digest = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

if redis.call('SISMEMBER', KEYS[1], kind) == 0 then
  return redis.error_reply('EMQKIND kind "' .. kind .. '" is not accepted by this queue')
end

local settings = redis.call('GET', KEYS[8]) or ''
if settings ~= ARGV[8] then
  return redis.error_reply('EMQDEDUP ' .. settings)
end

local at = now()
local last_window = #KEYS
local logged = ARGV[11] and ARGV[11] ~= ''
if logged then
  last_window = last_window - 3
end
local take
if ARGV[9] and ARGV[9] ~= '' then
  local err
  take, err = take_permit(KEYS[last_window], ARGV[9], ARGV[10], at)
  if err then return err end
  last_window = last_window - 1
end

-- reply is the three strings, the log entry's sequence when the admission
-- logs one (0 when it wrote nothing), and the permit take when there was one.
local sequence = 0
local function reply(outcome, first, stored)
  local answer = {outcome, first, stored}
  if logged then answer[#answer + 1] = sequence end
  if take then
    for i = 1, 4 do answer[#answer + 1] = take[i] end
  end
  return answer
end

if take and take[1] == 0 then
  return reply('limited', '', '')
end

for i = 10, last_window do
  local prior = redis.call('HGET', KEYS[i], digest)
  if prior then
    local space = string.find(prior, ' ', 1, true)
    return reply('duplicate', string.sub(prior, 1, space - 1), string.sub(prior, space + 1))
  end
end

-- HSETNX writes the row unless the id is taken: the check and the write
-- in one call.
if redis.call('HSETNX', KEYS[2], id, encode({
  state = 'pending', attempts = 0, forgiven = 0, created = at, died = 0, finished = 0,
  kind = kind, group = group, error = '', payload = payload,
})) == 0 then
  return redis.error_reply('EMQEXISTS job ' .. id .. ' exists already')
end
enqueue(KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], id, group)
if logged then
  sequence = log_append(KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS], group, ARGV[11], ARGV[12], ARGV[13], at)
end

redis.call('HSET', KEYS[10], digest, id .. ' ' .. fingerprint)
-- The window keeps the latest expiry an admission asked for (none yet:
-- -1). Read first: the admissions of a window mostly ask for the expiry it
-- has, and one read is then the whole cost, where PEXPIREAT NX then GT
-- took two calls each time.
if redis.call('PEXPIRETIME', KEYS[10]) < tonumber(ARGV[7]) then
  redis.call('PEXPIREAT', KEYS[10], ARGV[7])
end
-- One token wakes a claimer blocked on an empty queue; a busy queue keeps
-- its token (a claim removes it only when it finds nothing), so this costs
-- it one LLEN. The token is the job's group: the woken claimer names its
-- lane, which a claim must be handed in KEYS, so its first run takes the
-- job instead of only learning the lane at the head of the rotation.
if redis.call('LLEN', KEYS[9]) == 0 then
  redis.call('RPUSH', KEYS[9], group)
  redis.call('PEXPIRE', KEYS[9], wake_ttl_ms)
end

return reply('admitted', id, fingerprint)
