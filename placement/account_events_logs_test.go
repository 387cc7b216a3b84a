package placement_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// Accounts' logs are spread over the EventShards queues: an append lands
// on the account's shard, the outcomes come back in the order asked, and
// a stream of the account reads it there.
func TestEventLogsSpreadAccountsOverShards(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	client, err := emq.Connect(ctx, testserver.QueueRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	logs := placement.NewEventLogs(client)
	if got := len(logs.Queues()); got != placement.EventShards {
		t.Fatalf("%d queues, want %d", got, placement.EventShards)
	}
	var appends []emq.LogAppend
	shards := map[string]bool{}
	for i := range 40 {
		account := fmt.Sprintf("ACC_%d", i)
		shards[placement.EventsQueue(account)] = true
		appends = append(appends, emq.LogAppend{Group: account, Entries: []emq.LogEntry{
			{ID: account + ".1", Type: string(orders.EventBalance), Data: []byte(`{}`)},
			{ID: account + ".2", Type: string(orders.EventBalance), Data: []byte(`{}`)},
		}})
	}
	if len(shards) < placement.EventShards/2 {
		t.Errorf("40 accounts on %d shards", len(shards))
	}
	appended, err := logs.AppendLogs(ctx, appends)
	if err != nil || len(appended) != len(appends) {
		t.Fatalf("AppendLogs = %d outcomes, %v", len(appended), err)
	}
	for i, a := range appends {
		if appended[i].First != 1 || appended[i].Count != 2 {
			t.Errorf("%s: appended %+v", a.Group, appended[i])
		}
		if logs.For(a.Group).Name() != placement.EventsQueue(a.Group) {
			t.Errorf("%s: log on %s, want %s", a.Group, logs.For(a.Group).Name(), placement.EventsQueue(a.Group))
		}
		events, err := logs.For(a.Group).ReadLog(ctx, a.Group, 0, 10)
		if err != nil || len(events) != 2 || events[0].ID != a.Group+".1" {
			t.Errorf("%s's log: %+v, %v", a.Group, events, err)
		}
	}
	streams := placement.NewEventStreams(logs)
	t.Cleanup(streams.Close)
	for _, account := range []string{"ACC_1", "ACC_7"} {
		subscription, err := streams.Subscribe(ctx, account, 0)
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, subscription, 2)
		subscription.Close()
	}
}

// pipelines counts a client's pipelined round trips.
type pipelines struct{ n atomic.Int64 }

func (p *pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestEventLogsAppendEveryShardInOneRoundTrip: the appends of a relay's
// batch or a balance announce, spread over the accounts' shards, go in one
// round trip, not one a shard.
func TestEventLogsAppendEveryShardInOneRoundTrip(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	counted := &pipelines{}
	rdb.AddHook(counted)
	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	logs := placement.NewEventLogs(client)
	entries := func(id string) []emq.LogEntry {
		return []emq.LogEntry{{ID: id, Type: string(orders.EventBalance), Data: []byte(`{}`)}}
	}
	// Load the script: a server without it answers NOSCRIPT, a second round.
	if _, err := logs.AppendLogs(ctx, []emq.LogAppend{{Group: "ACC_warm", Entries: entries("w")}}); err != nil {
		t.Fatal(err)
	}
	var appends []emq.LogAppend
	shards := map[string]bool{}
	for i := range 8 {
		account := fmt.Sprintf("ACC_%d", i)
		shards[placement.EventsQueue(account)] = true
		appends = append(appends, emq.LogAppend{Group: account, Entries: entries(account + ".1")})
	}
	before := counted.n.Load()
	appended, err := logs.AppendLogs(ctx, appends)
	if err != nil || len(appended) != len(appends) {
		t.Fatalf("AppendLogs = %d outcomes, %v", len(appended), err)
	}
	if trips := counted.n.Load() - before; trips != 1 {
		t.Errorf("appends to %d shards took %d round trips, want 1", len(shards), trips)
	}
	for i, a := range appends {
		if appended[i].First != 1 || appended[i].Count != 1 {
			t.Errorf("%s: appended %+v", a.Group, appended[i])
		}
	}
}
