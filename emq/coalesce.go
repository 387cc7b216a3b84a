package emq

import (
	"context"
	"errors"
	"sync"

	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/redis/go-redis/v9"
)

// ErrClosed: the client was closed while a call waited to be sent.
var ErrClosed = errors.New("emq: client closed")

// A coalescer runs concurrent calls of one script as pipelines. A call that
// arrives while the round trips in flight are busy joins the next pipeline
// instead of writing its own, so under load many callers share one write,
// one read and one server wakeup, on both sides of the connection. A lone
// call goes at once: no timer holds it back to wait for company.
//
// Each call is still its own script run, answered on its own; only the
// transport is shared. What a caller learns when its context ends first is
// what it would learn from a direct run: the call may or may not have run.
type coalescer struct {
	rdb    redis.UniversalClient
	script *scriptpipe.Script

	start sync.Once
	calls chan *coalescedCall
	// closing is cancelled by close: senders finish their pipeline and stop.
	closing context.Context
	cancel  context.CancelFunc
	senders sync.WaitGroup
}

type coalescedCall struct {
	call scriptpipe.Call
	cmd  *redis.Cmd
	done chan struct{}
}

const (
	// coalescedPipelines is how many pipelines may be in flight at once: a
	// few, so a slow reply does not hold every caller back, and few enough
	// that callers queue up behind them and share a pipeline.
	coalescedPipelines = 4
	// coalescedMost bounds one pipeline, so a flood is sent in slices.
	coalescedMost = 128
)

func newCoalescer(rdb redis.UniversalClient, script *scriptpipe.Script) *coalescer {
	closing, cancel := context.WithCancel(context.Background())
	return &coalescer{rdb: rdb, script: script, calls: make(chan *coalescedCall), closing: closing, cancel: cancel}
}

// run runs the script with keys and args, sharing the round trip with
// whatever other calls are waiting.
func (c *coalescer) run(ctx context.Context, keys []string, args ...any) *redis.Cmd {
	c.start.Do(func() {
		for range coalescedPipelines {
			c.senders.Add(1)
			go c.send()
		}
	})
	call := &coalescedCall{call: scriptpipe.Call{Keys: keys, Args: args}, done: make(chan struct{})}
	failed := func(err error) *redis.Cmd {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	select {
	case c.calls <- call:
	case <-ctx.Done():
		return failed(ctx.Err())
	case <-c.closing.Done():
		return failed(ErrClosed)
	}
	select {
	case <-call.done:
		return call.cmd
	case <-ctx.Done():
		return failed(ctx.Err())
	}
}

// send takes a call, gathers the calls already waiting behind it, and runs
// them all in one pipeline.
func (c *coalescer) send() {
	defer c.senders.Done()
	batch := make([]*coalescedCall, 0, coalescedMost)
	calls := make([]scriptpipe.Call, 0, coalescedMost)
	for {
		select {
		case first := <-c.calls:
			batch = append(batch[:0], first)
		case <-c.closing.Done():
			return
		}
	gather:
		for len(batch) < coalescedMost {
			select {
			case next := <-c.calls:
				batch = append(batch, next)
			default:
				break gather
			}
		}
		calls = calls[:0]
		for _, call := range batch {
			calls = append(calls, call.call)
		}
		// The pipeline is everybody's: no one caller's context may cancel it.
		// The client's read and write timeouts bound it.
		cmds, err := scriptpipe.Run(context.WithoutCancel(c.closing), c.rdb, c.script, calls)
		for i, call := range batch {
			if err != nil {
				call.cmd = redis.NewCmd(c.closing)
				call.cmd.SetErr(err)
			} else {
				call.cmd = cmds[i]
			}
			close(call.done)
		}
	}
}

// close stops the senders once their pipelines are answered; calls not yet
// taken get ErrClosed.
func (c *coalescer) close() {
	c.cancel()
	c.senders.Wait()
}
