package placement_test

import (
	"context"
	"fmt"
	"testing"

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
