package settlement_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// spreadSymbols are the instruments the migrations list.
var spreadSymbols = []string{"BTC-USD", "ETH-USD", "ETH-BTC"}

// TestTheOrderPathSpreadsOverClusterMasters: on a 3-master Redis Cluster,
// orders on three instruments placed as the gateway places them (a
// rate-limit permit in the admit script, a permit per look-up, the look-up
// itself) and settled by two workers that own the instruments' queues: no
// master serves more than half the Redis commands, and the instruments'
// queues are on at least two masters (with everything on the {orders}
// slot, one master served 98.4 %). The figures are logged.
func TestTheOrderPathSpreadsOverClusterMasters(t *testing.T) {
	testserver.Parallel(t)
	if testing.Short() {
		t.Skip("a cluster, two workers and 900 orders")
	}
	ctx := context.Background()
	cluster := testserver.StartRedisCluster(t)
	rdb := cluster.Client(t)
	database := testserver.MigratedPostgres(t)
	db := database.Pool(t)
	logger := slog.New(slog.DiscardHandler)
	redisURL := "redis://" + cluster.Addrs[0] + "?addr=" + strings.Join(cluster.Addrs[1:], "&addr=")

	// The instruments on their masters.
	masters := map[string]string{}
	for _, symbol := range spreadSymbols {
		master, _ := cluster.MasterOf(t, emq.JobsKey(orders.InstrumentQueue(symbol)))
		masters[symbol] = master.Addr
	}
	distinct := map[string]bool{}
	for _, addr := range masters {
		distinct[addr] = true
	}
	if len(distinct) < 2 {
		t.Errorf("the instruments' queues are on %d master(s): %v", len(distinct), masters)
	}

	accounts := make([]string, 12)
	ledger := postgres.NewLedger(db)
	for i := range accounts {
		account, err := postgres.NewAccounts(db).Create(ctx, fmt.Sprintf("trader %d", i))
		if err != nil {
			t.Fatal(err)
		}
		accounts[i] = account
		for asset, amount := range map[string]string{"USD": "10000000", "BTC": "1000", "ETH": "10000"} {
			if err := ledger.Deposit(ctx, account, asset, amount); err != nil {
				t.Fatal(err)
			}
		}
	}

	config := settlement.DefaultConfig()
	config.Concurrency = 64
	config.OwnLease = time.Second
	for range 2 {
		runWorker(t, database.URL, redisURL, config, logger, nil)
	}

	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	placer := placement.NewPlacer(placement.NewOrderQueues(client),
		placement.WithHistory(postgres.NewOrders(postgres.NewHistory(db), postgres.NewSettler(db, nil, nil))))
	if err := placer.Declare(ctx, spreadSymbols...); err != nil {
		t.Fatal(err)
	}
	// What setting up cost is not the order path's.
	if err := resetCommandStats(ctx, rdb); err != nil {
		t.Fatal(err)
	}

	prices := map[string]string{"BTC-USD": "50000.00", "ETH-USD": "3000.00", "ETH-BTC": "0.06000"}
	quantities := map[string]string{"BTC-USD": "0.01000", "ETH-USD": "0.100", "ETH-BTC": "0.100"}
	limit := placement.Rate{Capacity: 1_000_000, PerSecond: 1_000_000}
	const perInstrument = 300
	var ids []string
	var mu sync.Mutex
	var placing sync.WaitGroup
	for a, account := range accounts {
		placing.Go(func() {
			for i := range perInstrument * len(spreadSymbols) / len(accounts) {
				symbol := spreadSymbols[i%len(spreadSymbols)]
				side := orders.Buy
				if (a+i/len(spreadSymbols))%2 == 1 {
					side = orders.Sell
				}
				bucket := "key:" + account
				if _, err := placer.TakePermit(ctx, bucket, limit); err != nil {
					t.Error(err)
					return
				}
				placed, err := placer.Place(ctx, orders.PlaceCommand{
					Account: account, ClientOrderID: fmt.Sprintf("spread-%d", i), Symbol: symbol, Side: side,
					Type: orders.Limit, Quantity: decimal.MustParse(quantities[symbol]), Price: decimal.MustParse(prices[symbol]),
				}, placement.WithRateLimit(bucket, limit))
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := placer.Order(ctx, account, placed.Order.ID); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, placed.Order.ID)
				mu.Unlock()
			}
		})
	}
	placing.Wait()
	if t.Failed() {
		return
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		var settled, unrelayed int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1)`, ids).Scan(&settled); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE relayed_at IS NULL`).Scan(&unrelayed); err != nil {
			t.Fatal(err)
		}
		if settled == len(ids) && unrelayed == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d orders settled, %d outbox rows unrelayed", settled, len(ids), unrelayed)
		}
		time.Sleep(100 * time.Millisecond)
	}

	calls, err := commandCalls(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range calls {
		total += n
	}
	var figures []string
	for addr, n := range calls {
		share := float64(n) / float64(total)
		var on []string
		for symbol, master := range masters {
			if master == addr {
				on = append(on, symbol)
			}
		}
		figures = append(figures, fmt.Sprintf("%s %d (%.1f %%) %v", addr, n, 100*share, on))
		if share > 0.5 {
			t.Errorf("master %s served %.1f %% of the commands", addr, 100*share)
		}
	}
	t.Logf("%d orders on %d instruments, %d commands: %s", len(ids), len(spreadSymbols), total, strings.Join(figures, "; "))
}

// resetCommandStats zeroes every master's INFO commandstats.
func resetCommandStats(ctx context.Context, rdb *redis.ClusterClient) error {
	return rdb.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
		return master.ConfigResetStat(ctx).Err()
	})
}

// commandCalls sums each master's calls over its INFO commandstats.
func commandCalls(ctx context.Context, rdb *redis.ClusterClient) (map[string]int64, error) {
	var mu sync.Mutex
	calls := map[string]int64{}
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
		info, err := master.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		var n int64
		for line := range strings.SplitSeq(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_") {
				continue
			}
			_, stats, _ := strings.Cut(line, ":")
			for field := range strings.SplitSeq(stats, ",") {
				if value, ok := strings.CutPrefix(field, "calls="); ok {
					count, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
					if err != nil {
						return err
					}
					n += count
				}
			}
		}
		mu.Lock()
		calls[master.Options().Addr] = n
		mu.Unlock()
		return nil
	})
	return calls, err
}
