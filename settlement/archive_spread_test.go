package settlement_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestArchiversAreSpreadOverTheWorkers: two workers share the shards of the
// accounts' logs, half each, rather than each running an archiver of every
// shard; when one stops, the other takes its shards over, and events then
// appended to any shard are archived.
func TestArchiversAreSpreadOverTheWorkers(t *testing.T) {
	ctx := context.Background()
	database := testserver.MigratedPostgres(t)
	redisServer := testserver.QueueRedisServer(t)
	db := database.Pool(t)
	logger := slog.New(slog.DiscardHandler)
	config := settlement.DefaultConfig()
	config.Concurrency = 16
	config.OwnLease = time.Second
	config.EventsArchiveDelay = 10 * time.Millisecond
	client, err := emq.Connect(ctx, redisServer.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	logs := placement.NewEventLogs(client)
	shards := logs.Queues()
	// holders returns how many shards each holder owns, and how many
	// shards are owned.
	holders := func() (map[string]int, int) {
		held, owned := map[string]int{}, 0
		for _, shard := range shards {
			state, err := shard.Ownership().Owner(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if state.Held {
				held[state.Holder]++
				owned++
			}
		}
		return held, owned
	}

	stopFirst := runWorker(t, database.URL, redisServer.URL(), config, logger, nil)
	runWorker(t, database.URL, redisServer.URL(), config, logger, nil)
	half := (len(shards) + 1) / 2
	waitUntil(t, 10*time.Second, "the shards spread over both workers, half each", func() bool {
		held, owned := holders()
		if owned != len(shards) || len(held) != 2 {
			return false
		}
		for _, n := range held {
			if n != half {
				return false
			}
		}
		return true
	})

	stopFirst()
	waitUntil(t, config.OwnLease+2*time.Second, "the other worker owns every shard", func() bool {
		held, owned := holders()
		return owned == len(shards) && len(held) == 1
	})

	// An account on each shard, each placing an order that rests: its
	// events go to its shard's log, which only the worker left archives.
	ledger, accountsTable := postgres.NewLedger(db), postgres.NewAccounts(db)
	byShard := map[string]string{}
	for tries := 0; len(byShard) < len(shards); tries++ {
		if tries == 1000 {
			t.Fatalf("1,000 accounts drew %d of %d shards", len(byShard), len(shards))
		}
		account, err := accountsTable.Create(ctx, "trader")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byShard[logs.For(account).Name()]; !ok {
			byShard[logs.For(account).Name()] = account
		}
	}
	placer := placement.NewPlacer(placement.NewOrderQueues(client))
	for _, account := range byShard {
		if err := ledger.Deposit(ctx, account, "USD", "1000"); err != nil {
			t.Fatal(err)
		}
		if _, err := placer.Place(ctx, orders.PlaceCommand{Account: account, ClientOrderID: "rest",
			Symbol: "BTC-USD", Side: orders.Buy, Type: orders.Limit, Quantity: decimal.MustParse("0.01"),
			Price: decimal.MustParse("100.00")}); err != nil {
			t.Fatal(err)
		}
	}
	for shard, account := range byShard {
		log := logs.For(account)
		waitUntil(t, 20*time.Second, shard+"'s log archived through its order's events", func() bool {
			_, last, err := log.LogBounds(ctx, account)
			if err != nil {
				t.Fatal(err)
			}
			archived, err := log.LogsArchived(ctx, []string{account})
			if err != nil {
				t.Fatal(err)
			}
			// The order's acceptance at least: the deposit's balance
			// event may come before it, relayed by the sweep.
			return last >= 1 && archived[account] == last && orderAccepted(t, log, account)
		})
	}
}

// orderAccepted reports whether account's log holds an order.accepted.
func orderAccepted(t testing.TB, log *emq.Queue, account string) bool {
	t.Helper()
	entries, err := log.ReadLog(context.Background(), account, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range entries {
		if entry.Type == "order.accepted" {
			return true
		}
	}
	return false
}
