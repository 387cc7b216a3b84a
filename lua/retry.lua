-- retry: give up an attempt that failed. Fenced. The job waits in delayed for
-- an exponential backoff with jitter, or goes to dead when its attempts are
-- spent or the failure is permanent.
--
-- KEYS[1] emq:{q}:jobs     hash  id -> job row
-- KEYS[2] emq:{q}:active   zset
-- KEYS[3] emq:{q}:delayed  zset  delayed ids by due time (ms)
-- KEYS[4] emq:{q}:dead     zset  dead ids by time of death (ms)
--
-- ARGV[1] id
-- ARGV[2] token
-- ARGV[3] the failure, kept as the job's last error
-- ARGV[4] attempt limit
-- ARGV[5] base delay in milliseconds (the first retry's)
-- ARGV[6] delay cap in milliseconds
-- ARGV[7] jitter in [0, 1), drawn by the caller: script randomness is not random
-- ARGV[8] "1" when the failure is permanent: dead at once
--
-- Reply: {"delayed", due} or {"dead", time of death}
--   error "EMQSTALE ..."  the lease was lost (or the job finished); nothing changed

local id = ARGV[1]
local row, refused = fenced(redis.call('HGET', KEYS[1], id), ARGV[2], 'retry')
if not row then return refused end
local job = decode(row)
local at = now()
local spent = job.attempts - job.forgiven
redis.call('ZREM', KEYS[2], id)
job.error = ARGV[3]
if ARGV[8] == '1' or spent >= tonumber(ARGV[4]) then
  job.state, job.died = 'dead', at
  write(KEYS[1], id, job)
  redis.call('ZADD', KEYS[4], at, id)
  return {'dead', at}
end
local delay = tonumber(ARGV[5]) * 2 ^ (spent - 1)
local cap = tonumber(ARGV[6])
if delay > cap then delay = cap end
-- equal jitter: half the delay is fixed, half is random, so retries spread out
-- yet never come sooner than half the backoff
local due = at + math.floor(delay / 2 + delay / 2 * tonumber(ARGV[7]))
job.state = 'delayed'
write(KEYS[1], id, job)
redis.call('ZADD', KEYS[3], due, id)
return {'delayed', due}
