-- release: hand an active job back unfinished (a draining worker). Fenced.
-- The job goes to the front list, claimable at once, and the attempt is
-- forgiven: it does not count toward the attempt limit. attempts itself never
-- goes down, so the released token stays stale forever.
--
-- KEYS[1] emq:{q}:jobs    hash  id -> job row
-- KEYS[2] emq:{q}:active  zset
-- KEYS[3] emq:{q}:front   list  requeued ids, claimed before any lane
-- KEYS[4] emq:{q}:lanes   hash  group -> pending count
--
-- ARGV[1] id
-- ARGV[2] token
--
-- Reply: 1
--   error "EMQSTALE ..."  the lease was lost (or the job finished); nothing changed

local id = ARGV[1]
local row, refused = fenced(redis.call('HGET', KEYS[1], id), ARGV[2], 'release')
if not row then return refused end
local job = decode(row)
redis.call('ZREM', KEYS[2], id)
job.state = 'pending'
job.forgiven = job.forgiven + 1
write(KEYS[1], id, job)
requeue_front(KEYS[3], KEYS[4], id, job.group)
return 1
