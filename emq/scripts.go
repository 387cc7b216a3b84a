package emq

import (
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/lua"
)

// Scripts run through redis.Script.Run: EVALSHA first, EVAL when the server
// answers NOSCRIPT (after a restart or SCRIPT FLUSH).
var (
	admitScript    = redis.NewScript(lua.Admit)
	claimScript    = redis.NewScript(lua.Claim)
	extendScript   = redis.NewScript(lua.Extend)
	completeScript = redis.NewScript(lua.Complete)
	retryScript    = redis.NewScript(lua.Retry)
	releaseScript  = redis.NewScript(lua.Release)
	promoteScript  = redis.NewScript(lua.Promote)
	reapScript     = redis.NewScript(lua.Reap)
	cancelScript   = redis.NewScript(lua.Cancel)
	requeueScript  = redis.NewScript(lua.Requeue)
	declareScript  = redis.NewScript(lua.Declare)

	rateLimitScript = redis.NewScript(lua.RateLimit)
)
