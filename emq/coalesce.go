package emq

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

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
	// replicas, when above zero, is how many replicas must acknowledge a
	// pipeline's writes (WAIT, within replicaTimeout) before its calls are
	// answered; each call learns how many did.
	replicas       int
	replicaTimeout time.Duration
	// reload is the cluster client's (see clusterReload); nil on a single
	// server.
	reload *clusterReload

	start sync.Once
	calls chan *coalescedCall
	// closing is cancelled by close: senders finish their pipeline and stop.
	closing context.Context
	cancel  context.CancelFunc
	senders sync.WaitGroup
}

type coalescedCall struct {
	call  scriptpipe.Call
	cmd   *redis.Cmd
	acked int
	done  chan struct{}
}

const (
	// coalescedPipelines is how many pipelines may be in flight at once:
	// one, so that every caller arriving during a round trip joins the next
	// pipeline. With four, a busy gateway's calls mostly found a sender idle
	// and went alone or in twos, a write, a read and a server wakeup each
	// (docs/performance.md, "the door"). A slow reply holds every caller
	// back, but it would with four as well: each pipeline carries calls for
	// every queue, and one server runs them one at a time.
	coalescedPipelines = 1
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
	cmd, _ := c.runAcked(ctx, keys, args...)
	return cmd
}

// runAcked is run, and reports how many replicas acknowledged the call's
// writes when the coalescer waits for them.
func (c *coalescer) runAcked(ctx context.Context, keys []string, args ...any) (*redis.Cmd, int) {
	return c.runCall(ctx, scriptpipe.Call{Keys: keys, Args: args})
}

