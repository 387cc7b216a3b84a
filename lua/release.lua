-- release: hand an active job back unfinished (a draining worker). Fenced.
-- The job goes to the front of the rotation, claimable at once, and the
-- attempt is forgiven: it does not count toward the attempt limit. attempts
-- itself never goes down, so the released token stays stale forever.
--
-- KEYS[1] emq:{q}:job:<id>  hash
-- KEYS[2] emq:{q}:active    zset
-- KEYS[3] emq:{q}:pending   zset
-- KEYS[4] emq:{q}:lanes     hash
-- KEYS[5] emq:{q}:clock     string
--
-- ARGV[1] id
-- ARGV[2] token
--
-- Reply: 1
--   error "EMQSTALE ..."  the lease was lost (or the job finished); nothing changed

local job, refused = fenced(read(KEYS[1]), ARGV[2], 'release')
if not job then return refused end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'forgiven', 1)
redis.call('HSET', KEYS[1], 'state', 'pending')
requeue_front(KEYS[3], KEYS[4], KEYS[5], ARGV[1], job.group)
return 1
