-- complete: finish active jobs, each fenced on its own: only the current
-- lease of a job may complete it. The runtime completes what its handlers
-- finished together in one run, so the per-run costs (the call, the clock,
-- the retention trim) are paid once per batch rather than once per job.
--
-- KEYS[1] emq:{q}:jobs      hash  id -> job row; the row moves to finished
-- KEYS[2] emq:{q}:active    zset
-- KEYS[3] emq:{q}:done      zset  finished ids by finish time (ms), trimmed to the retention
-- KEYS[4] emq:{q}:finished  hash  id -> row of a finished (done or canceled) job
--
-- ARGV[1]            retention: how many finished jobs are kept
-- ARGV[2], ARGV[3]   id and token of the first job; each further job adds its pair
--
-- Reply: one entry per job, in order:
--   1                  the job was completed
--   "EMQSTALE ..."     that job's lease was lost (or it finished); it is unchanged

local retention = tonumber(ARGV[1])
local at = now()
local replies = {}
for i = 2, #ARGV - 1, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local row, refused = fenced(redis.call('HGET', KEYS[1], id), token, 'complete')
  if row then
    local job = decode(row)
    job.error = ''
    redis.call('ZREM', KEYS[2], id)
    record_finished(KEYS[1], id, job, 'done', KEYS[3], KEYS[4], at)
    replies[#replies + 1] = 1
  else
    replies[#replies + 1] = refused.err
  end
end
trim_finished(KEYS[3], KEYS[4], retention)
return replies
