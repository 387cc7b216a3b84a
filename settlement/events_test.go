package settlement_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
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

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// statusRank orders an order's states: an order's events never go back.
var statusRank = map[orders.Status]int{
	orders.StatusPending: 0, orders.StatusOpen: 1, orders.StatusPartiallyFilled: 2,
	orders.StatusFilled: 3, orders.StatusCanceled: 3, orders.StatusRejected: 3,
}

// TestEveryAccountsLogHoldsEveryEventOfItsOrders: 1,000 orders from 10
// accounts, crossing so they trade, settled by two workers, whose
// archivers copy the accounts' logs to the history in PostgreSQL. Each
// account's history then holds, in one gapless sequence with no event
// twice (the archivers share the work and write each event once): each of its
// orders' order.accepted first, then its states, never going back, the last
// the state PostgreSQL holds; one fill per trade it was in; and its
// balances, the last of each at the version PostgreSQL holds. No event
// carries another account's resource.
func TestEveryAccountsLogHoldsEveryEventOfItsOrders(t *testing.T) {
	ctx := context.Background()
	database := testserver.MigratedPostgres(t)
	redisServer := testserver.QueueRedisServer(t)
	logger := slog.New(slog.DiscardHandler)
	config := settlement.DefaultConfig()
	config.Concurrency = 64
	config.EventsArchiveDelay = 10 * time.Millisecond
	for range 2 {
		runWorker(t, database.URL, redisServer.URL(), config, logger, nil)
	}

	db := database.Pool(t)
	accounts := make([]string, 10)
	ledger := postgres.NewLedger(db)
	for i := range accounts {
		account, err := postgres.NewAccounts(db).Create(ctx, fmt.Sprintf("trader %d", i))
		if err != nil {
			t.Fatal(err)
		}
		accounts[i] = account
		for asset, amount := range map[string]string{"USD": "10000000", "BTC": "100"} {
			if err := ledger.Deposit(ctx, account, asset, amount); err != nil {
				t.Fatal(err)
			}
		}
	}
	client, err := emq.Connect(ctx, redisServer.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	queues := placement.NewOrderQueues(client)
	placer := placement.NewPlacer(queues)
	placed := make([][]string, len(accounts)) // by account index
	var placing sync.WaitGroup
	for a, account := range accounts {
		placing.Go(func() {
			for i := range 100 {
				side, price := orders.Buy, 50000+(i%7)*10
				if (a+i)%2 == 1 {
					side, price = orders.Sell, 49970+(i%5)*10
				}
				placement, err := placer.Place(ctx, orders.PlaceCommand{Account: account, ClientOrderID: fmt.Sprintf("c-%d", i),
					Symbol: "BTC-USD", Side: side, Type: orders.Limit, Quantity: decimal.MustParse("0.01"),
					Price: decimal.MustNew(int64(price), 0)})
				if err != nil {
					t.Errorf("place: %v", err)
					return
				}
				placed[a] = append(placed[a], placement.Order.ID)
			}
		})
	}
	placing.Wait()

	deadline := time.Now().Add(60 * time.Second)
	for {
		var rows int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		var stats emq.Stats
		for _, name := range placement.CoherenceQueues(placement.BalancesTable) {
			shard, err := client.Queue(name).Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stats.Pending, stats.Active, stats.Delayed = stats.Pending+shard.Pending, stats.Active+shard.Active, stats.Delayed+shard.Delayed
		}
		var unrelayed int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE relayed_at IS NULL`).Scan(&unrelayed); err != nil {
			t.Fatal(err)
		}
		if rows == 1000 && unrelayed == 0 && stats.Pending+stats.Active+stats.Delayed == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: %d of 1000 orders settled, %d outbox rows unrelayed, coherence %+v", rows, unrelayed, stats)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The archivers catch up with every log.
	for _, account := range accounts {
		for {
			log := placement.NewEventLogs(client).For(account)
			archived, err := log.LogsArchived(ctx, []string{account})
			if err != nil {
				t.Fatal(err)
			}
			_, last, err := log.LogBounds(ctx, account)
			if err != nil {
				t.Fatal(err)
			}
			if archived[account] == last {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's log is archived through %d of %d", account, archived[account], last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	truth := postgres.NewBalances(db)
	history := postgres.NewEventHistory(db)
	trades := 0
	for a, account := range accounts {
		events, err := history.EventsAfter(ctx, account, 0, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) == 0 {
			t.Fatalf("%s: no history", account)
		}
		state := map[string]orders.Status{}
		fills, seen := 0, map[string]bool{}
		balances := map[string]int64{}
		for i, event := range events {
			if event.Sequence != int64(i+1) || seen[event.ID] {
				t.Fatalf("%s: event %d is %s (sequence %d): a gap or a second event", account, i+1, event.ID, event.Sequence)
			}
			seen[event.ID] = true
			var resource struct {
				ID      string        `json:"id"`
				Account string        `json:"account_id"`
				OrderID string        `json:"order_id"`
				Status  orders.Status `json:"status"`
				Asset   string        `json:"asset"`
				Version int64         `json:"version"`
			}
			if err := json.Unmarshal(event.Data, &resource); err != nil {
				t.Fatal(err)
			}
			switch event.Type {
			case orders.EventFill:
				if _, mine := state[resource.OrderID]; !mine {
					t.Errorf("%s: a fill of %s, no order of its own accepted before", account, resource.OrderID)
				}
				fills++
			case orders.EventBalance:
				if resource.Version <= balances[resource.Asset] {
					t.Errorf("%s: balance %s announced at version %d after %d", account, resource.Asset, resource.Version, balances[resource.Asset])
				}
				balances[resource.Asset] = resource.Version
			default:
				if resource.Account != account {
					t.Fatalf("%s: event %s carries %s's order", account, event.ID, resource.Account)
				}
				previous, known := state[resource.ID]
				switch {
				case event.Type == orders.EventOrderAccepted && known:
					t.Errorf("%s: %s accepted twice", account, resource.ID)
				case event.Type != orders.EventOrderAccepted && !known:
					t.Errorf("%s: %s %s before it was accepted", account, resource.ID, event.Type)
				case known && statusRank[resource.Status] < statusRank[previous]:
					t.Errorf("%s: %s went back from %s to %s", account, resource.ID, previous, resource.Status)
				}
				state[resource.ID] = resource.Status
			}
		}
		for _, id := range placed[a] {
			order, err := postgres.NewHistory(db).Order(ctx, account, id)
			if err != nil {
				t.Fatal(err)
			}
			if state[id] != order.Status {
				t.Errorf("%s: the log leaves %s %s, PostgreSQL has it %s", account, id, state[id], order.Status)
			}
		}
		var accountTrades int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM trades WHERE maker_account_id = $1 OR taker_account_id = $1`, account).Scan(&accountTrades); err != nil {
			t.Fatal(err)
		}
		if fills != accountTrades {
			t.Errorf("%s: %d fill events, %d trades", account, fills, accountTrades)
		}
		trades += accountTrades
		current, err := truth.OfAccounts(ctx, []string{account})
		if err != nil {
			t.Fatal(err)
		}
		for _, balance := range current[account] {
			if balances[balance.Asset] != balance.Version {
				t.Errorf("%s: %s last announced at version %d, PostgreSQL holds %d", account, balance.Asset, balances[balance.Asset], balance.Version)
			}
		}
	}
	if trades == 0 {
		t.Error("nothing traded: the test proves less than it says")
	}
}
