package placement_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/govalues/decimal"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestInstrumentQueuesLandOnSeveralMasters: on the cluster the suite runs on
// (EMQ_TEST_REDIS=cluster), an order placed on each instrument the
// migrations list lands on its instrument's queue, and those queues are on
// at least two of the three masters, so the cluster leg exercises the
// order path spread over masters, not gathered on one. Where each queue is
// is read from the masters themselves, not computed from its slot.
func TestInstrumentQueuesLandOnSeveralMasters(t *testing.T) {
	testserver.Parallel(t)
	if !testserver.ClusterMode() {
		t.Skip("counts the masters of the shared cluster: the cluster leg (EMQ_TEST_REDIS=cluster) runs it")
	}
	ctx := context.Background()
	server := testserver.QueueRedisServer(t)
	rdb := server.Client(t)
	instruments, err := postgres.NewInstruments(migratedPool(t)).ReadInstruments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	symbols := slices.Sorted(maps.Keys(instruments))
	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	placer := placement.NewPlacer(placement.NewOrderQueues(client))
	if err := placer.Declare(ctx, symbols...); err != nil {
		t.Fatal(err)
	}
	for _, symbol := range symbols {
		// The placer leaves the instrument's rules to the gateway.
		_, err := placer.Place(ctx, orders.PlaceCommand{Account: "acct-1", ClientOrderID: "c-" + symbol, Symbol: symbol,
			Side: orders.Buy, Type: orders.Limit, Quantity: decimal.MustParse("1"), Price: decimal.MustParse("1")})
		if err != nil {
			t.Fatalf("place on %s: %v", symbol, err)
		}
	}

	holders := map[string][]string{} // symbol → the masters holding its jobs
	var mu sync.Mutex
	err = rdb.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
		for _, symbol := range symbols {
			n, err := master.Exists(ctx, emq.JobsKey(orders.InstrumentQueue(symbol))).Result()
			if _, moved := redis.IsMovedError(err); moved {
				continue // another master serves its slot
			}
			if err != nil {
				return err
			}
			if n == 1 {
				mu.Lock()
				holders[symbol] = append(holders[symbol], master.Options().Addr)
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	masters := map[string]bool{}
	for _, symbol := range symbols {
		if len(holders[symbol]) != 1 {
			t.Fatalf("%s's jobs are on masters %v, want exactly one", symbol, holders[symbol])
		}
		masters[holders[symbol][0]] = true
	}
	t.Logf("instrument queues on masters: %v", holders)
	if len(masters) < 2 {
		t.Errorf("the %d instruments' queues are on %d master(s) %v, want at least two", len(symbols), len(masters), holders)
	}
}