// runCall is runAcked with the call as the caller built it (its keys boxed
// already, say: scriptpipe.Call.KeyArgs).
func (c *coalescer) runCall(ctx context.Context, run scriptpipe.Call) (*redis.Cmd, int) {
	c.start.Do(func() {
		for range coalescedPipelines {
			c.senders.Add(1)
			go c.send()
		}
	})
	call := &coalescedCall{call: run, done: make(chan struct{})}
	failed := func(err error) *redis.Cmd {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	select {
	case c.calls <- call:
	case <-ctx.Done():
		return failed(ctx.Err()), 0
	case <-c.closing.Done():
		return failed(ErrClosed), 0
	}
	select {
	case <-call.done:
		return call.cmd, call.acked
	case <-ctx.Done():
		return failed(ctx.Err()), 0
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
		cmds, acked, err := c.runPipeline(context.WithoutCancel(c.closing), calls)
		for i, call := range batch {
			if err != nil {
				call.cmd = redis.NewCmd(c.closing)
				call.cmd.SetErr(err)
			} else {
				call.cmd, call.acked = cmds[i], acked[i]
			}
			close(call.done)
		}
	}
}

// runPipeline runs the calls in one round trip, or, when the coalescer waits
// for replicas, one per server their keys live on (runReplicated).
func (c *coalescer) runPipeline(ctx context.Context, calls []scriptpipe.Call) ([]*redis.Cmd, []int, error) {
	return runReplicated(ctx, c.rdb, c.reload, c.script, calls, c.replicas, c.replicaTimeout)
}

// redirectsFollowed is how many times runReplicated sends a call again to
// the node a MOVED reply names: once is what a failover takes, twice covers
// a slot that moved again meanwhile.
const redirectsFollowed = 2

// runReplicated runs calls of script in one round trip and, with replicas
// above zero, waits for that many replicas to hold their writes (WAIT, at
// most timeout): one round trip per server the calls' keys live on, since
// WAIT counts the replicas of the connection's own server. acked[i] is how
// many replicas acknowledged call i.
//
// On a cluster each round trip goes to a node's own client, which follows
// no redirect and reloads no map: so runReplicated does both. A call
// answered MOVED did not run; it is sent again, with its WAIT, to the node
// the reply names, at most redirectsFollowed times, as the cluster client
// would send it. An ASK (a slot being migrated) is not followed: it would
// take ASKING, and all of the script's keys on the importing node, which
// answers TRYAGAIN otherwise, as it does on the cluster client's path. The
// call fails; once the migration ends the node answers MOVED instead.
// A call that failed without a reply asks reload for a new map, since its
// node may be dead and its replica promoted.
func runReplicated(ctx context.Context, rdb redis.UniversalClient, reload *clusterReload, script *scriptpipe.Script, calls []scriptpipe.Call,
	replicas int, timeout time.Duration) ([]*redis.Cmd, []int, error) {
	if replicas <= 0 {
		cmds, err := scriptpipe.Run(ctx, rdb, script, calls)
		return cmds, make([]int, len(calls)), err
	}
	cluster, isCluster := rdb.(*redis.ClusterClient)
	servers := make([]redis.UniversalClient, len(calls))
	for i, call := range calls {
		servers[i] = rdb
		if isCluster {
			node, err := cluster.MasterForKey(ctx, call.Keys[0])
			if err != nil {
				reload.after(err)
				return nil, nil, err
			}
			servers[i] = node
		}
	}
	cmds, acked := make([]*redis.Cmd, len(calls)), make([]int, len(calls))
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	for redirects := 0; ; redirects++ {
		sendReplicated(ctx, script, calls, todo, servers, cmds, acked, replicas, timeout)
		moved := map[int]string{}
		for _, i := range todo {
			err := cmds[i].Err()
			if addr, ok := redis.IsMovedError(err); ok && isCluster {
				moved[i] = addr
				continue
			}
			reload.after(err)
		}
		if len(moved) == 0 {
			return cmds, acked, nil
		}
		// The map is stale: go-redis reloads it itself on the MOVED its
		// own calls meet, not on a node client's.
		cluster.ReloadState(ctx)
		if redirects == redirectsFollowed {
			return cmds, acked, nil
		}
		nodes := nodesOf(ctx, cluster)
		todo = todo[:0]
		for i, addr := range moved {
			if node, ok := nodes[addr]; ok {
				servers[i] = node
				todo = append(todo, i)
			}
		}
		if len(todo) == 0 {
			return cmds, acked, nil
		}
	}
}

// sendReplicated sends the calls numbered todo, each to its server, one
// round trip per server, the servers at once, and fills in their cmds and
// acked.
func sendReplicated(ctx context.Context, script *scriptpipe.Script, calls []scriptpipe.Call, todo []int, servers []redis.UniversalClient,
	cmds []*redis.Cmd, acked []int, replicas int, timeout time.Duration) {
	groups := map[redis.UniversalClient][]int{}
	var order []redis.UniversalClient
	for _, i := range todo {
		server := servers[i]
		if _, seen := groups[server]; !seen {
			order = append(order, server)
		}
		groups[server] = append(groups[server], i)
	}
	send := func(server redis.UniversalClient) {
		indexes := groups[server]
		group := make([]scriptpipe.Call, len(indexes))
		for n, i := range indexes {
			group[n] = calls[i]
		}
		replication := scriptpipe.Replication{Replicas: replicas, Timeout: timeout, Mark: replicationMark(group[0].Keys[0])}
		groupCmds, groupAcked, err := scriptpipe.RunReplicated(ctx, server, script, group, replication)
		for n, i := range indexes {
			if err != nil {
				// This server's failure is its calls' only: another
				// server's admissions stand.
				cmds[i], acked[i] = redis.NewCmd(ctx), 0
				cmds[i].SetErr(err)
				continue
			}
			cmds[i], acked[i] = groupCmds[n], groupAcked[n]
		}
	}
	if len(order) == 1 {
		send(order[0])
		return
	}
	// The servers at once: each waits for its own replicas, so one after
	// another the waits would add up. Each writes only its calls' indexes.
	var wg sync.WaitGroup
	for _, server := range order {
		wg.Go(func() { send(server) })
	}
	wg.Wait()
}

// nodesOf returns the cluster's nodes by address. ForEachShard reloads the
// map before it visits the nodes (go-redis v9.23: state.ReloadOrGet), so a
// node a MOVED names is found even when the map did not know it yet; should
// the reload fail, the nodes are those of the map held.
func nodesOf(ctx context.Context, cluster *redis.ClusterClient) map[string]*redis.Client {
	var mu sync.Mutex
	nodes := map[string]*redis.Client{}
	_ = cluster.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes[node.Options().Addr] = node
		return nil
	})
	return nodes
}

// replicationMark is the key a replicated pipeline writes last, in the
// slot of key (its hash tag): emq:{q}:replicated.
func replicationMark(key string) string {
	open := strings.IndexByte(key, '{')
	end := strings.IndexByte(key[open+1:], '}')
	if open < 0 || end < 0 {
		return "emq:replicated"
	}
	return "emq:" + key[open:open+1+end+1] + ":replicated"
}

// close stops the senders once their pipelines are answered; calls not yet
// taken get ErrClosed.
func (c *coalescer) close() {
	c.cancel()
	c.senders.Wait()
}
