-- complete: finish an active job. Fenced: only the current lease may complete.
--
-- KEYS[1] emq:{q}:jobs      hash  id -> job row; the row moves to finished
-- KEYS[2] emq:{q}:active    zset
-- KEYS[3] emq:{q}:done      zset  finished ids by finish time (ms), trimmed to the retention
-- KEYS[4] emq:{q}:finished  hash  id -> row of a finished (done or canceled) job
--
-- ARGV[1] id
-- ARGV[2] token
-- ARGV[3] retention: how many finished jobs are kept
--
-- Reply: 1
--   error "EMQSTALE ..."  the lease was lost (or the job finished); nothing changed

local row, refused = fenced(redis.call('HGET', KEYS[1], ARGV[1]), ARGV[2], 'complete')
if not row then return refused end
local job = decode(row)
job.error = ''
redis.call('ZREM', KEYS[2], ARGV[1])
finish(KEYS[1], ARGV[1], job, 'done', KEYS[3], KEYS[4], tonumber(ARGV[3]))
return 1
