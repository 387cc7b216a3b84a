package emq

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestAdmitReplicasRefusesAWaitItCannotMake: a wait of no time blocks
// WAIT for good, and one as long as the client's read timeout would lose
// the admissions' answers with the pipeline's read.
func TestAdmitReplicasRefusesAWaitItCannotMake(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, wait := range []time.Duration{0, 300 * time.Millisecond, time.Second} {
		if _, err := Connect(context.Background(), rdb, WithLogger(slog.New(slog.DiscardHandler)), WithAdmitReplicas(1, wait)); err == nil || !strings.Contains(err.Error(), "admit replicas") {
			t.Errorf("a wait of %v with a read timeout of 300ms: %v; want it refused", wait, err)
		}
	}
}

// TestReplicatedBatchKeepsAnotherNodesAdmissions: a replicated coalescer
// batch spanning two cluster nodes, whose second node's reply is lost: the
// first node's admission, made and answered, stands.
func TestReplicatedBatchKeepsAnotherNodesAdmissions(t *testing.T) {
	ctx := context.Background()
	cluster := testserver.StartRedisCluster(t)
	proxy := testserver.StartProxy(t, cluster.Addrs...)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, Dialer: proxy.Dial})
	t.Cleanup(func() { _ = rdb.Close() })
	client, err := Connect(ctx, rdb, WithLogger(slog.New(slog.DiscardHandler)), WithAdmitReplicas(1, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	// Two queues on different masters.
	a := client.Queue("qa")
	var b *Queue
	nodeA, _ := rdb.MasterForKey(ctx, a.jobsKey())
	for i := 0; b == nil; i++ {
		q := client.Queue("qb" + string(rune('a'+i%26)) + strings.Repeat("x", i/26))
		if n, _ := rdb.MasterForKey(ctx, q.jobsKey()); n.Options().Addr != nodeA.Options().Addr {
			b = q
		}
	}
	for _, q := range []*Queue{a, b} {
		if err := q.Declare(ctx, "test.job"); err != nil {
			t.Fatal(err)
		}
	}
	callOf := func(q *Queue, id string) scriptpipe.Call {
		call, err := q.admitCall(dedupJob(id, id), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return call
	}
	proxy.DropReply("JOB-ON-B")
	cmds, _, err := client.admits.runPipeline(ctx, []scriptpipe.Call{callOf(a, "JOB-ON-A"), callOf(b, "JOB-ON-B")})
	exists, _ := rdb.HExists(ctx, a.jobsKey(), "JOB-ON-A").Result()
	if exists && (err != nil || cmds[0].Err() != nil) {
		t.Errorf("JOB-ON-A was admitted on its node, but its call is answered %v (batch error %v)", cmds, err)
	}
}
