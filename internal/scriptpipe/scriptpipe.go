// Package scriptpipe runs many calls of one Redis script in one round trip,
// EVALSHA first, for the queue (emq) and the cache fill (coherence).
package scriptpipe

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Call is one run of a script in a pipeline.
type Call struct {
	Keys []string
	Args []any
}

// Run runs calls of script in one round trip, EVALSHA first. A pipeline
// cannot fall back call by call the way Script.Run does, so calls refused
// with NOSCRIPT (which did not run) are sent again after loading the script.
// Each command's own error is on its Cmd.
func Run(ctx context.Context, rdb redis.UniversalClient, script *redis.Script, calls []Call) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; round < 2 && len(pending) > 0; round++ {
		pipe := rdb.Pipeline()
		for _, i := range pending {
			cmds[i] = script.EvalSha(ctx, pipe, calls[i].Keys, calls[i].Args...)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		var missing []int
		for _, i := range pending {
			if err := cmds[i].Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				missing = append(missing, i)
			}
		}
		if len(missing) > 0 {
			if err := script.Load(ctx, rdb).Err(); err != nil {
				return nil, fmt.Errorf("load script: %w", err)
			}
		}
		pending = missing
	}
	return cmds, nil
}
