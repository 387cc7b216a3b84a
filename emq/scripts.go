package emq

import (
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/lua"
)

// Scripts run through redis.Script.Run: EVALSHA first, EVAL when the server
// answers NOSCRIPT (after a restart or SCRIPT FLUSH).
var admitScript = redis.NewScript(lua.Admit)
