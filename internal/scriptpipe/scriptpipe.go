// Package scriptpipe runs the Redis scripts of the queue (emq) and the cache
// fill (coherence), EVALSHA first: one call at a time, or many calls of one
// script in one round trip.
//
// go-redis sends a command again when its reply does not come: after a read
// timeout, a reset or closed connection, up to Options.MaxRetries times (3 by
// default) on a Client and up to ClusterOptions.MaxRedirects times (3 by
// default) on a ClusterClient, even with its MaxRetries at the cluster
// default of -1; pipelines too. The server may well have run the command
// whose reply was lost. So each script is declared with what a second run of
// the same call does: Repeatable when it is harmless (go-redis may send it
// again), Once when it is not (go-redis never sends it again once it may have
// reached the server). A Once call whose reply is lost fails with the
// transport's error, and whether the script ran is then unknown: the caller
// decides what to do, knowing the script.
package scriptpipe

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script is a Redis script and whether the client may send a call of it again.
type Script struct {
	src  string
	hash string
	once bool
	// hashArg is hash as a command argument, boxed once: every call sends it.
	hashArg any
}

// Repeatable declares a script whose second run of a call changes nothing the
// first did not and answers as truly, so go-redis's own retries may send it
// again after a lost reply.
func Repeatable(src string) *Script { return newScript(src, false) }

// Once declares a script whose second run of a call would do harm or answer
// wrongly (refuse the first run's own success, say): go-redis never sends a
// call of it again once it may have reached the server, neither alone nor in
// a pipeline.
func Once(src string) *Script { return newScript(src, true) }

func newScript(src string, once bool) *Script {
	sum := sha1.Sum([]byte(src))
	hash := hex.EncodeToString(sum[:])
	return &Script{src: src, hash: hash, once: once, hashArg: hash}
}

// Run runs one call of the script: EVALSHA, then EVAL when the server answers
// NOSCRIPT (after a restart or SCRIPT FLUSH: the script did not run).
func (s *Script) Run(ctx context.Context, rdb redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	cmd := s.process(ctx, rdb, "evalsha", s.hashArg, keys, nil, args)
	if noScript(cmd.Err()) {
		cmd = s.process(ctx, rdb, "eval", s.src, keys, nil, args)
	}
	return cmd
}

// Call is one run of a script in a pipeline.
type Call struct {
	Keys []string
	Args []any
	// KeyArgs, when not nil, is Keys as command arguments, in order: a
	// caller that sends the same keys on every call boxes them once, which
	// spares each call an allocation per key. Keys still names them (a
	// cluster finds the slot by the first).
	KeyArgs []any
}

// Run runs calls of script in one round trip, EVALSHA first. A pipeline
// cannot fall back call by call the way Script.Run does, so calls refused
// with NOSCRIPT (which did not run) are sent again after loading the script.
// Each command's own error is on its Cmd.
func Run(ctx context.Context, rdb redis.UniversalClient, script *Script, calls []Call) ([]*redis.Cmd, error) {
	cmds, _, err := run(ctx, rdb, script, calls, nil)
	return cmds, err
}

// Replication asks a pipeline to be acknowledged by replicas: it ends with
// a write to Mark (a key in the calls' slot, so the connection's replication
// offset covers every write before it, including those of an earlier
// connection that a call only found done, as a replay finds an admission)
// and WAIT Replicas Timeout.
type Replication struct {
	Replicas int
	Timeout  time.Duration
	Mark     string
}

// RunReplicated is Run, each round of the pipeline ended as r asks;
// acked[i] is how many replicas WAIT counted for call i's round. The calls
// must all go to one server (on a cluster, send them to the node of their
// slot).
func RunReplicated(ctx context.Context, rdb redis.UniversalClient, script *Script, calls []Call, r Replication) (cmds []*redis.Cmd, acked []int, err error) {
	return run(ctx, rdb, script, calls, &r)
}

func run(ctx context.Context, rdb redis.UniversalClient, script *Script, calls []Call, r *Replication) ([]*redis.Cmd, []int, error) {
	cmds := make([]*redis.Cmd, len(calls))
	acked := make([]int, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; round < 2 && len(pending) > 0; round++ {
		pipe := rdb.Pipeline()
		for _, i := range pending {
			cmds[i] = script.process(ctx, pipe, "evalsha", script.hashArg, calls[i].Keys, calls[i].KeyArgs, calls[i].Args)
		}
		var wait *redis.IntCmd
		if r != nil {
			// Both safe to send again: the mark is a plain SET, and a WAIT
			// answers again for the same writes.
			pipe.Set(ctx, r.Mark, "1", time.Minute)
			wait = redis.NewIntCmd(ctx, "wait", r.Replicas, r.Timeout.Milliseconds())
			_ = pipe.Process(ctx, wait)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		var missing []int
		for _, i := range pending {
			if noScript(cmds[i].Err()) {
				missing = append(missing, i)
				continue
			}
			if wait != nil && wait.Err() == nil {
				// A WAIT that failed (its reply lost, say) leaves the
				// call's own answer standing, acknowledged by none.
				acked[i] = int(wait.Val())
			}
		}
		if len(missing) > 0 {
			if err := rdb.ScriptLoad(ctx, script.src).Err(); err != nil {
				return nil, nil, fmt.Errorf("load script: %w", err)
			}
		}
		pending = missing
	}
	return cmds, acked, nil
}

// noScript reports a NOSCRIPT refusal: the script was not loaded and did
// not run. Most calls have no error, and HasErrorPrefix allocates to find out.
func noScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// processor is a client or a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// process sends EVALSHA or EVAL as go-redis's own Eval does (the keys from
// the fourth argument on, for a cluster client to find the slot), marked
// NoRetry when the script is Once.
// The name and payload come boxed (a constant name costs nothing to box,
// the hash is boxed once per Script), and so may the keys (keyArgs).
func (s *Script) process(ctx context.Context, rdb processor, name, payload any, keys []string, keyArgs, args []any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, payload, len(keys))
	if keyArgs != nil {
		cmdArgs = append(cmdArgs, keyArgs...)
	} else {
		for _, key := range keys {
			cmdArgs = append(cmdArgs, key)
		}
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	if s.once {
		_ = rdb.Process(ctx, onceCmd{cmd})
	} else {
		_ = rdb.Process(ctx, cmd)
	}
	return cmd
}

// onceCmd is a command go-redis must not send again once it may have reached
// the server. go-redis asks every command (Cmder.NoRetry) before it sends one
// again, on a Client (a command, a pipeline) and on a ClusterClient alike;
// a redirect (MOVED, ASK), which says the command did not run, is still
// followed. Everything else is the embedded Cmd's, which gets the reply.
type onceCmd struct{ *redis.Cmd }

// NoRetry is true: see onceCmd.
func (onceCmd) NoRetry() bool { return true }
