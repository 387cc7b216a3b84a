-- ratelimit: take one permit from a rate-limit bucket, or refuse (take_permit in
-- permit_bucket.lua, which package lua prepends to this file).
--
-- KEYS[1] the bucket, a string; see permit_bucket.lua
--
-- ARGV[1] capacity     whole permits, an integer 1..1000000 (the burst)
-- ARGV[2] per_second   whole permits added per second, an integer 1..1000000
--
-- Reply: an array of four integers
--   [1] allowed      1 when a permit was taken, 0 when the bucket was empty
--   [2] remaining    whole permits left after this call
--   [3] retry_ms     milliseconds until the next permit is available; 0 when
--                    one is available now
--   [4] reset_ms     milliseconds until the bucket is full again
--   error "ERLARG ..."  an argument is malformed; nothing written

local take, err = take_permit(KEYS[1], ARGV[1], ARGV[2], nil)
if err then return err end
return take
